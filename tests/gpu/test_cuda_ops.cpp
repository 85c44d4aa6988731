// Every CUDA op against the CPU backend (the oracle) on fresh random inputs: relative error
// within bf16 tolerance, never NaN. Runs on a machine with a GPU (`make test-gpu`).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/attend_project.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/switches.h"
#include "core/half.h"

namespace infercept {
namespace {

struct Pair {
  std::unique_ptr<Backend> cpu, gpu;
};

// The GPU backend computes in `act` (bf16 or f16).
Pair backends(DType act = DType::bf16) {
  Pair p;
  p.cpu = make_cpu_backend(4);
  CudaBackendOptions o;
  o.activation_dtype = act;
  auto g = make_cuda_backend(o);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  if (g.ok()) p.gpu = std::move(*g);
  return p;
}

std::mt19937& rng() {
  static std::mt19937 r(std::random_device{}());  // fresh inputs every run
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

TEST(CudaOps, MatmulWithBiasAndF32Output) {
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  for (auto [n, m, k] : {std::tuple{1, 384, 256}, {7, 1000, 512}, {130, 512, 1024}}) {
    auto x = randn((size_t)(n * k)), w = randn((size_t)(m * k), 0.05f), bias = randn((size_t)m);
    auto w16 = to_f16(w);  // the CPU backend multiplies f16 weights
    auto wc = p.cpu->upload_weight(w16.data(), DType::f16, m, k);
    auto wg = p.gpu->upload_weight(w16.data(), DType::f16, m, k);
    auto bc = p.cpu->upload_weight(bias.data(), DType::f32, 1, m);
    auto bg = p.gpu->upload_weight(bias.data(), DType::f32, 1, m);
    ASSERT_TRUE(wc.ok() && wg.ok() && bc.ok() && bg.ok());
    Tensor xc = put(*p.cpu, x, n, k), xg = put(*p.gpu, x, n, k);
    Tensor oc = p.cpu->alloc_activation(n, m, DType::f32);
    Tensor og = p.gpu->alloc_activation(n, m, p.gpu->activation_dtype());
    Tensor og32 = p.gpu->alloc_activation(n, m, DType::f32);
    p.cpu->matmul(xc, *wc, &*bc, oc);
    p.gpu->matmul(xg, *wg, &*bg, og);
    p.gpu->matmul(xg, *wg, nullptr, og32);
    auto ref = get(*p.cpu, oc);
    EXPECT_LT(rel_error(get(*p.gpu, og), ref), kBf16Tol) << n << "x" << m << "x" << k;
    p.cpu->matmul(xc, *wc, nullptr, oc);
    EXPECT_LT(rel_error(get(*p.gpu, og32), get(*p.cpu, oc)), kBf16Tol);
  }
}

// The buckets of row counts whose cuBLASLt algorithm is shared (INFERCEPT_GEMM_BUCKETS=1):
// each count up to 16 alone, then eight per doubling, never more than 1/8 extra rows. Host code.
TEST(CudaOps, GemmRowBucketsEightPerDoubling) {
  for (int64_t n = 1; n <= 16; ++n) EXPECT_EQ(cuda::gemm_row_bucket(n), n);
  EXPECT_EQ(cuda::gemm_row_bucket(17), 18);
  EXPECT_EQ(cuda::gemm_row_bucket(33), 36);
  EXPECT_EQ(cuda::gemm_row_bucket(257), 288);
  EXPECT_EQ(cuda::gemm_row_bucket(304), 320);
  EXPECT_EQ(cuda::gemm_row_bucket(512), 512);
  EXPECT_EQ(cuda::gemm_row_bucket(513), 576);
  for (int64_t n = 1; n <= 5000; ++n) {
    const int64_t b = cuda::gemm_row_bucket(n);
    ASSERT_GE(b, n);
    ASSERT_LE(8 * (b - n), n) << n;               // at most n / 8 extra rows
    ASSERT_EQ(cuda::gemm_row_bucket(b), b) << n;  // a bucket's count is its own bucket
  }
}

// With INFERCEPT_GEMM_BUCKETS=1 cuBLASLt's algorithm is chosen once per bucket of row counts
// and reused for the bucket's other counts where cublasLtMatmulAlgoCheck accepts it: row
// counts on both sides of bucket edges from 3 to 513, with a strided input and both output
// types, against the CPU backend.
TEST(CudaOps, MatmulRowCountsThatShareABucketsAlgorithm) {
  setenv("INFERCEPT_GEMM_BUCKETS", "1", 1);  // read when the backend's Gemm is made
  Pair p = backends();
  unsetenv("INFERCEPT_GEMM_BUCKETS");
  ASSERT_TRUE(p.gpu);
  const int m = 640, k = 576;
  auto w = randn((size_t)(m * k), 0.05f);
  auto w16 = to_f16(w);
  auto wc = p.cpu->upload_weight(w16.data(), DType::f16, m, k);
  auto wg = p.gpu->upload_weight(w16.data(), DType::f16, m, k);
  ASSERT_TRUE(wc.ok() && wg.ok());
  for (int n :
       {3, 4, 5, 7, 9, 16, 17, 31, 33, 63, 65, 100, 127, 129, 200, 255, 257, 300, 511, 513}) {
    auto x2 = randn((size_t)(n * 2 * k));
    std::vector<float> x((size_t)(n * k));
    for (int r = 0; r < n; ++r)
      std::copy_n(x2.begin() + (ptrdiff_t)(r * 2 * k), k, x.begin() + (ptrdiff_t)(r * k));
    Tensor xc = put(*p.cpu, x, n, k);
    Tensor xg = put(*p.gpu, x2, n, 2 * k).slice_cols(0, k);
    Tensor oc = p.cpu->alloc_activation(n, m, DType::f32);
    Tensor og = p.gpu->alloc_activation(n, m, p.gpu->activation_dtype());
    Tensor og32 = p.gpu->alloc_activation(n, m, DType::f32);
    p.cpu->matmul(xc, *wc, nullptr, oc);
    p.gpu->matmul(xg, *wg, nullptr, og);
    p.gpu->matmul(xg, *wg, nullptr, og32);
    const auto ref = get(*p.cpu, oc);
    EXPECT_LT(rel_error(get(*p.gpu, og), ref), kBf16Tol) << n << " rows";
    EXPECT_LT(rel_error(get(*p.gpu, og32), ref), kBf16Tol) << n << " rows, f32 out";
  }
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

bool never(const cuda::GemvArgs&) {
  return false;
}

// The bulk-copy GEMV (one input row, the weight streamed through shared memory). k: 4096
// (tiles of 8 rows, 4 when gated), 11008 (2 rows), 5120 (4 rows, 2 when gated).
TEST(CudaOps, GemvBulkEveryEpilogueMatchesTheCpuBackend) {
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  check_every_epilogue(p, 1, cuda::gemv_bulk_fits, cuda::gemv_bulk,
                       {{1027, 4096}, {333, 11008}, {517, 5120}}, never);
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

// INFERCEPT_GEMV_ROPE: Q, K and V, RoPE and the KV store in one launch at 1-2 rows
// (norm_project_rope_store). Against the CPU backend's composition (the oracle) and the GPU's
// own two group ops: the rotated q, and attention over the cache it stored into (which reads
// the stored k and v), for both RoPE layouts, llama3-style frequency divisors on one. In the
// "require" mode a step that fell back to the composed ops would abort: the fused kernel is
// what is compared.
TEST(CudaOps, NormProjectRopeStoreMatchesTheComposedOps) {
  ASSERT_EQ(setenv("INFERCEPT_GEMV_ROPE", "require", 1), 0);
  Pair p = backends();
  unsetenv("INFERCEPT_GEMV_ROPE");
  ASSERT_TRUE(p.gpu);
  auto composed = make_cuda_backend({});
  ASSERT_TRUE(composed.ok());
  Backend& gpu2 = **composed;
  const int64_t d = 512, nh = 8, nkv = 2, hd = 64, bs = 16;
  const auto wq = to_f16(randn((size_t)(nh * hd * d), 0.05f)),
             wk = to_f16(randn((size_t)(nkv * hd * d), 0.05f)),
             wv = to_f16(randn((size_t)(nkv * hd * d), 0.05f));
  const auto norm = randn((size_t)d, 1.0f);
  struct Side {
    Weight wq, wk, wv, norm;
  };
  auto side = [&](Backend& b) {
    auto up = [&](const std::vector<uint16_t>& w, int64_t rows) {
      auto r = b.upload_weight(w.data(), DType::f16, rows, d);
      EXPECT_TRUE(r.ok());
      return *r;
    };
    auto nw = b.upload_weight(norm.data(), DType::f32, 1, d);
    EXPECT_TRUE(nw.ok());
    return Side{up(wq, nh * hd), up(wk, nkv * hd), up(wv, nkv * hd), *nw};
  };
  Backend* bk[3] = {p.cpu.get(), p.gpu.get(), &gpu2};  // oracle, fused, composed
  Side sides[3] = {side(*bk[0]), side(*bk[1]), side(*bk[2])};
  std::vector<float> ff;
  for (int i = 0; i < hd / 2; ++i) ff.push_back(i > hd / 4 ? 8.0f : 1.0f);
  for (bool neox : {true, false}) {
    for (int n : {1, 2}) {
      SCOPED_TRACE("neox " + std::to_string(neox) + ", rows " + std::to_string(n));
      const RopeParams rp{hd, hd, neox, neox ? 500000.0f : 10000.0f,
                          neox ? std::span<const float>(ff) : std::span<const float>()};
      // n sequences of 37 + 29 s tokens; the last is this step's row, the others history.
      std::vector<int32_t> ctx, tables, hist_pos, hist_slot, pos, slot, q_start, q_len(n, 1);
      const int max_blocks = (37 + 29 * (n - 1) + bs - 1) / bs;
      int next_block = 0;
      for (int s = 0; s < n; ++s) {
        ctx.push_back(37 + 29 * s);
        q_start.push_back(s);
        for (int b = 0; b < max_blocks; ++b)
          tables.push_back(b < (ctx.back() + bs - 1) / bs ? next_block++ : 0);
        for (int t = 0; t < ctx.back(); ++t) {
          const int sl = tables[(size_t)(s * max_blocks + t / bs)] * (int)bs + t % (int)bs;
          (t + 1 < ctx.back() ? hist_pos : pos).push_back(t);
          (t + 1 < ctx.back() ? hist_slot : slot).push_back(sl);
        }
      }
      const int64_t nh_rows = (int64_t)hist_pos.size();
      const auto hq = randn((size_t)(nh_rows * nh * hd)), hk = randn((size_t)(nh_rows * nkv * hd)),
                 hv = randn((size_t)(nh_rows * nkv * hd)), x = randn((size_t)(n * d));
      std::vector<float> q_out[3], attn_out[3];
      for (int i = 0; i < 3; ++i) {
        Backend& b = *bk[i];
        const DType kv_dtype = i == 0 ? DType::f16 : b.activation_dtype();
        KvGeometry g{1, next_block + 1, bs, nkv, hd, kv_dtype};
        auto kv = b.create_kv_storage(g).value();
        b.begin_step();
        Tensor tq = put(b, hq, nh_rows, nh * hd), tk = put(b, hk, nh_rows, nkv * hd),
               tv = put(b, hv, nh_rows, nkv * hd);
        b.rope_store_kv(tq, tk, tv, hist_pos, rp, *kv, 0, hist_slot);
        const DType act = b.activation_dtype();
        Tensor xt = put(b, x, n, d), h = b.alloc_activation(n, d, act),
               q = b.alloc_activation(n, nh * hd, act), k = b.alloc_activation(n, nkv * hd, act),
               v = b.alloc_activation(n, nkv * hd, act), o = b.alloc_activation(n, nh * hd, act);
        const Projection qkv[] = {
            {&sides[i].wq, nullptr, q}, {&sides[i].wk, nullptr, k}, {&sides[i].wv, nullptr, v}};
        b.begin_step();
        b.norm_project_rope_store(xt, sides[i].norm, 1e-5f, h, qkv, pos, rp, *kv, 0, slot);
        q_out[i] = get(b, q);
        const AttentionBatch batch{n, q_start, q_len, ctx, tables, max_blocks};
        b.attention(q, *kv, 0, batch, nh, 1.0f / std::sqrt((float)hd), o);
        attn_out[i] = get(b, o);
      }
      EXPECT_LT(rel_error(q_out[1], q_out[0]), kBf16Tol) << "rotated q, fused vs CPU";
      EXPECT_LT(rel_error(attn_out[1], attn_out[0]), kBf16Tol) << "attention, fused vs CPU";
      // The two GPU paths round the same products to bf16; only the sums' order differs.
      EXPECT_LT(rel_error(q_out[1], q_out[2]), 5e-3) << "rotated q, fused vs composed";
      EXPECT_LT(rel_error(attn_out[1], attn_out[2]), 5e-3) << "attention, fused vs composed";
    }
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
// and the GPU's composed ops (INFERCEPT_ATTN_FUSED=0), over two steps (the second attends over
// the key the first stored), up to 16 partitions a row, MHA and GQA, both RoPE layouts; a
// second launch of the same step repeats the first's bits. The fused path's attention waits
// per KV head on the Q/K/V product's counters (GemvHeadSignal); with INFERCEPT_ATTN_SIGNAL=0
// it waits for the whole product, and the outputs are the same bits.
void self_attention_case(int64_t nh, int64_t nkv, int64_t hd, bool neox,
                         std::vector<int> ctx_lens) {
  const DecodeLayerCase c(nh, nkv, hd, neox, std::move(ctx_lens));
  SCOPED_TRACE(c.trace());
  ASSERT_EQ(setenv("INFERCEPT_ATTN_FUSED", "1", 1), 0);
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  ASSERT_EQ(setenv("INFERCEPT_ATTN_FUSED", "0", 1), 0);
  auto composed = make_cuda_backend({});
  ASSERT_EQ(setenv("INFERCEPT_ATTN_FUSED", "1", 1), 0);
  ASSERT_EQ(setenv("INFERCEPT_ATTN_SIGNAL", "0", 1), 0);
  auto unsignalled = make_cuda_backend({});
  unsetenv("INFERCEPT_ATTN_SIGNAL");
  ASSERT_EQ(setenv("INFERCEPT_ATTN_GROUP_SPLIT", "1", 1), 0);
  auto unsplit = make_cuda_backend({});
  ASSERT_EQ(setenv("INFERCEPT_ATTN_GROUP_SPLIT", "8", 1), 0);
  auto split_all = make_cuda_backend({});
  unsetenv("INFERCEPT_ATTN_GROUP_SPLIT");
  unsetenv("INFERCEPT_ATTN_FUSED");
  ASSERT_TRUE(composed.ok());
  ASSERT_TRUE(unsignalled.ok());
  ASSERT_TRUE(unsplit.ok());
  ASSERT_TRUE(split_all.ok());
  // oracle, fused (waiting per KV head; a KV head's query group cut into blocks of at most 2
  // heads), composed, fused waiting for the whole product, fused with each group in one
  // block, and cut into a block a query head
  constexpr int kBackends = 6;
  Backend* bk[kBackends] = {p.cpu.get(),        p.gpu.get(),    composed->get(),
                            unsignalled->get(), unsplit->get(), split_all->get()};
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
// the GPU with INFERCEPT_ATTN_PROJECT=0 (the fused attention, then project_add); two steps a
// row, and the one-launch step twice more with the same inputs, which must give the same bits
// (its counters are back at zero after each launch).
void self_attention_project_case(int64_t nh, int64_t nkv, int64_t hd, bool neox,
                                 std::vector<int> ctx_lens) {
  const DecodeLayerCase c(nh, nkv, hd, neox, std::move(ctx_lens));
  SCOPED_TRACE(c.trace());
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  ASSERT_EQ(setenv("INFERCEPT_ATTN_PROJECT", "0", 1), 0);
  auto apart = make_cuda_backend({});
  unsetenv("INFERCEPT_ATTN_PROJECT");
  ASSERT_TRUE(apart.ok());
  constexpr int kBackends = 3;
  Backend* bk[kBackends] = {p.cpu.get(), p.gpu.get(), apart->get()};
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
}

TEST(CudaOps, SelfAttentionFoldsRopeAndStoreIntoTheDecodeKernel) {
  self_attention_case(32, 32, 128, true, {1025});      // llama2-7b at batch 1: 9 parts
  self_attention_case(32, 8, 128, true, {700, 2100});  // GQA, two rows of mixed lengths
  self_attention_case(8, 2, 64, false, {5000});        // 16 parts (the most)
  self_attention_case(9, 3, 64, false, {1, 300});      // a row with no history
  self_attention_case(8, 4, 32, true, {50, 3});        // the tiny shape
  // Past kFusedDecodeMaxRows (2): the composed ops on both GPU backends.
  self_attention_case(8, 4, 32, true, {50, 3, 700, 33, 16, 17, 200, 1000});
}

// RoPE + KV store of many rows (a prefill: 16 heads a block) and of few (4 a block), in
// 16-byte pieces where the head size allows (neox: head_dim % 16, else % 8) and element by
// element where it does not (24 neox, 20 interleaved), MHA and GQA: the rotated q and k
// against the CPU backend, and the stored K and V through an attention over them (where the
// CUDA attention takes the head size: 32, 64, 128).
TEST(CudaOps, RopeStoreInPiecesAndElementwiseMatchesTheCpuBackend) {
  struct Shape {
    int nh, nkv, hd;
    bool neox;
  };
  for (const Shape sh : {Shape{8, 8, 128, true}, Shape{8, 2, 64, false}, Shape{4, 2, 24, true},
                         Shape{4, 4, 20, false}})
    for (const int64_t n : {int64_t{5}, int64_t{100}}) {
      Pair p = backends();
      ASSERT_TRUE(p.gpu);
      const int bs = 16;
      const int blocks = (int)((n + bs - 1) / bs);
      KvGeometry g{1, blocks, bs, sh.nkv, sh.hd, DType::f16};
      auto kvc = p.cpu->create_kv_storage(g).value();
      auto kvg = p.gpu->create_kv_storage(g).value();
      std::vector<int32_t> pos, slot;
      for (int64_t t = 0; t < n; ++t) {
        pos.push_back((int32_t)(t * 37 % 4096));  // far-apart positions: large angles too
        slot.push_back((int32_t)t);
      }
      const RopeParams rp{sh.hd, sh.hd, sh.neox, 10000.0f, {}};
      const auto q = randn((size_t)(n * sh.nh * sh.hd)), k = randn((size_t)(n * sh.nkv * sh.hd)),
                 v = randn((size_t)(n * sh.nkv * sh.hd));
      Tensor out[2];
      Backend* bk[2] = {p.cpu.get(), p.gpu.get()};
      KvStorage* kv[2] = {kvc.get(), kvg.get()};
      std::vector<float> qr[2], kr[2];
      for (int i = 0; i < 2; ++i) {
        Backend& b = *bk[i];
        Tensor qt = put(b, q, n, sh.nh * sh.hd), kt = put(b, k, n, sh.nkv * sh.hd),
               vt = put(b, v, n, sh.nkv * sh.hd);
        b.begin_step();
        b.rope_store_kv(qt, kt, vt, pos, rp, *kv[i], 0, slot);
        qr[i] = get(b, qt);
        kr[i] = get(b, kt);
        if (sh.hd % 32 != 0) continue;
        // Causal attention of the rows over themselves reads every stored K and V.
        const std::vector<int32_t> q_start = {0}, q_len = {(int32_t)n}, ctx = {(int32_t)n};
        std::vector<int32_t> table((size_t)blocks);
        std::iota(table.begin(), table.end(), 0);
        const AttentionBatch batch{1, q_start, q_len, ctx, table, blocks};
        out[i] = b.alloc_activation(n, sh.nh * sh.hd, i == 0 ? DType::f32 : b.activation_dtype());
        b.attention(qt, *kv[i], 0, batch, sh.nh, 1.0f / std::sqrt((float)sh.hd), out[i]);
      }
      const std::string what =
          "hd " + std::to_string(sh.hd) + (sh.neox ? " neox" : "") + ", rows " + std::to_string(n);
      EXPECT_LT(rel_error(qr[1], qr[0]), kBf16Tol) << "rotated q, " << what;
      EXPECT_LT(rel_error(kr[1], kr[0]), kBf16Tol) << "rotated k, " << what;
      if (sh.hd % 32 == 0) {
        EXPECT_LT(rel_error(get(*p.gpu, out[1]), get(*p.cpu, out[0])), kBf16Tol)
            << "attention over the stored K and V, " << what;
      }
    }
}

TEST(CudaOps, NormsElementwiseEmbedGather) {
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  const int64_t n = 37;
  // A width of whole 16-byte pieces (the kernels in pieces) and one that is not (element-wise).
  for (const int64_t d : {int64_t{576}, int64_t{100}}) {
    auto x = randn((size_t)(n * d)), y = randn((size_t)(n * d)), w = randn((size_t)d);
    auto wc = *p.cpu->upload_weight(w.data(), DType::f32, 1, d);
    auto wg = *p.gpu->upload_weight(w.data(), DType::f32, 1, d);
    Tensor xc = put(*p.cpu, x, n, d), xg = put(*p.gpu, x, n, d);
    Tensor yc = put(*p.cpu, y, n, d), yg = put(*p.gpu, y, n, d);
    Tensor oc = p.cpu->alloc_activation(n, d, DType::f32);
    Tensor og = p.gpu->alloc_activation(n, d, p.gpu->activation_dtype());
    p.cpu->rmsnorm(xc, wc, 1e-5f, oc);
    p.gpu->rmsnorm(xg, wg, 1e-5f, og);
    EXPECT_LT(rel_error(get(*p.gpu, og), get(*p.cpu, oc)), kBf16Tol);
    p.cpu->add_rmsnorm(xc, yc, wc, 1e-5f, oc);
    p.gpu->add_rmsnorm(xg, yg, wg, 1e-5f, og);
    EXPECT_LT(rel_error(get(*p.gpu, og), get(*p.cpu, oc)), kBf16Tol);
    EXPECT_LT(rel_error(get(*p.gpu, xg), get(*p.cpu, xc)), kBf16Tol);  // the residual
    p.cpu->silu_mul(xc, yc, oc);
    p.gpu->silu_mul(xg, yg, og);
    EXPECT_LT(rel_error(get(*p.gpu, og), get(*p.cpu, oc)), kBf16Tol);
    p.cpu->add(xc, yc);
    p.gpu->add(xg, yg);
    EXPECT_LT(rel_error(get(*p.gpu, xg), get(*p.cpu, xc)), kBf16Tol);
  }
  const int64_t d = 576;
  auto x = randn((size_t)(n * d));
  Tensor xc = put(*p.cpu, x, n, d), xg = put(*p.gpu, x, n, d);
  std::vector<int32_t> rows = {5, 0, 36, 5};
  Tensor gc = p.cpu->alloc_activation(4, d, DType::f32);
  Tensor gg = p.gpu->alloc_activation(4, d, p.gpu->activation_dtype());
  p.cpu->gather_rows(xc, rows, gc);
  p.gpu->begin_step();
  p.gpu->gather_rows(xg, rows, gg);
  EXPECT_LT(rel_error(get(*p.gpu, gg), get(*p.cpu, gc)), kBf16Tol);
  // Embedding rows: a width of whole 16-byte pieces (the vector copy) and one that is not
  // (the element-wise copy).
  const int64_t vocab = 300;
  const std::vector<int32_t> toks = {0, 299, 17, 17, 123};
  for (const int64_t width : {d, int64_t{100}}) {
    const auto table = to_f16(randn((size_t)(vocab * width)));
    const auto tc = *p.cpu->upload_weight(table.data(), DType::f16, vocab, width);
    const auto tg = *p.gpu->upload_weight(table.data(), DType::f16, vocab, width);
    Tensor ec = p.cpu->alloc_activation(5, width, DType::f32);
    Tensor eg = p.gpu->alloc_activation(5, width, p.gpu->activation_dtype());
    p.cpu->embed(tc, toks, ec);
    p.gpu->begin_step();
    p.gpu->embed(tg, toks, eg);
    EXPECT_LT(rel_error(get(*p.gpu, eg), get(*p.cpu, ec)), kBf16Tol) << "width " << width;
  }
}

// RoPE + KV store + paged attention over a batch mixing a prefill chunk, a fresh prompt and
// decodes with long contexts (the split-context path), with scattered block tables.
void attention_case(int n_heads, int n_kv, int hd, bool neox, std::vector<int> q_lens,
                    std::vector<int> ctx_lens, bool hinted = false) {
  Pair p = backends();
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
  if (hinted) {  // a prefetch hint (a 1024 x 1024 weight) changes nothing
    const std::vector<float> w = randn(1024 * 1024);
    auto wg = p.gpu->upload_weight(w.data(), DType::f32, 1024, 1024);
    ASSERT_TRUE(wg.ok());
    p.gpu->prefetch_hint(*wg);
    p.gpu->attention(qg, *kvg, 0, batch, n_heads, scale, og);
    EXPECT_EQ(get(*p.gpu, og), first) << "with a prefetch hint";
  }
}

TEST(CudaOps, AttentionMixedBatchGqa) {
  attention_case(32, 8, 128, true, {1, 1, 40, 1, 17}, {1, 3000, 100, 777, 17});
}
TEST(CudaOps, AttentionMha64Interleaved) {
  attention_case(9, 3, 64, false, {5, 1, 1, 70}, {300, 64, 1, 70});
}
// Long query runs take the tensor-core prefill kernel, the rest the paged kernels, one step.
TEST(CudaOps, AttentionPrefillTilesBesideDecodes) {
  attention_case(32, 8, 128, true, {1, 200, 1, 70}, {900, 1200, 33, 70});
  attention_case(9, 3, 64, false, {100, 1}, {300, 20});
}
TEST(CudaOps, AttentionHeadDim32) {  // the tiny make-model shape
  attention_case(8, 4, 32, true, {1, 3, 1}, {50, 3, 700});
}
// Short chunks over long contexts (a resumed request's tool output): two rows and up take the
// tensor-core kernel, its tiles split across the keys and merged by attention_combine().
TEST(CudaOps, AttentionShortChunksOverLongContexts) {
  attention_case(32, 32, 128, true, {2, 1, 8, 33}, {3000, 2000, 4100, 1500});
  attention_case(32, 8, 128, true, {5, 1, 130}, {2600, 900, 3000});  // a 2-part 130-row chunk
  attention_case(8, 4, 32, true, {3, 2}, {700, 64});
}
TEST(CudaOps, AttentionLoneLongDecode) {  // one row, many partitions merged by the last one
  attention_case(32, 32, 128, true, {1}, {5000});
}
// The decode kernel with blocks of six warps (INFERCEPT_ATTN_DECODE_WARPS=6, PERF 4.5t): decode
// rows of MHA, GQA and head size 64, one split across the context, against the CPU backend.
TEST(CudaOps, AttentionDecodeKernelOfSixWarps) {
  ASSERT_EQ(setenv("INFERCEPT_ATTN_DECODE_WARPS", "6", 1), 0);
  // The backends attention_case makes read it: six warps, not the default four.
  ASSERT_EQ(cuda::BackendSwitches::from_env(9).attn_decode_warps, 6);
  attention_case(32, 32, 128, true, {1, 1, 1}, {1025, 40, 300});
  attention_case(32, 8, 128, true, {1, 1}, {3000, 777});
  attention_case(9, 3, 64, false, {1}, {5000});
  unsetenv("INFERCEPT_ATTN_DECODE_WARPS");
}

// Decode rows of mixed lengths past the point where the rows alone fill the chip (12 x 32
// heads), with and without the balanced split (INFERCEPT_ATTN_BALANCE, read when the backend
// is made): with it the long ones are still cut to about the mean length, their parts merged
// in-kernel.
TEST(CudaOps, AttentionMixedLengthDecodesWithAndWithoutTheBalancedSplit) {
  for (const char* balance : {"1", "0"}) {
    SCOPED_TRACE(std::string("INFERCEPT_ATTN_BALANCE=") + balance);
    ASSERT_EQ(setenv("INFERCEPT_ATTN_BALANCE", balance, 1), 0);
    attention_case(32, 32, 128, true, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
                   {4000, 120, 300, 33, 250, 2100, 90, 170, 310, 64, 1, 700});
    attention_case(32, 8, 128, true, {1, 1, 1, 1, 1, 1, 1, 1, 1},
                   {3000, 100, 200, 150, 90, 60, 30, 260, 17});
  }
  unsetenv("INFERCEPT_ATTN_BALANCE");
}

// INFERCEPT_L2_PREFETCH=1: a decode attention at a small batch asks L2 for the next
// product's weight while it runs (Backend::prefetch_hint); its output stays bit-identical.
TEST(CudaOps, AttentionWithAPrefetchHintIsUnchanged) {
  ASSERT_EQ(setenv("INFERCEPT_L2_PREFETCH", "1", 1), 0);
  attention_case(32, 32, 128, true, {1}, {1500}, /*hinted=*/true);
  attention_case(32, 8, 128, true, {1, 1, 1}, {700, 64, 2100}, /*hinted=*/true);
  unsetenv("INFERCEPT_L2_PREFETCH");
}

// One partition length a step: a long decode row beside short ones is cut into pieces of
// about the mean length (rounded to 32-key tiles), the short ones are left whole, every key
// is covered once, and rows of equal length split as ceil(target / blocks) parts each.
TEST(CudaOps, PlanAttentionBalancesMixedLengths) {
  std::vector<int32_t> q_start(8), q_len(8, 1), ctx(8, 300);
  for (int i = 0; i < 8; ++i) q_start[i] = i;
  ctx[3] = 3000;  // mean 638 keys; 8 rows x 32 heads = 256 blocks < 264: two parts of the mean
  const cuda::AttnPlan plan = cuda::plan_attention(q_start, q_len, ctx, 32, 32, 264, 128, true);
  std::map<int, std::vector<std::pair<int, int>>> by_row;
  for (const cuda::AttnItem& it : plan.decode_items) by_row[it.row0].push_back({it.kbeg, it.kend});
  ASSERT_EQ(by_row.size(), 8u);
  for (auto& [row, spans] : by_row) {
    std::sort(spans.begin(), spans.end());
    int covered = 0;
    for (const auto& [b, e] : spans) {
      EXPECT_EQ(b, covered);
      EXPECT_LE(e - b, 320) << "row " << row;  // ceil(638 / 2) rounded up to 32 keys
      covered = e;
    }
    EXPECT_EQ(covered, ctx[row]);
    EXPECT_EQ(spans.size(), row == 3 ? 10u : 1u) << "row " << row;
  }
  ASSERT_EQ(plan.decode_combines.size(), 1u);
  EXPECT_EQ(plan.decode_combines[0].n_parts, 10);
  // Without the balance (the default): every row split into ceil(264 / 256) = 2 parts, the
  // long one's 1,500 keys long.
  const cuda::AttnPlan plain = cuda::plan_attention(q_start, q_len, ctx, 32, 32, 264, 128, false);
  EXPECT_EQ(plain.decode_items.size(), 16u);
  for (const cuda::AttnItem& it : plain.decode_items)
    if (it.row0 == 3) {
      EXPECT_GE(it.kend - it.kbeg, 1496);  // 3,000 keys in parts of 1,504 and 1,496
    }
  // Equal lengths: the same plan either way, 2 parts each at 8 rows, none at 9.
  for (bool balance : {true, false}) {
    const cuda::AttnPlan even8 = cuda::plan_attention(q_start, q_len, std::vector<int32_t>(8, 1024),
                                                      32, 32, 264, 128, balance);
    EXPECT_EQ(even8.decode_items.size(), 16u);
    std::vector<int32_t> s9(9), l9(9, 1);
    for (int i = 0; i < 9; ++i) s9[i] = i;
    const cuda::AttnPlan even9 =
        cuda::plan_attention(s9, l9, std::vector<int32_t>(9, 1024), 32, 32, 264, 128, balance);
    EXPECT_EQ(even9.decode_items.size(), 9u);
    EXPECT_TRUE(even9.decode_combines.empty());
  }
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

TEST(CudaOps, BlockCopiesWithinAndBetweenTiers) {
  Pair p = backends();
  ASSERT_TRUE(p.gpu);
  KvGeometry g{3, 20, 16, 2, 64, DType::f16};
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
  // Read back through the public interface: attention over a moved block must equal
  // attention over the block it came from, in every layer (3 -> host 8 -> 10 -> 15,
  // 7 -> host 0 -> 11, 19 -> host 4 -> 12).
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

}  // namespace
}  // namespace infercept
