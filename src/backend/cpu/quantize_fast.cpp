#include "backend/cpu/quantize_fast.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "core/quant.h"
#include "core/quant_blocks.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define INFERCEPT_QFAST_AVX2 1
#endif

namespace infercept {

#if INFERCEPT_QFAST_AVX2
namespace {

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define INFERCEPT_QFAST_AVX512 1
// quantize32 and amax32 16 lanes at a time: the same operations per element (so the same
// bytes), the int32 -> int8 narrowing by vpmovsdb (the values are within [-127, 127], so
// saturation never applies) and the integer sum exact in any order. GCC 12 reports the
// intrinsics built on _mm512_undefined_* as maybe-uninitialized; the zero-masked forms
// with a full mask are the same instructions.
constexpr __mmask16 kAll16 = 0xffff;

inline int quantize32_512(const float* x, float id, int8_t* q) {
  const __m512 vid = _mm512_set1_ps(id);
  __m512i sum = _mm512_setzero_si512();
  for (int k = 0; k < 2; ++k) {
    const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * k), vid);
    const __m512i r = _mm512_maskz_cvt_roundps_epi32(
        kAll16, p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);  // ties to even
    _mm512_mask_cvtsepi32_storeu_epi8(q + 16 * k, kAll16, r);
    sum = _mm512_add_epi32(sum, r);
  }
  // Lane sums by halves (exact in any order): a store and a scalar loop here cost more
  // than the quantization itself.
  const __m256i s8 = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64((__mmask8)0xff, sum, 0),
                                      _mm512_maskz_extracti64x4_epi64((__mmask8)0xff, sum, 1));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
  s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x55));
  return _mm_cvtsi128_si32(s4);
}

inline float amax32_512(const float* x) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512 a0 =
      _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x)), abs_mask));
  const __m512 a1 =
      _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + 16)), abs_mask));
  const __m512i m16 = _mm512_castps_si512(_mm512_maskz_max_ps(kAll16, a0, a1));
  const __m256 m8 =
      _mm256_max_ps(_mm256_castsi256_ps(_mm512_maskz_extracti64x4_epi64((__mmask8)0xff, m16, 0)),
                    _mm256_castsi256_ps(_mm512_maskz_extracti64x4_epi64((__mmask8)0xff, m16, 1)));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}
#endif

// Quantizes 32 floats with inverse scale id to int8, rounding to nearest with ties to even
// (the rounding mode of ggml's x86 activation quantizer). Returns the sum of the quants.
inline int quantize32_256(const float* x, float id, int8_t* q) {
  const __m256 vid = _mm256_set1_ps(id);
  __m256i r[4];
  for (int k = 0; k < 4; ++k)
    r[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  // int32 x 32 -> int8 x 32 in order: packs interleave 128-bit lanes, a permute restores it.
  const __m256i s01 = _mm256_packs_epi32(r[0], r[1]);
  const __m256i s23 = _mm256_packs_epi32(r[2], r[3]);
  __m256i b = _mm256_packs_epi16(s01, s23);
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), b);
  const __m256i sum32 =
      _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum32), _mm256_extracti128_si256(sum32, 1));
  s = _mm_hadd_epi32(s, s);
  s = _mm_hadd_epi32(s, s);
  return _mm_cvtsi128_si32(s);
}

inline float amax32_256(const float* x) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(x));
  for (int k = 1; k < 4; ++k)
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(x + 8 * k)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

#if INFERCEPT_QFAST_AVX512
inline int quantize32(const float* x, float id, int8_t* q) {
  return quantize32_512(x, id, q);
}
inline float amax32(const float* x) {
  return amax32_512(x);
}
#else
inline int quantize32(const float* x, float id, int8_t* q) {
  return quantize32_256(x, id, q);
}
inline float amax32(const float* x) {
  return amax32_256(x);
}
#endif

}  // namespace
#endif

float quantize_block32_fast(const float* x, int8_t* q, int* sum) {
#if INFERCEPT_QFAST_AVX2
  const float amax = amax32(x);
  const float d = amax / 127.f;
  *sum = quantize32(x, q8_inverse_scale(amax), q);
  return d;
#else
  // core/quant.cpp's quant_q8_1, one block.
  float amax = 0.f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.f;
  const float id = q8_inverse_scale(amax);
  int s = 0;
  for (int j = 0; j < kQK; ++j) s += (q[j] = (int8_t)nearest_int(x[j] * id));
  *sum = s;
  return d;
#endif
}

void quantize_row_fast(DType t, const float* src, void* dst, int64_t n) {
#if INFERCEPT_QFAST_AVX2
  if (t == DType::q8_0 || t == DType::q8_1) {
    const int64_t nb = n / kQK;
    for (int64_t i = 0; i < nb; ++i, src += kQK) {
      const float amax = amax32(src);
      const float d = amax / 127.f;
      const float id = q8_inverse_scale(amax);
      if (t == DType::q8_0) {
        auto& b = static_cast<BlockQ8_0*>(dst)[i];
        b.d = fp32_to_fp16(d);
        quantize32(src, id, b.qs);
      } else {
        auto& b = static_cast<BlockQ8_1*>(dst)[i];
        b.d = fp32_to_fp16(d);
        const int sum = quantize32(src, id, b.qs);
        b.s = fp32_to_fp16((float)sum * d);
      }
    }
    return;
  }
#endif
  quantize_row(t, src, dst, n);
}

}  // namespace infercept
