#include "backend/cpu/quantize_fast.h"

#include <cmath>

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

// Quantizes 32 floats with inverse scale id to int8, rounding half away from zero exactly as
// std::roundf does (truncate, then add one where the dropped fraction is >= 0.5). Returns
// the sum of the quants.
inline int quantize32(const float* x, float id, int8_t* q) {
  const __m256 vid = _mm256_set1_ps(id);
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  __m256i r[4];
  for (int k = 0; k < 4; ++k) {
    const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid);
    const __m256 a = _mm256_andnot_ps(sign_mask, p);
    __m256 t = _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(a, t), half, _CMP_GE_OQ), one);
    t = _mm256_or_ps(_mm256_add_ps(t, up), _mm256_and_ps(p, sign_mask));
    r[k] = _mm256_cvttps_epi32(t);
  }
  // int32 x 32 -> int8 x 32 in order: packs interleave 128-bit lanes, a permute restores it.
  const __m256i s01 = _mm256_packs_epi32(r[0], r[1]);
  const __m256i s23 = _mm256_packs_epi32(r[2], r[3]);
  __m256i b = _mm256_packs_epi16(s01, s23);
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), b);
  const __m256i sum32 = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum32), _mm256_extracti128_si256(sum32, 1));
  s = _mm_hadd_epi32(s, s);
  s = _mm_hadd_epi32(s, s);
  return _mm_cvtsi128_si32(s);
}

inline float amax32(const float* x) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(x));
  for (int k = 1; k < 4; ++k) m = _mm256_max_ps(m, _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(x + 8 * k)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

}  // namespace
#endif

void quantize_row_fast(DType t, const float* src, void* dst, int64_t n) {
#if INFERCEPT_QFAST_AVX2
  if (t == DType::q8_0 || t == DType::q8_1) {
    const int64_t nb = n / kQK;
    for (int64_t i = 0; i < nb; ++i, src += kQK) {
      const float d = amax32(src) / 127.f;
      const float id = d != 0.f ? 1.f / d : 0.f;
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
