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

inline float dot(const float* a, const float* b, int64_t n) {
#if defined(__AVX2__) && defined(__FMA__)
  if (n % 8 == 0) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8)
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_hadd_ps(lo, lo);
    lo = _mm_hadd_ps(lo, lo);
    return _mm_cvtss_f32(lo);
  }
#endif
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
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

// Copies head `h` of positions [0, n_pos) of one sequence into dst [n_pos, head_dim] f32.
void gather_head(const uint8_t* base, const KvGeometry& g, const int32_t* block_table,
                 int64_t n_pos, int64_t h, float* dst) {
  const int64_t width = g.n_kv_heads * g.head_dim;
  for (int64_t p = 0; p < n_pos; ++p) {
    const int64_t slot = (int64_t)block_table[p / g.block_size] * g.block_size + p % g.block_size;
    const size_t off = (size_t)(slot * width + h * g.head_dim);
    float* d = dst + p * g.head_dim;
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
          for (int64_t p = 0; p < visible; ++p) {
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
          std::fill(op, op + hd, 0.0f);
          const float inv = 1.0f / sum;
          const bool f16 = g.dtype == DType::f16;
          for (int64_t p = 0; p < visible; ++p) {
            // With an f16 cache the probabilities meet f16 values, so they are rounded to
            // f16 too (an f16 P*V product, as llama.cpp computes it).
            const float w = scores[(size_t)p] * inv;
            axpy(f16 ? fp16_to_fp32(fp32_to_fp16(w)) : w, vbuf.data() + p * hd, op, hd);
          }
        }
      }
    }
  });
}

}  // namespace infercept
