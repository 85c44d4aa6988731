// fp8 (e4m3) KV cache on the CPU backend, the oracle the CUDA backend's fp8 path is held to.
// Why each test: the conversion is checked against the format's definition (every code, and
// the nearest-even rule by brute force), since both backends share it and a wrong rounding
// would pass unnoticed through attention; the backend's store and attention against a
// double-precision model of the documented layout (codes then a scale per token and head in
// each block), so the layout every copy relies on is the one written down; the model's logits
// with an fp8 cache against an f16 cache, so the error the option costs is measured, bounded
// and visible; and interception, whose swaps and recomputes copy and rebuild fp8 blocks, must
// give token for token what an uninterrupted fp8 run gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/fp8.h"
#include "engine/engine.h"
#include "interception_scripts.h"
#include "io/tensor_source.h"
#include "model/llama.h"
#include "test_util.h"

namespace infercept {
namespace {

// The format by its definition: sign, 4 exponent bits of bias 7, 3 mantissa bits.
double e4m3_value(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double v = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return s ? -v : v;
}

TEST(Fp8E4m3, EveryCodeDecodesToItsDefinedValue) {
  for (int c = 0; c < 256; ++c) {
    const float got = fp8_e4m3_to_f32((uint8_t)c);
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(got)) << c;
      continue;
    }
    EXPECT_EQ((double)got, e4m3_value(c)) << c;
    if (c != 0x80) {
      EXPECT_EQ(f32_to_fp8_e4m3(got), c) << "round trip of code " << c;
    }
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

// The nearest finite code to x, ties to the even code (the even mantissa); beyond 448, 448.
int brute_force_encode(float x) {
  if (std::isnan(x)) return 0x7f;
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs((double)x);
  if (a >= 448.0) return sign | 0x7e;
  int best = 0;
  for (int c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(e4m3_value(c) - a), db = std::fabs(e4m3_value(best) - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return sign | best;
}

TEST(Fp8E4m3, EncodingIsNearestEvenAndSaturates) {
  std::vector<float> xs = {
      0.0f,         -0.0f,  448.0f,  449.0f, 463.99f,
      464.0f,       465.0f, 1e6f,    -1e6f,  INFINITY,
      -INFINITY,    1e-30f, -1e-30f, 1e-45f, 0.0009765625f /* 2^-10: a tie between 0 and 2^-9 */,
      0.0029296875f /* 1.5 * 2^-9: a tie between 1 and 2 steps */};
  // Every midpoint between neighbouring codes, and the floats on either side of it.
  for (int c = 0; c < 0x7e; ++c) {
    const float mid = (float)((e4m3_value(c) + e4m3_value(c + 1)) / 2);
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid});
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> exp_d(-14.0f, 10.0f), sign_d(-1.0f, 1.0f);
  for (int i = 0; i < 20000; ++i) xs.push_back(std::copysign(std::exp2(exp_d(rng)), sign_d(rng)));
  for (float x : xs) ASSERT_EQ(f32_to_fp8_e4m3(x), brute_force_encode(x)) << x;
  EXPECT_EQ(f32_to_fp8_e4m3(NAN) & 0x7f, 0x7f);
}

// A cache filled through the backend's store_kv: rows of random K and V written to scattered
// slots of scattered blocks, then read back by attention.
struct StoredCache {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvStorage> kv;
  std::vector<float> k, v;     // [n_pos, n_kv_heads * head_dim], what was stored
  std::vector<int32_t> table;  // the sequence's blocks
};

KvGeometry geometry(DType dtype, int64_t n_blocks, int64_t block_size, int64_t n_kv_heads,
                    int64_t head_dim) {
  KvGeometry g;
  g.n_layers = 2;
  g.n_blocks = n_blocks;
  g.block_size = block_size;
  g.n_kv_heads = n_kv_heads;
  g.head_dim = head_dim;
  g.dtype = dtype;
  return g;
}

StoredCache store_random(DType dtype, int64_t n_pos, int64_t block_size, int64_t n_kv_heads,
                         int64_t head_dim, uint32_t seed) {
  StoredCache c;
  c.backend = make_cpu_backend(2);
  const int64_t n_blocks = (n_pos + block_size - 1) / block_size + 3;
  auto kv =
      c.backend->create_kv_storage(geometry(dtype, n_blocks, block_size, n_kv_heads, head_dim));
  EXPECT_TRUE(kv.ok());
  c.kv = std::move(*kv);
  std::mt19937 rng(seed);
  c.table.resize((size_t)n_blocks);
  std::iota(c.table.begin(), c.table.end(), 0);
  std::shuffle(c.table.begin(), c.table.end(), rng);
  const int64_t width = n_kv_heads * head_dim;
  // Heads of very different magnitudes (and an all-zero one): each token and head gets its
  // own scale.
  std::normal_distribution<float> nd(0.f, 1.f);
  c.k.resize((size_t)(n_pos * width));
  c.v.resize(c.k.size());
  for (int64_t p = 0; p < n_pos; ++p)
    for (int64_t h = 0; h < n_kv_heads; ++h)
      for (int64_t i = 0; i < head_dim; ++i) {
        const float mag = h == 1 ? 0.0f : std::pow(8.0f, (float)h) * (1.0f + (float)(p % 5));
        c.k[(size_t)(p * width + h * head_dim + i)] = nd(rng) * mag;
        c.v[(size_t)(p * width + h * head_dim + i)] = nd(rng) * mag * 0.5f;
      }
  std::vector<int32_t> slots((size_t)n_pos);
  for (int64_t p = 0; p < n_pos; ++p)
    slots[(size_t)p] =
        c.table[(size_t)(p / block_size)] * (int32_t)block_size + (int32_t)(p % block_size);
  // Stored in two calls (a prompt, then rows one at a time as decode steps write them).
  const int64_t first = n_pos / 2;
  auto rows = [&](std::vector<float>& src, int64_t b, int64_t n) {
    return Tensor{src.data() + b * width, DType::f32, n, width, width};
  };
  c.backend->store_kv(*c.kv, 1, rows(c.k, 0, first), rows(c.v, 0, first),
                      std::span<const int32_t>(slots.data(), (size_t)first));
  for (int64_t p = first; p < n_pos; ++p)
    c.backend->store_kv(*c.kv, 1, rows(c.k, p, 1), rows(c.v, p, 1),
                        std::span<const int32_t>(slots.data() + p, 1));
  return c;
}

// Attention of every position of the stored sequence (causal), from the backend.
std::vector<float> attend(StoredCache& c, const std::vector<float>& q, int64_t n_pos,
                          int64_t n_heads) {
  const KvGeometry& g = c.kv->geometry();
  const int64_t cols = n_heads * g.head_dim;
  std::vector<float> qc = q, out((size_t)(n_pos * cols), -1.f);
  Tensor qt{qc.data(), DType::f32, n_pos, cols, cols};
  Tensor ot{out.data(), DType::f32, n_pos, cols, cols};
  const int32_t q_start[] = {0}, q_len[] = {(int32_t)n_pos}, ctx_len[] = {(int32_t)n_pos};
  AttentionBatch b;
  b.n_seqs = 1;
  b.q_start = q_start;
  b.q_len = q_len;
  b.ctx_len = ctx_len;
  b.block_tables = c.table;
  b.max_blocks = (int32_t)c.table.size();
  c.backend->attention(qt, *c.kv, 1, b, n_heads, 1.0f / std::sqrt((float)g.head_dim), ot);
  return out;
}

// Double-precision attention over K and V as the layout says an fp8 cache holds them: each
// token and head quantized with scale amax / 448.
std::vector<double> reference_attention(const StoredCache& c, const std::vector<float>& q,
                                        int64_t n_pos, int64_t n_heads, bool quantize) {
  const KvGeometry& g = c.kv->geometry();
  const int64_t hd = g.head_dim, width = g.n_kv_heads * hd, group = n_heads / g.n_kv_heads;
  auto as_stored = [&](const std::vector<float>& x) {
    std::vector<double> out(x.size());
    for (int64_t p = 0; p < n_pos; ++p)
      for (int64_t h = 0; h < g.n_kv_heads; ++h) {
        const float* row = x.data() + p * width + h * hd;
        float amax = 0;
        for (int64_t i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(row[i]));
        const float scale = amax / 448.0f;
        for (int64_t i = 0; i < hd; ++i)
          out[(size_t)(p * width + h * hd + i)] =
              !quantize   ? (double)row[i]
              : scale > 0 ? e4m3_value(brute_force_encode(row[i] / scale)) * (double)scale
                          : 0.0;
      }
    return out;
  };
  const std::vector<double> k = as_stored(c.k), v = as_stored(c.v);
  std::vector<double> out((size_t)(n_pos * n_heads * hd));
  const double scale = 1.0 / std::sqrt((double)(float)hd);
  for (int64_t r = 0; r < n_pos; ++r)
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t kvh = h / group;
      std::vector<double> s((size_t)(r + 1));
      double mx = -INFINITY, sum = 0;
      for (int64_t p = 0; p <= r; ++p) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i)
          d += (double)q[(size_t)((r * n_heads + h) * hd + i)] *
               k[(size_t)(p * width + kvh * hd + i)];
        s[(size_t)p] = d * scale;
        mx = std::max(mx, s[(size_t)p]);
      }
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double o = 0;
        for (int64_t p = 0; p <= r; ++p)
          o += s[(size_t)p] / sum * v[(size_t)(p * width + kvh * hd + i)];
        out[(size_t)((r * n_heads + h) * hd + i)] = o;
      }
    }
  return out;
}

TEST(Fp8KvCpu, GeometryPutsCodesThenAScalePerTokenAndHeadInEachBlock) {
  const KvGeometry g = geometry(DType::fp8_e4m3, 5, 16, 4, 64);
  EXPECT_EQ(g.slot_bytes(), 4u * 64u);
  EXPECT_EQ(g.bytes_per_block_per_layer(), 16u * 4u * 64u + 16u * 4u * 4u);
  EXPECT_EQ(g.slot_offset(16 * 3 + 5), 3 * g.bytes_per_block_per_layer() + 5 * 256u);
  EXPECT_EQ(g.scale_offset(16 * 3 + 5), 3 * g.bytes_per_block_per_layer() + 16 * 256u + 5 * 16u);
  EXPECT_EQ(g.total_bytes(), 5 * 2 * 2 * g.bytes_per_block_per_layer());
  // f16 is laid out as before: slots contiguous across blocks.
  const KvGeometry h = geometry(DType::f16, 5, 16, 4, 64);
  EXPECT_EQ(h.slot_offset(16 * 3 + 5), (16u * 3 + 5) * 4 * 64 * 2);
  EXPECT_EQ(h.bytes_per_block_per_layer(), 16u * 4 * 64 * 2);
  EXPECT_FALSE(h.has_scales());
}

TEST(Fp8KvCpu, AttentionReadsWhatStoreWroteAndStaysNearTheUnquantizedResult) {
  struct S {
    int64_t n_pos, block_size, n_kv_heads, group, head_dim;
  };
  for (const S& s : {S{37, 16, 3, 2, 64}, S{70, 8, 2, 4, 128}, S{20, 16, 4, 1, 32}}) {
    const int64_t n_heads = s.n_kv_heads * s.group;
    StoredCache c = store_random(DType::fp8_e4m3, s.n_pos, s.block_size, s.n_kv_heads, s.head_dim,
                                 (uint32_t)s.n_pos);
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.f, 0.1f);
    std::vector<float> q((size_t)(s.n_pos * n_heads * s.head_dim));
    for (float& e : q) e = nd(rng);
    const std::vector<float> got = attend(c, q, s.n_pos, n_heads);
    const std::vector<double> want = reference_attention(c, q, s.n_pos, n_heads, true);
    const std::vector<double> exact = reference_attention(c, q, s.n_pos, n_heads, false);
    double err_q = 0, err_exact = 0, mag = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      // Against the quantized operands: only f32 arithmetic apart.
      // (Scores reach the hundreds with the largest heads, so f32 rounding in them shows.)
      ASSERT_NEAR(got[i], want[i], 2e-3 * (1.0 + std::fabs(want[i]))) << "element " << i;
      err_q = std::max(err_q, std::fabs(got[i] - want[i]));
      err_exact += std::fabs(got[i] - exact[i]);
      mag += std::fabs(exact[i]);
    }
    // Against the unquantized cache: e4m3 keeps 3 mantissa bits (a relative step of 1/8 at
    // worst, ~2.5% mean); scores in the hundreds (the largest heads here) make the softmax
    // peaky, where a key's error moves the weights more than the values' error averages out.
    const double rel = err_exact / mag;
    std::printf(
        "n_pos %lld hd %lld: max error vs quantized operands %.2e, mean relative error "
        "vs unquantized %.4f\n",
        (long long)s.n_pos, (long long)s.head_dim, err_q, rel);
    EXPECT_LT(rel, 0.08);
    EXPECT_GT(rel, 0.0);  // the cache did quantize
  }
}

TEST(Fp8KvCpu, SwappedBlocksComeBackWithTheirScales) {
  const int64_t n_pos = 45, n_heads = 6;
  StoredCache c = store_random(DType::fp8_e4m3, n_pos, 16, 3, 64, 21);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.f, 0.1f);
  std::vector<float> q((size_t)(n_pos * n_heads * 64));
  for (float& e : q) e = nd(rng);
  const std::vector<float> before = attend(c, q, n_pos, n_heads);
  // Out to a host pool and back into other device blocks, as a swap does.
  KvGeometry hg = c.kv->geometry();
  auto host = c.backend->create_host_kv_storage(hg);
  ASSERT_TRUE(host.ok());
  const int32_t n_used = (int32_t)((n_pos + 15) / 16);
  std::vector<int32_t> used(c.table.begin(), c.table.begin() + n_used), staged(used.size());
  std::iota(staged.begin(), staged.end(), 0);
  c.backend->copy_blocks_between(*c.kv, **host, used, staged);
  std::vector<int32_t> spare(c.table.begin() + n_used, c.table.end());
  ASSERT_GE(spare.size(), used.size());
  spare.resize(used.size());
  c.backend->copy_blocks_between(**host, *c.kv, staged, spare);
  c.backend->flush_copies();
  std::copy(spare.begin(), spare.end(), c.table.begin());
  const std::vector<float> after = attend(c, q, n_pos, n_heads);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) ASSERT_EQ(before[i], after[i]) << i;
}

// Logits of the default model with an fp8 cache and an f16 cache against an f32 cache: a prompt
// in one step, then one token a step. (The small model's logits move with f16 already.)
TEST(Fp8KvCpu, ModelLogitsStayCloseToAnF32Cache) {
  auto src = open_model_source(testing::default_model_path());
  ASSERT_TRUE(src.ok()) << src.error().message;
  const ModelConfig& mc = (*src)->config();
  auto run = [&](DType dtype) {
    auto backend = make_cpu_backend(2);
    auto m = LlamaModel::create(**src, *backend, 256, 256);
    EXPECT_TRUE(m.ok());
    KvGeometry g{mc.n_layers, 16, 16, mc.n_kv_heads, mc.head_dim, dtype};
    auto kv = backend->create_kv_storage(g);
    EXPECT_TRUE(kv.ok());
    std::vector<int32_t> tokens;
    for (int i = 0; i < 96; ++i) tokens.push_back(1 + (i * 7919) % (int)(mc.vocab_size - 1));
    std::vector<float> all;
    auto feed = [&](int32_t from, int32_t to) {
      StepInput in;
      for (int32_t p = from; p < to; ++p) {
        in.tokens.push_back(tokens[(size_t)p]);
        in.positions.push_back(p);
        in.slots.push_back(p);
      }
      in.logit_rows = {to - from - 1};
      in.q_start = {0};
      in.q_len = {to - from};
      in.ctx_len = {to};
      in.max_blocks = 16;
      for (int32_t b = 0; b < 16; ++b) in.block_tables.push_back(b);
      std::vector<float> row((size_t)mc.vocab_size);
      (*m)->forward(in, **kv, row.data());
      all.insert(all.end(), row.begin(), row.end());
    };
    feed(0, 64);
    for (int32_t p = 64; p < 96; ++p) feed(p, p + 1);
    return all;
  };
  const std::vector<float> f32 = run(DType::f32), f16 = run(DType::f16), fp8 = run(DType::fp8_e4m3);
  ASSERT_EQ(f16.size(), fp8.size());
  const size_t vocab = (size_t)mc.vocab_size, rows = f16.size() / vocab;
  struct Diff {
    double mean_abs = 0, max_abs = 0;
    int same_top = 0;
  };
  auto diff = [&](const std::vector<float>& x, const std::vector<float>& y) {
    Diff d;
    for (size_t r = 0; r < rows; ++r) {
      const float* a = x.data() + r * vocab;
      const float* b = y.data() + r * vocab;
      for (size_t i = 0; i < vocab; ++i) {
        d.mean_abs += std::fabs(a[i] - b[i]);
        d.max_abs = std::max(d.max_abs, (double)std::fabs(a[i] - b[i]));
      }
      d.same_top += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
    }
    d.mean_abs /= (double)x.size();
    return d;
  };
  const Diff q8 = diff(f32, fp8), q16 = diff(f32, f16);
  std::printf(
      "against an f32 cache over %zu rows: fp8 mean |diff| %.4f, max %.3f, same argmax %d;"
      " f16 mean |diff| %.4f, max %.3f, same argmax %d\n",
      rows, q8.mean_abs, q8.max_abs, q8.same_top, q16.mean_abs, q16.max_abs, q16.same_top);
  EXPECT_GT(q8.mean_abs, q16.mean_abs);  // the cache did quantize, more coarsely than f16
  EXPECT_LT(q8.mean_abs, 0.35);
  EXPECT_GE(q8.same_top, (int)rows * 3 / 4);
}

// Interception over an fp8 cache: swaps copy fp8 blocks with their scales, discards recompute
// them, and what a request generates is what the uninterrupted fp8 run generates.
TEST(Fp8KvCpu, InterceptionGivesTheUninterruptedRunsTokens) {
  auto with_fp8 = [](EngineConfig c) {
    c.kv_dtype = DType::fp8_e4m3;
    return c;
  };
  const std::vector<testing::Script> ss = testing::scripts();
  auto ref_engine = EngineCore::create(with_fp8(testing::config_for("preserve", "elapsed", 4096)));
  ASSERT_TRUE(ref_engine.ok()) << ref_engine.error().message;
  const auto ref = testing::run_scripts(**ref_engine, ss, /*hints=*/true, nullptr);
  for (const char* policy : {"swap", "discard", "minwaste"}) {
    auto e = EngineCore::create(with_fp8(testing::config_for(policy, "oracle", 160)));
    ASSERT_TRUE(e.ok()) << e.error().message;
    EngineStats st;
    const auto got = testing::run_scripts(**e, ss, /*hints=*/true, &st);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(got[i], ref[i]) << policy << ": script " << i;
    EXPECT_GT(st.swapped_out_tokens + st.recomputed_tokens, 0) << policy;
    EXPECT_EQ((*e)->allocator().n_held(), 0);
    EXPECT_EQ((*e)->host_allocator().n_held(), 0);
  }
}

}  // namespace
}  // namespace infercept
