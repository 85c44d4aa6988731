// 16-lane exp and horizontal sums for the CPU backend's AVX-512 paths (attention's softmax,
// SiLU). Why: a batch-32 decode step evaluates ~50k exponentials per layer, and the scalar
// libm call was ~6% of the step. These are not libm's bits (within 2.2 ulp of exp) but
// ggml's (llama.cpp's CPU backend computes its softmax and SiLU with the same exp), so every
// caller uses them on all of its paths: a row's result must not depend on which path or
// batch served it.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#define INFERCEPT_VEC_AVX512 1
#endif

namespace infercept {

#if INFERCEPT_VEC_AVX512

// GCC 12 builds several AVX-512 intrinsics on _mm512_undefined_ps() and then reports it as
// maybe-uninitialized (a warning, so an error in CI); the zero-masked forms with a full mask
// are the same instructions without it.
namespace vm {
constexpr __mmask16 kAll = 0xffff;
inline __m512 max(__m512 a, __m512 b) {
  return _mm512_maskz_max_ps(kAll, a, b);
}
inline __m512 min(__m512 a, __m512 b) {
  return _mm512_maskz_min_ps(kAll, a, b);
}
inline __m512 round_nearest(__m512 a) {
  return _mm512_maskz_roundscale_ps(kAll, a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline __m512 scalef(__m512 a, __m512 b) {
  return _mm512_maskz_scalef_ps(kAll, a, b);
}
inline __m512 unpacklo(__m512 a, __m512 b) {
  return _mm512_maskz_unpacklo_ps(kAll, a, b);
}
inline __m512 unpackhi(__m512 a, __m512 b) {
  return _mm512_maskz_unpackhi_ps(kAll, a, b);
}
template <int kImm>
inline __m512 shuffle_x4(__m512 a, __m512 b) {
  return _mm512_maskz_shuffle_f32x4(kAll, a, b, kImm);
}
inline __m512 permute(__m512i idx, __m512 a) {
  return _mm512_maskz_permutexvar_ps(kAll, idx, a);
}
inline __m256 low_half(__m512 a) {
  return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd((__mmask8)0xff, _mm512_castps_pd(a), 0));
}
inline __m256 high_half(__m512 a) {
  return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd((__mmask8)0xff, _mm512_castps_pd(a), 1));
}
// f32 -> f16 (round to nearest even) -> f32: the value an f16 store would keep.
inline __m512 round_to_f16(__m512 a) {
  return _mm512_maskz_cvtph_ps(
      kAll, _mm512_maskz_cvtps_ph(kAll, a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline __m512 f16_to_f32(const uint16_t* p) {
  return _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
}  // namespace vm

// exp(x) per lane, with the argument reduction and polynomial of ggml's 16-lane expf (after
// Arm's optimized-routines expf), operation for operation, so softmax weights and SiLU get
// llama.cpp's bits: x = n ln2 + b with n = round(x log2 e) found by adding 1.5 * 2^23,
// ln2 split in two for the reduction, exp(b) ~ 1 + c1 b + b^2 (c2 + c3 b) + b^4 (c4 + c5 b),
// 2^n applied by scalef. |n| > 192 (x beyond about +-133) gives +inf or 0 instead. Within
// 2.2 ulp of libm where it does not overflow or underflow (ggml states 1.45 ulp + 0.5).
inline __m512 exp16(__m512 x) {
  const __m512 shift = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift);
  const __m512 n = _mm512_sub_ps(z, shift);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 hi = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f)));
  const __m512 j = _mm512_fmadd_ps(
      hi, u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
  const __m512 res = vm::scalef(j, n);
  const __mmask16 out_of_range = _mm512_cmp_ps_mask(
      _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(n), _mm512_set1_epi32(0x7fffffff))),
      _mm512_set1_ps(192.0f), _CMP_GT_OQ);
  if (out_of_range == 0) return res;
  const __mmask16 non_positive = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
  const __m512 limit =
      _mm512_mask_blend_ps(non_positive, _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
  return _mm512_mask_blend_ps(out_of_range, res, limit);
}

// Sum of the 16 lanes in one fixed order: lanes j and j + 8, then j and j + 4, j and j + 2,
// then the last pair (the order hsum16x16 uses for each of its vectors).
inline float hsum16(__m512 v) {
  const __m256 s8 = _mm256_add_ps(vm::low_half(v), vm::high_half(v));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Lane i of the result = hsum16(v[i]), summed in exactly hsum16's order: a transpose-add
// tree (45 operations for 16 sums instead of ~8 each).
inline __m512 hsum16x16(const __m512* v) {
  __m512 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i)  // [v0 lanes j + (j+8) | v1 lanes j + (j+8)], j < 8
    a[i] = _mm512_add_ps(vm::shuffle_x4<0x44>(v[2 * i], v[2 * i + 1]),
                         vm::shuffle_x4<0xEE>(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i)  // [4 sums of j + (j+4), j < 4] for v 4i .. 4i+3
    b[i] = _mm512_add_ps(vm::shuffle_x4<0x88>(a[2 * i], a[2 * i + 1]),
                         vm::shuffle_x4<0xDD>(a[2 * i], a[2 * i + 1]));
  for (int i = 0; i < 2; ++i)  // per 128-bit lane: [x j + (j+2), y j + (j+2)] interleaved
    c[i] =
        _mm512_add_ps(vm::unpacklo(b[2 * i], b[2 * i + 1]), vm::unpackhi(b[2 * i], b[2 * i + 1]));
  const __m512 s = _mm512_add_ps(vm::unpacklo(c[0], c[1]), vm::unpackhi(c[0], c[1]));
  // s holds the sums of v 0, 8, 4, 12 | 1, 9, 5, 13 | 2, 10, 6, 14 | 3, 11, 7, 15.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15);
  return vm::permute(order, s);
}

#endif  // INFERCEPT_VEC_AVX512

}  // namespace infercept
