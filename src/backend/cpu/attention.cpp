#include "backend/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/half.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace infercept {
namespace {

// Query rows per work item: small enough to spread one long prefill over all threads.
constexpr int64_t kQueryChunk = 32;

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

// dot(a, b + j * n, n) for j = 0..3, each summed in exactly dot()'s order: four independent
// FMA chains instead of one, which is what bounded the loop over key positions.
inline void dot4(const float* a, const float* b, int64_t n, float* out) {
#if defined(__AVX2__) && defined(__FMA__)
  if (n % 8 == 0) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int64_t i = 0; i < n; i += 8) {
      const __m256 va = _mm256_loadu_ps(a + i);
      acc0 = _mm256_fmadd_ps(va, _mm256_loadu_ps(b + i), acc0);
      acc1 = _mm256_fmadd_ps(va, _mm256_loadu_ps(b + n + i), acc1);
      acc2 = _mm256_fmadd_ps(va, _mm256_loadu_ps(b + 2 * n + i), acc2);
      acc3 = _mm256_fmadd_ps(va, _mm256_loadu_ps(b + 3 * n + i), acc3);
    }
    out[0] = reduce8(acc0);
    out[1] = reduce8(acc1);
    out[2] = reduce8(acc2);
    out[3] = reduce8(acc3);
    return;
  }
#endif
  for (int j = 0; j < 4; ++j) out[j] = dot(a, b + j * n, n);
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

// out[0, n) = sum over p of w[p] * v[p * n .. p * n + n), accumulated in position order per
// element (the same fused multiply-adds as repeated axpy), with 64 columns at a time held
// in registers instead of being reloaded and stored for every position.
inline void weighted_rows(const float* w, const float* v, int64_t n_pos, int64_t n, float* out) {
#if defined(__AVX2__) && defined(__FMA__)
  if (n % 64 == 0) {
    for (int64_t c = 0; c < n; c += 64) {
      __m256 acc[8];
      for (auto& a : acc) a = _mm256_setzero_ps();
      for (int64_t p = 0; p < n_pos; ++p) {
        const __m256 wp = _mm256_set1_ps(w[p]);
        const float* vp = v + p * n + c;
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j)
          acc[j] = _mm256_fmadd_ps(wp, _mm256_loadu_ps(vp + 8 * j), acc[j]);
      }
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(out + c + 8 * j, acc[j]);
    }
    return;
  }
#endif
  std::fill(out, out + n, 0.0f);
  for (int64_t p = 0; p < n_pos; ++p) axpy(w[p], v + p * n, out, n);
}

// Copies head `h` of positions [0, n_pos) of one sequence into dst [n_pos, head_dim] f32.
void gather_head(const uint8_t* base, const KvGeometry& g, const int32_t* block_table,
                 int64_t n_pos, int64_t h, float* dst) {
  const int64_t width = g.n_kv_heads * g.head_dim;
  // Block by block: a division per position (block_size is not a compile-time constant)
  // cost more than the copy itself.
  for (int64_t p0 = 0, b = 0; p0 < n_pos; p0 += g.block_size, ++b) {
    const int64_t in_block = std::min<int64_t>(g.block_size, n_pos - p0);
    const int64_t first_slot = (int64_t)block_table[b] * g.block_size;
    for (int64_t j = 0; j < in_block; ++j) {
    const size_t off = (size_t)((first_slot + j) * width + h * g.head_dim);
    float* d = dst + (p0 + j) * g.head_dim;
    if (g.dtype == DType::f32) {
      const float* s = reinterpret_cast<const float*>(base) + off;
      std::copy(s, s + g.head_dim, d);
    } else {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(base) + off;
      int64_t i = 0;
#if defined(__F16C__) && defined(__AVX2__)
      for (; i + 8 <= g.head_dim; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
#endif
      for (; i < g.head_dim; ++i) d[i] = fp16_to_fp32(s[i]);
    }
    }
  }
}

struct WorkItem {
  int32_t seq;
  int32_t kv_head;
  int32_t q_begin;  // relative to the sequence's first query row
  int32_t q_end;
};

}  // namespace

void paged_attention_cpu(ThreadPool& pool, const Tensor& q, const PagedKvView& kv,
                         const AttentionBatch& batch, int64_t n_heads, float scale, Tensor out) {
  const KvGeometry& g = kv.g;
  const int64_t hd = g.head_dim;
  CHECK(n_heads % g.n_kv_heads == 0);
  CHECK(q.cols == n_heads * hd && out.cols == q.cols && out.rows == q.rows);
  const int64_t group = n_heads / g.n_kv_heads;

  std::vector<WorkItem> items;
  for (int32_t s = 0; s < batch.n_seqs; ++s) {
    const int32_t ql = batch.q_len[(size_t)s];
    CHECK(batch.ctx_len[(size_t)s] >= ql && ql >= 0);
    for (int32_t h = 0; h < (int32_t)g.n_kv_heads; ++h)
      for (int32_t b = 0; b < ql; b += (int32_t)kQueryChunk)
        items.push_back({s, h, b, std::min<int32_t>(ql, b + (int32_t)kQueryChunk)});
  }
  std::atomic<size_t> next{0};
  pool.run([&](int, int) {
    std::vector<float> kbuf, vbuf, scores, qh(hd);
    for (size_t it = next.fetch_add(1); it < items.size(); it = next.fetch_add(1)) {
      const WorkItem& w = items[it];
      const int64_t ctx = batch.ctx_len[(size_t)w.seq];
      const int64_t ql = batch.q_len[(size_t)w.seq];
      const int64_t first_pos = ctx - ql;
      const int64_t n_pos = first_pos + w.q_end;  // keys visible to the last row of the chunk
      const int32_t* table = batch.block_tables.data() + (size_t)w.seq * (size_t)batch.max_blocks;
      CHECK((n_pos + g.block_size - 1) / g.block_size <= batch.max_blocks);
      kbuf.resize((size_t)(n_pos * hd));
      vbuf.resize((size_t)(n_pos * hd));
      scores.resize((size_t)n_pos);
      gather_head(kv.k, g, table, n_pos, w.kv_head, kbuf.data());
      gather_head(kv.v, g, table, n_pos, w.kv_head, vbuf.data());
      for (int64_t r = w.q_begin; r < w.q_end; ++r) {
        const int64_t row = batch.q_start[(size_t)w.seq] + r;
        const int64_t visible = first_pos + r + 1;
        for (int64_t hq = w.kv_head * group; hq < (w.kv_head + 1) * group; ++hq) {
          const float* qp = q.row<float>(row) + hq * hd;
          // The cache holds f16 keys; rounding q the same way keeps the score arithmetic
          // what a f16 K*Q product computes (and what llama.cpp computes).
          for (int64_t i = 0; i < hd; ++i)
            qh[(size_t)i] = g.dtype == DType::f16 ? fp16_to_fp32(fp32_to_fp16(qp[i])) : qp[i];
          float mx = -INFINITY;
          int64_t p = 0;
          for (; p + 4 <= visible; p += 4) {
            float d4[4];
            dot4(qh.data(), kbuf.data() + p * hd, hd, d4);
            for (int j = 0; j < 4; ++j) {
              const float sc = d4[j] * scale;
              scores[(size_t)(p + j)] = sc;
              mx = std::max(mx, sc);
            }
          }
          for (; p < visible; ++p) {
            const float sc = dot(qh.data(), kbuf.data() + p * hd, hd) * scale;
            scores[(size_t)p] = sc;
            mx = std::max(mx, sc);
          }
          float sum = 0.0f;
          for (int64_t p = 0; p < visible; ++p) {
            const float e = std::exp(scores[(size_t)p] - mx);
            scores[(size_t)p] = e;
            sum += e;
          }
          float* op = out.row<float>(row) + hq * hd;
          const float inv = 1.0f / sum;
          const bool f16 = g.dtype == DType::f16;
          for (int64_t p = 0; p < visible; ++p) {
            // With an f16 cache the probabilities meet f16 values, so they are rounded to
            // f16 too (an f16 P*V product, as llama.cpp computes it).
            const float w = scores[(size_t)p] * inv;
            scores[(size_t)p] = f16 ? fp16_to_fp32(fp32_to_fp16(w)) : w;
          }
          weighted_rows(scores.data(), vbuf.data(), visible, hd, op);
        }
      }
    }
  });
}

}  // namespace infercept
