// Every CUDA op against the CPU backend (the oracle) on fresh random inputs: relative error
// within bf16 tolerance, never NaN. Runs on a machine with a GPU (`make test-gpu`).
//
// The plain ops are a table of op x shape x activation type (CudaOpCases, at the end, in the
// spirit of llama.cpp's test-backend-ops): each case draws its inputs from its own seed, which
// a failure prints with the run's base seed (--gtest_random_seed=N runs the same inputs
// again). The fused forms, the kernels called directly and the host-side plans follow as
// tests of their own; a backend option that turns a fused form off gives the composed path
// to compare against on the same device (CudaBackendOptions, never the environment).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/attend_project.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kv_storage.h"
#include "core/half.h"

namespace infercept {
namespace {

struct Pair {
  std::unique_ptr<Backend> cpu, gpu;
};

// A CUDA backend with options `o` (the production defaults unless a test changes a field).
std::unique_ptr<Backend> cuda_backend(const CudaBackendOptions& o = {}) {
  auto g = make_cuda_backend(o);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  return g.ok() ? std::move(*g) : nullptr;
}

// The CPU oracle and a GPU backend computing in `act` (bf16 or f16).
Pair backends(DType act = DType::bf16) {
  Pair p;
  p.cpu = make_cpu_backend(4);
  CudaBackendOptions o;
  o.activation_dtype = act;
  p.gpu = cuda_backend(o);
  return p;
}

// The run's base seed: --gtest_random_seed when given, else fresh every run.
uint32_t base_seed() {
  static const uint32_t seed = GTEST_FLAG_GET(random_seed) != 0
                                   ? (uint32_t)GTEST_FLAG_GET(random_seed)
                                   : std::random_device{}();
  return seed;
}

std::mt19937& rng() {
  static std::mt19937 r(base_seed());
  return r;
}

std::vector<float> randn(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}

// Host floats into a backend activation (bf16 or f16 on the GPU, f32 on the CPU).
Tensor put(Backend& b, const std::vector<float>& v, int64_t rows, int64_t cols) {
  Tensor t = b.alloc_activation(rows, cols, b.activation_dtype());
  if (b.activation_dtype() == DType::f32) {
    std::memcpy(t.data, v.data(), v.size() * 4);
  } else {
    const bool f16 = b.activation_dtype() == DType::f16;
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = f16 ? fp32_to_fp16(v[i]) : fp32_to_bf16(v[i]);
    EXPECT_EQ(cudaMemcpy(t.data, h.data(), h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  return t;
}

std::vector<float> get(Backend& b, const Tensor& t) {
  std::vector<float> v((size_t)(t.rows * t.cols));
  b.to_host_f32(t, v.data());
  return v;
}

// ||a - b|| / ||b||, and no NaN in a.
double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_FALSE(std::isnan(got[i])) << "NaN at " << i;
    num += (double)(got[i] - ref[i]) * (got[i] - ref[i]);
    den += (double)ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

constexpr double kBf16Tol = 1.5e-2;

std::vector<uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = fp32_to_fp16(v[i]);
  return h;
}

// The GEMV kernel for decode at small batch, every row count it takes, strided input rows
// and both output types, against the CPU backend; shapes with k not a multiple of 256 too.
TEST(CudaOps, GemvEveryRowCountStridedInput) {
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  for (auto [m, k] : {std::pair{1000, 576}, {257, 4096}, {64, 11008}}) {
    auto w = randn((size_t)(m * k), 0.05f);
    auto w16 = to_f16(w);
    auto wc = p.cpu->upload_weight(w16.data(), DType::f16, m, k);
    auto wg = p.gpu->upload_weight(w16.data(), DType::f16, m, k);
    ASSERT_TRUE(wc.ok() && wg.ok());
    for (int n = 1; n <= cuda::kGemvMaxRows; ++n) {
      // x is the second half of a [n, 2k] buffer: a row stride of 2k.
      auto x2 = randn((size_t)(n * 2 * k));
      std::vector<float> x((size_t)(n * k));
      for (int r = 0; r < n; ++r)
        std::copy_n(x2.begin() + (ptrdiff_t)(r * 2 * k + k), k, x.begin() + (ptrdiff_t)(r * k));
      Tensor xc = put(*p.cpu, x, n, k);
      Tensor xg = put(*p.gpu, x2, n, 2 * k).slice_cols(k, k);
      ASSERT_TRUE(cuda::gemv_fits(n, k, xg.data, xg.stride, wg->data, xg.dtype, DType::f32));
      Tensor oc = p.cpu->alloc_activation(n, m, DType::f32);
      Tensor og32 = p.gpu->alloc_activation(n, m, DType::f32);
      Tensor og = p.gpu->alloc_activation(n, m, p.gpu->activation_dtype());
      cuda::gemv(xg.data, xg.stride, xg.dtype, wg->data, n, m, k, og32.data, og32.stride,
                 DType::f32, nullptr);
      cuda::gemv(xg.data, xg.stride, xg.dtype, wg->data, n, m, k, og.data, og.stride, og.dtype,
                 nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      p.cpu->matmul(xc, *wc, nullptr, oc);
      const auto ref = get(*p.cpu, oc);
      EXPECT_LT(rel_error(get(*p.gpu, og32), ref), kBf16Tol) << n << "x" << m << "x" << k;
      EXPECT_LT(rel_error(get(*p.gpu, og), ref), kBf16Tol) << n << "x" << m << "x" << k;
      // Through the backend's matmul (GEMV up to its row limit, cuBLASLt beyond).
      Tensor ob = p.gpu->alloc_activation(n, m, DType::f32);
      p.gpu->matmul(xg, *wg, nullptr, ob);
      EXPECT_LT(rel_error(get(*p.gpu, ob), ref), kBf16Tol) << n << "x" << m << "x" << k;
    }
  }
}

// A weight from f16 values, or an f32 vector (a norm's weights, a bias), on backend b.
Weight upload_f16(Backend& b, const std::vector<uint16_t>& w16, int64_t rows, int64_t cols) {
  auto w = b.upload_weight(w16.data(), DType::f16, rows, cols);
  EXPECT_TRUE(w.ok());
  return *w;
}
Weight upload_f32(Backend& b, const std::vector<float>& v) {
  auto w = b.upload_weight(v.data(), DType::f32, 1, (int64_t)v.size());
  EXPECT_TRUE(w.ok());
  return *w;
}

// One of the GEMV's alternative kernels (`fits`, `run`), called directly whatever the
// switches say, with every epilogue it takes against the CPU backend at n input rows: plain
// products (both output types, a bias), norm + three segments (Q/K/V-like, row counts that
// leave a short last tile), norm + gated, and the residual accumulate. Shapes where `fits`
// says no are skipped only where `may_refuse` allows (k too wide to stage n normalized rows).
using GemvFits = bool (*)(const cuda::GemvArgs&);
using GemvRun = void (*)(const cuda::GemvArgs&, cudaStream_t);
void check_every_epilogue(Pair& p, int n, GemvFits fits, GemvRun run,
                          std::initializer_list<std::pair<int, int>> shapes,
                          bool (*may_refuse)(const cuda::GemvArgs&)) {
  const DType act = p.gpu->activation_dtype();
  auto args = [&](const Tensor& x, cuda::GemvEpilogue e) {
    cuda::GemvArgs a;
    a.x = x.data;
    a.x_stride = x.stride;
    a.n = n;
    a.k = (int)x.cols;
    a.in_dtype = act;
    a.out_dtype = act;
    a.epilogue = e;
    return a;
  };
  auto seg = [](const Weight& w, const Weight* w2, const Weight* bias, const Tensor& out) {
    return cuda::GemvSegment{w.data,
                             w2 != nullptr ? w2->data : nullptr,
                             bias != nullptr ? static_cast<const float*>(bias->data) : nullptr,
                             out.data,
                             out.stride,
                             (int)w.rows};
  };
  auto launch = [&](const cuda::GemvArgs& a) {
    if (!fits(a)) {
      EXPECT_TRUE(may_refuse(a)) << "refused";
      return false;
    }
    run(a, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return true;
  };
  for (auto [m, k] : shapes) {
    SCOPED_TRACE(std::to_string(n) + " rows, " + std::to_string(m) + " x " + std::to_string(k));
    const auto w = to_f16(randn((size_t)(m * k), 0.03f)),
               w2 = to_f16(randn((size_t)(m * k), 0.03f));
    const auto wk = to_f16(randn((size_t)(96 * k), 0.03f));
    const auto norm = randn((size_t)k, 1.0f), bias = randn((size_t)m, 0.5f),
               bias96 = randn(96, 0.5f);
    const auto res = randn((size_t)(n * m));
    // x is the second half of a [n, 2k] buffer: a row stride of 2k.
    const auto x2 = randn((size_t)(n * 2 * k));
    std::vector<float> x((size_t)(n * k));
    for (int r = 0; r < n; ++r)
      std::copy_n(x2.begin() + (ptrdiff_t)(r * 2 * k + k), k, x.begin() + (ptrdiff_t)(r * k));
    const Weight wc = upload_f16(*p.cpu, w, m, k), wg = upload_f16(*p.gpu, w, m, k);
    const Weight uc = upload_f16(*p.cpu, w2, m, k), ug = upload_f16(*p.gpu, w2, m, k);
    const Weight kc = upload_f16(*p.cpu, wk, 96, k), kg = upload_f16(*p.gpu, wk, 96, k);
    const Weight nc = upload_f32(*p.cpu, norm), ng = upload_f32(*p.gpu, norm);
    const Weight bc = upload_f32(*p.cpu, bias), bg = upload_f32(*p.gpu, bias);
    const Weight b96c = upload_f32(*p.cpu, bias96), b96g = upload_f32(*p.gpu, bias96);
    Tensor xc = put(*p.cpu, x, n, k), xg = put(*p.gpu, x2, n, 2 * k).slice_cols(k, k);

    // Plain, f32 and activation outputs, with a bias.
    Tensor oc = p.cpu->alloc_activation(n, m, DType::f32);
    p.cpu->matmul(xc, wc, &bc, oc);
    const auto ref = get(*p.cpu, oc);
    for (DType out_t : {DType::f32, act}) {
      Tensor og = p.gpu->alloc_activation(n, m, out_t);
      cuda::GemvArgs a = args(xg, cuda::GemvEpilogue::store);
      a.out_dtype = out_t;
      a.seg[0] = seg(wg, nullptr, &bg, og);
      if (launch(a)) {
        EXPECT_LT(rel_error(get(*p.gpu, og), ref), kBf16Tol) << "plain, out " << dtype_name(out_t);
      }
    }

    // Norm + three segments: the second with a bias and 96 rows, the third the same weight.
    {
      std::vector<Tensor> cs, gs;
      for (int64_t cols : {(int64_t)m, (int64_t)96, (int64_t)m, (int64_t)k}) {
        cs.push_back(p.cpu->alloc_activation(n, cols, DType::f32));
        gs.push_back(p.gpu->alloc_activation(n, cols, act));
      }
      const Weight none{};
      const Projection pc[] = {{&wc, &none, cs[0]}, {&kc, &b96c, cs[1]}, {&uc, nullptr, cs[2]}};
      p.cpu->norm_project(xc, nc, 1e-5f, cs[3], pc);
      cuda::GemvArgs a = args(xg, cuda::GemvEpilogue::store);
      a.norm = static_cast<const float*>(ng.data);
      a.eps = 1e-5f;
      a.n_segments = 3;
      a.seg[0] = seg(wg, nullptr, nullptr, gs[0]);
      a.seg[1] = seg(kg, nullptr, &b96g, gs[1]);
      a.seg[2] = seg(ug, nullptr, nullptr, gs[2]);
      if (launch(a)) {
        for (int i = 0; i < 3; ++i)
          EXPECT_LT(rel_error(get(*p.gpu, gs[i]), get(*p.cpu, cs[i])), kBf16Tol) << "segment " << i;
      }
    }

    // Norm + gated (silu(h w) * (h w2)).
    {
      Tensor gc = p.cpu->alloc_activation(n, m, DType::f32),
             upc = p.cpu->alloc_activation(n, m, DType::f32);
      Tensor hc = p.cpu->alloc_activation(n, k, DType::f32);
      p.cpu->norm_gated_ffn(xc, nc, 1e-5f, hc, wc, uc, gc, upc);
      Tensor gg = p.gpu->alloc_activation(n, m, act);
      cuda::GemvArgs a = args(xg, cuda::GemvEpilogue::gated);
      a.norm = static_cast<const float*>(ng.data);
      a.eps = 1e-5f;
      a.seg[0] = seg(wg, &ug, nullptr, gg);
      if (launch(a)) {
        EXPECT_LT(rel_error(get(*p.gpu, gg), get(*p.cpu, gc)), kBf16Tol) << "gated";
      }
    }

    // The residual accumulate: res += x w^T.
    {
      Tensor rc = put(*p.cpu, res, n, m), rg = put(*p.gpu, res, n, m);
      Tensor scratch = p.cpu->alloc_activation(n, m, DType::f32);
      p.cpu->project_add(xc, wc, rc, scratch);
      cuda::GemvArgs a = args(xg, cuda::GemvEpilogue::accumulate);
      a.seg[0] = seg(wg, nullptr, nullptr, rg);
      if (launch(a)) {
        EXPECT_LT(rel_error(get(*p.gpu, rg), get(*p.cpu, rc)), kBf16Tol) << "accumulate";
      }
    }
  }
}

// The tensor-core GEMV at every fragment boundary of the rows (1, 4, 7, 8, 9, 16): feature
// counts that leave a short last tile of 16, k split unevenly over the warps (11008 = 344
// steps of 32; 5120: every warp 20; 96: warps without steps). The input rows must fit the
// shared memory (180 KB): 9 and 16 rows of 11008 do not, the only refusals allowed. Then 3 and
// 9 rows with f16 activations.
TEST(CudaOps, GemvMmaEveryEpilogueMatchesTheCpuBackend) {
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  auto too_wide = [](const cuda::GemvArgs& a) {
    return (size_t)a.n * (size_t)(a.k + 32) * 2 > (180u << 10);
  };
  // 4 rows of 5,120 first: their staged rows and the static buffers are just over the 48 KB a
  // kernel gets without opting in (the launch failed on llama2-13b before it opted in always).
  for (int n : {4, 1, 7, 8, 9, 16})
    check_every_epilogue(p, n, cuda::gemv_mma_fits, cuda::gemv_mma,
                         {{517, 5120}, {1027, 4096}, {333, 11008}, {40, 96}}, too_wide);
  // f16 activations: the other mma instruction and conversions.
  Pair h = backends(DType::f16);
  ASSERT_TRUE(h.gpu);
  ASSERT_EQ(h.gpu->activation_dtype(), DType::f16);
  for (int n : {3, 9})
    check_every_epilogue(h, n, cuda::gemv_mma_fits, cuda::gemv_mma, {{517, 5120}, {40, 96}},
                         too_wide);
}

// The Q/K/V product that signals per KV head (GemvHeadSignal): the same bits as the product
// in segment order, and every head's counter at its rows (Q rows + 2 x K rows) afterwards.
// MHA and GQA, 1 and 2 input rows, more virtual blocks than the grid holds (k = 4096, 32
// heads: 1,536 blocks of 8 rows).
TEST(CudaOps, GemvHeadSignalCountsEveryHeadsRowsWithTheSameBits) {
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  const DType act = p.gpu->activation_dtype();
  struct Shape {
    int nh, nkv, hd, k, n;
  };
  for (const Shape sh :
       {Shape{32, 32, 128, 4096, 1}, Shape{32, 8, 128, 1024, 2}, Shape{8, 4, 32, 256, 1}}) {
    SCOPED_TRACE(std::to_string(sh.nh) + "/" + std::to_string(sh.nkv) + " heads, k " +
                 std::to_string(sh.k) + ", rows " + std::to_string(sh.n));
    const int mq = sh.nh * sh.hd, mkv = sh.nkv * sh.hd;
    const Weight wq = upload_f16(*p.gpu, to_f16(randn((size_t)mq * sh.k, 0.03f)), mq, sh.k);
    const Weight wk = upload_f16(*p.gpu, to_f16(randn((size_t)mkv * sh.k, 0.03f)), mkv, sh.k);
    const Weight wv = upload_f16(*p.gpu, to_f16(randn((size_t)mkv * sh.k, 0.03f)), mkv, sh.k);
    const Weight ng = upload_f32(*p.gpu, randn((size_t)sh.k, 1.0f));
    Tensor xg = put(*p.gpu, randn((size_t)sh.n * sh.k), sh.n, sh.k);
    int* ready = nullptr;
    ASSERT_EQ(cudaMalloc(&ready, (size_t)sh.nkv * sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(ready, 0, (size_t)sh.nkv * sizeof(int)), cudaSuccess);
    std::vector<float> outs[2][3];
    for (int signal = 0; signal < 2; ++signal) {
      Tensor o[3] = {p.gpu->alloc_activation(sh.n, mq, act),
                     p.gpu->alloc_activation(sh.n, mkv, act),
                     p.gpu->alloc_activation(sh.n, mkv, act)};
      cuda::GemvArgs a;
      a.x = xg.data;
      a.x_stride = xg.stride;
      a.n = sh.n;
      a.k = sh.k;
      a.in_dtype = a.out_dtype = act;
      a.norm = static_cast<const float*>(ng.data);
      a.eps = 1e-5f;
      a.n_segments = 3;
      const Weight* w[3] = {&wq, &wk, &wv};
      for (int i = 0; i < 3; ++i)
        a.seg[i] = cuda::GemvSegment{w[i]->data, nullptr,     nullptr,
                                     o[i].data,  o[i].stride, (int)w[i]->rows};
      if (signal) {
        a.signal.ready = ready;
        a.signal.q_rows = sh.nh / sh.nkv * sh.hd;
        a.signal.kv_rows = sh.hd;
      }
      ASSERT_TRUE(cuda::gemv_fits(a));
      cuda::gemv(a, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (int i = 0; i < 3; ++i) outs[signal][i] = get(*p.gpu, o[i]);
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(outs[1][i], outs[0][i]) << "segment " << i;
    std::vector<int> counts((size_t)sh.nkv);
    ASSERT_EQ(cudaMemcpy(counts.data(), ready, counts.size() * sizeof(int), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(counts, std::vector<int>((size_t)sh.nkv, (sh.nh / sh.nkv + 2) * sh.hd));
    cudaFree(ready);
  }
}

// The fused groups of a decoder layer (norm + Q/K/V with a bias, norm + SwiGLU gate/up,
// product + residual add) against the CPU backend's composed ops: at 1-2 rows (one fused
// GEMV launch each) and at 5 and 40 rows (rmsnorm + cuBLASLt, residual by beta = 1).
TEST(CudaOps, FusedLayerGroupsMatchTheComposedOps) {
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  const int64_t d = 576, qd = 576, kvd = 192, f = 1536;
  const auto wq = to_f16(randn((size_t)(qd * d), 0.05f)),
             wk = to_f16(randn((size_t)(kvd * d), 0.05f)),
             wv = to_f16(randn((size_t)(kvd * d), 0.05f)),
             wg = to_f16(randn((size_t)(f * d), 0.05f)), wu = to_f16(randn((size_t)(f * d), 0.05f)),
             wd = to_f16(randn((size_t)(d * f), 0.03f));
  const auto norm = randn((size_t)d, 1.0f), bk = randn((size_t)kvd, 0.5f);
  struct Side {
    Weight wq, wk, wv, wg, wu, wd, norm, bk, none;
  };
  auto side = [&](Backend& b) {
    return Side{upload_f16(b, wq, qd, d), upload_f16(b, wk, kvd, d), upload_f16(b, wv, kvd, d),
                upload_f16(b, wg, f, d),  upload_f16(b, wu, f, d),   upload_f16(b, wd, d, f),
                upload_f32(b, norm),      upload_f32(b, bk),         Weight{}};
  };
  const Side c = side(*p.cpu), g = side(*p.gpu);
  for (int64_t n : {1, 2, 5, 40}) {
    const auto x = randn((size_t)(n * d)), act = randn((size_t)(n * f));
    Tensor xc = put(*p.cpu, x, n, d), xg = put(*p.gpu, x, n, d);
    auto outs = [&](Backend& b, DType t) {
      std::vector<Tensor> o;
      for (int64_t cols : {d, qd, kvd, kvd, f, f, d}) o.push_back(b.alloc_activation(n, cols, t));
      return o;
    };
    auto oc = outs(*p.cpu, DType::f32), og = outs(*p.gpu, p.gpu->activation_dtype());
    // [0] h, [1] q, [2] k, [3] v, [4] gate, [5] up, [6] scratch
    const Projection pc[] = {
        {&c.wq, &c.none, oc[1]}, {&c.wk, &c.bk, oc[2]}, {&c.wv, nullptr, oc[3]}};
    const Projection pg[] = {
        {&g.wq, &g.none, og[1]}, {&g.wk, &g.bk, og[2]}, {&g.wv, nullptr, og[3]}};
    p.cpu->norm_project(xc, c.norm, 1e-5f, oc[0], pc);
    p.gpu->norm_project(xg, g.norm, 1e-5f, og[0], pg);
    for (int i = 1; i <= 3; ++i)
      EXPECT_LT(rel_error(get(*p.gpu, og[i]), get(*p.cpu, oc[i])), kBf16Tol)
          << "n " << n << " qkv " << i;
    p.cpu->norm_gated_ffn(xc, c.norm, 1e-5f, oc[0], c.wg, c.wu, oc[4], oc[5]);
    p.gpu->norm_gated_ffn(xg, g.norm, 1e-5f, og[0], g.wg, g.wu, og[4], og[5]);
    EXPECT_LT(rel_error(get(*p.gpu, og[4]), get(*p.cpu, oc[4])), kBf16Tol) << "n " << n << " gated";
    Tensor ac = put(*p.cpu, act, n, f), ag = put(*p.gpu, act, n, f);
    p.cpu->project_add(ac, c.wd, xc, oc[6]);
    p.gpu->project_add(ag, g.wd, xg, og[6]);
    EXPECT_LT(rel_error(get(*p.gpu, xg), get(*p.cpu, xc)), kBf16Tol) << "n " << n << " residual";
  }
}

// What both decode-layer cases below share: a layer's Q, K, V and O weights and its norm, each
// row's paged table with room for two steps (block ids interleaved across the rows), the
// history before each row's first step (stored once per backend), and each step's inputs.
class DecodeLayerCase {
 public:
  static constexpr int64_t d = 256, bs = 16;
  const int64_t nh, nkv, hd, n;

  DecodeLayerCase(int64_t nh_, int64_t nkv_, int64_t hd_, bool neox, std::vector<int> ctx)
      : nh(nh_), nkv(nkv_), hd(hd_), n((int64_t)ctx.size()), ctx_lens_(std::move(ctx)) {
    wq_ = to_f16(randn((size_t)(nh * hd * d), 0.06f));
    wk_ = to_f16(randn((size_t)(nkv * hd * d), 0.06f));
    wv_ = to_f16(randn((size_t)(nkv * hd * d), 0.06f));
    wo_ = to_f16(randn((size_t)(d * nh * hd), 0.06f));
    norm_ = randn((size_t)d, 1.0f);
    for (int i = 0; i < hd / 2; ++i) ff_.push_back(i > hd / 4 ? 8.0f : 1.0f);
    rope = RopeParams{hd, hd, neox, neox ? 500000.0f : 10000.0f,
                      neox ? std::span<const float>(ff_) : std::span<const float>()};
    for (int c : ctx_lens_) max_blocks_ = std::max(max_blocks_, (c + 1 + (int)bs - 1) / (int)bs);
    tables_.resize((size_t)(n * max_blocks_));
    for (int64_t s = 0; s < n; ++s)
      for (int b = 0; b < max_blocks_; ++b)
        tables_[(size_t)(s * max_blocks_ + b)] = b * (int)n + (int)s;
    for (int64_t s = 0; s < n; ++s)
      for (int t = 0; t + 1 < ctx_lens_[(size_t)s]; ++t) {
        hist_pos_.push_back(t);
        hist_slot_.push_back(slot_of(s, t));
      }
    const int64_t rows = (int64_t)hist_pos_.size();
    hq_ = randn((size_t)(rows * nh * hd));
    hk_ = randn((size_t)(rows * nkv * hd));
    hv_ = randn((size_t)(rows * nkv * hd));
    x_[0] = randn((size_t)(n * d));
    x_[1] = randn((size_t)(n * d));
  }
  DecodeLayerCase(const DecodeLayerCase&) = delete;  // rope points into ff_

  // One backend's copy of the layer: weights, a KV cache holding the history (f16 on the CPU
  // oracle, the activation type on a GPU), scratch activations.
  struct On {
    Weight wq, wk, wv, wo, norm;
    std::unique_ptr<KvStorage> kv;
    Tensor h, q, k, v, o, scratch;
  };
  On on(Backend& b) const {
    const DType act = b.activation_dtype();
    auto up = [&](const std::vector<uint16_t>& w, int64_t rows, int64_t cols) {
      auto r = b.upload_weight(w.data(), DType::f16, rows, cols);
      EXPECT_TRUE(r.ok());
      return *r;
    };
    On o;
    o.wq = up(wq_, nh * hd, d);
    o.wk = up(wk_, nkv * hd, d);
    o.wv = up(wv_, nkv * hd, d);
    o.wo = up(wo_, d, nh * hd);
    o.norm = b.upload_weight(norm_.data(), DType::f32, 1, d).value();
    const KvGeometry g{1, n * max_blocks_, bs, nkv, hd, act == DType::f32 ? DType::f16 : act};
    o.kv = b.create_kv_storage(g).value();
    const int64_t rows = (int64_t)hist_pos_.size();
    if (rows > 0) {
      b.begin_step();
      Tensor tq = put(b, hq_, rows, nh * hd), tk = put(b, hk_, rows, nkv * hd),
             tv = put(b, hv_, rows, nkv * hd);
      b.rope_store_kv(tq, tk, tv, hist_pos_, rope, *o.kv, 0, hist_slot_);
    }
    o.h = b.alloc_activation(n, d, act);
    o.q = b.alloc_activation(n, nh * hd, act);
    o.k = b.alloc_activation(n, nkv * hd, act);
    o.v = b.alloc_activation(n, nkv * hd, act);
    o.o = b.alloc_activation(n, nh * hd, act);
    o.scratch = b.alloc_activation(n, d, act);
    return o;
  }

  // Step `step` (0 or 1) of every row: one query row at the row's next position.
  struct Step {
    std::vector<int32_t> pos, slot, ctx, q_start, q_len;
    const std::vector<float>* x;
  };
  Step step(int step) const {
    Step st{{}, {}, {}, {}, std::vector<int32_t>((size_t)n, 1), &x_[step]};
    for (int64_t s = 0; s < n; ++s) {
      const int c = ctx_lens_[(size_t)s] + step;
      st.pos.push_back(c - 1);
      st.slot.push_back(slot_of(s, c - 1));
      st.ctx.push_back(c);
      st.q_start.push_back((int32_t)s);
    }
    return st;
  }
  AttentionBatch batch(const Step& st) const {
    return AttentionBatch{(int)n, st.q_start, st.q_len, st.ctx, tables_, max_blocks_};
  }
  std::string trace() const {
    return "heads " + std::to_string(nh) + "/" + std::to_string(nkv) + ", hd " +
           std::to_string(hd) + ", neox " + std::to_string(rope.neox) + ", rows " +
           std::to_string(n) + ", first ctx " + std::to_string(ctx_lens_[0]);
  }

  RopeParams rope;

 private:
  int32_t slot_of(int64_t s, int t) const {
    return tables_[(size_t)(s * max_blocks_ + t / bs)] * (int)bs + t % (int)bs;
  }
  std::vector<int> ctx_lens_;
  std::vector<uint16_t> wq_, wk_, wv_, wo_;
  std::vector<float> norm_, ff_, hq_, hk_, hv_, x_[2];
  int max_blocks_ = 0;
  std::vector<int32_t> tables_, hist_pos_, hist_slot_;
};

// self_attention at a step of decode rows alone takes decode_rope_attention (sm_90): the Q/K/V
// product, then one kernel that rotates q and the new key, stores K and V, attends with each
// row's partitions merged inside a thread-block cluster. Against the CPU backend's composition
// and the GPU's composed ops (CudaBackendOptions::attn_fused off), over two steps (the second
// attends over the key the first stored), up to 16 partitions a row, MHA and GQA, both RoPE
// layouts; a second launch of the same step repeats the first's bits. The fused path's attention
// waits per KV head on the Q/K/V product's counters (GemvHeadSignal); with attn_signal off it waits
// for the whole product, and the outputs are the same bits.
void self_attention_case(int64_t nh, int64_t nkv, int64_t hd, bool neox,
                         std::vector<int> ctx_lens) {
  const DecodeLayerCase c(nh, nkv, hd, neox, std::move(ctx_lens));
  SCOPED_TRACE(c.trace());
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  CudaBackendOptions o;
  o.attn_fused = false;
  auto composed = cuda_backend(o);
  o = {};
  o.attn_signal = false;
  auto unsignalled = cuda_backend(o);
  o = {};
  o.attn_group_split = 1;
  auto unsplit = cuda_backend(o);
  o.attn_group_split = 8;
  auto split_all = cuda_backend(o);
  ASSERT_TRUE(composed && unsignalled && unsplit && split_all);
  // oracle, fused (waiting per KV head; a KV head's query group cut into blocks of at most 2
  // heads), composed, fused waiting for the whole product, fused with each group in one
  // block, and cut into a block a query head
  constexpr int kBackends = 6;
  Backend* bk[kBackends] = {p.cpu.get(),       p.gpu.get(),   composed.get(),
                            unsignalled.get(), unsplit.get(), split_all.get()};
  std::vector<float> outs[kBackends][2];
  for (int i = 0; i < kBackends; ++i) {
    Backend& b = *bk[i];
    DecodeLayerCase::On l = c.on(b);
    const Projection qkv[] = {{&l.wq, nullptr, l.q}, {&l.wk, nullptr, l.k}, {&l.wv, nullptr, l.v}};
    for (int step = 0; step < 2; ++step) {
      const DecodeLayerCase::Step st = c.step(step);
      const AttentionBatch batch = c.batch(st);
      Tensor xt = put(b, *st.x, c.n, c.d);
      b.begin_step();
      b.self_attention(xt, l.norm, 1e-5f, l.h, qkv, st.pos, c.rope, *l.kv, 0, st.slot, batch, nh,
                       1.0f / std::sqrt((float)hd), l.o);
      outs[i][step] = get(b, l.o);
      if (i == 1) {  // again, twice: nothing uploaded now, so the prewait form
        for (int again = 0; again < 2; ++again) {
          b.self_attention(xt, l.norm, 1e-5f, l.h, qkv, st.pos, c.rope, *l.kv, 0, st.slot, batch,
                           nh, 1.0f / std::sqrt((float)hd), l.o);
          EXPECT_EQ(get(b, l.o), outs[1][step]) << "launch " << again + 2;
        }
      }
    }
  }
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_LT(rel_error(outs[1][step], outs[0][step]), kBf16Tol) << "fused vs CPU";
    EXPECT_LT(rel_error(outs[2][step], outs[0][step]), kBf16Tol) << "composed vs CPU";
    // The same bf16 inputs and the same partitions; only the merges' order differs.
    EXPECT_LT(rel_error(outs[1][step], outs[2][step]), 5e-3) << "fused vs composed";
    EXPECT_EQ(outs[1][step], outs[3][step]) << "waiting per KV head vs for the whole product";
    // Each query head's sums run in the same order whichever block holds it.
    EXPECT_EQ(outs[1][step], outs[4][step]) << "the group in one block";
    EXPECT_EQ(outs[1][step], outs[5][step]) << "the group cut across a block a query head";
  }
}

// self_attention_project: the attention and the output projection added into the residual,
// on the CPU backend (the composition, the oracle), the GPU's one launch (attend_project) and
// the GPU with CudaBackendOptions::attn_project off (the fused attention, then project_add); two
// steps a row, and the one-launch step twice more with the same inputs, which must give the same
// bits (its counters are back at zero after each launch).
void self_attention_project_case(int64_t nh, int64_t nkv, int64_t hd, bool neox,
                                 std::vector<int> ctx_lens) {
  const DecodeLayerCase c(nh, nkv, hd, neox, std::move(ctx_lens));
  SCOPED_TRACE(c.trace());
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  CudaBackendOptions o;
  o.attn_project = false;
  auto apart = cuda_backend(o);
  ASSERT_TRUE(apart);
  constexpr int kBackends = 3;
  Backend* bk[kBackends] = {p.cpu.get(), p.gpu.get(), apart.get()};
  std::vector<float> outs[kBackends][2], residuals[kBackends][2];
  for (int i = 0; i < kBackends; ++i) {
    Backend& b = *bk[i];
    DecodeLayerCase::On l = c.on(b);
    const Projection qkv[] = {{&l.wq, nullptr, l.q}, {&l.wk, nullptr, l.k}, {&l.wv, nullptr, l.v}};
    for (int step = 0; step < 2; ++step) {
      const DecodeLayerCase::Step st = c.step(step);
      const AttentionBatch batch = c.batch(st);
      // The residual is the layer's input, as in the model: normalized for Q/K/V, then added to.
      for (int again = 0; again < (i == 1 ? 3 : 1); ++again) {
        Tensor xt = put(b, *st.x, c.n, c.d);
        b.begin_step();
        b.self_attention_project(xt, l.norm, 1e-5f, l.h, qkv, st.pos, c.rope, *l.kv, 0, st.slot,
                                 batch, nh, 1.0f / std::sqrt((float)hd), l.o, l.wo, xt, l.scratch);
        if (again == 0) {
          outs[i][step] = get(b, l.o);
          residuals[i][step] = get(b, xt);
        } else {
          EXPECT_EQ(get(b, l.o), outs[1][step]) << "launch " << again + 1;
          EXPECT_EQ(get(b, xt), residuals[1][step]) << "launch " << again + 1;
        }
      }
    }
  }
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_LT(rel_error(outs[1][step], outs[0][step]), kBf16Tol) << "one launch vs CPU";
    EXPECT_LT(rel_error(outs[2][step], outs[0][step]), kBf16Tol) << "apart vs CPU";
    // The same partitions; two warps an item instead of four sum the keys in another order.
    EXPECT_LT(rel_error(outs[1][step], outs[2][step]), 5e-3) << "one launch vs apart";
    EXPECT_LT(rel_error(residuals[1][step], residuals[0][step]), kBf16Tol) << "residual vs CPU";
    EXPECT_LT(rel_error(residuals[1][step], residuals[2][step]), 5e-3) << "residual vs apart";
  }
}

TEST(CudaOps, SelfAttentionProjectRunsTheOutputProjectionInTheAttentionsLaunch) {
  self_attention_project_case(32, 32, 128, true, {1025});  // llama2-7b at batch 1
  self_attention_project_case(32, 8, 128, true, {2100});   // GQA: groups cut in two
  self_attention_project_case(8, 2, 64, false, {5000});    // 32 partitions, 3 chunks a warp
  self_attention_project_case(9, 3, 64, false, {1});       // no history; 3 heads an item
  self_attention_project_case(8, 4, 32, true, {50});       // the tiny shape
  // Two rows: 32 groups (8 KV heads cut in two), one launch; 2 x 40 groups leave too few
  // partitions a row on an H200's grid, so both GPU backends take them apart.
  self_attention_project_case(32, 8, 128, true, {700, 2100});
  self_attention_project_case(40, 40, 128, true, {1025, 1025});
  // Two rows past AttentionPlanner::kLongDecodeKeys: each KV head's whole group in one block; one
  // row: cut.
  self_attention_project_case(32, 8, 128, true, {20000, 17000});
  self_attention_project_case(32, 8, 128, true, {20000});
}

TEST(CudaOps, SelfAttentionFoldsRopeAndStoreIntoTheDecodeKernel) {
  self_attention_case(32, 32, 128, true, {1025});      // llama2-7b at batch 1: 9 parts
  self_attention_case(32, 8, 128, true, {700, 2100});  // GQA, two rows of mixed lengths
  self_attention_case(8, 2, 64, false, {5000});        // 16 parts (the most)
  self_attention_case(9, 3, 64, false, {1, 300});      // a row with no history
  self_attention_case(8, 4, 32, true, {50, 3});        // the tiny shape
  // Past kFusedDecodeMaxRows (2): the composed ops on both GPU backends.
  self_attention_case(8, 4, 32, true, {50, 3, 700, 33, 16, 17, 200, 1000});
  // Past AttentionPlanner::kLongDecodeKeys: the group in one block (two
  // rows), and the composed ops' decode rows split to fill the decode kernel's blocks in one
  // wave (four rows).
  self_attention_case(32, 8, 128, true, {20000, 18000});
  self_attention_case(32, 8, 128, true, {17000, 300, 5, 18000});
}

// RoPE + KV store + paged attention over a batch mixing a prefill chunk, a fresh prompt and
// decodes with long contexts (the split-context path), with scattered block tables.
void attention_case(int n_heads, int n_kv, int hd, bool neox, std::vector<int> q_lens,
                    std::vector<int> ctx_lens, DType act = DType::bf16) {
  Pair p = backends(act);
  ASSERT_TRUE(p.gpu);
  const int bs = 16, n_seqs = (int)q_lens.size();
  int max_blocks = 0, total_blocks = 0;
  for (int c : ctx_lens) {
    max_blocks = std::max(max_blocks, (c + bs - 1) / bs);
    total_blocks += (c + bs - 1) / bs;
  }
  KvGeometry g{1, total_blocks + 3, bs, n_kv, hd, DType::f16};
  auto kvc = p.cpu->create_kv_storage(g).value();
  auto kvg = p.gpu->create_kv_storage(g).value();
  // Random permutation of block ids, so tables are scattered.
  std::vector<int32_t> ids((size_t)g.n_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng());
  std::vector<int32_t> tables((size_t)(n_seqs * max_blocks), 0);
  size_t next = 0;
  for (int s = 0; s < n_seqs; ++s)
    for (int b = 0; b < (ctx_lens[s] + bs - 1) / bs; ++b)
      tables[(size_t)(s * max_blocks + b)] = ids[next++];
  // Fill the history (positions before this step's rows) with one big store, then the step.
  std::vector<int32_t> hist_pos, hist_slot, pos, slot, q_start, q_len(q_lens.begin(), q_lens.end()),
      ctx(ctx_lens.begin(), ctx_lens.end());
  int rows = 0;
  for (int s = 0; s < n_seqs; ++s) {
    q_start.push_back(rows);
    for (int t = 0; t < ctx_lens[s]; ++t) {
      const int sl = tables[(size_t)(s * max_blocks + t / bs)] * bs + t % bs;
      if (t < ctx_lens[s] - q_lens[s]) {
        hist_pos.push_back(t);
        hist_slot.push_back(sl);
      } else {
        pos.push_back(t);
        slot.push_back(sl);
        ++rows;
      }
    }
  }
  std::vector<float> ff;  // llama3-style divisors on some frequencies
  for (int i = 0; i < hd / 2; ++i) ff.push_back(i > hd / 4 ? 4.0f : 1.0f);
  const RopeParams rp{hd, hd, neox, 500000.0f, ff};
  auto run_store = [&](Backend& b, KvStorage& kv, const std::vector<int32_t>& ps,
                       const std::vector<int32_t>& sl, const std::vector<float>& q,
                       const std::vector<float>& k, const std::vector<float>& v, Tensor* q_out) {
    const int64_t n = (int64_t)ps.size();
    Tensor qt = put(b, q, n, n_heads * hd), kt = put(b, k, n, n_kv * hd),
           vt = put(b, v, n, n_kv * hd);
    b.begin_step();
    b.rope_store_kv(qt, kt, vt, ps, rp, kv, 0, sl);
    if (q_out) *q_out = qt;
  };
  const size_t nh = hist_pos.size();
  auto hq = randn(nh * n_heads * hd), hk = randn(nh * n_kv * hd), hv = randn(nh * n_kv * hd);
  if (nh > 0) {
    run_store(*p.cpu, *kvc, hist_pos, hist_slot, hq, hk, hv, nullptr);
    run_store(*p.gpu, *kvg, hist_pos, hist_slot, hq, hk, hv, nullptr);
  }
  auto q = randn((size_t)rows * n_heads * hd), k = randn((size_t)rows * n_kv * hd),
       v = randn((size_t)rows * n_kv * hd);
  Tensor qc, qg;
  run_store(*p.cpu, *kvc, pos, slot, q, k, v, &qc);
  run_store(*p.gpu, *kvg, pos, slot, q, k, v, &qg);
  EXPECT_LT(rel_error(get(*p.gpu, qg), get(*p.cpu, qc)), kBf16Tol) << "rotated q";
  const AttentionBatch batch{n_seqs, q_start, q_len, ctx, tables, max_blocks};
  Tensor oc = p.cpu->alloc_activation(rows, n_heads * hd, DType::f32);
  Tensor og = p.gpu->alloc_activation(rows, n_heads * hd, p.gpu->activation_dtype());
  const float scale = 1.0f / std::sqrt((float)hd);
  p.cpu->attention(qc, *kvc, 0, batch, n_heads, scale, oc);
  p.gpu->attention(qg, *kvg, 0, batch, n_heads, scale, og);
  const std::vector<float> first = get(*p.gpu, og);
  EXPECT_LT(rel_error(first, get(*p.cpu, oc)), kBf16Tol);
  // Again, the same inputs: split decode rows are merged by whichever partition finishes
  // last, counted on device counters that must be back at zero, so the result repeats. This
  // call uploads nothing, so a batch of decode rows alone now takes the prewait path (the
  // kernel issues its first chunk's loads before waiting for the kernel before it,
  // AttnArgs::prewait), which must give the same bits as the first call's.
  p.gpu->attention(qg, *kvg, 0, batch, n_heads, scale, og);
  EXPECT_EQ(get(*p.gpu, og), first) << "second launch";
}

// Decode rows of equal lengths: while the rows leave the chip idle each is split into
// ceil(target / blocks) parts (2 at 8 rows x 32 heads against 264 blocks), none once they fill
// it (9 rows); a long row beside short ones gets the same number of parts as they do.
TEST(CudaOps, PlanAttentionSplitsEveryRowIntoTheSameParts) {
  std::vector<int32_t> q_start(8), q_len(8, 1), ctx(8, 300);
  for (int i = 0; i < 8; ++i) q_start[i] = i;
  ctx[3] = 3000;
  const cuda::AttnPlan plain = cuda::plan_attention(q_start, q_len, ctx, 32, 32, 264, 128);
  EXPECT_EQ(plain.decode_items.size(), 16u);
  for (const cuda::AttnItem& it : plain.decode_items)
    if (it.row0 == 3) {
      EXPECT_GE(it.kend - it.kbeg, 1496);  // 3,000 keys in parts of 1,504 and 1,496
    }
  const cuda::AttnPlan even8 =
      cuda::plan_attention(q_start, q_len, std::vector<int32_t>(8, 1024), 32, 32, 264, 128);
  EXPECT_EQ(even8.decode_items.size(), 16u);
  std::vector<int32_t> s9(9), l9(9, 1);
  for (int i = 0; i < 9; ++i) s9[i] = i;
  const cuda::AttnPlan even9 =
      cuda::plan_attention(s9, l9, std::vector<int32_t>(9, 1024), 32, 32, 264, 128);
  EXPECT_EQ(even9.decode_items.size(), 9u);
  EXPECT_TRUE(even9.decode_combines.empty());
}

// The split of a lone decode row across its context (host-side plan): partitions of at least
// the minimum (a multiple of the 32-key tile), at most as many as fill the chip, covering
// every key once, merged by one combine.
// attend_project's partitions: the row's keys in partition_keys pieces, no more than give each
// block of the grid one item over all groups, at least 1, at most kAttendProjectMaxParts.
TEST(CudaOps, AttendProjectPartsFitTheGrid) {
  using cuda::attend_project_parts;
  const std::vector<int32_t> ctx_1025{1025}, long_row{5000}, fresh{1}, two{300, 1025};
  EXPECT_EQ(attend_project_parts(ctx_1025, 64, 16, 528), 17);  // llama3-8b: 8 KV heads x 2
  EXPECT_EQ(attend_project_parts(ctx_1025, 64, 32, 528), 16);  // llama2-7b: the grid's share
  EXPECT_EQ(attend_project_parts(ctx_1025, 128, 32, 528), 9);
  EXPECT_EQ(attend_project_parts(long_row, 64, 4, 528), cuda::kAttendProjectMaxParts);
  EXPECT_EQ(attend_project_parts(fresh, 64, 32, 528), 1);
  EXPECT_EQ(attend_project_parts(two, 64, 64, 528), 8);  // the longer row decides, the grid caps
  EXPECT_EQ(attend_project_parts(ctx_1025, 64, 1000, 528), 1);  // more groups than blocks
}

TEST(CudaOps, PlanAttentionSplitsAtTheMinimumPartition) {
  const std::vector<int32_t> q_start{0}, q_len{1}, ctx{1024};
  // {min partition, target blocks, partitions}: 32 heads of one row are 32 blocks, so the
  // target caps the split at ceil(target / 32) parts, rounded to whole 32-key tiles.
  const int cases[][3] = {{128, 264, 8}, {256, 264, 4}, {64, 264, 8},
                          {64, 528, 16}, {32, 528, 16}, {32, 1056, 32}};
  for (const auto& c : cases) {
    const cuda::AttnPlan plan = cuda::plan_attention(q_start, q_len, ctx, 32, 32, c[1], c[0]);
    ASSERT_EQ((int)plan.decode_items.size(), c[2]) << c[0] << " keys, " << c[1] << " blocks";
    ASSERT_EQ(plan.decode_combines.size(), 1u);
    EXPECT_EQ(plan.decode_combines[0].n_parts, c[2]);
    int covered = 0;
    for (const cuda::AttnItem& it : plan.decode_items) {
      EXPECT_EQ(it.kbeg, covered);
      EXPECT_EQ(it.kbeg % 32, 0);
      EXPECT_GE(it.kend - it.kbeg, std::min(c[0], 1024 - it.kbeg));
      covered = it.kend;
    }
    EXPECT_EQ(covered, 1024);
  }
}

// The split of prefill tiles across their keys (host-side plan): only while the tiles leave
// the chip idle, whole 64-key partitions covering each tile's keys once, partials laid out
// after `partial_base` without overlap, and none beyond the scratch limit.
TEST(CudaOps, PlanPrefillSplitsFewTilesAcrossTheirKeys) {
  const std::vector<int32_t> q_start{0, 8, 9}, q_len{8, 1, 130}, ctx{4000, 900, 3000};
  // Two sequences of 2+ rows: tiles of 8, 128 and 2 rows, 32 heads each = 96 blocks < 264.
  const cuda::PrefillPlan plan = cuda::plan_prefill(q_start, q_len, ctx, 32, 2, 264, 100, 1 << 20);
  ASSERT_EQ(plan.combines.size(), 3u);
  std::map<int, int> covered;  // row0 -> keys covered so far
  int64_t pairs = 0;
  for (const cuda::PrefillTile& t : plan.tiles) {
    EXPECT_NE(t.seq, 1) << "a lone row stays with the decode kernel";
    EXPECT_EQ(t.kbeg % 64, 0);
    EXPECT_GE(t.partial, 100);
    EXPECT_EQ(t.kbeg, covered[t.row0]) << "partitions in order within the plan's tile list";
    covered[t.row0] = t.kend;
    pairs += (int64_t)t.nrows * 32;
  }
  EXPECT_EQ(pairs, plan.partial_pairs);
  for (const cuda::AttnCombine& c : plan.combines) {
    const int seq = c.row0 < 9 ? 0 : 2;
    EXPECT_EQ(covered[c.row0], ctx[seq] - q_len[seq] + (c.row0 - q_start[seq]) + c.nrows);
    EXPECT_GE(c.n_parts, 2);
  }
  // Enough tiles to fill the chip: no split. No room for partials: no split either.
  EXPECT_TRUE(cuda::plan_prefill(q_start, q_len, ctx, 32, 2, 64).combines.empty());
  const cuda::PrefillPlan tight = cuda::plan_prefill(q_start, q_len, ctx, 32, 2, 264, 0, 100);
  EXPECT_TRUE(tight.combines.empty());
  EXPECT_EQ(tight.tiles.size(), 3u);
  EXPECT_LE(plan.partial_pairs, cuda::prefill_scratch_pairs(264));
}

// Greedy sampling on the device picks what the host would: the largest logit, and among
// equal largest values the lowest id.
// Vocabularies of whole 16-byte pieces (the vector scan, llama3's 128,256 among them) and not
// (the scalar one); ties across pieces, inside one piece, and in the row's last element.
TEST(CudaOps, ArgmaxRowsMatchesTheHostRule) {
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  const int64_t rows = 37;
  for (const int64_t vocab : {int64_t{50000}, int64_t{50001}, int64_t{128256}}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    auto v = randn((size_t)(rows * vocab));
    for (int64_t r = 0; r < rows; ++r) {
      float* row = v.data() + r * vocab;
      const float m = 100.0f + (float)r;
      if (r % 3 == 0) {  // the same maximum at two places in different pieces
        row[4000 + r] = m;
        row[123 + r] = m;
      } else if (r % 3 == 1) {  // twice inside one piece
        row[(vocab / 2) / 4 * 4 + 2] = m;
        row[(vocab / 2) / 4 * 4 + 1] = m;
      } else if (r % 6 == 2) {  // at the very end
        row[vocab - 1] = m;
      }
    }
    Tensor t = p.gpu->alloc_activation(rows, vocab, DType::f32);
    ASSERT_EQ(cudaMemcpy(t.data, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<int32_t> got((size_t)rows, -1);
    ASSERT_TRUE(p.gpu->argmax_rows(t, got.data()));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = v.data() + r * vocab;
      const int32_t want = (int32_t)(std::max_element(row, row + vocab) - row);  // first maximum
      EXPECT_EQ(got[(size_t)r], want) << "row " << r;
    }
    // The CPU backend arg-maxes greedy rows itself too (split across threads): same rule.
    Tensor tc = p.cpu->alloc_activation(rows, vocab, DType::f32);
    std::copy(v.begin(), v.end(), static_cast<float*>(tc.data));
    std::vector<int32_t> got_cpu((size_t)rows, -1);
    ASSERT_TRUE(p.cpu->greedy_on_device());
    ASSERT_TRUE(p.cpu->argmax_rows(tc, got_cpu.data()));
    EXPECT_EQ(got_cpu, got);
  }
}

// Device sampling against the exact filtered distribution: N copies of one logit row drawn
// with stratified u = (j + 0.5) / N. The device draws by inverse CDF in id order, so token i
// comes up round(p_i * N) times, give or take one; nothing outside the kept set ever does.
TEST(CudaOps, SampleRowsMatchTheFilteredDistribution) {
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  ASSERT_TRUE(p.gpu->samples_on_device());
  const int64_t vocab = 5000, n = 4000;
  auto row = randn((size_t)vocab, 2.5f);
  row[17] = std::nanf("");  // NaN is never drawn
  struct Case {
    float t;
    int32_t top_k;
    float top_p, min_p;
  };
  for (const Case& c :
       {Case{1.0f, 0, 1.0f, 0.0f}, Case{1.0f, 0, 0.9f, 0.0f}, Case{0.7f, 50, 1.0f, 0.0f},
        Case{1.3f, 20, 0.5f, 0.05f}, Case{1.0f, 0, 1.0f, 0.1f}, Case{0.5f, 0, 0.95f, 0.0f}}) {
    // The exact distribution, in double, the host sampler's order of filters.
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < vocab; ++i)
      if (!std::isnan(row[(size_t)i])) ids.push_back(i);
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
      return row[(size_t)a] > row[(size_t)b] || (row[(size_t)a] == row[(size_t)b] && a < b);
    });
    const double mx = row[(size_t)ids[0]];
    if (c.top_k > 0) ids.resize((size_t)c.top_k);
    std::vector<double> w;
    double kept = 0;
    for (int32_t i : ids) kept += std::exp((row[(size_t)i] - mx) / c.t);
    double cum = 0;
    std::vector<int32_t> keep;
    for (int32_t i : ids) {
      const double wi = std::exp((row[(size_t)i] - mx) / c.t);
      if (c.min_p > 0 && wi < c.min_p) break;  // sorted: the rest are smaller
      keep.push_back(i);
      w.push_back(wi);
      cum += wi;
      if (c.top_p < 1.0f && cum >= c.top_p * kept) break;
    }
    std::vector<double> prob((size_t)vocab, 0.0);
    for (size_t j = 0; j < keep.size(); ++j) prob[(size_t)keep[j]] = w[j] / cum;

    std::vector<float> rows((size_t)(n * vocab));
    for (int64_t r = 0; r < n; ++r) std::copy(row.begin(), row.end(), rows.begin() + r * vocab);
    Tensor t = p.gpu->alloc_activation(n, vocab, DType::f32);
    ASSERT_EQ(cudaMemcpy(t.data, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
    std::vector<DeviceSampleRow> params((size_t)n);
    for (int64_t j = 0; j < n; ++j)
      params[(size_t)j] =
          DeviceSampleRow{0, 1.0f / c.t, c.top_k, c.top_p, c.min_p, (float)((j + 0.5) / n)};
    std::vector<int32_t> got((size_t)n, -1);
    ASSERT_TRUE(p.gpu->sample_rows(t, params, got.data()));
    std::vector<int> count((size_t)vocab, 0);
    for (int32_t g : got) {
      ASSERT_TRUE(g >= 0 && g < vocab);
      ++count[(size_t)g];
    }
    int outside = 0;
    double worst = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      if (prob[(size_t)i] == 0.0) outside += count[(size_t)i];
      worst = std::max(worst, std::abs(count[(size_t)i] - prob[(size_t)i] * n));
    }
    EXPECT_EQ(outside, 0) << "T " << c.t << " top_k " << c.top_k << " top_p " << c.top_p;
    EXPECT_LE(worst, 1.5) << "T " << c.t << " top_k " << c.top_k << " top_p " << c.top_p
                          << ": kept " << keep.size();
  }
  // Greedy rows beside sampled ones: the argmax, lowest id on ties.
  auto a = randn((size_t)(3 * vocab));
  a[(size_t)(1 * vocab + 10)] = a[(size_t)(1 * vocab + 20)] = 50.0f;
  Tensor t = p.gpu->alloc_activation(3, vocab, DType::f32);
  ASSERT_EQ(cudaMemcpy(t.data, a.data(), a.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<DeviceSampleRow> params(3);
  params[0].greedy = params[1].greedy = 1;
  params[2].u = 0.999f;
  params[2].top_k = 1;  // top_k 1 at any u is the argmax too
  std::vector<int32_t> got(3, -1);
  ASSERT_TRUE(p.gpu->sample_rows(t, params, got.data()));
  for (int r = 0; r < 3; ++r) {
    const float* x = a.data() + r * vocab;
    EXPECT_EQ(got[(size_t)r], (int32_t)(std::max_element(x, x + vocab) - x)) << "row " << r;
  }
  EXPECT_EQ(got[1], 10);
}

// Constrained decoding's masks applied on the device: the same logits as the CPU backend's
// (the oracle), for a subset of a step's rows, masks shorter than the row (ids past them are
// refused), and more rows than one upload holds (the masks go in turns); then a masked row
// is drawn by argmax and by sampling among the allowed ids only.
TEST(CudaOps, MaskRowsMatchTheCpuAndOnlyAllowedIdsAreDrawn) {
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  ASSERT_TRUE(p.gpu->masks_on_device() && p.cpu->masks_on_device());
  struct Case {
    int64_t rows, vocab, words, every;  // masked: every `every`-th row
  };
  // 152,064 ids (Qwen2.5's vocabulary): 2,376 words; 240 rows of them are two uploads.
  for (const Case& c : {Case{7, 5000, 79, 2}, Case{9, 50001, 700, 2}, Case{240, 152064, 2376, 1}}) {
    SCOPED_TRACE("vocab " + std::to_string(c.vocab) + " rows " + std::to_string(c.rows));
    auto v = randn((size_t)(c.rows * c.vocab));
    std::vector<int32_t> masked;
    for (int32_t r = 0; r < c.rows; r += (int32_t)c.every) masked.push_back(r);
    std::mt19937_64 rng(7);
    std::vector<uint64_t> masks(masked.size() * (size_t)c.words);
    for (size_t i = 0; i < masked.size(); ++i)
      for (int64_t w = 0; w < c.words; ++w) {
        uint64_t& m = masks[i * (size_t)c.words + (size_t)w];
        switch ((w + (int64_t)i) % 4) {
          case 0:
            m = ~uint64_t{0};
            break;  // a word kept whole
          case 1:
            m = 0;
            break;  // refused whole
          default:
            m = rng() & rng();
            break;  // scattered bits
        }
      }
    Tensor tg = p.gpu->alloc_activation(c.rows, c.vocab, DType::f32);
    ASSERT_EQ(cudaMemcpy(tg.data, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    Tensor tc = p.cpu->alloc_activation(c.rows, c.vocab, DType::f32);
    std::copy(v.begin(), v.end(), static_cast<float*>(tc.data));
    ASSERT_TRUE(p.gpu->mask_rows(tg, masked, masks.data(), c.words));
    ASSERT_TRUE(p.cpu->mask_rows(tc, masked, masks.data(), c.words));
    std::vector<float> got(v.size());
    ASSERT_EQ(cudaMemcpy(got.data(), tg.data, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    const float* want = static_cast<const float*>(tc.data);
    int64_t differ = 0, refused = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      differ += std::memcmp(&got[i], &want[i], 4) != 0 ? 1 : 0;
      refused += std::isinf(want[i]) ? 1 : 0;
    }
    EXPECT_EQ(differ, 0);
    EXPECT_GT(refused, c.vocab / 4);  // the masks did refuse ids
    if (c.every > 1) {                // an unmasked row is untouched
      EXPECT_EQ(std::memcmp(got.data() + c.vocab, v.data() + c.vocab, (size_t)c.vocab * 4), 0);
    }
    // Drawn where the logits are: the argmax of the allowed ids, and samples among them.
    std::vector<int32_t> ids((size_t)c.rows, -1);
    ASSERT_TRUE(p.gpu->argmax_rows(tg, ids.data()));
    std::vector<DeviceSampleRow> params((size_t)c.rows);
    for (int64_t r = 0; r < c.rows; ++r) params[(size_t)r].u = (float)((r + 0.5) / c.rows);
    std::vector<int32_t> drawn((size_t)c.rows, -1);
    ASSERT_TRUE(p.gpu->sample_rows(tg, params, drawn.data()));
    for (size_t i = 0; i < masked.size(); ++i) {
      const int32_t r = masked[i];
      const float* row = want + (int64_t)r * c.vocab;
      EXPECT_EQ(ids[(size_t)r], (int32_t)(std::max_element(row, row + c.vocab) - row)) << r;
      const int32_t d = drawn[(size_t)r];
      ASSERT_TRUE(d >= 0 && d < c.vocab);
      EXPECT_FALSE(std::isinf(row[d])) << "row " << r << " drew refused id " << d;
    }
  }
}

// ---- KV bytes, and the fp8 (e4m3) cache ----

// v rounded to the activation type `act` and back: what a GPU activation holds exactly, so that
// the CPU backend (f32 activations) is given the very same values.
std::vector<float> round_to(DType act, std::vector<float> v) {
  for (float& x : v)
    x = act == DType::f16 ? fp16_to_fp32(fp32_to_fp16(x)) : bf16_to_fp32(fp32_to_bf16(x));
  return v;
}

// The bytes of plane `plane` (2l: layer l's K, 2l + 1 its V) of a KV storage of backend b: a
// host pool's own (the CPU's, the GPU's pinned swap pool), a GPU device pool's copied out.
std::vector<uint8_t> plane_bytes(Backend& b, const KvStorage& kv, int64_t plane) {
  const KvGeometry& g = kv.geometry();
  std::vector<uint8_t> out(g.bytes_per_block_per_layer() * (size_t)g.n_blocks);
  b.sync();
  if (const uint8_t* h = kv.host_plane(plane)) {
    std::memcpy(out.data(), h, out.size());
    return out;
  }
  const auto& s = static_cast<const cuda::CudaKvStorage&>(kv);
  const char* src = plane % 2 == 0 ? s.k(plane / 2) : s.v(plane / 2);
  EXPECT_EQ(cudaMemcpy(out.data(), src, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

// Codes and scales of slots `slots` in every plane of two fp8 caches that differ (0: the same
// bits); the first difference is described in *first.
int64_t fp8_differences(Backend& a, const KvStorage& kv_a, Backend& b, const KvStorage& kv_b,
                        const std::vector<int32_t>& slots, std::string* first) {
  const KvGeometry& g = kv_a.geometry();
  EXPECT_TRUE(g.has_scales());
  int64_t diffs = 0;
  auto note = [&](const std::string& what) {
    if (diffs++ == 0) *first = what;
  };
  for (int64_t plane = 0; plane < 2 * g.n_layers; ++plane) {
    const std::vector<uint8_t> x = plane_bytes(a, kv_a, plane), y = plane_bytes(b, kv_b, plane);
    for (int32_t slot : slots)
      for (int64_t h = 0; h < g.n_kv_heads; ++h) {
        const std::string where = "plane " + std::to_string(plane) + " slot " +
                                  std::to_string(slot) + " head " + std::to_string(h);
        const size_t codes = g.slot_offset(slot) + (size_t)(h * g.head_dim);
        for (int64_t e = 0; e < g.head_dim; ++e)
          if (x[codes + (size_t)e] != y[codes + (size_t)e])
            note(where + " code " + std::to_string(e) + ": " +
                 std::to_string(x[codes + (size_t)e]) + " vs " +
                 std::to_string(y[codes + (size_t)e]));
        const size_t scale = g.scale_offset(slot) + (size_t)h * sizeof(float);
        float sx, sy;
        std::memcpy(&sx, &x[scale], 4);
        std::memcpy(&sy, &y[scale], 4);
        if (std::memcmp(&sx, &sy, 4) != 0)
          note(where + " scale: " + std::to_string(sx) + " vs " + std::to_string(sy));
      }
  }
  return diffs;
}

// n distinct slots of a pool of `blocks` blocks, scattered, the last slot of the first block
// and of the pool among them (a block's edges; the pool's end).
std::vector<int32_t> scattered_slots(int64_t n, int64_t blocks, int bs) {
  std::vector<int32_t> all((size_t)(blocks * bs));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng());
  std::vector<int32_t> slots = {bs - 1, (int32_t)(blocks * bs - 1)};
  for (int32_t s : all)
    if ((int64_t)slots.size() < n && s != slots[0] && s != slots[1]) slots.push_back(s);
  slots.resize((size_t)n);
  return slots;
}

// Swaps and block copies move whole blocks (KvGeometry::bytes_per_block_per_layer(): an fp8
// block's scales with its codes): device -> host -> device -> device, every layer, and the
// moved blocks hold the bytes and give the attention of the blocks they came from.
void block_copies_case(DType kv_dtype) {
  SCOPED_TRACE(std::string("KV ") + std::string(dtype_name(kv_dtype)));
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  KvGeometry g{3, 20, 16, 2, 64, kv_dtype};
  auto dev = p.gpu->create_kv_storage(g).value();
  KvGeometry hg = g;
  hg.n_blocks = 9;
  auto host = p.gpu->create_host_kv_storage(hg).value();
  // Write a known pattern through store_kv into every slot of every layer.
  const int64_t slots = g.n_blocks * g.block_size, w = g.n_kv_heads * g.head_dim;
  auto kv_data = randn((size_t)(slots * w));
  std::vector<int32_t> all((size_t)slots);
  std::iota(all.begin(), all.end(), 0);
  Tensor k = put(*p.gpu, kv_data, slots, w);
  p.gpu->begin_step();
  for (int64_t l = 0; l < g.n_layers; ++l) p.gpu->store_kv(*dev, l, k, k, all);
  // Device -> host (out), host -> device into other blocks (in), then within the device.
  std::vector<int32_t> out_src = {3, 7, 19}, out_dst = {8, 0, 4};
  p.gpu->copy_blocks_between(*dev, *host, out_src, out_dst);
  std::vector<int32_t> in_src = {8, 0, 4}, in_dst = {10, 11, 12};
  p.gpu->copy_blocks_between(*host, *dev, in_src, in_dst);
  std::vector<int32_t> cp_src = {10}, cp_dst = {15};
  p.gpu->sync();
  p.gpu->begin_step();  // the step after a swap waits for it before touching the cache
  p.gpu->copy_blocks(*dev, cp_src, cp_dst);
  p.gpu->sync();
  // Byte for byte (an fp8 block's scales included): the host blocks and the device blocks they
  // came back to against the blocks they left, in every plane (3 -> host 8 -> 10 -> 15,
  // 7 -> host 0 -> 11, 19 -> host 4 -> 12).
  const size_t bb = g.bytes_per_block_per_layer();
  for (int64_t plane = 0; plane < 2 * g.n_layers; ++plane) {
    const auto d = plane_bytes(*p.gpu, *dev, plane), h = plane_bytes(*p.gpu, *host, plane);
    auto block = [&](const std::vector<uint8_t>& v, int b) {
      return std::vector<uint8_t>(v.begin() + (ptrdiff_t)(b * bb),
                                  v.begin() + (ptrdiff_t)((b + 1) * bb));
    };
    for (auto [from, pool, to] : {std::tuple{3, 'h', 8},
                                  {7, 'h', 0},
                                  {19, 'h', 4},
                                  {3, 'd', 15},
                                  {7, 'd', 11},
                                  {19, 'd', 12}})
      EXPECT_EQ(block(pool == 'h' ? h : d, to), block(d, from))
          << "plane " << plane << ": block " << from << " -> " << (pool == 'h' ? "host " : "")
          << to;
    EXPECT_NE(block(d, 3), block(d, 7));  // the blocks differ (the check is not vacuous)
  }
  // Read back through the public interface: attention over a moved block must equal
  // attention over the block it came from, in every layer.
  const int hd = 64, nh = 2;
  std::vector<int32_t> qs = {0, 1, 2, 3, 4, 5}, ql(6, 1), cl(6, 16), bt = {15, 3, 11, 7, 12, 19};
  const AttentionBatch batch{6, qs, ql, cl, bt, 1};
  auto qv = randn(nh * hd);
  std::vector<float> q6;
  for (int i = 0; i < 6; ++i) q6.insert(q6.end(), qv.begin(), qv.end());
  Tensor q = put(*p.gpu, q6, 6, nh * hd);
  Tensor o = p.gpu->alloc_activation(6, nh * hd, p.gpu->activation_dtype());
  for (int64_t l = 0; l < g.n_layers; ++l) {
    p.gpu->begin_step();
    p.gpu->attention(q, *dev, l, batch, nh, 0.125f, o);
    auto r = get(*p.gpu, o);
    for (int pair = 0; pair < 3; ++pair)
      for (int i = 0; i < nh * hd; ++i)
        EXPECT_EQ(r[(size_t)(2 * pair * nh * hd + i)], r[(size_t)((2 * pair + 1) * nh * hd + i)])
            << "layer " << l << " pair " << pair;
    // And the blocks differ from each other (the check is not vacuous).
    EXPECT_NE(r[0], r[(size_t)(2 * nh * hd)]);
  }
}

TEST(CudaOps, BlockCopiesWithinAndBetweenTiers) {
  block_copies_case(DType::f16);
  block_copies_case(DType::fp8_e4m3);  // the scales go with the codes
}

// The fp8 store: each stored head quantized with its own scale (its largest magnitude / 448)
// by core/fp8.h on both backends, so for the same values the GPU writes the CPU backend's
// codes and scales bit for bit: store_kv (a prefill's many rows and a decode's few; an all-zero
// head, whose scale is 0 and codes 0; a head with one large value, beside which the others get
// small codes, subnormal ones among them; a head of tiny values), and rope_store_kv, whose
// rotated k (rounded to the activation type, as the GPU rotates it) the CPU then stores.
TEST(CudaOps, Fp8StoreWritesTheCpuBackendsCodesAndScales) {
  for (DType act : {DType::bf16, DType::f16})
    for (const auto& [nkv, hd, n] :
         {std::tuple<int, int, int>{8, 128, 5}, {2, 64, 100}, {4, 32, 37}}) {
      SCOPED_TRACE(std::string(dtype_name(act)) + " " + std::to_string(nkv) + " KV heads of " +
                   std::to_string(hd) + ", " + std::to_string(n) + " rows");
      Pair p = backends(act);
      ASSERT_TRUE(p.gpu);
      const int bs = 16, w = nkv * hd;
      const int64_t blocks = (n + bs - 1) / bs + 3;
      const KvGeometry g{2, blocks, bs, nkv, hd, DType::fp8_e4m3};
      auto kvc = p.cpu->create_kv_storage(g).value();
      auto kvg = p.gpu->create_kv_storage(g).value();
      const std::vector<int32_t> slots = scattered_slots(n, blocks, bs);
      std::vector<float> k = randn((size_t)(n * w)), v = randn((size_t)(n * w));
      std::fill_n(k.begin(), hd, 0.0f);  // row 0, K head 0: all zero
      k[(size_t)(w + 3)] = 3000.0f;      // row 1, K head 0: one large value
      k[(size_t)(w + 7)] = -2999.0f;     //   (its largest magnitude is positive)
      for (int e = 0; e < hd; ++e) v[(size_t)(2 * w + (nkv - 1) * hd + e)] *= 1e-4f;  // tiny
      k = round_to(act, k);
      v = round_to(act, v);
      for (Backend* b : {p.cpu.get(), p.gpu.get()}) {
        KvStorage& kv = b == p.cpu.get() ? *kvc : *kvg;
        Tensor kt = put(*b, k, n, w), vt = put(*b, v, n, w);
        b->begin_step();
        b->store_kv(kv, 0, kt, vt, slots);
        b->store_kv(kv, 1, vt, kt, slots);  // layer 1: the other way round
      }
      std::string first;
      EXPECT_EQ(fp8_differences(*p.cpu, *kvc, *p.gpu, *kvg, slots, &first), 0) << first;
      // Not vacuous: the zero head has scale 0 and codes 0, the others a scale and codes.
      const std::vector<uint8_t> k0 = plane_bytes(*p.cpu, *kvc, 0);
      float scale0, scale1;
      std::memcpy(&scale0, &k0[g.scale_offset(slots[0])], 4);
      std::memcpy(&scale1, &k0[g.scale_offset(slots[1])], 4);
      EXPECT_EQ(scale0, 0.0f);
      EXPECT_EQ(scale1, k[(size_t)(w + 3)] / 448.0f);  // 3000 as the activation type holds it
      EXPECT_TRUE(std::all_of(k0.begin() + (ptrdiff_t)g.slot_offset(slots[0]),
                              k0.begin() + (ptrdiff_t)g.slot_offset(slots[0]) + hd,
                              [](uint8_t c) { return c == 0; }));
      EXPECT_EQ(k0[g.slot_offset(slots[1]) + 3], 0x7e);  // 448
      // rope_store_kv: the GPU's rotated k, stored by the CPU, gives the GPU's bytes.
      for (bool neox : {false, true}) {
        SCOPED_TRACE(neox ? "RoPE neox" : "RoPE interleaved");
        const RopeParams rp{hd, hd, neox, 10000.0f, {}};
        std::vector<int32_t> pos;
        for (int t = 0; t < n; ++t) pos.push_back(t * 37 % 4096);
        const int nh = 2 * nkv;
        Tensor qt = put(*p.gpu, randn((size_t)(n * nh * hd)), n, nh * hd);
        Tensor kt = put(*p.gpu, k, n, w), vt = put(*p.gpu, v, n, w);
        p.gpu->begin_step();
        p.gpu->rope_store_kv(qt, kt, vt, pos, rp, *kvg, 0, slots);
        const std::vector<float> k_rotated = get(*p.gpu, kt);
        EXPECT_NE(k_rotated, k);
        Tensor kc = put(*p.cpu, k_rotated, n, w), vc = put(*p.cpu, v, n, w);
        p.cpu->store_kv(*kvc, 0, kc, vc, slots);
        EXPECT_EQ(fp8_differences(*p.cpu, *kvc, *p.gpu, *kvg, slots, &first), 0) << first;
      }
    }
}

// Attention over an fp8 cache against the CPU backend's over the same bytes: both caches are
// filled by store_kv from the same values (so the codes and scales are equal, checked here),
// and q holds the same values; what is left is the order of the sums and the rounding of the
// output, the bf16 tolerance. A prefill chunk beside decodes, short chunks over long contexts
// (the tensor-core tiles split and combined), decodes split across their context (4,100 keys:
// the last block partial), a query group of 16 (the general kernel), every head size, f16
// activations; each step a second time with nothing uploaded (the decode kernel's prewait form
// where the step is decode rows alone), which must repeat the bits.
void fp8_attention_case(int n_heads, int n_kv, int hd, const std::vector<int>& q_lens,
                        const std::vector<int>& ctx_lens, DType act) {
  std::string trace = std::string(dtype_name(act)) + " " + std::to_string(n_heads) + "h" +
                      std::to_string(n_kv) + "kv" + std::to_string(hd) + " ctx";
  for (int c : ctx_lens) trace += " " + std::to_string(c);
  SCOPED_TRACE(trace);
  Pair p = backends(act);
  ASSERT_TRUE(p.gpu);
  const int bs = 16, n_seqs = (int)q_lens.size();
  int max_blocks = 0, total_blocks = 0;
  for (int c : ctx_lens) {
    max_blocks = std::max(max_blocks, (c + bs - 1) / bs);
    total_blocks += (c + bs - 1) / bs;
  }
  const KvGeometry g{1, total_blocks + 3, bs, n_kv, hd, DType::fp8_e4m3};
  auto kvc = p.cpu->create_kv_storage(g).value();
  auto kvg = p.gpu->create_kv_storage(g).value();
  std::vector<int32_t> ids((size_t)g.n_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng());
  std::vector<int32_t> tables((size_t)(n_seqs * max_blocks), 0), slots, q_start;
  size_t next = 0;
  int rows = 0;
  for (int s = 0; s < n_seqs; ++s) {
    for (int b = 0; b < (ctx_lens[s] + bs - 1) / bs; ++b)
      tables[(size_t)(s * max_blocks + b)] = ids[next++];
    for (int t = 0; t < ctx_lens[s]; ++t)
      slots.push_back(tables[(size_t)(s * max_blocks + t / bs)] * bs + t % bs);
    q_start.push_back(rows);
    rows += q_lens[s];
  }
  // Every key and value of every sequence (this step's rows' too) in one store.
  const int64_t n = (int64_t)slots.size(), w = n_kv * hd;
  const std::vector<float> k = round_to(act, randn((size_t)(n * w))),
                           v = round_to(act, randn((size_t)(n * w)));
  for (Backend* b : {p.cpu.get(), p.gpu.get()}) {
    Tensor kt = put(*b, k, n, w), vt = put(*b, v, n, w);
    b->begin_step();
    b->store_kv(b == p.cpu.get() ? *kvc : *kvg, 0, kt, vt, slots);
  }
  std::string first;
  ASSERT_EQ(fp8_differences(*p.cpu, *kvc, *p.gpu, *kvg, slots, &first), 0) << first;
  const std::vector<float> q = round_to(act, randn((size_t)rows * n_heads * hd));
  const std::vector<int32_t> q_len(q_lens.begin(), q_lens.end()),
      ctx(ctx_lens.begin(), ctx_lens.end());
  const AttentionBatch batch{n_seqs, q_start, q_len, ctx, tables, max_blocks};
  Tensor qc = put(*p.cpu, q, rows, n_heads * hd), qg = put(*p.gpu, q, rows, n_heads * hd);
  Tensor oc = p.cpu->alloc_activation(rows, n_heads * hd, DType::f32);
  Tensor og = p.gpu->alloc_activation(rows, n_heads * hd, p.gpu->activation_dtype());
  const float scale = 1.0f / std::sqrt((float)hd);
  p.cpu->attention(qc, *kvc, 0, batch, n_heads, scale, oc);
  p.gpu->begin_step();
  p.gpu->attention(qg, *kvg, 0, batch, n_heads, scale, og);
  const std::vector<float> first_out = get(*p.gpu, og);
  EXPECT_LT(rel_error(first_out, get(*p.cpu, oc)), kBf16Tol);
  p.gpu->attention(qg, *kvg, 0, batch, n_heads, scale, og);
  EXPECT_EQ(get(*p.gpu, og), first_out) << "second launch";
}

TEST(CudaOps, Fp8AttentionMatchesTheCpuBackendOverTheSameCache) {
  struct Case {
    int nh, nkv, hd;
    std::vector<int> q, ctx;
    DType act;
  };
  const DType bf = DType::bf16;
  const std::vector<Case> cases = {
      {32, 8, 128, {1, 1, 40, 1, 17}, {1, 3000, 100, 777, 17}, bf},  // mixed
      {32, 8, 128, {1, 1, 40, 1, 17}, {1, 3000, 100, 777, 17}, DType::f16},
      {32, 32, 128, {1}, {4100}, bf},  // one long decode, split
      {32, 8, 128, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {4100, 100, 200, 150, 90, 60, 30, 260, 17}, bf},
      {32, 32, 128, {2, 1, 8, 33}, {3000, 2000, 4100, 1500}, bf},  // short chunks, split tiles
      {32, 8, 128, {200, 1}, {1200, 33}, bf},                      // a prefill chunk
      {9, 3, 64, {5, 1, 1, 70}, {300, 64, 1, 70}, bf},
      {8, 4, 32, {1, 3, 1}, {50, 3, 700}, bf},
      {32, 2, 128, {1, 1}, {300, 1000}, bf},  // a group of 16: the general kernel
      // Past AttentionPlanner::kLongDecodeKeys: one row on the usual grid; two rows split to
      // fill the decode kernel's resident blocks in one wave.
      {32, 8, 128, {1}, {20000}, bf},
      {32, 8, 128, {1, 1}, {17000, 300}, bf},
  };
  for (const Case& c : cases) fp8_attention_case(c.nh, c.nkv, c.hd, c.q, c.ctx, c.act);
}

// ---- The table of plain ops: op x shape x activation type, each against the CPU backend ----

enum class Op {
  matmul,        // x[n, k] w[m, k]^T (+ bias): GEMV, tensor-core GEMV or cuBLASLt by n
  rmsnorm,       // [n, k]
  add_rmsnorm,   // residual += x, then rmsnorm of it
  head_rmsnorm,  // [n, k] in place, each m-wide head normalized (Qwen3's q/k norm)
  silu_mul,
  add,
  gather_rows,  // n rows picked out of k-wide rows
  embed,        // n tokens of a 300-row table k wide
  rope_store,   // RoPE + KV store of n rows, checked through an attention over them
  attention,    // RoPE + KV store of a step's rows over stored history, then attention
};

const char* op_name(Op op) {
  switch (op) {
    case Op::matmul:
      return "matmul";
    case Op::rmsnorm:
      return "rmsnorm";
    case Op::add_rmsnorm:
      return "add_rmsnorm";
    case Op::head_rmsnorm:
      return "head_rmsnorm";
    case Op::silu_mul:
      return "silu_mul";
    case Op::add:
      return "add";
    case Op::gather_rows:
      return "gather_rows";
    case Op::embed:
      return "embed";
    case Op::rope_store:
      return "rope_store";
    case Op::attention:
      return "attention";
  }
  return "?";
}

struct OpCase {
  Op op = Op::matmul;
  DType act = DType::bf16;  // the GPU backend's activation type
  // matmul: n rows, m outputs, k inputs; the element-wise ops: n rows of k.
  int64_t n = 0, m = 0, k = 0;
  bool strided = false;  // matmul: x a column slice of a wider buffer
  bool bias = false;     // matmul: + an f32 bias
  // rope_store, attention: heads, KV heads, head size, RoPE layout; attention: each
  // sequence's rows this step and its context length (rope_store: n rows of one sequence).
  int nh = 0, nkv = 0, hd = 0;
  bool neox = false;
  std::vector<int> q_lens, ctx_lens;
  const char* what = "";  // the path it is there for (the case's name ends with it)
};

OpCase op_case(Op op, DType act, int64_t n = 0, int64_t m = 0, int64_t k = 0) {
  OpCase c;
  c.op = op;
  c.act = act;
  c.n = n;
  c.m = m;
  c.k = k;
  return c;
}

std::string case_name(const OpCase& c) {
  std::string n = std::string(op_name(c.op)) + "_";
  if (c.op == Op::rope_store || c.op == Op::attention) {
    n += std::to_string(c.nh) + "h" + std::to_string(c.nkv) + "kv" + std::to_string(c.hd) +
         (c.neox ? "neox" : "") + "_";
    n += c.op == Op::rope_store ? std::to_string(c.n) + "rows"
                                : std::to_string(c.q_lens.size()) + "seqs";
  } else {
    n += std::to_string(c.n) + "x" + (c.m > 0 ? std::to_string(c.m) + "x" : "") +
         std::to_string(c.k) + (c.strided ? "_strided" : "") + (c.bias ? "_bias" : "");
  }
  n += "_" + std::string(dtype_name(c.act));
  if (*c.what) n += std::string("_") + c.what;
  return n;
}

// How gtest names a case's parameter in its output.
void PrintTo(const OpCase& c, std::ostream* os) {
  *os << case_name(c);
}

// The case's seed: the run's base seed mixed with its name, so one case's inputs do not depend
// on which cases ran before it.
uint32_t case_seed(const OpCase& c) {
  uint32_t h = base_seed();
  for (char ch : case_name(c)) h = h * 16777619u ^ (uint8_t)ch;
  return h;
}

void run_matmul(const OpCase& c) {
  Pair p = backends(c.act);
  ASSERT_TRUE(p.gpu);
  const int64_t n = c.n, m = c.m, k = c.k;
  const auto w16 = to_f16(randn((size_t)(m * k), 0.05f));  // the CPU multiplies f16 weights
  const auto bias = randn((size_t)m);
  const Weight wc = upload_f16(*p.cpu, w16, m, k), wg = upload_f16(*p.gpu, w16, m, k);
  const Weight bc = upload_f32(*p.cpu, bias), bg = upload_f32(*p.gpu, bias);
  // Strided: x is the second half of [n, 2k] rows.
  const int64_t width = c.strided ? 2 * k : k, off = c.strided ? k : 0;
  const auto xw = randn((size_t)(n * width));
  std::vector<float> x((size_t)(n * k));
  for (int64_t r = 0; r < n; ++r)
    std::copy_n(xw.begin() + (ptrdiff_t)(r * width + off), k, x.begin() + (ptrdiff_t)(r * k));
  Tensor xc = put(*p.cpu, x, n, k), xg = put(*p.gpu, xw, n, width).slice_cols(off, k);
  // The activation type with the bias if any; f32 (the logits' product) without.
  for (DType out_t : {c.act, DType::f32}) {
    const bool bias = c.bias && out_t == c.act;
    Tensor oc = p.cpu->alloc_activation(n, m, DType::f32);
    p.cpu->matmul(xc, wc, bias ? &bc : nullptr, oc);
    Tensor og = p.gpu->alloc_activation(n, m, out_t);
    p.gpu->begin_step();
    p.gpu->matmul(xg, wg, bias ? &bg : nullptr, og);
    EXPECT_LT(rel_error(get(*p.gpu, og), get(*p.cpu, oc)), kBf16Tol)
        << "output " << dtype_name(out_t);
  }
}

void run_elementwise(const OpCase& c) {
  Pair p = backends(c.act);
  ASSERT_TRUE(p.gpu);
  const int64_t n = c.n, d = c.k;
  const auto x = randn((size_t)(n * d)), y = randn((size_t)(n * d)), w = randn((size_t)d);
  const Weight wc = upload_f32(*p.cpu, w), wg = upload_f32(*p.gpu, w);
  Tensor xc = put(*p.cpu, x, n, d), xg = put(*p.gpu, x, n, d);
  Tensor yc = put(*p.cpu, y, n, d), yg = put(*p.gpu, y, n, d);
  Tensor oc = p.cpu->alloc_activation(n, d, DType::f32);
  Tensor og = p.gpu->alloc_activation(n, d, c.act);
  p.gpu->begin_step();
  switch (c.op) {
    case Op::rmsnorm:
      p.cpu->rmsnorm(xc, wc, 1e-5f, oc);
      p.gpu->rmsnorm(xg, wg, 1e-5f, og);
      break;
    case Op::add_rmsnorm:
      p.cpu->add_rmsnorm(xc, yc, wc, 1e-5f, oc);
      p.gpu->add_rmsnorm(xg, yg, wg, 1e-5f, og);
      EXPECT_LT(rel_error(get(*p.gpu, xg), get(*p.cpu, xc)), kBf16Tol) << "the residual";
      break;
    case Op::silu_mul:
      p.cpu->silu_mul(xc, yc, oc);
      p.gpu->silu_mul(xg, yg, og);
      break;
    case Op::head_rmsnorm: {  // in place, heads of c.m
      const auto hw = randn((size_t)c.m);
      const Weight hc = upload_f32(*p.cpu, hw), hg = upload_f32(*p.gpu, hw);
      p.cpu->head_rmsnorm(xc, hc, 1e-6f);
      p.gpu->head_rmsnorm(xg, hg, 1e-6f);
      EXPECT_LT(rel_error(get(*p.gpu, xg), get(*p.cpu, xc)), kBf16Tol);
      return;
    }
    case Op::add:  // in place: x += y
      p.cpu->add(xc, yc);
      p.gpu->add(xg, yg);
      EXPECT_LT(rel_error(get(*p.gpu, xg), get(*p.cpu, xc)), kBf16Tol);
      return;
    default:
      FAIL() << "not an element-wise op";
  }
  EXPECT_LT(rel_error(get(*p.gpu, og), get(*p.cpu, oc)), kBf16Tol);
}

void run_gather_embed(const OpCase& c) {
  Pair p = backends(c.act);
  ASSERT_TRUE(p.gpu);
  const int64_t d = c.k, rows = 300;
  // The first and the last row, one twice; then rows further on.
  std::vector<int32_t> picks = {0, 299, 17, 17, 123};
  for (int64_t i = 5; i < c.n; ++i) picks.push_back((int32_t)(i * 37 % rows));
  picks.resize((size_t)c.n);
  Tensor oc = p.cpu->alloc_activation(c.n, d, DType::f32);
  Tensor og = p.gpu->alloc_activation(c.n, d, c.act);
  p.gpu->begin_step();
  if (c.op == Op::embed) {
    const auto table = to_f16(randn((size_t)(rows * d)));
    const Weight tc = upload_f16(*p.cpu, table, rows, d), tg = upload_f16(*p.gpu, table, rows, d);
    p.cpu->embed(tc, picks, oc);
    p.gpu->embed(tg, picks, og);
  } else {
    const auto x = randn((size_t)(rows * d));
    Tensor xc = put(*p.cpu, x, rows, d), xg = put(*p.gpu, x, rows, d);
    p.cpu->gather_rows(xc, picks, oc);
    p.gpu->gather_rows(xg, picks, og);
  }
  EXPECT_LT(rel_error(get(*p.gpu, og), get(*p.cpu, oc)), kBf16Tol);
}

// RoPE + KV store of n rows at far-apart positions (large angles too): the rotated q and k
// against the CPU backend, and the stored K and V through a causal attention of the rows over
// themselves (where the CUDA attention takes the head size: 32, 64, 128).
void run_rope_store(const OpCase& c) {
  Pair p = backends(c.act);
  ASSERT_TRUE(p.gpu);
  const int64_t n = c.n;
  const int bs = 16, blocks = (int)((n + bs - 1) / bs);
  const KvGeometry g{1, blocks, bs, c.nkv, c.hd, DType::f16};
  auto kvc = p.cpu->create_kv_storage(g).value();
  auto kvg = p.gpu->create_kv_storage(g).value();
  std::vector<int32_t> pos, slot;
  for (int64_t t = 0; t < n; ++t) {
    pos.push_back((int32_t)(t * 37 % 4096));
    slot.push_back((int32_t)t);
  }
  const RopeParams rp{c.hd, c.hd, c.neox, 10000.0f, {}};
  const auto q = randn((size_t)(n * c.nh * c.hd)), k = randn((size_t)(n * c.nkv * c.hd)),
             v = randn((size_t)(n * c.nkv * c.hd));
  Backend* bk[2] = {p.cpu.get(), p.gpu.get()};
  KvStorage* kv[2] = {kvc.get(), kvg.get()};
  std::vector<float> qr[2], kr[2], att[2];
  for (int i = 0; i < 2; ++i) {
    Backend& b = *bk[i];
    Tensor qt = put(b, q, n, c.nh * c.hd), kt = put(b, k, n, c.nkv * c.hd),
           vt = put(b, v, n, c.nkv * c.hd);
    b.begin_step();
    b.rope_store_kv(qt, kt, vt, pos, rp, *kv[i], 0, slot);
    qr[i] = get(b, qt);
    kr[i] = get(b, kt);
    if (c.hd % 32 != 0) continue;
    const std::vector<int32_t> q_start = {0}, q_len = {(int32_t)n}, ctx = {(int32_t)n};
    std::vector<int32_t> table((size_t)blocks);
    std::iota(table.begin(), table.end(), 0);
    const AttentionBatch batch{1, q_start, q_len, ctx, table, blocks};
    Tensor out = b.alloc_activation(n, c.nh * c.hd, i == 0 ? DType::f32 : b.activation_dtype());
    b.attention(qt, *kv[i], 0, batch, c.nh, 1.0f / std::sqrt((float)c.hd), out);
    att[i] = get(b, out);
  }
  EXPECT_LT(rel_error(qr[1], qr[0]), kBf16Tol) << "rotated q";
  EXPECT_LT(rel_error(kr[1], kr[0]), kBf16Tol) << "rotated k";
  if (c.hd % 32 == 0) {
    EXPECT_LT(rel_error(att[1], att[0]), kBf16Tol) << "attention over K, V";
  }
}

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  for (DType act : {DType::bf16, DType::f16}) {
    // matmul: 1-2 rows the GEMV, 3-8 the tensor-core GEMV, more cuBLASLt; k not a multiple
    // of 256; row counts on both sides of cuBLASLt's tile edges; strided input rows.
    struct Mm {
      int64_t n, m, k;
      bool strided, bias;
      const char* what;
    };
    for (const Mm& mm :
         {Mm{1, 384, 256, false, true, "gemv"}, Mm{2, 1000, 576, true, false, "gemv"},
          Mm{1, 64, 11008, true, false, "gemv"}, Mm{3, 1000, 576, true, false, "mma"},
          Mm{8, 257, 4096, false, false, "mma"}, Mm{7, 1000, 512, false, true, "mma"},
          Mm{9, 640, 576, true, false, "cublaslt"}, Mm{17, 640, 576, true, false, "cublaslt"},
          Mm{130, 512, 1024, false, true, "cublaslt"}, Mm{304, 640, 576, true, false, "cublaslt"},
          Mm{513, 640, 576, true, false, "cublaslt"}}) {
      OpCase c = op_case(Op::matmul, act, mm.n, mm.m, mm.k);
      c.strided = mm.strided;
      c.bias = mm.bias;
      c.what = mm.what;
      cases.push_back(c);
    }
    // Element-wise ops: a width of whole 16-byte pieces (the kernels in pieces) and one that
    // is not (element by element).
    for (Op op : {Op::rmsnorm, Op::add_rmsnorm, Op::silu_mul, Op::add})
      for (int64_t d : {576, 100}) cases.push_back(op_case(op, act, 37, 0, d));
    // Head norms: Qwen3's head sizes, one row (decode) and many, a head narrower than a warp.
    for (const auto& [n, hd, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 128, 4096},
                                   {37, 128, 1024},
                                   {5, 64, 512},
                                   {3, 16, 64}})
      cases.push_back(op_case(Op::head_rmsnorm, act, n, hd, k));
    for (Op op : {Op::gather_rows, Op::embed})
      for (int64_t d : {576, 100}) cases.push_back(op_case(op, act, 5, 0, d));
    // RoPE + store of many rows (a prefill: 16 heads a block) and of few (4 a block), in
    // 16-byte pieces where the head size allows (neox: head_dim % 16, else % 8) and element by
    // element where it does not (24 neox, 20 interleaved), MHA and GQA.
    struct Rs {
      int nh, nkv, hd;
      bool neox;
    };
    for (const Rs& r :
         {Rs{8, 8, 128, true}, Rs{8, 2, 64, false}, Rs{4, 2, 24, true}, Rs{4, 4, 20, false}})
      for (int64_t n : {5, 100}) {
        OpCase c = op_case(Op::rope_store, act, n);
        c.nh = r.nh;
        c.nkv = r.nkv;
        c.hd = r.hd;
        c.neox = r.neox;
        c.q_lens = {(int)n};
        cases.push_back(c);
      }
  }
  // Attention: a prefill chunk, a fresh prompt and decodes with long contexts (split rows
  // merged in-kernel) in one step; long query runs on the tensor-core kernel beside decodes;
  // short chunks over long contexts (its tiles split across the keys and combined, where the
  // tiles fill less than the chip); one long decode row; decode rows of mixed lengths past the
  // point where they fill the chip.
  struct At {
    int nh, nkv, hd;
    bool neox;
    std::vector<int> q, ctx;
    const char* what;
  };
  const std::vector<At> attn = {
      {32, 8, 128, true, {1, 1, 40, 1, 17}, {1, 3000, 100, 777, 17}, "mixed"},
      {9, 3, 64, false, {5, 1, 1, 70}, {300, 64, 1, 70}, "mixed"},
      {32, 8, 128, true, {1, 200, 1, 70}, {900, 1200, 33, 70}, "prefill_tiles"},
      {9, 3, 64, false, {100, 1}, {300, 20}, "prefill_tiles"},
      {8, 4, 32, true, {1, 3, 1}, {50, 3, 700}, "tiny"},
      {32, 32, 128, true, {2, 1, 8, 33}, {3000, 2000, 4100, 1500}, "short_chunks"},
      {32, 8, 128, true, {5, 1, 130}, {2600, 900, 3000}, "short_chunks"},
      {8, 4, 32, true, {3, 2}, {700, 64}, "short_chunks"},
      // One or two 8-row tiles over thousands of keys at head size 128: split into partitions
      // (4300 keys: parts of 1,088, which start and end inside the wgmma kernel's 128-key
      // tiles; 2600 and 3000 keys: 1,344 and 1,536) whose partial states are combined.
      {32, 8, 128, true, {8}, {4300}, "split_tiles"},
      {32, 8, 128, true, {8, 8}, {2600, 3000}, "split_tiles"},
      {32, 32, 128, true, {1}, {5000}, "long_decode"},
      {32,
       32,
       128,
       true,
       {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
       {4000, 120, 300, 33, 250, 2100, 90, 170, 310, 64, 1, 700},
       "decodes"},
      {32,
       8,
       128,
       true,
       {1, 1, 1, 1, 1, 1, 1, 1, 1},
       {3000, 100, 200, 150, 90, 60, 30, 260, 17},
       "decodes"},
  };
  for (DType act : {DType::bf16, DType::f16})
    for (const At& a : attn) {
      if (act == DType::f16 && std::string(a.what) != "mixed") continue;
      OpCase c = op_case(Op::attention, act);
      c.nh = a.nh;
      c.nkv = a.nkv;
      c.hd = a.hd;
      c.neox = a.neox;
      c.q_lens = a.q;
      c.ctx_lens = a.ctx;
      c.what = a.what;
      cases.push_back(c);
    }
  return cases;
}

class CudaOpCases : public testing::TestWithParam<OpCase> {};

TEST_P(CudaOpCases, MatchesTheCpuBackend) {
  const OpCase& c = GetParam();
  const uint32_t seed = case_seed(c);
  rng().seed(seed);
  SCOPED_TRACE(case_name(c) + ": seed " + std::to_string(seed) + " (base seed " +
               std::to_string(base_seed()) +
               ": --gtest_random_seed=" + std::to_string(base_seed()) + " draws the same inputs)");
  switch (c.op) {
    case Op::matmul:
      return run_matmul(c);
    case Op::rmsnorm:
    case Op::add_rmsnorm:
    case Op::head_rmsnorm:
    case Op::silu_mul:
    case Op::add:
      return run_elementwise(c);
    case Op::gather_rows:
    case Op::embed:
      return run_gather_embed(c);
    case Op::rope_store:
      return run_rope_store(c);
    case Op::attention:
      return attention_case(c.nh, c.nkv, c.hd, c.neox, c.q_lens, c.ctx_lens, c.act);
  }
}

INSTANTIATE_TEST_SUITE_P(Table, CudaOpCases, testing::ValuesIn(op_cases()),
                         [](const testing::TestParamInfo<OpCase>& i) {
                           std::string n = case_name(i.param);
                           for (char& ch : n)
                             if (!std::isalnum((unsigned char)ch)) ch = '_';
                           return n + "_" + std::to_string(i.index);
                         });

}  // namespace
}  // namespace infercept
