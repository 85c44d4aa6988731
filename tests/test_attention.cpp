// Tests for the CPU paged attention (backend/cpu/attention.*). Why: decode rows (one query
// row per sequence) take a different path through the cache than prefill chunks; a request's
// tokens must not depend on which path served a row, so in the default order the two are
// held bit-identical, and both against a double-precision reference over the same
// f16-rounded operands. AttentionOrder::llama_cpp must instead give llama.cpp's bits (flash
// attention off): decode rows in ggml_vec_dot_f16's order, prefill rows in tinyBLAS's,
// checked against scalar models of both written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/vec_math.h"
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

// n values drawn from N(0, 1): query rows.
std::vector<float> normal_values(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v((size_t)n);
  for (auto& e : v) e = nd(rng);
  return v;
}

// Scalar models of llama.cpp's CPU attention arithmetic (flash attention off, f16 cache),
// for the AVX-512 orders the backend reproduces (a build without AVX-512 has none to test).
#if INFERCEPT_VEC_AVX512

// The tree of _mm512_reduce_add_ps over 16 lanes.
float tree16(const float* l) {
  float b[8], c[4];
  for (int i = 0; i < 8; ++i) b[i] = l[i] + l[i + 8];
  for (int i = 0; i < 4; ++i) c[i] = b[i] + b[i + 4];
  return (c[0] + c[2]) + (c[1] + c[3]);
}

// tinyBLAS (a batch of two or more tokens): element i into lane i % 16 by FMA, in order.
float dot_batched_order(const float* a, const float* b, int64_t n) {
  float lane[16] = {};
  for (int64_t i = 0; i < n; ++i) lane[i % 16] = std::fma(a[i], b[i], lane[i % 16]);
  return tree16(lane);
}

// ggml_vec_dot_f16 (one token): element i into accumulator (i / 16) % 4, lane i % 16, for
// i below the last multiple of 64; accumulators combined (0 + 2) + (1 + 3), lanes by the
// tree; the rest added in double.
float dot_single_order(const float* a, const float* b, int64_t n) {
  float acc[4][16] = {};
  const int64_t np = n / 64 * 64;
  for (int64_t i = 0; i < np; ++i) {
    float& x = acc[(i / 16) % 4][i % 16];
    x = std::fma(a[i], b[i], x);
  }
  float lane[16];
  for (int j = 0; j < 16; ++j) lane[j] = (acc[0][j] + acc[2][j]) + (acc[1][j] + acc[3][j]);
  double sum = tree16(lane);
  for (int64_t i = np; i < n; ++i) sum += (double)(a[i] * b[i]);
  return (float)sum;
}

float round_f16(float x) {
  return fp16_to_fp32(fp32_to_fp16(x));
}

float exp1(float x) {
  alignas(64) float out[16];
  _mm512_store_ps(out, exp16(_mm512_set1_ps(x)));
  return out[0];
}

// One query row of one head as llama.cpp computes it: scores by ggml_vec_dot_f16 (a single
// token) or tinyBLAS (batched), ggml's softmax (exp per 16 positions, their tree sums added
// in double, times (float)(1 / sum)), weights rounded to f16, P*V in the same order
// (positions padded with zeros to a multiple of 64, as llama.cpp's 256-cell view is).
std::vector<float> llama_cpp_row(const Cache& c, const float* q, int64_t kvh, int64_t n_pos,
                                 bool batched) {
  const int64_t hd = c.g.head_dim;
  auto slot_of = [&](int64_t p) {
    return (int64_t)c.table[(size_t)(p / c.g.block_size)] * c.g.block_size + p % c.g.block_size;
  };
  auto at = [&](const std::vector<uint16_t>& m, int64_t p, int64_t i) {
    return fp16_to_fp32(m[(size_t)((slot_of(p) * c.g.n_kv_heads + kvh) * hd + i)]);
  };
  std::vector<float> qh((size_t)hd), key((size_t)hd);
  for (int64_t i = 0; i < hd; ++i) qh[(size_t)i] = round_f16(q[i]);
  const float scale = 1.0f / std::sqrt((float)hd);
  const int64_t padded = (n_pos + 63) / 64 * 64;
  std::vector<float> w((size_t)padded, 0.f);
  float mx = -INFINITY;
  for (int64_t p = 0; p < n_pos; ++p) {
    for (int64_t i = 0; i < hd; ++i) key[(size_t)i] = at(c.k, p, i);
    const float d = batched ? dot_batched_order(key.data(), qh.data(), hd)
                            : dot_single_order(key.data(), qh.data(), hd);
    w[(size_t)p] = d * scale;
    mx = std::max(mx, w[(size_t)p]);
  }
  double sum = 0;
  for (int64_t p0 = 0; p0 < n_pos; p0 += 16) {
    float e[16] = {};
    for (int64_t i = 0; i < 16 && p0 + i < n_pos; ++i) e[i] = exp1(w[(size_t)(p0 + i)] - mx);
    sum += tree16(e);
    for (int64_t i = 0; i < 16 && p0 + i < n_pos; ++i) w[(size_t)(p0 + i)] = e[i];
  }
  const float inv = (float)(1.0 / sum);
  for (int64_t p = 0; p < n_pos; ++p) w[(size_t)p] = round_f16(w[(size_t)p] * inv);
  std::vector<float> out((size_t)hd), col((size_t)padded, 0.f);
  for (int64_t i = 0; i < hd; ++i) {
    for (int64_t p = 0; p < n_pos; ++p) col[(size_t)p] = at(c.v, p, i);
    out[(size_t)i] = batched ? dot_batched_order(col.data(), w.data(), padded)
                             : dot_single_order(col.data(), w.data(), padded);
  }
  return out;
}
#endif

// A step of several sequences over one cache (sharing its blocks, as prefix-cached requests
// do): sequence s has q_lens[s] query rows ending at position ctx_lens[s] - 1, its query rows
// taken from q at those positions. Returns the output rows in the step's order.
std::vector<float> run_step(ThreadPool& pool, const Cache& c, const std::vector<float>& q,
                            int64_t n_heads, const std::vector<int32_t>& q_lens,
                            const std::vector<int32_t>& ctx_lens,
                            AttentionOrder order = AttentionOrder::fast) {
  const int64_t cols = n_heads * c.g.head_dim;
  const int32_t n_seqs = (int32_t)q_lens.size();
  std::vector<int32_t> q_start;
  std::vector<float> qrows;
  for (int32_t s = 0; s < n_seqs; ++s) {
    q_start.push_back((int32_t)(qrows.size() / (size_t)cols));
    const int64_t first = ctx_lens[(size_t)s] - q_lens[(size_t)s];
    qrows.insert(qrows.end(), q.begin() + first * cols, q.begin() + ctx_lens[(size_t)s] * cols);
  }
  const int64_t rows = (int64_t)(qrows.size() / (size_t)cols);
  std::vector<float> out(qrows.size(), -1.f);
  Tensor qt{qrows.data(), DType::f32, rows, cols, cols};
  Tensor ot{out.data(), DType::f32, rows, cols, cols};
  AttentionBatch b;
  b.n_seqs = n_seqs;
  b.q_start = q_start;
  b.q_len = q_lens;
  b.ctx_len = ctx_lens;
  std::vector<int32_t> tables;
  for (int32_t s = 0; s < n_seqs; ++s) tables.insert(tables.end(), c.table.begin(), c.table.end());
  b.block_tables = tables;
  b.max_blocks = (int32_t)c.table.size();
  PagedKvView view{reinterpret_cast<const uint8_t*>(c.k.data()),
                   reinterpret_cast<const uint8_t*>(c.v.data()), c.g};
  paged_attention_cpu(pool, qt, view, b, n_heads, 1.0f / std::sqrt((float)c.g.head_dim), ot, order);
  return out;
}

// Attention of query rows [first, first + n) of one sequence whose context ends at row
// first + n - 1 (rows before `first` already in the cache).
std::vector<float> run_rows(ThreadPool& pool, const Cache& c, const std::vector<float>& q,
                            int64_t n_heads, int64_t first, int64_t n,
                            AttentionOrder order = AttentionOrder::fast) {
  return run_step(pool, c, q, n_heads, {(int32_t)n}, {(int32_t)(first + n)}, order);
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

// A decode row of at least 768 positions alone in its step runs on every thread of the pool
// (its scores, softmax and P*V split among them) with the one-item path's arithmetic: the same
// bits as the row inside a prefill chunk and as the row decoded on a one-thread pool, at head
// sizes with and without the 64-column vector form of P*V.
TEST(PagedAttentionCpu, LongDecodeRowOnEveryThreadKeepsItsBits) {
  std::mt19937 rng(21);
  ThreadPool two(2), one(1), three(3);
  struct S {
    int64_t n_pos, block_size, n_kv_heads, group, head_dim;
  };
  for (const S& s : {S{2100, 16, 3, 3, 64}, S{1500, 16, 2, 4, 128}, S{1300, 32, 1, 2, 24}}) {
    const int64_t n_heads = s.n_kv_heads * s.group, cols = n_heads * s.head_dim;
    Cache c = make_cache(rng, s.n_pos, s.block_size, s.n_kv_heads, s.head_dim);
    const std::vector<float> q = normal_values(rng, s.n_pos * cols);
    const std::vector<float> prefill = run_rows(two, c, q, n_heads, 0, s.n_pos);
    for (int64_t r : {(int64_t)766, (int64_t)767, s.n_pos - 2, s.n_pos - 1}) {  // 767, 768 keys
      const std::vector<float> lone = run_rows(one, c, q, n_heads, r, 1);
      const std::vector<float> split2 = run_rows(two, c, q, n_heads, r, 1);
      const std::vector<float> split3 = run_rows(three, c, q, n_heads, r, 1);
      for (int64_t i = 0; i < cols; ++i) {
        const float want = prefill[(size_t)(r * cols + i)];
        ASSERT_EQ(lone[(size_t)i], want) << "n_pos " << s.n_pos << " row " << r << " col " << i;
        ASSERT_EQ(split2[(size_t)i], want) << "n_pos " << s.n_pos << " row " << r << " col " << i;
        ASSERT_EQ(split3[(size_t)i], want) << "n_pos " << s.n_pos << " row " << r << " col " << i;
      }
    }
  }
}

// Steps whose decode rows are unequal (a long row beside short ones, with and without a
// prefill chunk, more rows than threads) spread their decode rows over every thread of the
// pool: each row keeps the bits it has inside a prefill chunk, whatever the pool's size.
TEST(PagedAttentionCpu, UnequalDecodeRowsOnEveryThreadKeepTheirBits) {
  std::mt19937 rng(33);
  ThreadPool one(1), two(2), three(3), four(4);
  struct S {
    int64_t n_pos, block_size, n_kv_heads, group, head_dim;
  };
  struct Step {
    std::vector<int32_t> q_lens, ctx_lens;
  };
  for (const S& s : {S{2200, 16, 3, 3, 64}, S{1600, 32, 2, 4, 128}}) {
    const int64_t n_heads = s.n_kv_heads * s.group, cols = n_heads * s.head_dim;
    Cache c = make_cache(rng, s.n_pos, s.block_size, s.n_kv_heads, s.head_dim);
    const std::vector<float> q = normal_values(rng, s.n_pos * cols);
    const std::vector<float> prefill = run_rows(two, c, q, n_heads, 0, s.n_pos);
    const int32_t n = (int32_t)s.n_pos;
    for (const Step& step :
         {Step{{1, 1}, {n, 300}},                         // a long row and a short
          Step{{1, 1, 1, 1, 1}, {n, 40, 1500, 7, 1100}},  // more rows than threads
          Step{{1, 8, 1}, {n - 5, 108, 600}}}) {          // a prefill chunk among them
      for (ThreadPool* pool : {&one, &two, &three, &four}) {
        const std::vector<float> out = run_step(*pool, c, q, n_heads, step.q_lens, step.ctx_lens);
        int64_t row = 0;
        for (size_t i = 0; i < step.q_lens.size(); ++i)
          for (int32_t r = 0; r < step.q_lens[i]; ++r, ++row) {
            const int64_t pos = step.ctx_lens[i] - step.q_lens[i] + r;
            for (int64_t j = 0; j < cols; ++j)
              ASSERT_EQ(out[(size_t)(row * cols + j)], prefill[(size_t)(pos * cols + j)])
                  << "threads " << pool->size() << " sequence " << i << " position " << pos
                  << " col " << j;
          }
      }
    }
  }
}

#if INFERCEPT_VEC_AVX512
TEST(PagedAttentionCpu, LlamaCppOrderIsLlamaCppsArithmeticBitForBit) {
  std::mt19937 rng(13);
  ThreadPool pool(2);
  struct S {
    int64_t n_pos, block_size, n_kv_heads, group, head_dim;
  };
  for (const S& s :
       {S{45, 16, 3, 3, 64}, S{150, 16, 3, 3, 64}, S{70, 8, 2, 4, 128}, S{20, 16, 1, 2, 80}}) {
    const int64_t n_heads = s.n_kv_heads * s.group, hd = s.head_dim;
    Cache c = make_cache(rng, s.n_pos, s.block_size, s.n_kv_heads, hd);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> q((size_t)(s.n_pos * n_heads * hd));
    for (auto& e : q) e = nd(rng);
    const auto prefill = run_rows(pool, c, q, n_heads, 0, s.n_pos, AttentionOrder::llama_cpp);
    for (int64_t r = 0; r < s.n_pos; ++r) {
      const auto decode = run_rows(pool, c, q, n_heads, r, 1, AttentionOrder::llama_cpp);
      for (int64_t h = 0; h < n_heads; ++h) {
        const float* qr = q.data() + (r * n_heads + h) * hd;
        const auto batched = llama_cpp_row(c, qr, h / s.group, r + 1, true);
        const auto single = llama_cpp_row(c, qr, h / s.group, r + 1, false);
        for (int64_t i = 0; i < hd; ++i) {
          ASSERT_EQ(prefill[(size_t)((r * n_heads + h) * hd + i)], batched[(size_t)i])
              << "n_pos " << s.n_pos << " row " << r << " head " << h << " col " << i;
          ASSERT_EQ(decode[(size_t)(h * hd + i)], single[(size_t)i])
              << "n_pos " << s.n_pos << " row " << r << " head " << h << " col " << i;
        }
      }
    }
  }
}
#endif

}  // namespace
}  // namespace infercept
