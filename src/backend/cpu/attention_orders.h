// llama.cpp's summation orders for attention (flash attention off), reproduced for
// AttentionOrder::llama_cpp (attention.h): the scores and P*V sums of ggml_vec_dot_f16 (a
// decode step) and of llamafile's tinyBLAS (a batch of two or more tokens), AVX-512 only.
// Kept apart from attention_rows.h, whose default orders do not depend on them.
#pragma once

#include <cstdint>

#include "backend/cpu/vec_math.h"

#if INFERCEPT_VEC_AVX512
#include <immintrin.h>
#endif

namespace infercept::cpu_attention {

#if INFERCEPT_VEC_AVX512
// llama.cpp (flash attention off) computes attention as two f16 matrix products, and which
// kernel runs them decides the order of every sum: a single token (a decode step) goes to
// ggml_vec_dot_f16, a batch of two or more tokens to llamafile's tinyBLAS. The functions
// below reproduce both (K, V, Q and the softmax weights are f16 values, so every product is
// exact and only the order of the additions matters):
//   ggml_vec_dot_f16 ("single order"): four 16-lane accumulators, element i in accumulator
//     (i / 16) % 4, lane i % 16, combined as (acc0 + acc2) + (acc1 + acc3), then the lanes by
//     the tree of _mm512_reduce_add_ps (hsum16); elements past the last multiple of 64 are
//     added afterwards in double;
//   tinyBLAS ("batched order"): one 16-lane accumulator, element i in lane i % 16 in order,
//     then the same tree.
// AttentionOrder::llama_cpp uses them: decode rows (a sequence computing one row) in the
// single order, prompt rows in the batched order, as llama.cpp computes a prompt and then its
// decode steps. The single order costs ~1.5-1.8x the default's P*V (it needs whole
// values and short chains), and the split makes a row's bits depend on how it was
// computed, so the default (AttentionOrder::fast) keeps cheaper orders that depend on
// position only: scores in the batched order, P*V one FMA chain per element in position
// order. Here the lanes of llama.cpp's accumulators are vectors over 16 head dimensions, so
// their tree is vertical adds.

// hsum16's tree applied to 16 vectors lane by lane: lane j of the result is hsum16 of the
// vector whose lanes are a[0..15][j].
inline __m512 tree16(const __m512* a) {
  __m512 b[8], c[4];
  for (int l = 0; l < 8; ++l) b[l] = _mm512_add_ps(a[l], a[l + 8]);
  for (int l = 0; l < 4; ++l) c[l] = _mm512_add_ps(b[l], b[l + 4]);
  return _mm512_add_ps(_mm512_add_ps(c[0], c[2]), _mm512_add_ps(c[1], c[3]));
}

// out[0, hd) = sum over p < n_pos of w[p] * v[p * stride + (0, hd)] in tinyBLAS's order.
// hd % 16 == 0.
inline void weighted_sum_batched_order(const float* w, const float* v, int64_t n_pos, int64_t hd,
                                       int64_t stride, float* out) {
  for (int64_t c = 0; c < hd; c += 16) {
    __m512 acc[16];
    for (auto& a : acc) a = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 16 <= n_pos; p += 16) {
      _Pragma("GCC unroll 16") for (int l = 0; l < 16; ++l) acc[l] = _mm512_fmadd_ps(
          _mm512_set1_ps(w[p + l]), _mm512_loadu_ps(v + (p + l) * stride + c), acc[l]);
    }
    for (int l = 0; p + l < n_pos; ++l)
      acc[l] = _mm512_fmadd_ps(_mm512_set1_ps(w[p + l]), _mm512_loadu_ps(v + (p + l) * stride + c),
                               acc[l]);
    _mm512_storeu_ps(out + c, tree16(acc));
  }
}

// out_j[0, hd) = sum over p < n_pos of w_j[p] * v[p * stride + (0, hd)] for G query heads
// sharing v (w_j = w + j * w_stride, out_j = out + j * hd), in ggml_vec_dot_f16's order.
// Positions past n_pos are zeros in llama.cpp's padded row (a multiple of 256 long), so no
// position is ever "left over". hd % 16 == 0.
// Position p belongs to class p % 64 (accumulator (p / 16) % 4, lane p % 16); for each lane
// l the classes l, l + 32, l + 16, l + 48 are summed over their positions (64 apart) and
// combined as (A_l + A_l+32) + (A_l+16 + A_l+48); the 16 lanes then go through hsum16's tree.
// The G heads share every value load, as in weighted_rows_group.
template <int G>
void weighted_sums_single_order(const float* w, int64_t w_stride, const float* v, int64_t n_pos,
                                int64_t hd, int64_t stride, float* out) {
  alignas(64) float lanes[16][G][64];  // X_l per head and dimension
  alignas(64) float first[G][64];      // A_l + A_l+32 while A_l+16 + A_l+48 is summed
  for (int64_t c = 0; c < hd; c += 64) {
    const int nq = (int)std::min<int64_t>(4, (hd - c) / 16);  // 16-dimension vectors here
    // Sum of class `cls` over its positions into acc[G][4].
    auto class_sum = [&](int64_t cls, __m512(&acc)[G][4]) {
      for (auto& a : acc)
        for (auto& x : a) x = _mm512_setzero_ps();
      for (int64_t p = cls; p < n_pos; p += 64) {
        const float* vp = v + p * stride + c;
        __m512 vq[4];
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) if (q < nq) vq[q] =
            _mm512_loadu_ps(vp + 16 * q);
        _Pragma("GCC unroll 4") for (int j = 0; j < G; ++j) {
          const __m512 wp = _mm512_set1_ps(w[j * w_stride + p]);
          _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) if (q < nq) acc[j][q] =
              _mm512_fmadd_ps(wp, vq[q], acc[j][q]);
        }
      }
    };
    for (int l = 0; l < 16; ++l) {
      __m512 a[G][4], b[G][4];
      class_sum(l, a);
      class_sum(l + 32, b);
      for (int j = 0; j < G; ++j)
        for (int q = 0; q < nq; ++q)
          _mm512_store_ps(&first[j][16 * q], _mm512_add_ps(a[j][q], b[j][q]));
      class_sum(l + 16, a);
      class_sum(l + 48, b);
      for (int j = 0; j < G; ++j)
        for (int q = 0; q < nq; ++q)
          _mm512_store_ps(&lanes[l][j][16 * q], _mm512_add_ps(_mm512_load_ps(&first[j][16 * q]),
                                                              _mm512_add_ps(a[j][q], b[j][q])));
    }
    for (int j = 0; j < G; ++j)
      for (int q = 0; q < nq; ++q) {
        __m512 x[16];
        for (int l = 0; l < 16; ++l) x[l] = _mm512_load_ps(&lanes[l][j][16 * q]);
        _mm512_storeu_ps(out + j * hd + c + 16 * q, tree16(x));
      }
  }
}

// Scores of one query head in ggml_vec_dot_f16's order: out[p] = dot(q, key p) * scale,
// 16 positions per pass (a pass past n_pos re-reads the last key and drops the extra sums).
// hd % 16 == 0.
inline void head_scores_single_order(const float* qh, const float* k, int64_t n_pos, int64_t hd,
                                     int64_t stride, float scale, float* out) {
  const int64_t np = hd / 64 * 64;
  for (int64_t p0 = 0; p0 < n_pos; p0 += 16) {
    const int64_t live = std::min<int64_t>(16, n_pos - p0);
    __m512 x[16];
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; ++i) {
      const float* kr = k + (p0 + std::min<int64_t>(i, live - 1)) * stride;
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t c = 0; c < np; c += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(kr + c), _mm512_loadu_ps(qh + c), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(kr + c + 16), _mm512_loadu_ps(qh + c + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(kr + c + 32), _mm512_loadu_ps(qh + c + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(kr + c + 48), _mm512_loadu_ps(qh + c + 48), a3);
      }
      x[i] = _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
    }
    alignas(64) float dots[16];
    _mm512_store_ps(dots, hsum16x16(x));
    for (int64_t i = 0; i < live; ++i) {
      float d = dots[i];
      if (np < hd) {  // the elements past the last multiple of 64, in double
        const float* kr = k + (p0 + i) * stride;
        double sum = d;
        for (int64_t e = np; e < hd; ++e) sum += (double)(kr[e] * qh[e]);
        d = (float)sum;
      }
      out[p0 + i] = d * scale;
    }
  }
}

// Scores in tinyBLAS's order: each dot one 16-lane FMA chain over the dimensions, summed by
// hsum16's tree, 16 positions per pass. hd % 16 == 0.
inline void head_scores_batched_order(const float* qh, const float* k, int64_t n_pos, int64_t hd,
                                      int64_t stride, float scale, float* out) {
  const __m512 vscale = _mm512_set1_ps(scale);
  // Dimensions outer and the 16 positions inner (unrolled), so the accumulators stay in
  // registers; each position's chain is the same either way.
  for (int64_t p0 = 0; p0 < n_pos; p0 += 16) {
    const int64_t live = std::min<int64_t>(16, n_pos - p0);
    const float* rows[16];
    for (int i = 0; i < 16; ++i) rows[i] = k + (p0 + std::min<int64_t>(i, live - 1)) * stride;
    __m512 acc[16];
    __m512 qc = _mm512_loadu_ps(qh);
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; ++i) acc[i] =
        _mm512_mul_ps(qc, _mm512_loadu_ps(rows[i]));
    for (int64_t c = 16; c < hd; c += 16) {
      qc = _mm512_loadu_ps(qh + c);
      _Pragma("GCC unroll 16") for (int i = 0; i < 16; ++i) acc[i] =
          _mm512_fmadd_ps(qc, _mm512_loadu_ps(rows[i] + c), acc[i]);
    }
    const __m512 s = _mm512_mul_ps(hsum16x16(acc), vscale);
    _mm512_mask_storeu_ps(out + p0, (__mmask16)((1u << live) - 1u), s);
  }
}
#endif

}  // namespace infercept::cpu_attention
