// Tests for the CPU paged attention (backend/cpu/attention.*). Why: decode rows (one query
// row per sequence) take a different path through the cache than prefill chunks; a request's
// tokens must not depend on which path served a row, so the two are held bit-identical, and
// both against a double-precision reference over the same f16-rounded operands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "core/half.h"

namespace infercept {
namespace {

struct Cache {
  KvGeometry g;
  std::vector<uint16_t> k, v;  // [n_blocks, block_size, n_kv_heads, head_dim] f16
  std::vector<int32_t> table;  // one sequence's blocks, shuffled
};

Cache make_cache(std::mt19937& rng, int64_t n_pos, int64_t block_size, int64_t n_kv_heads,
                 int64_t head_dim) {
  Cache c;
  c.g.n_layers = 1;
  c.g.block_size = block_size;
  c.g.n_kv_heads = n_kv_heads;
  c.g.head_dim = head_dim;
  c.g.dtype = DType::f16;
  const int64_t n_blocks = (n_pos + block_size - 1) / block_size + 3;
  c.g.n_blocks = n_blocks;
  std::normal_distribution<float> nd(0.f, 1.f);
  const size_t elems = (size_t)(n_blocks * block_size * n_kv_heads * head_dim);
  c.k.resize(elems);
  c.v.resize(elems);
  for (auto& e : c.k) e = fp32_to_fp16(nd(rng));
  for (auto& e : c.v) e = fp32_to_fp16(nd(rng));
  c.table.resize((size_t)n_blocks);
  std::iota(c.table.begin(), c.table.end(), 0);
  std::shuffle(c.table.begin(), c.table.end(), rng);
  return c;
}

// Attention of query rows [first, first + n) of one sequence whose context ends at row
// first + n - 1 (rows before `first` already in the cache).
std::vector<float> run_rows(ThreadPool& pool, const Cache& c, const std::vector<float>& q,
                            int64_t n_heads, int64_t first, int64_t n) {
  const int64_t cols = n_heads * c.g.head_dim;
  std::vector<float> qrows(q.begin() + first * cols, q.begin() + (first + n) * cols);
  std::vector<float> out((size_t)(n * cols), -1.f);
  Tensor qt{qrows.data(), DType::f32, n, cols, cols};
  Tensor ot{out.data(), DType::f32, n, cols, cols};
  const int32_t q_start[] = {0}, q_len[] = {(int32_t)n}, ctx_len[] = {(int32_t)(first + n)};
  AttentionBatch b;
  b.n_seqs = 1;
  b.q_start = q_start;
  b.q_len = q_len;
  b.ctx_len = ctx_len;
  b.block_tables = c.table;
  b.max_blocks = (int32_t)c.table.size();
  PagedKvView view{reinterpret_cast<const uint8_t*>(c.k.data()),
                   reinterpret_cast<const uint8_t*>(c.v.data()), c.g};
  paged_attention_cpu(pool, qt, view, b, n_heads, 1.0f / std::sqrt((float)c.g.head_dim), ot);
  return out;
}

TEST(PagedAttentionCpu, DecodeRowsBitIdenticalToPrefillRowsAndNearReference) {
  std::mt19937 rng(9);
  ThreadPool pool(2);
  struct S {
    int64_t n_pos, block_size, n_kv_heads, group, head_dim;
  };
  for (const S& s : {S{1, 16, 3, 3, 64}, S{37, 16, 3, 3, 64}, S{70, 8, 2, 4, 128},
                     S{53, 16, 1, 2, 24}, S{100, 32, 3, 3, 64}}) {
    const int64_t n_heads = s.n_kv_heads * s.group, hd = s.head_dim;
    Cache c = make_cache(rng, s.n_pos, s.block_size, s.n_kv_heads, hd);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> q((size_t)(s.n_pos * n_heads * hd));
    for (auto& e : q) e = nd(rng);
    const std::vector<float> prefill = run_rows(pool, c, q, n_heads, 0, s.n_pos);
    for (int64_t r = 0; r < s.n_pos; ++r) {
      const std::vector<float> decode = run_rows(pool, c, q, n_heads, r, 1);
      for (int64_t i = 0; i < n_heads * hd; ++i)
        ASSERT_EQ(decode[(size_t)i], prefill[(size_t)(r * n_heads * hd + i)])
            << "n_pos " << s.n_pos << " row " << r << " col " << i;
      // double reference with the f16 roundings the kernel applies to q
      const float scale = 1.0f / std::sqrt((float)hd);
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t kvh = h / s.group;
        std::vector<double> sc((size_t)(r + 1));
        double mx = -INFINITY;
        for (int64_t p = 0; p <= r; ++p) {
          const int64_t slot =
              (int64_t)c.table[(size_t)(p / s.block_size)] * s.block_size + p % s.block_size;
          double d = 0;
          for (int64_t i = 0; i < hd; ++i)
            d += (double)fp16_to_fp32(fp32_to_fp16(q[(size_t)((r * n_heads + h) * hd + i)])) *
                 fp16_to_fp32(c.k[(size_t)((slot * s.n_kv_heads + kvh) * hd + i)]);
          sc[(size_t)p] = d * scale;
          mx = std::max(mx, sc[(size_t)p]);
        }
        double sum = 0;
        for (auto& e : sc) sum += (e = std::exp(e - mx));
        for (int64_t i = 0; i < hd; ++i) {
          double o = 0;
          for (int64_t p = 0; p <= r; ++p) {
            const int64_t slot =
                (int64_t)c.table[(size_t)(p / s.block_size)] * s.block_size + p % s.block_size;
            o += sc[(size_t)p] / sum *
                 fp16_to_fp32(c.v[(size_t)((slot * s.n_kv_heads + kvh) * hd + i)]);
          }
          // probabilities are rounded to f16 (relative 2^-11) before they meet V
          EXPECT_NEAR(decode[(size_t)(h * hd + i)], o, 2e-3) << "row " << r << " head " << h;
        }
      }
    }
  }
}

}  // namespace
}  // namespace infercept
