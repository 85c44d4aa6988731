#include "backend/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention_orders.h"
#include "backend/cpu/vec_math.h"
#include "core/check.h"
#include "core/fp8.h"
#include "core/half.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace infercept {
namespace {

using namespace cpu_attention;  // llama.cpp's summation orders (attention_orders.h)

// Query rows per work item: small enough to spread one long prefill over all threads.
constexpr int64_t kQueryChunk = 32;
// Positions of a decode row whose keys (then values), every KV head, pass through an L1-sized
// buffer at a time.
constexpr int64_t kPosChunk = 16;

#if defined(__AVX2__) && defined(__FMA__)
// The horizontal sum every dot product here ends with (one fixed order, so results are
// reproducible whichever helper computed them).
inline float reduce8(__m256 acc) {
  __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}
#endif

inline float dot(const float* a, const float* b, int64_t n) {
#if defined(__AVX2__) && defined(__FMA__)
  if (n % 8 == 0) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8)
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    return reduce8(acc);
  }
#endif
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// dot(a, b + j * stride, n) for j = 0..3, each summed in exactly dot()'s order: four
// independent FMA chains instead of one, which is what bounded the loop over key positions.
inline void dot4(const float* a, const float* b, int64_t n, int64_t stride, float* out) {
#if defined(__AVX2__) && defined(__FMA__)
  if (n % 8 == 0) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int64_t i = 0; i < n; i += 8) {
      const __m256 va = _mm256_loadu_ps(a + i);
      acc0 = _mm256_fmadd_ps(va, _mm256_loadu_ps(b + i), acc0);
      acc1 = _mm256_fmadd_ps(va, _mm256_loadu_ps(b + stride + i), acc1);
      acc2 = _mm256_fmadd_ps(va, _mm256_loadu_ps(b + 2 * stride + i), acc2);
      acc3 = _mm256_fmadd_ps(va, _mm256_loadu_ps(b + 3 * stride + i), acc3);
    }
    // reduce8 of all four at once, in reduce8's order: halves added lane-wise
    // (t_i = e_i + e_{i+4}), then (t0 + t1) + (t2 + t3) through two horizontal adds.
    const __m256 t01 = _mm256_add_ps(_mm256_permute2f128_ps(acc0, acc1, 0x20),
                                     _mm256_permute2f128_ps(acc0, acc1, 0x31));
    const __m256 t23 = _mm256_add_ps(_mm256_permute2f128_ps(acc2, acc3, 0x20),
                                     _mm256_permute2f128_ps(acc2, acc3, 0x31));
    const __m256 h = _mm256_hadd_ps(t01, t23);
    const __m256 s = _mm256_hadd_ps(h, h);  // lanes 0, 1, 4, 5: dots 0, 2, 1, 3
    const __m128 lo = _mm256_castps256_ps128(s), hi = _mm256_extractf128_ps(s, 1);
    _mm_storeu_ps(out, _mm_unpacklo_ps(lo, hi));  // dots 0, 1, 2, 3
    return;
  }
#endif
  for (int j = 0; j < 4; ++j) out[j] = dot(a, b + j * stride, n);
}

inline void axpy(float a, const float* x, float* y, int64_t n) {
#if defined(__AVX2__) && defined(__FMA__)
  if (n % 8 == 0) {
    const __m256 va = _mm256_set1_ps(a);
    for (int64_t i = 0; i < n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// out[0, n) = sum over p of w[p] * v[p * stride .. p * stride + n), accumulated in position order
// per element (the same fused multiply-adds as repeated axpy), with 64 columns at a time held in
// registers instead of being reloaded and stored for every position. With accumulate, the sums
// continue from what out holds (a later chunk of positions).
inline void weighted_rows(const float* w, const float* v, int64_t n_pos, int64_t n, int64_t stride,
                          float* out, bool accumulate = false) {
#if INFERCEPT_VEC_AVX512
  // The same per-element FMA chain as the AVX2 form below, 16 lanes wide.
  if (n % 64 == 0) {
    for (int64_t c = 0; c < n; c += 64) {
      // Four named accumulators: as an array GCC kept them in memory across positions.
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      if (accumulate) {
        a0 = _mm512_loadu_ps(out + c);
        a1 = _mm512_loadu_ps(out + c + 16);
        a2 = _mm512_loadu_ps(out + c + 32);
        a3 = _mm512_loadu_ps(out + c + 48);
      }
      for (int64_t p = 0; p < n_pos; ++p) {
        const __m512 wp = _mm512_set1_ps(w[p]);
        const float* vp = v + p * stride + c;
        a0 = _mm512_fmadd_ps(wp, _mm512_loadu_ps(vp), a0);
        a1 = _mm512_fmadd_ps(wp, _mm512_loadu_ps(vp + 16), a1);
        a2 = _mm512_fmadd_ps(wp, _mm512_loadu_ps(vp + 32), a2);
        a3 = _mm512_fmadd_ps(wp, _mm512_loadu_ps(vp + 48), a3);
      }
      _mm512_storeu_ps(out + c, a0);
      _mm512_storeu_ps(out + c + 16, a1);
      _mm512_storeu_ps(out + c + 32, a2);
      _mm512_storeu_ps(out + c + 48, a3);
    }
    return;
  }
#endif
#if defined(__AVX2__) && defined(__FMA__)
  if (n % 64 == 0) {
    for (int64_t c = 0; c < n; c += 64) {
      __m256 acc[8];
      for (int j = 0; j < 8; ++j)
        acc[j] = accumulate ? _mm256_loadu_ps(out + c + 8 * j) : _mm256_setzero_ps();
      for (int64_t p = 0; p < n_pos; ++p) {
        const __m256 wp = _mm256_set1_ps(w[p]);
        const float* vp = v + p * stride + c;
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) acc[j] =
            _mm256_fmadd_ps(wp, _mm256_loadu_ps(vp + 8 * j), acc[j]);
      }
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(out + c + 8 * j, acc[j]);
    }
    return;
  }
#endif
  if (!accumulate) std::fill(out, out + n, 0.0f);
  for (int64_t p = 0; p < n_pos; ++p) axpy(w[p], v + p * stride, out, n);
}

#if INFERCEPT_VEC_AVX512
// weighted_rows for G query heads that share one value head: out_j[c] = sum over p of
// w_j[p] * v[p * stride + c], each element the same FMA chain in position order as
// weighted_rows, but the G heads' 4G chains run side by side and share each value load
// (one head alone is bound by the FMA latency, 4 chains deep). n % 64 == 0.
template <int G>
inline void weighted_rows_heads(const float* const* w, const float* v, int64_t n_pos, int64_t n,
                                int64_t stride, float* const* out, bool accumulate) {
  for (int64_t c = 0; c < n; c += 64) {
    __m512 acc[G][4];
    _Pragma("GCC unroll 4") for (int j = 0; j < G; ++j)
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) acc[j][q] =
            accumulate ? _mm512_loadu_ps(out[j] + c + 16 * q) : _mm512_setzero_ps();
    for (int64_t p = 0; p < n_pos; ++p) {
      const float* vp = v + p * stride + c;
      const __m512 v0 = _mm512_loadu_ps(vp), v1 = _mm512_loadu_ps(vp + 16),
                   v2 = _mm512_loadu_ps(vp + 32), v3 = _mm512_loadu_ps(vp + 48);
      _Pragma("GCC unroll 4") for (int j = 0; j < G; ++j) {
        const __m512 wp = _mm512_set1_ps(w[j][p]);
        acc[j][0] = _mm512_fmadd_ps(wp, v0, acc[j][0]);
        acc[j][1] = _mm512_fmadd_ps(wp, v1, acc[j][1]);
        acc[j][2] = _mm512_fmadd_ps(wp, v2, acc[j][2]);
        acc[j][3] = _mm512_fmadd_ps(wp, v3, acc[j][3]);
      }
    }
    _Pragma("GCC unroll 4") for (int j = 0; j < G; ++j)
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q)
            _mm512_storeu_ps(out[j] + c + 16 * q, acc[j][q]);
  }
}
#endif

// Calls f(std::integral_constant<int, G>{}) with G = min(4, n): the query heads of a GQA
// group go through kernels templated on their count, at most 4 at a time.
template <typename F>
inline void for_head_count(int64_t n, F&& f) {
  switch (std::min<int64_t>(4, n)) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    default:
      return f(std::integral_constant<int, 4>{});
  }
}

// weighted_rows for `group` heads sharing v: w_j = w + j * w_stride, out_j = out + j * n.
inline void weighted_rows_group(const float* w, int64_t w_stride, int64_t group, const float* v,
                                int64_t n_pos, int64_t n, int64_t stride, float* out,
                                bool accumulate) {
#if INFERCEPT_VEC_AVX512
  if (n % 64 == 0) {
    for (int64_t j0 = 0; j0 < group; j0 += 4) {
      const int g = (int)std::min<int64_t>(4, group - j0);
      const float* ws[4];
      float* os[4];
      for (int j = 0; j < g; ++j) {
        ws[j] = w + (j0 + j) * w_stride;
        os[j] = out + (j0 + j) * n;
      }
      for_head_count(g, [&](auto heads) {
        weighted_rows_heads<decltype(heads)::value>(ws, v, n_pos, n, stride, os, accumulate);
      });
    }
    return;
  }
#endif
  for (int64_t j = 0; j < group; ++j)
    weighted_rows(w + j * w_stride, v, n_pos, n, stride, out + j * n, accumulate);
}

// Which order a row's sums take (see above): position chains / scores in the batched order
// (the default), or llama.cpp's single-token or batched order throughout.
enum class RowOrder { fast, single, batched };

// out_j[0, n) = sum over p < n_pos of w_j[p] * v[p * stride + (0, n)] for the `group` heads
// sharing v (w_j = w + j * w_stride, out_j = out + j * n), in `order` (llama.cpp's orders
// with AVX-512 and n % 16 == 0; else position chains).
inline void weighted_sums(const float* w, int64_t w_stride, int64_t group, const float* v,
                          int64_t n_pos, int64_t n, int64_t stride, float* out, RowOrder order) {
#if INFERCEPT_VEC_AVX512
  if (n % 16 == 0 && order != RowOrder::fast) {
    if (order == RowOrder::batched) {
      for (int64_t j = 0; j < group; ++j)
        weighted_sum_batched_order(w + j * w_stride, v, n_pos, n, stride, out + j * n);
      return;
    }
    for (int64_t j0 = 0; j0 < group; j0 += 4) {
      const float* wj = w + j0 * w_stride;
      float* oj = out + j0 * n;
      for_head_count(group - j0, [&](auto heads) {
        weighted_sums_single_order<decltype(heads)::value>(wj, w_stride, v, n_pos, n, stride, oj);
      });
    }
    return;
  }
#else
  (void)order;
#endif
  weighted_rows_group(w, w_stride, group, v, n_pos, n, stride, out, false);
}

// Heads [h, h + n_heads) of fp8 cache slot `slot` into dst [n_heads, head_dim] f32: each code
// times its token and head's scale (KvGeometry).
void dequantize_fp8(const uint8_t* base, const KvGeometry& g, int64_t slot, int64_t h,
                    int64_t n_heads, float* dst) {
  const uint8_t* codes = base + g.slot_offset(slot) + h * g.head_dim;
  const uint8_t* scales = base + g.scale_offset(slot) + h * (int64_t)sizeof(float);
  for (int64_t i = 0; i < n_heads; ++i) {
    float scale;
    std::memcpy(&scale, scales + i * (int64_t)sizeof(float), sizeof(float));
    for (int64_t e = 0; e < g.head_dim; ++e)
      dst[i * g.head_dim + e] = fp8_e4m3_to_f32(codes[i * g.head_dim + e]) * scale;
  }
}

// Copies head `h` of positions [p_begin, p_begin + n) of one sequence into dst [n, head_dim]
// f32 (exact: f16 -> f32 loses nothing; fp8 is dequantized).
void gather_head(const uint8_t* base, const KvGeometry& g, const int32_t* block_table,
                 int64_t p_begin, int64_t n, int64_t h, float* dst) {
  const int64_t width = g.n_kv_heads * g.head_dim;
  // Block by block: a division per position (block_size is not a compile-time constant)
  // cost more than the copy itself.
  int64_t b = p_begin / g.block_size, j = p_begin % g.block_size;
  for (int64_t p = 0; p < n; ++b, j = 0) {
    const int64_t first_slot = (int64_t)block_table[b] * g.block_size;
    for (; j < g.block_size && p < n; ++j, ++p) {
      const size_t off = (size_t)((first_slot + j) * width + h * g.head_dim);
      float* d = dst + p * g.head_dim;
      if (g.has_scales()) {
        dequantize_fp8(base, g, first_slot + j, h, 1, d);
      } else if (g.dtype == DType::f32) {
        const float* s = reinterpret_cast<const float*>(base) + off;
        std::copy(s, s + g.head_dim, d);
      } else {
        const uint16_t* s = reinterpret_cast<const uint16_t*>(base) + off;
        int64_t i = 0;
#if defined(__F16C__) && defined(__AVX2__)
        for (; i + 8 <= g.head_dim; i += 8)
          _mm256_storeu_ps(
              d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
#endif
        for (; i < g.head_dim; ++i) d[i] = fp16_to_fp32(s[i]);
      }
    }
  }
}

// Scores of one query head against positions' keys (position p's at k + p * stride):
// out[p] = dot(q, key p) * scale; with AVX-512 and head_dim % 16 == 0 in llama.cpp's single
// order for RowOrder::single, else in its batched order (the default's too).
inline void head_scores(const float* qh, const float* k, int64_t n_pos, int64_t hd, int64_t stride,
                        float scale, float* out, RowOrder order) {
#if INFERCEPT_VEC_AVX512
  if (hd % 16 == 0) {
    if (order == RowOrder::single)
      return head_scores_single_order(qh, k, n_pos, hd, stride, scale, out);
    return head_scores_batched_order(qh, k, n_pos, hd, stride, scale, out);
  }
#else
  (void)order;
#endif
  int64_t p = 0;
  for (; p + 4 <= n_pos; p += 4) {
    dot4(qh, k + p * stride, hd, stride, out + p);
    for (int j = 0; j < 4; ++j) out[p + j] *= scale;
  }
  for (; p < n_pos; ++p) out[p] = dot(qh, k + p * stride, hd) * scale;
}

// The cache lines of positions [p_begin, p_begin + n) (every head) of one sequence, to be
// prefetched a few at a time while the chunk before them is computed: a block's slots are
// contiguous but blocks are scattered, so the hardware prefetcher cannot run ahead across
// them. Issued in one burst they filled the core's fill buffers and stalled it (13% of a
// batch-32 decode step sat on the prefetch instructions); spread out, they overlap compute.
struct LinePrefetch {
  struct Run {
    const uint8_t* start;
    size_t lines;
  };
  std::vector<Run> runs;  // contiguous slots, one run per block touched
  size_t total = 0, issued = 0;
  size_t run = 0, line = 0;  // where the next line to issue is

  void clear() {
    runs.clear();
    total = issued = run = line = 0;
  }
  void plan(const uint8_t* base, const KvGeometry& g, const int32_t* block_table, int64_t p_begin,
            int64_t n) {
    clear();
    const size_t slot_bytes = (size_t)(g.n_kv_heads * g.head_dim) * dtype_block_bytes(g.dtype);
    int64_t b = p_begin / g.block_size, j = p_begin % g.block_size;
    for (int64_t p = 0; p < n; ++b, j = 0) {
      const int64_t count = std::min(g.block_size - j, n - p);
      const uint8_t* start = base + g.slot_offset((int64_t)block_table[b] * g.block_size + j);
      const size_t lines = ((size_t)count * slot_bytes + 63) / 64;
      runs.push_back({start, lines});
      total += lines;
      p += count;
    }
  }
  // Issues the next share of the planned lines: part `i` of `parts`.
  void issue(int64_t i, int64_t parts) {
    const size_t end =
        std::min(total, ((size_t)(i + 1) * total + (size_t)parts - 1) / (size_t)parts);
    for (; issued < end; ++issued) {
      __builtin_prefetch(runs[run].start + 64 * line, 0, 3);
      if (++line == runs[run].lines) ++run, line = 0;
    }
  }
};

// Copies all heads of positions [p_begin, p_begin + n) into dst [n, n_kv_heads * head_dim]
// f32: whole slots, which lie contiguous within a block, so the reads stream.
void gather_slots(const uint8_t* base, const KvGeometry& g, const int32_t* block_table,
                  int64_t p_begin, int64_t n, float* dst) {
  const int64_t width = g.n_kv_heads * g.head_dim;
  int64_t b = p_begin / g.block_size, j = p_begin % g.block_size;
  for (int64_t p = 0; p < n; ++b, j = 0) {
    const int64_t run = std::min(g.block_size - j, n - p);
    const size_t off = (size_t)(((int64_t)block_table[b] * g.block_size + j) * width);
    const int64_t count = run * width;
    float* d = dst + p * width;
    if (g.has_scales()) {
      for (int64_t t = 0; t < run; ++t)
        dequantize_fp8(base, g, (int64_t)block_table[b] * g.block_size + j + t, 0, g.n_kv_heads,
                       d + t * width);
    } else if (g.dtype == DType::f32) {
      const float* s = reinterpret_cast<const float*>(base) + off;
      std::copy(s, s + count, d);
    } else {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(base) + off;
      int64_t i = 0;
#if INFERCEPT_VEC_AVX512
      for (; i + 16 <= count; i += 16) _mm512_storeu_ps(d + i, vm::f16_to_f32(s + i));
#endif
#if defined(__F16C__) && defined(__AVX2__)
      for (; i + 8 <= count; i += 8)
        _mm256_storeu_ps(d + i,
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
#endif
      for (; i < count; ++i) d[i] = fp16_to_fp32(s[i]);
    }
    p += run;
  }
}

// scores[0, n) -> softmax weights, rounded to f16 with an f16 cache: with an f16 cache the
// probabilities meet f16 values, so they are rounded to f16 too (an f16 P*V product, as
// llama.cpp computes it).
inline void softmax_weights(float* scores, int64_t n, bool f16) {
#if INFERCEPT_VEC_AVX512
  // 16 positions per pass, the tail masked: the maximum is exact in any order; the sum is
  // ggml's (soft_max_f32): each pass's 16 exponentials summed by hsum16 (the tree of
  // _mm512_reduce_add_ps), the passes added in double, and the weights multiplied by
  // (float)(1.0 / sum). Positions past n are exact zeros in ggml's padded row, so a masked
  // tail sums the same.
  auto mask_at = [&](int64_t p) {
    return (__mmask16)(n - p >= 16 ? 0xffffu : (1u << (n - p)) - 1u);
  };
  __m512 m16 = _mm512_set1_ps(-INFINITY);
  for (int64_t p = 0; p < n; p += 16)
    m16 = _mm512_mask_max_ps(m16, mask_at(p), m16, _mm512_maskz_loadu_ps(mask_at(p), scores + p));
  float lanes[16];
  _mm512_storeu_ps(lanes, m16);
  float mx = lanes[0];
  for (float l : lanes) mx = std::max(mx, l);
  const __m512 vmx = _mm512_set1_ps(mx);
  double sum = 0.0;
  for (int64_t p = 0; p < n; p += 16) {
    const __mmask16 m = mask_at(p);
    const __m512 e =
        _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + p), vmx)));
    sum += (double)hsum16(e);
    _mm512_mask_storeu_ps(scores + p, m, e);
  }
  const __m512 vinv = _mm512_set1_ps((float)(1.0 / sum));
  for (int64_t p = 0; p < n; p += 16) {
    const __mmask16 m = mask_at(p);
    __m512 w = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, scores + p), vinv);
    if (f16) w = vm::round_to_f16(w);
    _mm512_mask_storeu_ps(scores + p, m, w);
  }
#else
  float mx = -INFINITY;
  int64_t p0 = 0;
#if defined(__AVX2__) && defined(__FMA__)
  // The maximum is exact in any order, so it is taken 8 lanes at a time.
  if (n >= 8) {
    __m256 m8 = _mm256_loadu_ps(scores);
    for (p0 = 8; p0 + 8 <= n; p0 += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(scores + p0));
    float lanes[8];
    _mm256_storeu_ps(lanes, m8);
    for (float l : lanes) mx = std::max(mx, l);
  }
#endif
  for (int64_t p = p0; p < n; ++p) mx = std::max(mx, scores[p]);
  float sum = 0.0f;
  for (int64_t p = 0; p < n; ++p) {
    const float e = std::exp(scores[p] - mx);
    scores[p] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  int64_t p = 0;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  // Element-wise, so 8 at a time gives the same values (the same multiply and the same
  // round-to-nearest-even conversion as fp32_to_fp16).
  const __m256 vinv = _mm256_set1_ps(inv);
  for (; p + 8 <= n; p += 8) {
    __m256 w = _mm256_mul_ps(_mm256_loadu_ps(scores + p), vinv);
    if (f16) w = _mm256_cvtph_ps(_mm256_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT));
    _mm256_storeu_ps(scores + p, w);
  }
#endif
  for (; p < n; ++p) {
    const float w = scores[p] * inv;
    scores[p] = f16 ? fp16_to_fp32(fp32_to_fp16(w)) : w;
  }
#endif
}

// A worker's scratch for paged_attention_cpu.
struct Scratch {
  std::vector<float> k, v, scores, qall, qh;
};

struct WorkItem {
  int32_t seq;
  int32_t kv_head;
  int32_t q_begin;  // relative to the sequence's first query row
  int32_t q_end;
};

// Query heads [h0, h0 + n) of `row` into dst [n, hd]. With an f16 cache they are rounded to
// f16 and back: the cache holds f16 keys, and rounding q the same way keeps the score
// arithmetic what a f16 K*Q product computes (and what llama.cpp computes).
void round_q_heads(const Tensor& q, int64_t row, int64_t h0, int64_t n, int64_t hd, bool f16,
                   float* dst) {
  for (int64_t j = 0; j < n; ++j) {
    const float* qp = q.row<float>(row) + (h0 + j) * hd;
    int64_t i = 0;
#if INFERCEPT_VEC_AVX512
    if (f16)
      for (; i + 16 <= hd; i += 16)
        _mm512_storeu_ps(dst + j * hd + i, vm::round_to_f16(_mm512_loadu_ps(qp + i)));
#endif
    for (; i < hd; ++i) dst[j * hd + i] = f16 ? fp16_to_fp32(fp32_to_fp16(qp[i])) : qp[i];
  }
}

// Decode rows are spread over every thread (decode_rows_phased) when one work item a row would
// leave threads waiting for the longest: a row alone on the pool, or a long row beside short
// ones (SmolLM2-135M on the 2-core development machine, a 4,000-position row beside 1-3 of
// 500: 21-23 ms a step as items, 16-20 spread). Where the items already balance (two equal rows on
// two threads) the three parallel regions and the scores' round trip through shared memory only
// cost, so it is taken when the items' greedy schedule is at least kPhasedMinGain times an even
// share and the longest decode row has at least kPhasedMinPositions: spread, three rows of 1,000
// took 9.7-9.8 ms against 10.9, of 750 8.1-8.8 against 9.2-9.3, of 500 and 300 no less (the
// regions' fork and join are then a visible share; docs/bench/cpu-long-decode/threshold.txt).
constexpr int64_t kPhasedMinPositions = 768;
constexpr double kPhasedMinGain = 1.15;

// The cost of attention work in query-head positions (a query head's score and value pass over
// one position): what decides between the two decode paths.
struct ItemCost {
  bool decode;
  double cost;
};

// The longest thread's load when the items go, in order, each to the least loaded thread: the
// pool's next-item counter hands them out that way.
double greedy_makespan(const std::vector<ItemCost>& items, int nt, bool decode, bool prefill) {
  std::vector<double> load((size_t)nt, 0.0);
  for (const ItemCost& c : items) {
    if (c.decode ? !decode : !prefill) continue;
    *std::min_element(load.begin(), load.end()) += c.cost;
  }
  return *std::max_element(load.begin(), load.end());
}

// [begin, end) of items whose weights' running sum starts in thread t's even share: contiguous
// ranges of about equal weight, the same on every call with the same weights.
std::pair<size_t, size_t> weighted_share(const std::vector<int64_t>& prefix, int t, int nt) {
  // prefix[i]: the weight of the items before item i; prefix.back(): the total.
  const int64_t total = prefix.back();
  auto first_at = [&](int k) {
    const auto it = std::lower_bound(prefix.begin(), prefix.end() - 1, 0, [&](int64_t p, int) {
      return p * (int64_t)nt < total * (int64_t)k;
    });
    return (size_t)(it - prefix.begin());
  };
  return {first_at(t), t + 1 == nt ? prefix.size() - 1 : first_at(t + 1)};
}

// One decode row of decode_rows_phased.
struct PhasedRow {
  int64_t row;           // its query (and output) row
  const int32_t* table;  // its block table
  int64_t n_pos;         // positions it attends to
  int64_t scores_at;     // its [n_heads, n_pos] scores in the shared buffer
};

// Decode rows' attention in the default order on every thread of the pool, in three phases
// whose arithmetic is the one-item path's (a row's bits do not depend on the path): the scores
// of whole kPosChunk-position chunks (all rows' chunks split among the threads), the softmax of
// each (row, query head) and P*V (the (row, query head) pairs split by positions): each output
// element is the same FMA chain in position order, continued chunk by chunk.
void decode_rows_phased(ThreadPool& pool, const Tensor& q, const PagedKvView& kv,
                        std::vector<PhasedRow>& rows, int64_t n_heads, float scale, Tensor out,
                        const std::atomic<bool>* stop) {
  const KvGeometry& g = kv.g;
  const int64_t hd = g.head_dim, width = g.n_kv_heads * hd, group = n_heads / g.n_kv_heads;
  const bool f16 = g.dtype == DType::f16;
  const size_t n_rows = rows.size();
  // The calling thread's buffers, shared with the pool through pointers (a thread_local named
  // inside the lambdas would be each worker's own).
  thread_local std::vector<float> scores_buf, q_buf;
  int64_t n_scores = 0;
  for (PhasedRow& r : rows) r.scores_at = n_scores, n_scores += n_heads * r.n_pos;
  scores_buf.resize((size_t)n_scores);
  q_buf.resize(n_rows * (size_t)(n_heads * hd));
  float* const scores = scores_buf.data();
  float* const qall = q_buf.data();
  for (size_t i = 0; i < n_rows; ++i)
    round_q_heads(q, rows[i].row, 0, n_heads, hd, f16, qall + i * (size_t)(n_heads * hd));
  auto stopped = [&] { return stop != nullptr && stop->load(std::memory_order_relaxed); };

  // Scores: the rows' chunks in one list, weighted by their positions.
  std::vector<int64_t> chunk_prefix{0};
  std::vector<std::pair<int32_t, int64_t>> chunks;  // (row index, first position)
  for (size_t i = 0; i < n_rows; ++i)
    for (int64_t p0 = 0; p0 < rows[i].n_pos; p0 += kPosChunk) {
      chunks.push_back({(int32_t)i, p0});
      chunk_prefix.push_back(chunk_prefix.back() + std::min(kPosChunk, rows[i].n_pos - p0));
    }
  // A chunk's keys are prefetched while the chunk before it is computed (LinePrefetch).
  auto chunk_at = [&](size_t c) {
    const PhasedRow& r = rows[(size_t)chunks[c].first];
    return std::tuple<const PhasedRow&, int64_t, int64_t>(
        r, chunks[c].second, std::min(kPosChunk, r.n_pos - chunks[c].second));
  };
  pool.run([&](int t, int nt) {
    thread_local std::vector<float> k;
    k.resize((size_t)(kPosChunk * width));
    LinePrefetch pf;
    const auto [c0, c1] = weighted_share(chunk_prefix, t, nt);
    if (c0 < c1) {
      const auto [r, p0, n] = chunk_at(c0);
      pf.plan(kv.k, g, r.table, p0, n);
      pf.issue(0, 1);
    }
    for (size_t c = c0; c < c1 && !stopped(); ++c) {
      const auto [r, p0, n] = chunk_at(c);
      const float* qr = qall + (size_t)chunks[c].first * (size_t)(n_heads * hd);
      gather_slots(kv.k, g, r.table, p0, n, k.data());
      if (c + 1 < c1) {
        const auto [rn, pn, nn] = chunk_at(c + 1);
        pf.plan(kv.k, g, rn.table, pn, nn);
      } else {
        pf.clear();
      }
      for (int64_t hq = 0; hq < n_heads; ++hq) {
        head_scores(qr + hq * hd, k.data() + (hq / group) * hd, n, hd, width, scale,
                    scores + r.scores_at + hq * r.n_pos + p0, RowOrder::fast);
        pf.issue(hq, n_heads);
      }
    }
  });
  if (stopped()) return;
  // Softmax and P*V: the (row, query head) pairs in one list, weighted by the row's positions.
  std::vector<int64_t> head_prefix{0};
  for (size_t i = 0; i < n_rows; ++i)
    for (int64_t h = 0; h < n_heads; ++h) head_prefix.push_back(head_prefix.back() + rows[i].n_pos);
  auto pair_at = [&](size_t j) {
    return std::pair<const PhasedRow&, int64_t>(rows[j / (size_t)n_heads],
                                                (int64_t)(j % (size_t)n_heads));
  };
  pool.run([&](int t, int nt) {
    const auto [j0, j1] = weighted_share(head_prefix, t, nt);
    for (size_t j = j0; j < j1; ++j) {
      const auto [r, hq] = pair_at(j);
      softmax_weights(scores + r.scores_at + hq * r.n_pos, r.n_pos, f16);
    }
  });
  // P*V: a thread's pairs of one row. A whole row streams its values' whole slots through an
  // L1-sized buffer, the next chunk prefetched, as the one-item path does; a run of a row's
  // heads within one KV head's group gathers that head's values (weighted_rows_group: one FMA
  // chain per element whichever heads share a pass).
  pool.run([&](int t, int nt) {
    thread_local std::vector<float> v;
    v.resize((size_t)(kPosChunk * width));
    LinePrefetch pf;
    const auto [j0, j1] = weighted_share(head_prefix, t, nt);
    for (size_t j = j0; j < j1 && !stopped();) {
      const auto [r, h0] = pair_at(j);
      const size_t row_end = (j / (size_t)n_heads + 1) * (size_t)n_heads;
      if (h0 == 0 && row_end <= j1) {
        float* dst = out.row<float>(r.row);
        pf.plan(kv.v, g, r.table, 0, std::min(kPosChunk, r.n_pos));
        pf.issue(0, 1);
        for (int64_t p0 = 0; p0 < r.n_pos; p0 += kPosChunk) {
          const int64_t n = std::min(kPosChunk, r.n_pos - p0);
          gather_slots(kv.v, g, r.table, p0, n, v.data());
          if (p0 + kPosChunk < r.n_pos)
            pf.plan(kv.v, g, r.table, p0 + kPosChunk,
                    std::min(kPosChunk, r.n_pos - p0 - kPosChunk));
          else
            pf.clear();
          for (int64_t kvh = 0; kvh < g.n_kv_heads; ++kvh) {
            weighted_rows_group(scores + r.scores_at + kvh * group * r.n_pos + p0, r.n_pos, group,
                                v.data() + kvh * hd, n, hd, width, dst + kvh * group * hd, p0 > 0);
            pf.issue(kvh, g.n_kv_heads);
          }
        }
        j = row_end;
        continue;
      }
      const int64_t kvh = h0 / group;
      const size_t group_end = j + (size_t)((kvh + 1) * group - h0);
      const int64_t n_run = (int64_t)(std::min({j1, row_end, group_end}) - j);
      float* dst = out.row<float>(r.row) + h0 * hd;
      for (int64_t p0 = 0; p0 < r.n_pos; p0 += kPosChunk) {
        const int64_t n = std::min(kPosChunk, r.n_pos - p0);
        gather_head(kv.v, g, r.table, p0, n, kvh, v.data());
        weighted_rows_group(scores + r.scores_at + h0 * r.n_pos + p0, r.n_pos, n_run, v.data(), n,
                            hd, hd, dst, p0 > 0);
      }
      j += (size_t)n_run;
    }
  });
}

}  // namespace

void paged_attention_cpu(ThreadPool& pool, const Tensor& q, const PagedKvView& kv,
                         const AttentionBatch& batch, int64_t n_heads, float scale, Tensor out,
                         AttentionOrder order, const std::atomic<bool>* stop) {
  const KvGeometry& g = kv.g;
  const int64_t hd = g.head_dim;
  CHECK(n_heads % g.n_kv_heads == 0);
  CHECK(q.cols == n_heads * hd && out.cols == q.cols && out.rows == q.rows);
  const int64_t group = n_heads / g.n_kv_heads;

  // The work items: a decode row is one (all its KV heads: streamed whole slots), a prefill
  // row range one per KV head and kQueryChunk rows.
  const bool llama = order == AttentionOrder::llama_cpp;
  std::vector<WorkItem> items;
  std::vector<ItemCost> costs;
  int64_t longest_decode = 0;
  for (int32_t s = 0; s < batch.n_seqs; ++s) {
    const int32_t ql = batch.q_len[(size_t)s];
    const int64_t ctx = batch.ctx_len[(size_t)s];
    CHECK(ctx >= ql && ql >= 0);
    if (ql == 1) {  // decode: one item for all kv heads (kv_head -1), see below
      items.push_back({s, -1, 0, 1});
      costs.push_back({true, (double)(n_heads * ctx)});
      longest_decode = std::max(longest_decode, ctx);
      continue;
    }
    for (int32_t h = 0; h < (int32_t)g.n_kv_heads; ++h)
      for (int32_t b = 0; b < ql; b += (int32_t)kQueryChunk) {
        const int32_t e = std::min<int32_t>(ql, b + (int32_t)kQueryChunk);
        const double first_visible = (double)(ctx - ql + b + 1);
        costs.push_back(
            {false, (double)group * (double)(e - b) * (first_visible + (e - b - 1) / 2.0)});
        items.push_back({s, h, b, e});
      }
  }
  // Decode rows on every thread first (decode_rows_phased), where one item a row would leave
  // threads waiting for the longest.
  const int nt = pool.size();
  if (!llama && nt > 1 && longest_decode >= kPhasedMinPositions) {
    double decode_cost = 0;
    for (const ItemCost& c : costs) decode_cost += c.decode ? c.cost : 0.0;
    const double as_items = greedy_makespan(costs, nt, true, true);
    const double phased = decode_cost / nt + greedy_makespan(costs, nt, false, true);
    if (as_items > kPhasedMinGain * phased) {
      std::vector<PhasedRow> rows;
      std::vector<WorkItem> rest;
      for (const WorkItem& w : items) {
        if (w.kv_head >= 0) {
          rest.push_back(w);
          continue;
        }
        rows.push_back({batch.q_start[(size_t)w.seq],
                        batch.block_tables.data() + (size_t)w.seq * (size_t)batch.max_blocks,
                        batch.ctx_len[(size_t)w.seq], 0});
        CHECK((rows.back().n_pos + g.block_size - 1) / g.block_size <= batch.max_blocks);
      }
      decode_rows_phased(pool, q, kv, rows, n_heads, scale, out, stop);
      items = std::move(rest);
    }
  }

  std::atomic<size_t> next{0};
  const bool f16 = g.dtype == DType::f16;
  // llama.cpp's orders when asked: a sequence computing one row in the single order, two or
  // more in the batched order.
  const RowOrder lone = llama ? RowOrder::single : RowOrder::fast;
  const RowOrder chunk = llama ? RowOrder::batched : RowOrder::fast;
  pool.run([&](int, int) {
    // Per-thread scratch kept across calls (each layer's attention is one call): vectors
    // created per call zero-filled ~n_pos x width floats every layer on growing, 2% of a
    // batch-1 step.
    thread_local Scratch buf;
    buf.qh.resize((size_t)(group * hd));
    LinePrefetch pf, pfv;
    for (size_t it = next.fetch_add(1); it < items.size(); it = next.fetch_add(1)) {
      // A given-up step: the rest of the items are skipped (a long chunk's attention over a
      // long context is most of its step: ~3 s at 109 rows and 7k positions on 2 cores).
      if (stop != nullptr && stop->load(std::memory_order_relaxed)) break;
      const WorkItem& w = items[it];
      const int64_t ctx = batch.ctx_len[(size_t)w.seq];
      const int64_t ql = batch.q_len[(size_t)w.seq];
      const int64_t first_pos = ctx - ql;
      const int64_t n_pos = first_pos + w.q_end;  // keys visible to the last row of the chunk
      const int32_t* table = batch.block_tables.data() + (size_t)w.seq * (size_t)batch.max_blocks;
      CHECK((n_pos + g.block_size - 1) / g.block_size <= batch.max_blocks);
      auto round_q = [&](int64_t row, int64_t kv_head) {
        round_q_heads(q, row, kv_head * group, group, hd, f16, buf.qh.data());
      };
      if (w.kv_head < 0) {
        // One query row (decode): whole slots (every kv head) pass through an L1-sized
        // buffer in chunks of positions, so the cache is read as a stream instead of one
        // head's 128-byte slices at a time. In llama.cpp's order the values are gathered
        // whole, in the same pass as the keys (its P*V sums positions 64 apart first:
        // weighted_sums_single_order). In the default order the arithmetic per element is
        // the chunked path's below, so a row's output does not depend on which path served it.
        const int64_t width = g.n_kv_heads * hd;
        const int64_t row = batch.q_start[(size_t)w.seq];
        buf.k.resize((size_t)(kPosChunk * width));
        buf.scores.resize((size_t)(n_heads * n_pos));
        buf.qall.resize((size_t)(n_heads * hd));
        round_q_heads(q, row, 0, n_heads, hd, f16, buf.qall.data());
        if (!llama) {
          // Keys, then values, stream through the L1 buffer; chunk c + 1 (of K, then of V) is
          // prefetched while chunk c is computed, one share after each query head.
          auto plan_after = [&](bool in_v, int64_t p0) {
            if (p0 + kPosChunk < n_pos)
              pf.plan(in_v ? kv.v : kv.k, g, table, p0 + kPosChunk,
                      std::min(kPosChunk, n_pos - p0 - kPosChunk));
            else if (!in_v)
              pf.plan(kv.v, g, table, 0, std::min(kPosChunk, n_pos));
            else
              pf.clear();
          };
          pf.plan(kv.k, g, table, 0, std::min(kPosChunk, n_pos));
          pf.issue(0, 1);
          for (int64_t p0 = 0; p0 < n_pos; p0 += kPosChunk) {
            const int64_t n = std::min(kPosChunk, n_pos - p0);
            gather_slots(kv.k, g, table, p0, n, buf.k.data());
            plan_after(false, p0);
            for (int64_t hq = 0; hq < n_heads; ++hq) {
              head_scores(buf.qall.data() + hq * hd, buf.k.data() + (hq / group) * hd, n, hd, width,
                          scale, buf.scores.data() + hq * n_pos + p0, lone);
              pf.issue(hq, n_heads);
            }
          }
          for (int64_t hq = 0; hq < n_heads; ++hq)
            softmax_weights(buf.scores.data() + hq * n_pos, n_pos, f16);
          for (int64_t p0 = 0; p0 < n_pos; p0 += kPosChunk) {
            const int64_t n = std::min(kPosChunk, n_pos - p0);
            gather_slots(kv.v, g, table, p0, n, buf.k.data());
            plan_after(true, p0);
            for (int64_t kvh = 0; kvh < g.n_kv_heads; ++kvh) {
              weighted_rows_group(buf.scores.data() + kvh * group * n_pos + p0, n_pos, group,
                                  buf.k.data() + kvh * hd, n, hd, width,
                                  out.row<float>(row) + kvh * group * hd, p0 > 0);
              pf.issue(kvh, g.n_kv_heads);
            }
          }
          continue;
        }
        // Keys and values stream together, chunk by chunk: the keys through the L1 buffer
        // for the scores, the values into buf.v (read whole after the softmax); chunk c + 1
        // of both is prefetched while chunk c is computed, a share after each query head.
        buf.v.resize((size_t)(n_pos * width));
        pf.plan(kv.k, g, table, 0, std::min(kPosChunk, n_pos));
        pfv.plan(kv.v, g, table, 0, std::min(kPosChunk, n_pos));
        pf.issue(0, 1);
        pfv.issue(0, 1);
        for (int64_t p0 = 0; p0 < n_pos; p0 += kPosChunk) {
          const int64_t n = std::min(kPosChunk, n_pos - p0);
          gather_slots(kv.k, g, table, p0, n, buf.k.data());
          gather_slots(kv.v, g, table, p0, n, buf.v.data() + p0 * width);
          const int64_t next = std::min(kPosChunk, n_pos - p0 - kPosChunk);
          if (next > 0) {
            pf.plan(kv.k, g, table, p0 + kPosChunk, next);
            pfv.plan(kv.v, g, table, p0 + kPosChunk, next);
          } else {
            pf.clear();
            pfv.clear();
          }
          for (int64_t hq = 0; hq < n_heads; ++hq) {
            head_scores(buf.qall.data() + hq * hd, buf.k.data() + (hq / group) * hd, n, hd, width,
                        scale, buf.scores.data() + hq * n_pos + p0, lone);
            pf.issue(hq, n_heads);
            pfv.issue(hq, n_heads);
          }
        }
        for (int64_t hq = 0; hq < n_heads; ++hq)
          softmax_weights(buf.scores.data() + hq * n_pos, n_pos, f16);
        for (int64_t kvh = 0; kvh < g.n_kv_heads; ++kvh)
          weighted_sums(buf.scores.data() + kvh * group * n_pos, n_pos, group,
                        buf.v.data() + kvh * hd, n_pos, hd, width,
                        out.row<float>(row) + kvh * group * hd, lone);
        continue;
      }
      buf.k.resize((size_t)(n_pos * hd));
      buf.v.resize((size_t)(n_pos * hd));
      buf.scores.resize((size_t)(group * n_pos));
      gather_head(kv.k, g, table, 0, n_pos, w.kv_head, buf.k.data());
      gather_head(kv.v, g, table, 0, n_pos, w.kv_head, buf.v.data());
      for (int64_t r = w.q_begin; r < w.q_end; ++r) {
        const int64_t row = batch.q_start[(size_t)w.seq] + r;
        const int64_t visible = first_pos + r + 1;
        round_q(row, w.kv_head);
        for (int64_t j = 0; j < group; ++j) {
          float* sj = buf.scores.data() + j * n_pos;
          head_scores(buf.qh.data() + j * hd, buf.k.data(), visible, hd, hd, scale, sj, chunk);
          softmax_weights(sj, visible, f16);
        }
        weighted_sums(buf.scores.data(), n_pos, group, buf.v.data(), visible, hd, hd,
                      out.row<float>(row) + w.kv_head * group * hd, chunk);
      }
    }
  });
}

}  // namespace infercept
