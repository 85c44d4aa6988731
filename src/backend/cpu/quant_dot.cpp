// Weight x activation dot products for the CPU backend. Why it is shaped this way:
//  - Every kernel computes the exact integer sum of each block (maddubs/madd or VNNI dpbusd)
//    and only then scales it in float, so SIMD and scalar paths agree up to float
//    accumulation order, and the scalar path (vec_dot_scalar) doubles as the test oracle.
//  - Kernels for the 32-element formats take up to 4 activation rows at once: a weight block
//    is loaded and unpacked once and reused from registers, which is what makes prefill
//    compute-bound instead of unpack-bound. Decode (one activation row) is a streaming loop
//    with two independent accumulators so it keeps up with memory bandwidth.
//  - AVX2+FMA+F16C is the baseline fast path; AVX512-VNNI (256-bit form) only replaces the
//    maddubs+madd pair where it is a strict win. A 512-bit two-blocks-per-vector q4_1 kernel
//    on this file layout was measured slower than this one (shuffle-bound); 512-bit VNNI pays
//    off only on rows repacked at load (packed_matmul.*), which is what the CPU backend uses
//    for q4_0/q4_1/q8_0 where AVX512-VNNI exists. These kernels remain for the other types,
//    builds without it, and as the reference layout. Without AVX2 everything is scalar.
#include "backend/cpu/quant_dot.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/quant_blocks.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define INFERCEPT_QDOT_AVX2 1
#include <immintrin.h>
#endif

namespace infercept {
namespace {

// ---------------------------------------------------------------------------------------
// Scalar kernels (exact integer block sums, float accumulation in block order).

// Decodes the 8 six-bit scales and mins of a q4_K super-block (layout: see core/quant.cpp).
inline void q4k_scales_mins(const uint8_t* s, int* sc, int* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    mn[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

float dot_q4_0_scalar(const BlockQ4_0* x, const BlockQ8_0* y, int64_t nb) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += ((x[i].qs[j] & 0x0f) - 8) * y[i].qs[j];
      isum += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + kQK / 2];
    }
    sum += (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * (float)isum;
  }
  return sum;
}

float dot_q4_1_scalar(const BlockQ4_1* x, const BlockQ8_1* y, int64_t nb) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += (x[i].qs[j] & 0x0f) * y[i].qs[j];
      isum += (x[i].qs[j] >> 4) * y[i].qs[j + kQK / 2];
    }
    // sum_j (q_j dx + m)(qy_j dy) = dx dy sum q qy + m * (dy sum qy), the latter stored as s.
    sum += (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * (float)isum +
           fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
  }
  return sum;
}

float dot_q8_0_scalar(const BlockQ8_0* x, const BlockQ8_0* y, int64_t nb) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK; ++j) isum += x[i].qs[j] * y[i].qs[j];
    sum += (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * (float)isum;
  }
  return sum;
}

float dot_q4_k_scalar(const BlockQ4_K* x, const BlockQ8_K* y, int64_t nb) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; ++i) {
    int sc[8], mn[8];
    q4k_scales_mins(x[i].scales, sc, mn);
    int isum = 0, msum = 0;
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = x[i].qs + 32 * c;
      const int8_t* a = y[i].qs + 64 * c;
      int s0 = 0, s1 = 0;
      for (int l = 0; l < 32; ++l) {
        s0 += (q[l] & 0x0f) * a[l];
        s1 += (q[l] >> 4) * a[l + 32];
      }
      isum += sc[2 * c] * s0 + sc[2 * c + 1] * s1;
    }
    for (int j = 0; j < 8; ++j) msum += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    const float d = y[i].d * fp16_to_fp32(x[i].d);
    const float dmin = y[i].d * fp16_to_fp32(x[i].dmin);
    sum += d * (float)isum - dmin * (float)msum;
  }
  return sum;
}

float dot_q6_k_scalar(const BlockQ6_K* x, const BlockQ8_K* y, int64_t nb) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* a = y[i].qs;
    int isum = 0;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, a += 128) {
      const int8_t* sc = x[i].scales + 8 * h;
      int g[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // group sums, group = element / 16 in the half
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q0 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        g[is + 0] += q0 * a[l];
        g[is + 2] += q1 * a[l + 32];
        g[is + 4] += q2 * a[l + 64];
        g[is + 6] += q3 * a[l + 96];
      }
      for (int j = 0; j < 8; ++j) isum += sc[j] * g[j];
    }
    sum += (y[i].d * fp16_to_fp32(x[i].d)) * (float)isum;
  }
  return sum;
}

float dot_f32_scalar(const float* x, const float* y, int64_t n) {
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

float dot_f16_scalar(const uint16_t* x, const uint16_t* y, int64_t n) {
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) sum += fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]);
  return sum;
}

float dot_bf16_f32_scalar(const uint16_t* x, const float* y, int64_t n) {
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) sum += bf16_to_fp32(x[i]) * y[i];
  return sum;
}

// ---------------------------------------------------------------------------------------
// AVX2 kernels.
#if INFERCEPT_QDOT_AVX2

// Fully unrolls the short loops over activation rows / unrolled blocks so the accumulator
// arrays live in registers (at -O2 GCC would otherwise keep them on the stack).
#define INFERCEPT_UNROLL _Pragma("GCC unroll 8")

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sums of 4 adjacent u8*s8 products as 8 int32. Exact as long as each pair sum fits int16
// (true for our operands: |u| <= 128, |s| <= 127).
inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// 32 nibbles of a 16-byte q4 block as bytes: low nibbles (elements 0..15) then high nibbles.
// The 16 bytes are broadcast to both halves by the load itself and only the upper half is
// shifted (a per-lane variable shift), which keeps the unpack off the shuffle ports.
inline __m256i unpack_q4(const uint8_t* qs) {
  const __m256i both =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i shifted = _mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4));
  return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f));
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Two adjacent fp16 values (a block's d and m, or d and s) as the low lanes of a __m128.
// Only used on fields followed by at least 6 more bytes of the same block.
// Reads 8 bytes (the two values and what follows them in the block), so the conversion can
// take its operand from memory.
inline __m128 f16x2(const uint16_t* p) {
  return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// kUnroll blocks per iteration feed separate accumulators so the FMA latency chain does not
// limit the streaming rate. It must not depend on NA: block i always lands in accumulator
// i % kUnroll, so a row's dot product is summed in the same order whether it is computed
// alone (decode) or in a tile of 4 (prefill). That is what makes a request's tokens the same
// alone and inside a batch.
template <int NA>
constexpr int kUnroll = 2;

// NA activation rows against one q4_1 row. Per block: (dx, mx) * (dy, sy) in one multiply
// gives the integer sum's scale in lane 0 and the min term m * s in lane 1.
template <int NA>
void dots_q4_1(const BlockQ4_1* x, const BlockQ8_1* const* y, int64_t nb, float* out) {
  constexpr int U = kUnroll<NA>;
  __m256 acc[NA][U];
  __m128 msum[NA][U];
  INFERCEPT_UNROLL
  for (int a = 0; a < NA; ++a) {
    INFERCEPT_UNROLL
    for (int u = 0; u < U; ++u) {
      acc[a][u] = _mm256_setzero_ps();
      msum[a][u] = _mm_setzero_ps();
    }
  }
  auto block = [&](int64_t i, int u) {
    const __m128 xdm = f16x2(&x[i].d);  // d, m adjacent
    const __m256i q = unpack_q4(x[i].qs);
    INFERCEPT_UNROLL
    for (int a = 0; a < NA; ++a) {
      const BlockQ8_1& b = y[a][i];
      const __m128 p = _mm_mul_ps(xdm, f16x2(&b.d));  // d, s adjacent
      const __m256i s = dot_u8s8(q, load256(b.qs));
      acc[a][u] = _mm256_fmadd_ps(_mm256_broadcastss_ps(p), _mm256_cvtepi32_ps(s), acc[a][u]);
      msum[a][u] = _mm_add_ps(msum[a][u], p);
    }
  };
  int64_t i = 0;
  for (; i + U <= nb; i += U) {
    INFERCEPT_UNROLL
    for (int u = 0; u < U; ++u) block(i + u, u);
  }
  for (; i < nb; ++i) block(i, 0);
  INFERCEPT_UNROLL
  for (int a = 0; a < NA; ++a) {
    __m256 t = acc[a][0];
    __m128 m = msum[a][0];
    INFERCEPT_UNROLL
    for (int u = 1; u < U; ++u) {
      t = _mm256_add_ps(t, acc[a][u]);
      m = _mm_add_ps(m, msum[a][u]);
    }
    out[a] = hsum(t) + _mm_cvtss_f32(_mm_movehdup_ps(m));
  }
}

// q8_0 and q4_0 weights against q8_0 activations: the weight's sign moves onto the
// activation (|x| unsigned, sign(y, x) signed) so the u8*s8 multiply applies.
template <int NA, bool kQ4>
void dots_q_q8_0(const void* xv, const BlockQ8_0* const* y, int64_t nb, float* out) {
  constexpr int U = kUnroll<NA>;
  __m256 acc[NA][U];
  INFERCEPT_UNROLL
  for (int a = 0; a < NA; ++a) {
    INFERCEPT_UNROLL
    for (int u = 0; u < U; ++u) acc[a][u] = _mm256_setzero_ps();
  }
  auto block = [&](int64_t i, int u) {
    __m128 dx;  // lane 0
    __m256i xs;
    if constexpr (kQ4) {
      const BlockQ4_0& b = static_cast<const BlockQ4_0*>(xv)[i];
      dx = f16x2(&b.d);
      xs = _mm256_sub_epi8(unpack_q4(b.qs), _mm256_set1_epi8(8));
    } else {
      const BlockQ8_0& b = static_cast<const BlockQ8_0*>(xv)[i];
      dx = f16x2(&b.d);
      xs = load256(b.qs);
    }
    const __m256i ax = _mm256_sign_epi8(xs, xs);
    INFERCEPT_UNROLL
    for (int a = 0; a < NA; ++a) {
      const BlockQ8_0& b = y[a][i];
      const __m256i s = dot_u8s8(ax, _mm256_sign_epi8(load256(b.qs), xs));
      const __m256 d = _mm256_broadcastss_ps(_mm_mul_ps(dx, f16x2(&b.d)));
      acc[a][u] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[a][u]);
    }
  };
  int64_t i = 0;
  for (; i + U <= nb; i += U) {
    INFERCEPT_UNROLL
    for (int u = 0; u < U; ++u) block(i + u, u);
  }
  for (; i < nb; ++i) block(i, 0);
  INFERCEPT_UNROLL
  for (int a = 0; a < NA; ++a) {
    __m256 t = acc[a][0];
    INFERCEPT_UNROLL
    for (int u = 1; u < U; ++u) t = _mm256_add_ps(t, acc[a][u]);
    out[a] = hsum(t);
  }
}

// pshufb control that repeats 16-bit element j of each 128-bit lane across that lane.
inline __m256i bcast16_ctrl(int lo_elem, int hi_elem) {
  return _mm256_set_m128i(_mm_set1_epi16((int16_t)(((2 * hi_elem + 1) << 8) | (2 * hi_elem))),
                          _mm_set1_epi16((int16_t)(((2 * lo_elem + 1) << 8) | (2 * lo_elem))));
}

// The 12 scale bytes of a q4_K super-block as 8 scales (low 8 bytes) and 8 mins (high 8
// bytes). With w0, w1, w2 the three little-endian words: scales 0-3 and mins 0-3 are the low
// 6 bits of w0 and w1; scales 4-7 take their low nibble from w2's low nibbles and bits 4-5
// from the top 2 bits of w0's bytes ((w0 >> 2) & 0x30 lands them there); mins 4-7 likewise
// from w2's high nibbles and w1.
inline __m128i q4k_unpack_scales(const uint8_t* s) {
  uint32_t w[3];
  std::memcpy(w, s, 12);
  const uint32_t sc_lo = w[0] & 0x3f3f3f3fu;
  const uint32_t mn_lo = w[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
  const uint32_t mn_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
  return _mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)mn_lo, (int)mn_hi);
}

float dot_q4_k_avx2(const BlockQ4_K* x, const BlockQ8_K* y, int64_t nb) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ctrl[8] = {bcast16_ctrl(0, 0), bcast16_ctrl(1, 1), bcast16_ctrl(2, 2),
                           bcast16_ctrl(3, 3), bcast16_ctrl(4, 4), bcast16_ctrl(5, 5),
                           bcast16_ctrl(6, 6), bcast16_ctrl(7, 7)};
  __m256 acc = _mm256_setzero_ps();
  __m128 macc = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m128i scmn = q4k_unpack_scales(x[i].scales);
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scmn));
    const __m128i mn16 = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(scmn, scmn));
    // mins: sum_j mn_j * (activation sum of sub-block j) from the pairs of 16-group sums.
    const __m128i bs_lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y[i].bsums));
    const __m128i bs_hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y[i].bsums + 8));
    const __m128i msum = _mm_madd_epi16(_mm_hadd_epi16(bs_lo, bs_hi), mn16);  // 4 x int32
    __m256i isum = _mm256_setzero_si256();
    INFERCEPT_UNROLL
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load256(x[i].qs + 32 * c);
      const __m256i lo = _mm256_and_si256(q, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      const __m256i p0 = _mm256_maddubs_epi16(lo, load256(y[i].qs + 64 * c));
      const __m256i p1 = _mm256_maddubs_epi16(hi, load256(y[i].qs + 64 * c + 32));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p0, _mm256_shuffle_epi8(sc16, ctrl[2 * c])));
      isum =
          _mm256_add_epi32(isum, _mm256_madd_epi16(p1, _mm256_shuffle_epi8(sc16, ctrl[2 * c + 1])));
    }
    const __m128 xd = f16x2(&x[i].d);  // d, dmin
    const __m128 dd = _mm_mul_ps(xd, _mm_set1_ps(y[i].d));
    acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(isum), acc);
    // lane 1 of dd is dmin * y.d; the 4 partial min sums are reduced after the loop
    macc =
        _mm_fmadd_ps(_mm_shuffle_ps(dd, dd, _MM_SHUFFLE(1, 1, 1, 1)), _mm_cvtepi32_ps(msum), macc);
  }
  __m128 m = _mm_add_ps(macc, _mm_movehl_ps(macc, macc));
  m = _mm_add_ss(m, _mm_movehdup_ps(m));
  return hsum(acc) - _mm_cvtss_f32(m);
}

float dot_q6_k_avx2(const BlockQ6_K* x, const BlockQ8_K* y, int64_t nb) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  // within a half, quarter k uses groups 2k (elements 0..15) and 2k+1 (16..31)
  const __m256i ctrl[4] = {bcast16_ctrl(0, 1), bcast16_ctrl(2, 3), bcast16_ctrl(4, 5),
                           bcast16_ctrl(6, 7)};
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    // sum (q - 32) a = sum q a - 32 sum a; the per-16 sums of a are the bsums.
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    const __m256i off = _mm256_madd_epi16(sc16, load256(y[i].bsums));
    __m256i isum = _mm256_setzero_si256();
    INFERCEPT_UNROLL
    for (int h = 0; h < 2; ++h) {
      // scales 8h..8h+7 in both 128-bit lanes
      const __m256i sch = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                 : _mm256_permute2x128_si256(sc16, sc16, 0x11);
      const __m256i ql0 = load256(x[i].ql + 64 * h);
      const __m256i ql1 = load256(x[i].ql + 64 * h + 32);
      const __m256i qh = load256(x[i].qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, m4),
                          _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
          _mm256_or_si256(_mm256_and_si256(ql1, m4),
                          _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                          _mm256_and_si256(qh, m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
      };
      const int8_t* a = y[i].qs + 128 * h;
      INFERCEPT_UNROLL
      for (int k = 0; k < 4; ++k) {
        const __m256i p = _mm256_maddubs_epi16(q[k], load256(a + 32 * k));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_shuffle_epi8(sch, ctrl[k])));
      }
    }
    isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 5));
    const float d = y[i].d * fp16_to_fp32(x[i].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc);
  }
  return hsum(acc);
}

float dot_f32_avx2(const float* x, const float* y, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int u = 0; u < 4; ++u) {
      acc[u] =
          _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * u), _mm256_loadu_ps(y + i + 8 * u), acc[u]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
  }
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

inline __m256 load_bf16x8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

float dot_bf16_f32_avx2(const uint16_t* x, const float* y, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int u = 0; u < 4; ++u) {
      acc[u] = _mm256_fmadd_ps(load_bf16x8(x + i + 8 * u), _mm256_loadu_ps(y + i + 8 * u), acc[u]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    acc[0] = _mm256_fmadd_ps(load_bf16x8(x + i), _mm256_loadu_ps(y + i), acc[0]);
  }
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += bf16_to_fp32(x[i]) * y[i];
  return sum;
}

inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

float dot_f16_avx2(const uint16_t* x, const uint16_t* y, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int u = 0; u < 4; ++u) {
      acc[u] = _mm256_fmadd_ps(load_f16x8(x + i + 8 * u), load_f16x8(y + i + 8 * u), acc[u]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    acc[0] = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), acc[0]);
  }
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]);
  return sum;
}

#endif  // INFERCEPT_QDOT_AVX2

// ---------------------------------------------------------------------------------------
// Dispatch. A RowDots computes the dots of one weight row with na (1..4) activation rows.
using RowDots = void (*)(const void* w, const void* const* acts, int na, int64_t k, float* out);

template <typename Fn>
void each_act(const void* const* acts, int na, float* out, Fn&& fn) {
  for (int a = 0; a < na; ++a) out[a] = fn(acts[a]);
}

float vec_dot_scalar_impl(DType t, const void* w, const void* a, int64_t n) {
  switch (t) {
    case DType::f32:
      return dot_f32_scalar(static_cast<const float*>(w), static_cast<const float*>(a), n);
    case DType::f16:
      return dot_f16_scalar(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), n);
    case DType::bf16:
      return dot_bf16_f32_scalar(static_cast<const uint16_t*>(w), static_cast<const float*>(a), n);
    case DType::q8_0:
      return dot_q8_0_scalar(static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0*>(a),
                             n / kQK);
    case DType::q4_0:
      return dot_q4_0_scalar(static_cast<const BlockQ4_0*>(w), static_cast<const BlockQ8_0*>(a),
                             n / kQK);
    case DType::q4_1:
      return dot_q4_1_scalar(static_cast<const BlockQ4_1*>(w), static_cast<const BlockQ8_1*>(a),
                             n / kQK);
    case DType::q4_k:
      return dot_q4_k_scalar(static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(a),
                             n / kQKK);
    case DType::q6_k:
      return dot_q6_k_scalar(static_cast<const BlockQ6_K*>(w), static_cast<const BlockQ8_K*>(a),
                             n / kQKK);
    default:
      break;
  }
  CHECK_MSG(false, "vec_dot: unsupported weight type");
  return 0.f;
}

#if INFERCEPT_QDOT_AVX2
template <int NA>
void q4_1_rows(const void* w, const void* const* acts, int64_t k, float* out) {
  const BlockQ8_1* y[NA];
  for (int a = 0; a < NA; ++a) y[a] = static_cast<const BlockQ8_1*>(acts[a]);
  dots_q4_1<NA>(static_cast<const BlockQ4_1*>(w), y, k / kQK, out);
}

template <int NA, bool kQ4>
void q_q8_0_rows(const void* w, const void* const* acts, int64_t k, float* out) {
  const BlockQ8_0* y[NA];
  for (int a = 0; a < NA; ++a) y[a] = static_cast<const BlockQ8_0*>(acts[a]);
  dots_q_q8_0<NA, kQ4>(w, y, k / kQK, out);
}

void row_dots_q4_1(const void* w, const void* const* acts, int na, int64_t k, float* out) {
  switch (na) {
    case 1:
      q4_1_rows<1>(w, acts, k, out);
      return;
    case 2:
      q4_1_rows<2>(w, acts, k, out);
      return;
    case 3:
      q4_1_rows<3>(w, acts, k, out);
      return;
    default:
      q4_1_rows<4>(w, acts, k, out);
      return;
  }
}

template <bool kQ4>
void row_dots_q_q8_0(const void* w, const void* const* acts, int na, int64_t k, float* out) {
  switch (na) {
    case 1:
      q_q8_0_rows<1, kQ4>(w, acts, k, out);
      return;
    case 2:
      q_q8_0_rows<2, kQ4>(w, acts, k, out);
      return;
    case 3:
      q_q8_0_rows<3, kQ4>(w, acts, k, out);
      return;
    default:
      q_q8_0_rows<4, kQ4>(w, acts, k, out);
      return;
  }
}

void row_dots_q4_k(const void* w, const void* const* acts, int na, int64_t k, float* out) {
  each_act(acts, na, out, [&](const void* a) {
    return dot_q4_k_avx2(static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(a),
                         k / kQKK);
  });
}

void row_dots_q6_k(const void* w, const void* const* acts, int na, int64_t k, float* out) {
  each_act(acts, na, out, [&](const void* a) {
    return dot_q6_k_avx2(static_cast<const BlockQ6_K*>(w), static_cast<const BlockQ8_K*>(a),
                         k / kQKK);
  });
}

void row_dots_f32(const void* w, const void* const* acts, int na, int64_t k, float* out) {
  each_act(acts, na, out, [&](const void* a) {
    return dot_f32_avx2(static_cast<const float*>(w), static_cast<const float*>(a), k);
  });
}

void row_dots_bf16(const void* w, const void* const* acts, int na, int64_t k, float* out) {
  each_act(acts, na, out, [&](const void* a) {
    return dot_bf16_f32_avx2(static_cast<const uint16_t*>(w), static_cast<const float*>(a), k);
  });
}

void row_dots_f16(const void* w, const void* const* acts, int na, int64_t k, float* out) {
  each_act(acts, na, out, [&](const void* a) {
    return dot_f16_avx2(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), k);
  });
}
#endif  // INFERCEPT_QDOT_AVX2

template <DType T>
void row_dots_scalar(const void* w, const void* const* acts, int na, int64_t k, float* out) {
  each_act(acts, na, out, [&](const void* a) { return vec_dot_scalar_impl(T, w, a, k); });
}

// Decode: the row loop is instantiated per kernel so the single-row dot is inlined into it
// and the per-row cost is only the dot itself.
using DecodeRows = void (*)(const char* w, size_t w_row_bytes, int64_t r0, int64_t r1,
                            const void* act, int64_t k, float* out);

template <RowDots R>
void decode_rows(const char* w, size_t w_row_bytes, int64_t r0, int64_t r1, const void* act,
                 int64_t k, float* out) {
  for (int64_t r = r0; r < r1; ++r) R(w + (size_t)r * w_row_bytes, &act, 1, k, out + r);
}

struct Kernels {
  RowDots rows = nullptr;
  DecodeRows decode = nullptr;
};

template <RowDots R>
Kernels kernels_of() {
  return {R, decode_rows<R>};
}

Kernels kernels_for(DType t) {
  switch (t) {
#if INFERCEPT_QDOT_AVX2
    case DType::f32:
      return kernels_of<row_dots_f32>();
    case DType::bf16:
      return kernels_of<row_dots_bf16>();
    case DType::f16:
      return kernels_of<row_dots_f16>();
    case DType::q8_0:
      return kernels_of<row_dots_q_q8_0<false>>();
    case DType::q4_0:
      return kernels_of<row_dots_q_q8_0<true>>();
    case DType::q4_1:
      return kernels_of<row_dots_q4_1>();
    case DType::q4_k:
      return kernels_of<row_dots_q4_k>();
    case DType::q6_k:
      return kernels_of<row_dots_q6_k>();
#else
    case DType::f32:
      return kernels_of<row_dots_scalar<DType::f32>>();
    case DType::bf16:
      return kernels_of<row_dots_scalar<DType::bf16>>();
    case DType::f16:
      return kernels_of<row_dots_scalar<DType::f16>>();
    case DType::q8_0:
      return kernels_of<row_dots_scalar<DType::q8_0>>();
    case DType::q4_0:
      return kernels_of<row_dots_scalar<DType::q4_0>>();
    case DType::q4_1:
      return kernels_of<row_dots_scalar<DType::q4_1>>();
    case DType::q4_k:
      return kernels_of<row_dots_scalar<DType::q4_k>>();
    case DType::q6_k:
      return kernels_of<row_dots_scalar<DType::q6_k>>();
#endif
    default:
      break;
  }
  CHECK_MSG(false, "vec_dot: unsupported weight type");
  return {};
}

}  // namespace

float vec_dot_scalar(DType weight_type, const void* w_row, const void* act_row, int64_t n) {
  CHECK(n % dtype_block_elems(weight_type) == 0);
  return vec_dot_scalar_impl(weight_type, w_row, act_row, n);
}

float vec_dot(DType weight_type, const void* w_row, const void* act_row, int64_t n) {
  CHECK(n % dtype_block_elems(weight_type) == 0);
  float out;
  kernels_for(weight_type).rows(w_row, &act_row, 1, n, &out);
  return out;
}

void matmul_rows(DType weight_type, const void* w, size_t w_row_bytes, int64_t w_row_begin,
                 int64_t w_row_end, const void* acts, size_t act_row_bytes, int64_t n_act_rows,
                 int64_t k, float* out, int64_t out_stride) {
  if (w_row_begin >= w_row_end || n_act_rows <= 0) return;
  CHECK(k % dtype_block_elems(weight_type) == 0);
  const Kernels kern = kernels_for(weight_type);
  const RowDots dots = kern.rows;
  const char* wb = static_cast<const char*>(w);
  const char* ab = static_cast<const char*>(acts);

  if (n_act_rows == 1) {  // decode: stream the weight rows once
    kern.decode(wb, w_row_bytes, w_row_begin, w_row_end, ab, k, out);
    return;
  }

  // A tile of weight rows (about 32 KiB: L1-resident while re-read) meets every activation
  // row, four activation rows at a time so each unpacked weight block serves four dots.
  constexpr size_t kTileBytes = 32 * 1024;
  const int64_t tile =
      std::clamp<int64_t>((int64_t)(kTileBytes / std::max<size_t>(w_row_bytes, 1)), 4, 64);
  for (int64_t r0 = w_row_begin; r0 < w_row_end; r0 += tile) {
    const int64_t r1 = std::min(r0 + tile, w_row_end);
    for (int64_t a = 0; a < n_act_rows; a += 4) {
      const int na = (int)std::min<int64_t>(4, n_act_rows - a);
      const void* ap[4];
      for (int j = 0; j < na; ++j) ap[j] = ab + (size_t)(a + j) * act_row_bytes;
      for (int64_t r = r0; r < r1; ++r) {
        float res[4];
        dots(wb + (size_t)r * w_row_bytes, ap, na, k, res);
        for (int j = 0; j < na; ++j) out[(a + j) * out_stride + r] = res[j];
      }
    }
  }
}

}  // namespace infercept
