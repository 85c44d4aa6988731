// The arithmetic of one query row's attention on the CPU, shared by the work-item path
// (attention.cpp) and the decode rows spread over every thread (attention_spread.cpp): dot
// products and P*V sums in the default order (one fixed summation order, so a row's bits do not
// depend on which path served it), the softmax, and the gathers from the paged cache.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/attention_orders.h"
#include "backend/cpu/vec_math.h"
#include "core/fp8.h"
#include "core/half.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace infercept::cpu_attention {

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
inline void dequantize_fp8(const uint8_t* base, const KvGeometry& g, int64_t slot, int64_t h,
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
inline void gather_head(const uint8_t* base, const KvGeometry& g, const int32_t* block_table,
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
inline void gather_slots(const uint8_t* base, const KvGeometry& g, const int32_t* block_table,
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

// Query heads [h0, h0 + n) of `row` into dst [n, hd]. With an f16 cache they are rounded to
// f16 and back: the cache holds f16 keys, and rounding q the same way keeps the score
// arithmetic what a f16 K*Q product computes (and what llama.cpp computes).
inline void round_q_heads(const Tensor& q, int64_t row, int64_t h0, int64_t n, int64_t hd, bool f16,
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

}  // namespace infercept::cpu_attention
