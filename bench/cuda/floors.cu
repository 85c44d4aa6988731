// floors.cu: hardware ceilings ("floors" for the engine's timings) on one GPU.
//
// Build (also: make -C bench/cuda [BIN=/tmp/floors]):
//   nvcc -O3 -std=c++20 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 floors.cu -lcublasLt -o floors
// Run:
//   ./floors --json $OUT/floors.json [--reps 20] [--warmup 3] [--sections d2d,gemm,host]
//            [--copy-mb 4096] [--host-mb 256] [--small-kb 64] [--small-count 2048]
//            [--algos 4] [--gemm-rot-mb 256] [--device 0]
//
// What it measures (every timing: CUDA events around each repeat, after warm-up, median of
// --reps repeats; all data random (hash of seed and index), never zeros; working sets larger
// than L2, GEMM operands rotated over several copies so that >= --gemm-rot-mb is touched):
//  (a) d2d:  device-to-device copy of --copy-mb MiB: cudaMemcpyAsync and a 16-byte vectorized
//            copy kernel (GB/s counting bytes read + written, and copy size / time, i.e. the
//            read-only-equivalent rate), plus a read-only kernel (XOR of every 16-byte word).
//  (b) gemm: cuBLASLt bf16 x bf16 -> bf16, fp32 accumulate, out[M,N] = x[M,K] @ W[N,K]^T with
//            W row-major [N,K] (the engine's weight layout): 8192^3 and M in {1,32,128,4096} x
//            (N,K) in {(4096,4096),(11008,4096),(4096,11008),(14336,4096)}. Heuristic algos
//            (32 MiB workspace): heur[0] and the best of the first --algos. Launches are
//            replayed from a CUDA graph (falls back to plain launches if capture fails) so
//            that small-M timings are not launch-bound. TFLOP/s and bytes/s (x+W+out once).
//  (c) host: pinned host<->device, --host-mb MiB: H2D alone, D2H alone, both at once on two
//            streams; --small-count copies of --small-kb KiB between random block slots of a
//            pinned pool and a device pool (like KV-cache blocks), both directions, via
//            (1) a loop of cudaMemcpyAsync, (2) cudaMemcpyBatchAsync, (3) a CUDA graph of the
//            copies, (4) a gather kernel reading/writing mapped pinned host memory (zero-copy).
// Checks: copies compare sampled words against the hash that generated the source; GEMMs
// compare sampled outputs against an fp64 host dot product (rel err = |got-ref| /
// max(|ref|, sqrt(sum_k (x_k w_k)^2)), tolerance 2e-2).
// Output: Markdown tables on stdout, JSON to --json PATH. Exit code 0 if every check
// passed, 1 if a check failed (JSON still written), 2 for bad arguments, 3 for a CUDA error.

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

// ------------------------------------------------------------------------------------------
// error checking

#define CK(call)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "CUDA error %s (%d: %s) at %s:%d in %s\n", cudaGetErrorName(e_), \
                   (int)e_, cudaGetErrorString(e_), __FILE__, __LINE__, #call);           \
      std::exit(3);                                                                       \
    }                                                                                     \
  } while (0)

#define CKLT(call)                                                                          \
  do {                                                                                      \
    cublasStatus_t s_ = (call);                                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      std::fprintf(stderr, "cuBLASLt error %d at %s:%d in %s\n", (int)s_, __FILE__, __LINE__, \
                   #call);                                                                  \
      std::exit(3);                                                                         \
    }                                                                                       \
  } while (0)

#define CK_LAUNCH() CK(cudaGetLastError())

// ------------------------------------------------------------------------------------------
// deterministic random data: word i of a buffer filled with seed s is word_at(s, i)

__host__ __device__ inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
__host__ __device__ inline uint64_t word_at(uint64_t seed, uint64_t i) {
  return mix64(i + seed * 0xD1B54A32D192ED03ull);
}

__global__ void fill_u64_kernel(uint64_t* p, size_t n, uint64_t seed) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = word_at(seed, i);
}

// uniform in [-1, 1)
__global__ void fill_bf16_kernel(__nv_bfloat16* p, size_t n, uint64_t seed) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float u = (float)(word_at(seed, i) >> 40) * (1.0f / 16777216.0f);
    p[i] = __float2bfloat16(2.0f * u - 1.0f);
  }
}

// ------------------------------------------------------------------------------------------
// bandwidth kernels

__global__ void __launch_bounds__(256) copy_kernel(const uint4* __restrict__ src,
                                                   uint4* __restrict__ dst, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

// Reads every 16-byte word; writes only if the XOR hits a magic value (practically never), so
// the loads cannot be removed and (almost) no bytes are written.
__global__ void __launch_bounds__(256) read_kernel(const uint4* __restrict__ src, size_t n,
                                                   uint4* __restrict__ sink) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    acc.x ^= a.x ^ b.x ^ c.x ^ d.x;
    acc.y ^= a.y ^ b.y ^ c.y ^ d.y;
    acc.z ^= a.z ^ b.z ^ c.z ^ d.z;
    acc.w ^= a.w ^ b.w ^ c.w ^ d.w;
  }
  for (; i < n; i += stride) {
    uint4 a = src[i];
    acc.x ^= a.x;
    acc.y ^= a.y;
    acc.z ^= a.z;
    acc.w ^= a.w;
  }
  if (acc.x == 0x9E3779B9u && acc.y == 0x7F4A7C15u && acc.z == 0x12345678u) sink[0] = acc;
}

// Batched copy: copy blockIdx.y goes from srcs[y] to dsts[y], n16 16-byte words each, split
// over gridDim.x CTAs. Pointers may be mapped pinned host memory (zero-copy over PCIe).
__global__ void __launch_bounds__(256) batched_copy_kernel(const uint4* const* __restrict__ srcs,
                                                           uint4* const* __restrict__ dsts,
                                                           size_t n16) {
  const uint4* __restrict__ s = srcs[blockIdx.y];
  uint4* __restrict__ d = dsts[blockIdx.y];
  const size_t per_cta = (n16 + gridDim.x - 1) / gridDim.x;
  const size_t beg = (size_t)blockIdx.x * per_cta;
  const size_t end = beg + per_cta < n16 ? beg + per_cta : n16;
  const size_t bd = blockDim.x;
  size_t i = beg + threadIdx.x;
  for (; i + 3 * bd < end; i += 4 * bd) {
    uint4 a = s[i], b = s[i + bd], c = s[i + 2 * bd], e = s[i + 3 * bd];
    d[i] = a;
    d[i + bd] = b;
    d[i + 2 * bd] = c;
    d[i + 3 * bd] = e;
  }
  for (; i < end; i += bd) d[i] = s[i];
}

// ------------------------------------------------------------------------------------------
// options, device info, helpers

struct Opts {
  std::string json_path;
  int reps = 20;
  int warmup = 3;
  int device = 0;
  size_t copy_mb = 4096;
  size_t host_mb = 256;
  size_t small_kb = 64;
  int small_count = 2048;
  int algos = 4;
  size_t gemm_rot_mb = 256;
  bool do_d2d = true, do_gemm = true, do_host = true;
};

static int g_sms = 132;
static int g_grid = 132 * 8;   // bandwidth-kernel grid: 8 CTAs of 256 threads per SM
static bool g_all_ok = true;

static double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
static double vmin(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::min_element(v.begin(), v.end());
}

struct Timing {
  std::vector<double> ms;       // device time per repeat (events)
  std::vector<double> host_us;  // host time to enqueue the body per repeat
};

// Runs body() `warm` times, then `reps` times each between two events on stream s.
// body() must enqueue all of its work so that it completes before anything recorded on s
// afterwards (multi-stream bodies join back into s themselves).
static Timing time_reps(cudaStream_t s, int warm, int reps, const std::function<void()>& body) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < warm; ++i) body();
  CK(cudaStreamSynchronize(s));
  Timing t;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a, s));
    auto h0 = std::chrono::steady_clock::now();
    body();
    auto h1 = std::chrono::steady_clock::now();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.ms.push_back(ms);
    t.host_us.push_back(std::chrono::duration<double, std::micro>(h1 - h0).count());
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return t;
}

static void fill_words(void* p, size_t bytes, uint64_t seed, cudaStream_t s) {
  fill_u64_kernel<<<g_grid, 256, 0, s>>>((uint64_t*)p, bytes / 8, seed);
  CK_LAUNCH();
}
static void fill_bf16(void* p, size_t n, uint64_t seed, cudaStream_t s) {
  fill_bf16_kernel<<<g_grid, 256, 0, s>>>((__nv_bfloat16*)p, n, seed);
  CK_LAUNCH();
}

// Reads one 8-byte word from a device or (pinned) host pointer. Caller synchronizes first.
static uint64_t read_word(const void* base, size_t word_index) {
  uint64_t w = 0;
  CK(cudaMemcpy(&w, (const uint64_t*)base + word_index, 8, cudaMemcpyDefault));
  return w;
}

// Sampled check of a contiguous copy: word i of dst must be word_at(seed, i).
static bool check_contig(const void* dst, size_t nwords, uint64_t seed, int samples,
                         std::mt19937_64& rng, long* bad_out = nullptr) {
  CK(cudaDeviceSynchronize());
  long bad = 0;
  std::uniform_int_distribution<size_t> d(0, nwords - 1);
  for (int k = 0; k < samples; ++k) {
    size_t i = k == 0 ? 0 : k == 1 ? nwords - 1 : d(rng);
    if (read_word(dst, i) != word_at(seed, i)) ++bad;
  }
  if (bad_out) *bad_out = bad;
  return bad == 0;
}

static std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if ((unsigned char)c < 0x20) {
      o += ' ';
    } else {
      o += c;
    }
  }
  return o;
}
static std::string jnum(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}
static std::string fmt(const char* f, double v) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// ------------------------------------------------------------------------------------------
// (a) device-to-device bandwidth

struct BwRow {
  std::string section, name;
  double bytes_counted = 0;  // bytes the GB/s column counts (read + written for d2d)
  double bytes_payload = 0;  // copy size (payload) per repeat
  double ms_med = NAN, ms_min = NAN, host_us_med = NAN;
  bool checked = false, ok = true, ran = true;
  std::string note;
  double gbps() const { return bytes_counted / (ms_med * 1e-3) / 1e9; }
  double gbps_payload() const { return bytes_payload / (ms_med * 1e-3) / 1e9; }
};

static void record_timing(BwRow& r, const Timing& t) {
  r.ms_med = median(t.ms);
  r.ms_min = vmin(t.ms);
  r.host_us_med = median(t.host_us);
}

static void gpu_warmup(cudaStream_t s, const void* src, void* dst, size_t bytes, double ms_target) {
  // Brings clocks up: repeated copy kernels for about ms_target milliseconds.
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  double spent = 0;
  int batches = 0;
  while (spent < ms_target && batches < 200) {
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < 10; ++i) {
      copy_kernel<<<g_grid, 256, 0, s>>>((const uint4*)src, (uint4*)dst, bytes / 16);
      CK_LAUNCH();
    }
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    spent += ms;
    ++batches;
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
}

static std::vector<BwRow> run_d2d(const Opts& o, cudaStream_t s, std::mt19937_64& rng) {
  std::vector<BwRow> rows;
  const size_t S = o.copy_mb << 20;
  const uint64_t seed = 0xD2D0001;
  void *src = nullptr, *dst = nullptr, *sink = nullptr;
  CK(cudaMalloc(&src, S));
  CK(cudaMalloc(&dst, S));
  CK(cudaMalloc(&sink, 64));
  fill_words(src, S, seed, s);
  CK(cudaMemsetAsync(dst, 0, S, s));
  CK(cudaMemsetAsync(sink, 0, 64, s));
  CK(cudaStreamSynchronize(s));
  gpu_warmup(s, src, dst, S, 300.0);

  {
    BwRow r;
    r.section = "d2d";
    r.name = "cudaMemcpyAsync D2D";
    r.bytes_counted = 2.0 * S;
    r.bytes_payload = (double)S;
    CK(cudaMemsetAsync(dst, 0, S, s));
    CK(cudaMemcpyAsync(dst, src, S, cudaMemcpyDeviceToDevice, s));
    long bad = 0;
    r.checked = true;
    r.ok = check_contig(dst, S / 8, seed, 4096, rng, &bad);
    if (!r.ok) r.note = std::to_string(bad) + " of 4096 sampled words wrong";
    Timing t = time_reps(s, o.warmup, o.reps, [&] {
      CK(cudaMemcpyAsync(dst, src, S, cudaMemcpyDeviceToDevice, s));
    });
    record_timing(r, t);
    rows.push_back(r);
  }
  {
    BwRow r;
    r.section = "d2d";
    r.name = "copy kernel (uint4, grid-stride)";
    r.bytes_counted = 2.0 * S;
    r.bytes_payload = (double)S;
    CK(cudaMemsetAsync(dst, 0, S, s));
    copy_kernel<<<g_grid, 256, 0, s>>>((const uint4*)src, (uint4*)dst, S / 16);
    CK_LAUNCH();
    long bad = 0;
    r.checked = true;
    r.ok = check_contig(dst, S / 8, seed, 4096, rng, &bad);
    if (!r.ok) r.note = std::to_string(bad) + " of 4096 sampled words wrong";
    Timing t = time_reps(s, o.warmup, o.reps, [&] {
      copy_kernel<<<g_grid, 256, 0, s>>>((const uint4*)src, (uint4*)dst, S / 16);
      CK_LAUNCH();
    });
    record_timing(r, t);
    rows.push_back(r);
  }
  {
    BwRow r;
    r.section = "d2d";
    r.name = "read-only kernel (uint4 XOR)";
    r.bytes_counted = (double)S;
    r.bytes_payload = (double)S;
    r.checked = false;
    r.note = "reads only; nothing to check";
    Timing t = time_reps(s, o.warmup, o.reps, [&] {
      read_kernel<<<g_grid, 256, 0, s>>>((const uint4*)src, S / 16, (uint4*)sink);
      CK_LAUNCH();
    });
    record_timing(r, t);
    rows.push_back(r);
  }
  CK(cudaStreamSynchronize(s));
  CK(cudaFree(src));
  CK(cudaFree(dst));
  CK(cudaFree(sink));
  for (auto& r : rows)
    if (r.checked && !r.ok) g_all_ok = false;
  return rows;
}

// ------------------------------------------------------------------------------------------
// (b) GEMM through cuBLASLt

struct GemmRow {
  int M = 0, N = 0, K = 0;
  int nsets = 0, inner = 0, n_heur = 0, n_tried = 0, best_algo = -1;
  bool graph = false;
  double ms_heur0 = NAN, ms_best = NAN, ms_best_min = NAN;
  double max_rel_err = NAN;
  bool ok = true;
  std::string note;
  double flops() const { return 2.0 * M * (double)N * K; }
  double bytes() const { return 2.0 * ((double)M * K + (double)N * K + (double)M * N); }
  double tflops(double ms) const { return flops() / (ms * 1e-3) / 1e12; }
  double gbps(double ms) const { return bytes() / (ms * 1e-3) / 1e9; }
};

static float bf16_bits_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Checks out[m,n] = sum_k x[m,k] * w[n,k] at a few entries; returns max relative error.
static double check_gemm(const void* X, const void* W, const void* O, int M, int N, int K,
                         std::mt19937_64& rng) {
  CK(cudaDeviceSynchronize());
  std::vector<int> ms = {0, M / 2, M - 1}, ns = {0, N - 1};
  ns.push_back(std::uniform_int_distribution<int>(0, N - 1)(rng));
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
  std::vector<uint16_t> xr(K), wr(K);
  double worst = 0;
  for (int m : ms) {
    CK(cudaMemcpy(xr.data(), (const uint16_t*)X + (size_t)m * K, (size_t)K * 2,
                  cudaMemcpyDeviceToHost));
    for (int n : ns) {
      CK(cudaMemcpy(wr.data(), (const uint16_t*)W + (size_t)n * K, (size_t)K * 2,
                    cudaMemcpyDeviceToHost));
      uint16_t ob = 0;
      CK(cudaMemcpy(&ob, (const uint16_t*)O + (size_t)m * N + n, 2, cudaMemcpyDeviceToHost));
      double ref = 0, sq = 0;
      for (int k = 0; k < K; ++k) {
        double p = (double)bf16_bits_to_float(xr[k]) * (double)bf16_bits_to_float(wr[k]);
        ref += p;
        sq += p * p;
      }
      double got = bf16_bits_to_float(ob);
      double denom = std::max(std::fabs(ref), std::sqrt(sq));
      double err = denom > 0 ? std::fabs(got - ref) / denom : std::fabs(got - ref);
      if (!std::isfinite(got)) err = INFINITY;
      worst = std::max(worst, err);
    }
  }
  return worst;
}

static GemmRow run_gemm(const Opts& o, cublasLtHandle_t lt, void* ws, size_t ws_bytes,
                        cudaStream_t s, int M, int N, int K, std::mt19937_64& rng) {
  GemmRow r;
  r.M = M;
  r.N = N;
  r.K = K;
  const size_t xb = (size_t)M * K * 2, wb = (size_t)N * K * 2, ob = (size_t)M * N * 2;
  const size_t per = xb + wb + ob;
  const size_t rot = o.gemm_rot_mb << 20;
  int nsets = (int)std::min<size_t>(64, std::max<size_t>(1, (rot + per - 1) / per));
  r.nsets = nsets;
  std::vector<void*> X(nsets), Wt(nsets), O(nsets);
  for (int i = 0; i < nsets; ++i) {
    CK(cudaMalloc(&X[i], xb));
    CK(cudaMalloc(&Wt[i], wb));
    CK(cudaMalloc(&O[i], ob));
    fill_bf16(X[i], (size_t)M * K, 1000 + 3 * i, s);
    fill_bf16(Wt[i], (size_t)N * K, 1001 + 3 * i, s);
    CK(cudaMemsetAsync(O[i], 0, ob, s));
  }
  CK(cudaStreamSynchronize(s));

  // Row-major out[M,N] = x[M,K] @ W[N,K]^T is, in cuBLASLt's column-major terms,
  // D (N x M, ld N) = op(A) * B with A = W stored K x N (ld K), op = T, and B = x stored
  // K x M (ld K), op = N: the "TN" layout.
  cublasLtMatmulDesc_t op = nullptr;
  CKLT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CKLT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CKLT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  CKLT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, (uint64_t)K, (uint64_t)N, (int64_t)K));
  CKLT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, (uint64_t)K, (uint64_t)M, (int64_t)K));
  CKLT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, (uint64_t)N, (uint64_t)M, (int64_t)N));
  cublasLtMatmulPreference_t pref = nullptr;
  CKLT(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t wsb = ws_bytes;
  CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                            sizeof wsb));
  cublasLtMatmulHeuristicResult_t res[8];
  std::memset(res, 0, sizeof res);
  int nret = 0;
  cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 8, res, &nret);
  r.n_heur = nret;
  const float alpha = 1.0f, beta = 0.0f;
  auto launch = [&](int a, int set) -> cublasStatus_t {
    return cublasLtMatmul(lt, op, &alpha, Wt[set], la, X[set], lb, &beta, O[set], lc, O[set], lc,
                          &res[a].algo, ws, ws_bytes, s);
  };

  if (hs != CUBLAS_STATUS_SUCCESS || nret == 0) {
    r.ok = false;
    r.note = "no cuBLASLt heuristic result (status " + std::to_string((int)hs) + ")";
  } else {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double worst_err = 0;
    const int ntry = std::min(nret, std::max(1, o.algos));
    for (int a = 0; a < ntry; ++a) {
      if (res[a].state != CUBLAS_STATUS_SUCCESS) continue;
      // Uncaptured warm-up (also loads the kernel's module before any capture).
      bool failed = false;
      for (int i = 0; i < 2 * nsets && !failed; ++i)
        if (launch(a, i % nsets) != CUBLAS_STATUS_SUCCESS) failed = true;
      CK(cudaStreamSynchronize(s));
      if (failed) {
        r.note += "algo " + std::to_string(a) + " failed to launch; ";
        continue;
      }
      // Estimate one launch, size the inner batch to ~2 ms (a multiple of nsets).
      CK(cudaEventRecord(e0, s));
      for (int i = 0; i < nsets; ++i) CKLT(launch(a, i));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float est = 0;
      CK(cudaEventElapsedTime(&est, e0, e1));
      double per_launch = std::max(1e-4, (double)est / nsets);
      int rounds = (int)std::ceil(2.0 / (per_launch * nsets));
      rounds = std::max(1, std::min(rounds, std::max(1, 4096 / nsets)));
      const int inner = rounds * nsets;

      // Capture `inner` launches into a graph; fall back to plain launches on failure.
      cudaGraphExec_t gexec = nullptr;
      {
        bool cap_ok = true;
        cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        if (e == cudaSuccess) {
          for (int i = 0; i < inner; ++i)
            if (launch(a, i % nsets) != CUBLAS_STATUS_SUCCESS) cap_ok = false;
          cudaGraph_t g = nullptr;
          e = cudaStreamEndCapture(s, &g);
          if (e == cudaSuccess && cap_ok && g) e = cudaGraphInstantiate(&gexec, g, 0);
          if (g) cudaGraphDestroy(g);
          if (e != cudaSuccess || !cap_ok) {
            if (gexec) cudaGraphExecDestroy(gexec);
            gexec = nullptr;
          }
        }
        (void)cudaGetLastError();  // clear any capture error; the fallback is plain launches
      }
      Timing t = time_reps(s, std::max(2, o.warmup), o.reps, [&] {
        if (gexec) {
          CK(cudaGraphLaunch(gexec, s));
        } else {
          for (int i = 0; i < inner; ++i) CKLT(launch(a, i % nsets));
        }
      });
      for (auto& v : t.ms) v /= inner;
      double med = median(t.ms), mn = vmin(t.ms);
      if (gexec) CK(cudaGraphExecDestroy(gexec));

      // Check this algo's result on set 0 (output cleared first).
      CK(cudaMemsetAsync(O[0], 0, ob, s));
      CKLT(launch(a, 0));
      double err = check_gemm(X[0], Wt[0], O[0], M, N, K, rng);
      worst_err = std::max(worst_err, err);

      ++r.n_tried;
      if (a == 0) r.ms_heur0 = med;
      if (r.best_algo < 0 || med < r.ms_best) {
        r.ms_best = med;
        r.ms_best_min = mn;
        r.best_algo = a;
        r.inner = inner;
        r.graph = gexec != nullptr;
      }
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    r.max_rel_err = r.n_tried ? worst_err : NAN;
    if (r.n_tried == 0) {
      r.ok = false;
      r.note += "no algo ran";
    } else if (!(worst_err <= 2e-2)) {
      r.ok = false;
      r.note += "relative error above 2e-2";
    }
  }
  CKLT(cublasLtMatmulPreferenceDestroy(pref));
  CKLT(cublasLtMatrixLayoutDestroy(la));
  CKLT(cublasLtMatrixLayoutDestroy(lb));
  CKLT(cublasLtMatrixLayoutDestroy(lc));
  CKLT(cublasLtMatmulDescDestroy(op));
  CK(cudaStreamSynchronize(s));
  for (int i = 0; i < nsets; ++i) {
    CK(cudaFree(X[i]));
    CK(cudaFree(Wt[i]));
    CK(cudaFree(O[i]));
  }
  if (!r.ok) g_all_ok = false;
  return r;
}

// ------------------------------------------------------------------------------------------
// (c) pinned host <-> device

static void host_fill_words(void* p, size_t bytes, uint64_t seed) {
  uint64_t* w = (uint64_t*)p;
  const size_t n = bytes / 8;
  for (size_t i = 0; i < n; ++i) w[i] = word_at(seed, i);
}

static std::vector<BwRow> run_host(const Opts& o, cudaStream_t s, cudaStream_t s2, int dev,
                                   std::mt19937_64& rng, std::string& fastest_h2d,
                                   std::string& fastest_d2h) {
  std::vector<BwRow> rows;
  const size_t H = o.host_mb << 20;
  const uint64_t seed_h = 0x4057001, seed_d = 0xDE71CE1;
  int can_map = 0;
  CK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, dev));
  void *h_src = nullptr, *h_dst = nullptr, *d_in = nullptr, *d_out = nullptr;
  const unsigned flags = cudaHostAllocPortable | (can_map ? cudaHostAllocMapped : 0u);
  CK(cudaHostAlloc(&h_src, H, flags));
  CK(cudaHostAlloc(&h_dst, H, flags));
  CK(cudaMalloc(&d_in, H));
  CK(cudaMalloc(&d_out, H));
  host_fill_words(h_src, H, seed_h);
  std::memset(h_dst, 0, H);
  fill_words(d_out, H, seed_d, s);
  CK(cudaMemsetAsync(d_in, 0, H, s));
  CK(cudaStreamSynchronize(s));

  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  auto clear_dev = [&](void* p, size_t n) {
    CK(cudaMemsetAsync(p, 0, n, s));
    CK(cudaStreamSynchronize(s));
  };
  auto clear_host = [&](void* p, size_t n) {
    CK(cudaDeviceSynchronize());
    std::memset(p, 0, n);
  };
  auto mark = [&](BwRow& r, bool ok, long bad, int samples) {
    r.checked = true;
    r.ok = ok;
    if (!ok) r.note += std::to_string(bad) + " of " + std::to_string(samples) + " sampled words wrong; ";
    if (!ok) g_all_ok = false;
  };

  // --- large copies
  {
    BwRow r;
    r.section = "host";
    r.name = "H2D " + std::to_string(o.host_mb) + " MiB";
    r.bytes_counted = r.bytes_payload = (double)H;
    clear_dev(d_in, H);
    CK(cudaMemcpyAsync(d_in, h_src, H, cudaMemcpyHostToDevice, s));
    long bad = 0;
    mark(r, check_contig(d_in, H / 8, seed_h, 1024, rng, &bad), bad, 1024);
    record_timing(r, time_reps(s, o.warmup, o.reps, [&] {
                    CK(cudaMemcpyAsync(d_in, h_src, H, cudaMemcpyHostToDevice, s));
                  }));
    rows.push_back(r);
  }
  {
    BwRow r;
    r.section = "host";
    r.name = "D2H " + std::to_string(o.host_mb) + " MiB";
    r.bytes_counted = r.bytes_payload = (double)H;
    clear_host(h_dst, H);
    CK(cudaMemcpyAsync(h_dst, d_out, H, cudaMemcpyDeviceToHost, s));
    long bad = 0;
    mark(r, check_contig(h_dst, H / 8, seed_d, 1024, rng, &bad), bad, 1024);
    record_timing(r, time_reps(s, o.warmup, o.reps, [&] {
                    CK(cudaMemcpyAsync(h_dst, d_out, H, cudaMemcpyDeviceToHost, s));
                  }));
    rows.push_back(r);
  }
  {
    BwRow r;
    r.section = "host";
    r.name = "H2D + D2H at once (2 streams), " + std::to_string(o.host_mb) + " MiB each";
    r.bytes_counted = r.bytes_payload = 2.0 * H;
    auto body = [&] {
      CK(cudaEventRecord(fork, s));
      CK(cudaStreamWaitEvent(s2, fork, 0));
      CK(cudaMemcpyAsync(d_in, h_src, H, cudaMemcpyHostToDevice, s));
      CK(cudaMemcpyAsync(h_dst, d_out, H, cudaMemcpyDeviceToHost, s2));
      CK(cudaEventRecord(join, s2));
      CK(cudaStreamWaitEvent(s, join, 0));
    };
    clear_dev(d_in, H);
    clear_host(h_dst, H);
    body();
    long bad1 = 0, bad2 = 0;
    bool ok1 = check_contig(d_in, H / 8, seed_h, 512, rng, &bad1);
    bool ok2 = check_contig(h_dst, H / 8, seed_d, 512, rng, &bad2);
    mark(r, ok1 && ok2, bad1 + bad2, 1024);
    record_timing(r, time_reps(s, o.warmup, o.reps, body));
    r.note += "GB/s counts both directions (sum); per direction about half";
    rows.push_back(r);
  }

  // --- many small copies between random block slots (KV-block-like)
  const size_t B = o.small_kb << 10;
  const size_t pool_blocks = H / B;
  const int C = (int)std::min<size_t>({(size_t)o.small_count, pool_blocks, (size_t)65535});
  if (C <= 0 || B % 16 != 0) {
    std::fprintf(stderr, "small copies skipped: --small-kb must divide --host-mb and be > 0\n");
  } else {
    std::vector<size_t> perm_src(pool_blocks), perm_dst(pool_blocks);
    std::iota(perm_src.begin(), perm_src.end(), 0);
    std::iota(perm_dst.begin(), perm_dst.end(), 0);
    std::shuffle(perm_src.begin(), perm_src.end(), rng);
    std::shuffle(perm_dst.begin(), perm_dst.end(), rng);
    const size_t wpb = B / 8;  // words per block
    const std::string tag = std::to_string(C) + " x " + std::to_string(o.small_kb) + " KiB";

    void* h_src_dev = h_src;  // device-visible aliases of the pinned buffers (zero-copy)
    void* h_dst_dev = h_dst;
    if (can_map) {
      CK(cudaHostGetDevicePointer(&h_src_dev, h_src, 0));
      CK(cudaHostGetDevicePointer(&h_dst_dev, h_dst, 0));
    }
    void** d_ptrs = nullptr;  // [srcs C][dsts C] for the gather kernel
    CK(cudaMalloc(&d_ptrs, 2 * C * sizeof(void*)));

    for (int dir = 0; dir < 2; ++dir) {
      const bool h2d = dir == 0;
      const char* dname = h2d ? "H2D" : "D2H";
      char* src_base = (char*)(h2d ? h_src : d_out);
      char* dst_base = (char*)(h2d ? d_in : h_dst);
      char* src_base_k = (char*)(h2d ? h_src_dev : d_out);  // as the kernel sees them
      char* dst_base_k = (char*)(h2d ? d_in : h_dst_dev);
      const uint64_t seed_src = h2d ? seed_h : seed_d;
      const cudaMemcpyKind kind = h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
      std::vector<void*> dsts(C);
      std::vector<const void*> srcs(C);
      std::vector<size_t> sizes(C, B);
      std::vector<void*> kptrs(2 * C);
      for (int i = 0; i < C; ++i) {
        srcs[i] = src_base + perm_src[i] * B;
        dsts[i] = dst_base + perm_dst[i] * B;
        kptrs[i] = src_base_k + perm_src[i] * B;
        kptrs[C + i] = dst_base_k + perm_dst[i] * B;
      }
      CK(cudaMemcpy(d_ptrs, kptrs.data(), 2 * C * sizeof(void*), cudaMemcpyHostToDevice));

      auto clear_dst = [&] {
        if (h2d)
          clear_dev(d_in, H);
        else
          clear_host(h_dst, H);
      };
      // sampled check: copy i lands block perm_src[i] of the source in block perm_dst[i]
      auto check_blocks = [&](BwRow& r) {
        CK(cudaDeviceSynchronize());
        long bad = 0;
        int samples = 0;
        std::uniform_int_distribution<int> ci(0, C - 1);
        std::uniform_int_distribution<size_t> wi(0, wpb - 1);
        for (int k = 0; k < 64; ++k) {
          int i = k == 0 ? 0 : k == 1 ? C - 1 : ci(rng);
          for (int j = 0; j < 4; ++j) {
            size_t w = j == 0 ? 0 : j == 1 ? wpb - 1 : wi(rng);
            uint64_t got = read_word(dst_base, perm_dst[i] * wpb + w);
            if (got != word_at(seed_src, perm_src[i] * wpb + w)) ++bad;
            ++samples;
          }
        }
        mark(r, bad == 0, bad, samples);
      };
      auto new_row = [&](const std::string& method) {
        BwRow r;
        r.section = "host_small";
        r.name = std::string(dname) + " " + tag + ": " + method;
        r.bytes_counted = r.bytes_payload = (double)C * B;
        return r;
      };

      // (1) loop of cudaMemcpyAsync
      {
        BwRow r = new_row("loop of cudaMemcpyAsync");
        auto body = [&] {
          for (int i = 0; i < C; ++i) CK(cudaMemcpyAsync(dsts[i], srcs[i], B, kind, s));
        };
        clear_dst();
        body();
        check_blocks(r);
        record_timing(r, time_reps(s, o.warmup, o.reps, body));
        rows.push_back(r);
      }
      // (2) cudaMemcpyBatchAsync
      {
        BwRow r = new_row("cudaMemcpyBatchAsync");
#if CUDART_VERSION >= 12080
        cudaMemcpyAttributes attr;
        std::memset(&attr, 0, sizeof attr);
        attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        attr.srcLocHint.type = h2d ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
        attr.srcLocHint.id = h2d ? 0 : dev;
        attr.dstLocHint.type = h2d ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
        attr.dstLocHint.id = h2d ? dev : 0;
        attr.flags = 0;
        size_t attr_idx = 0;
        auto call = [&]() -> cudaError_t {
#if CUDART_VERSION >= 13000
          return cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), (size_t)C, &attr,
                                      &attr_idx, 1, s);
#else
          size_t fail_idx = 0;
          return cudaMemcpyBatchAsync(dsts.data(), const_cast<void**>(srcs.data()), sizes.data(),
                                      (size_t)C, &attr, &attr_idx, 1, &fail_idx, s);
#endif
        };
        clear_dst();
        cudaError_t e = call();
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        if (e != cudaSuccess) {
          (void)cudaGetLastError();
          r.ran = false;
          r.note = std::string("unavailable: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
        } else {
          check_blocks(r);
          record_timing(r, time_reps(s, o.warmup, o.reps, [&] { CK(call()); }));
        }
#else
        r.ran = false;
        r.note = "unavailable: built with CUDA < 12.8";
#endif
        rows.push_back(r);
      }
      // (3) CUDA graph of the C copies (captured once, replayed)
      {
        BwRow r = new_row("CUDA graph of cudaMemcpyAsync nodes");
        cudaGraphExec_t gexec = nullptr;
        cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        if (e == cudaSuccess) {
          cudaError_t first = cudaSuccess;
          for (int i = 0; i < C; ++i) {
            cudaError_t ei = cudaMemcpyAsync(dsts[i], srcs[i], B, kind, s);
            if (ei != cudaSuccess && first == cudaSuccess) first = ei;
          }
          cudaGraph_t g = nullptr;
          e = cudaStreamEndCapture(s, &g);
          if (e == cudaSuccess) e = first;
          if (e == cudaSuccess && g) e = cudaGraphInstantiate(&gexec, g, 0);
          if (g) cudaGraphDestroy(g);
        }
        if (e != cudaSuccess || !gexec) {
          (void)cudaGetLastError();
          if (gexec) cudaGraphExecDestroy(gexec);
          gexec = nullptr;
          r.ran = false;
          r.note = std::string("capture failed: ") + cudaGetErrorName(e);
        } else {
          clear_dst();
          CK(cudaGraphLaunch(gexec, s));
          check_blocks(r);
          record_timing(r, time_reps(s, o.warmup, o.reps, [&] { CK(cudaGraphLaunch(gexec, s)); }));
          r.note = "host column: graph launch only";
          CK(cudaGraphExecDestroy(gexec));
        }
        rows.push_back(r);
      }
      // (4) zero-copy gather/scatter kernel over mapped pinned memory
      {
        BwRow r = new_row("zero-copy kernel (mapped pinned)");
        if (!can_map) {
          r.ran = false;
          r.note = "device cannot map host memory";
        } else {
          const size_t n16 = B / 16;
          const unsigned ctas = (unsigned)std::max<size_t>(1, B / 16384);
          const dim3 grid(ctas, (unsigned)C);
          auto body = [&] {
            batched_copy_kernel<<<grid, 256, 0, s>>>((const uint4* const*)d_ptrs,
                                                     (uint4* const*)(d_ptrs + C), n16);
            CK_LAUNCH();
          };
          clear_dst();
          body();
          check_blocks(r);
          record_timing(r, time_reps(s, o.warmup, o.reps, body));
          r.note = std::to_string(ctas) + " CTAs x 256 threads per copy";
        }
        rows.push_back(r);
      }
      // fastest method this direction
      double best = 0;
      std::string bname = "none";
      for (auto& r : rows)
        if (r.section == "host_small" && r.ran && r.ok && r.name.rfind(dname, 0) == 0 &&
            r.gbps() > best) {
          best = r.gbps();
          bname = r.name.substr(r.name.find(": ") + 2);
        }
      (h2d ? fastest_h2d : fastest_d2h) = bname;
    }
    CK(cudaFree(d_ptrs));
  }

  CK(cudaDeviceSynchronize());
  CK(cudaEventDestroy(fork));
  CK(cudaEventDestroy(join));
  CK(cudaFreeHost(h_src));
  CK(cudaFreeHost(h_dst));
  CK(cudaFree(d_in));
  CK(cudaFree(d_out));
  return rows;
}

// ------------------------------------------------------------------------------------------
// output

static void print_bw_table(const char* title, const std::vector<BwRow>& rows, bool d2d) {
  std::printf("\n### %s\n\n", title);
  if (d2d) {
    std::printf("| test | MiB per rep | median ms | min ms | GB/s (read+written) | GB/s (size/time) | check | note |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---|---|\n");
  } else {
    std::printf("| test | MiB per rep | median ms | min ms | GB/s | host enqueue us | check | note |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---|---|\n");
  }
  for (auto& r : rows) {
    const char* chk = !r.ran ? "not run" : !r.checked ? "n/a" : r.ok ? "ok" : "FAIL";
    if (d2d)
      std::printf("| %s | %.0f | %s | %s | %s | %s | %s | %s |\n", r.name.c_str(),
                  r.bytes_payload / 1048576.0, fmt("%.3f", r.ms_med).c_str(),
                  fmt("%.3f", r.ms_min).c_str(), fmt("%.0f", r.ran ? r.gbps() : NAN).c_str(),
                  fmt("%.0f", r.ran ? r.gbps_payload() : NAN).c_str(), chk, r.note.c_str());
    else
      std::printf("| %s | %.0f | %s | %s | %s | %s | %s | %s |\n", r.name.c_str(),
                  r.bytes_payload / 1048576.0, fmt("%.3f", r.ms_med).c_str(),
                  fmt("%.3f", r.ms_min).c_str(), fmt("%.1f", r.ran ? r.gbps() : NAN).c_str(),
                  fmt("%.0f", r.host_us_med).c_str(), chk, r.note.c_str());
  }
}

static void print_gemm_table(const std::vector<GemmRow>& rows) {
  std::printf("\n### bf16 GEMM, cuBLASLt (out[M,N] = x[M,K] @ W[N,K]^T, fp32 accumulate)\n\n");
  std::printf("| M | N | K | sets | algos tried | heur[0] us | best us | TFLOP/s best | TFLOP/s heur[0] | GB/s best | max rel err | graph | check |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
  for (auto& r : rows)
    std::printf("| %d | %d | %d | %d | %d/%d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.M,
                r.N, r.K, r.nsets, r.n_tried, r.n_heur, fmt("%.1f", r.ms_heur0 * 1e3).c_str(),
                fmt("%.1f", r.ms_best * 1e3).c_str(), fmt("%.1f", r.tflops(r.ms_best)).c_str(),
                fmt("%.1f", r.tflops(r.ms_heur0)).c_str(), fmt("%.0f", r.gbps(r.ms_best)).c_str(),
                fmt("%.2e", r.max_rel_err).c_str(), r.graph ? "yes" : "no",
                r.ok ? "ok" : ("FAIL " + r.note).c_str());
}

static std::string bw_json(const BwRow& r) {
  std::string s = "{\"name\": \"" + json_escape(r.name) + "\"";
  s += ", \"ran\": " + std::string(r.ran ? "true" : "false");
  s += ", \"bytes_counted\": " + jnum(r.bytes_counted);
  s += ", \"bytes_payload\": " + jnum(r.bytes_payload);
  s += ", \"ms_median\": " + jnum(r.ms_med);
  s += ", \"ms_min\": " + jnum(r.ms_min);
  s += ", \"gbps\": " + jnum(r.ran ? r.gbps() : NAN);
  s += ", \"gbps_payload\": " + jnum(r.ran ? r.gbps_payload() : NAN);
  s += ", \"host_enqueue_us_median\": " + jnum(r.host_us_med);
  s += ", \"checked\": " + std::string(r.checked ? "true" : "false");
  s += ", \"ok\": " + std::string(r.ok ? "true" : "false");
  s += ", \"note\": \"" + json_escape(r.note) + "\"}";
  return s;
}

static std::string gemm_json(const GemmRow& r) {
  std::string s = "{\"M\": " + std::to_string(r.M) + ", \"N\": " + std::to_string(r.N) +
                  ", \"K\": " + std::to_string(r.K);
  s += ", \"rotating_sets\": " + std::to_string(r.nsets);
  s += ", \"launches_per_rep\": " + std::to_string(r.inner);
  s += ", \"heuristic_results\": " + std::to_string(r.n_heur);
  s += ", \"algos_tried\": " + std::to_string(r.n_tried);
  s += ", \"best_algo_index\": " + std::to_string(r.best_algo);
  s += ", \"cuda_graph\": " + std::string(r.graph ? "true" : "false");
  s += ", \"us_heur0\": " + jnum(r.ms_heur0 * 1e3);
  s += ", \"us_best\": " + jnum(r.ms_best * 1e3);
  s += ", \"us_best_min\": " + jnum(r.ms_best_min * 1e3);
  s += ", \"tflops_best\": " + jnum(r.tflops(r.ms_best));
  s += ", \"tflops_heur0\": " + jnum(r.tflops(r.ms_heur0));
  s += ", \"bytes_min\": " + jnum(r.bytes());
  s += ", \"gbps_best\": " + jnum(r.gbps(r.ms_best));
  s += ", \"gbps_heur0\": " + jnum(r.gbps(r.ms_heur0));
  s += ", \"max_rel_err\": " + jnum(r.max_rel_err);
  s += ", \"ok\": " + std::string(r.ok ? "true" : "false");
  s += ", \"note\": \"" + json_escape(r.note) + "\"}";
  return s;
}

static std::string join_rows(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ",\n    " : "\n    ") + v[i];
  s += v.empty() ? "]" : "\n  ]";
  return s;
}

static void usage() {
  std::fprintf(stderr,
               "usage: floors [--json PATH] [--reps N] [--warmup N] [--sections d2d,gemm,host]\n"
               "              [--copy-mb MiB] [--host-mb MiB] [--small-kb KiB] [--small-count N]\n"
               "              [--algos N] [--gemm-rot-mb MiB] [--device N]\n");
}

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", a.c_str());
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    auto num = [&]() -> long long {
      std::string v = next();
      char* end = nullptr;
      long long x = std::strtoll(v.c_str(), &end, 10);
      if (!end || *end || x < 0) {
        std::fprintf(stderr, "bad number for %s: %s\n", a.c_str(), v.c_str());
        std::exit(2);
      }
      return x;
    };
    if (a == "--json") o.json_path = next();
    else if (a == "--reps") o.reps = (int)std::max(1LL, num());
    else if (a == "--warmup") o.warmup = (int)num();
    else if (a == "--device") o.device = (int)num();
    else if (a == "--copy-mb") o.copy_mb = (size_t)std::max(1LL, num());
    else if (a == "--host-mb") o.host_mb = (size_t)std::max(1LL, num());
    else if (a == "--small-kb") o.small_kb = (size_t)std::max(1LL, num());
    else if (a == "--small-count") o.small_count = (int)std::max(1LL, num());
    else if (a == "--algos") o.algos = (int)std::max(1LL, num());
    else if (a == "--gemm-rot-mb") o.gemm_rot_mb = (size_t)std::max(1LL, num());
    else if (a == "--sections") {
      std::string v = next();
      o.do_d2d = v.find("d2d") != std::string::npos;
      o.do_gemm = v.find("gemm") != std::string::npos;
      o.do_host = v.find("host") != std::string::npos;
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      usage();
      return 2;
    }
  }
  if ((o.small_kb << 10) % 16 != 0 || (o.host_mb << 20) % (o.small_kb << 10) != 0) {
    std::fprintf(stderr, "--small-kb must divide --host-mb\n");
    return 2;
  }

  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (o.device >= ndev) {
    std::fprintf(stderr, "device %d not present (%d devices)\n", o.device, ndev);
    return 2;
  }
  CK(cudaSetDevice(o.device));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, o.device));
  int mem_clock_khz = 0, bus_bits = 0, sm_clock_khz = 0, l2 = 0;
  CK(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, o.device));
  CK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, o.device));
  CK(cudaDeviceGetAttribute(&sm_clock_khz, cudaDevAttrClockRate, o.device));
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, o.device));
  g_sms = prop.multiProcessorCount;
  g_grid = g_sms * 8;
  const double theo_gbps = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  int rt_ver = 0, drv_ver = 0;
  CK(cudaRuntimeGetVersion(&rt_ver));
  CK(cudaDriverGetVersion(&drv_ver));
  const size_t lt_ver = cublasLtGetVersion();

  std::printf("## floors: %s (sm_%d%d, %d SMs, L2 %.1f MiB, %.1f GiB, mem clock %d MHz x %d bit "
              "= %.0f GB/s theoretical, SM clock %d MHz)\n",
              prop.name, prop.major, prop.minor, g_sms, l2 / 1048576.0,
              prop.totalGlobalMem / 1073741824.0, mem_clock_khz / 1000, bus_bits, theo_gbps,
              sm_clock_khz / 1000);
  std::printf("CUDA runtime %d, driver %d, cuBLASLt %zu; reps %d (median), warm-up %d\n", rt_ver,
              drv_ver, lt_ver, o.reps, o.warmup);
  std::fflush(stdout);

  if ((size_t)l2 * 2 > (o.gemm_rot_mb << 20))
    std::fprintf(stderr, "warning: --gemm-rot-mb %zu is under twice L2 (%d bytes)\n",
                 o.gemm_rot_mb, l2);

  cudaStream_t s, s2;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  std::mt19937_64 rng(12345);

  std::vector<BwRow> d2d_rows, host_rows;
  std::vector<GemmRow> gemm_rows;
  std::string fastest_h2d = "none", fastest_d2h = "none";

  if (o.do_d2d) {
    d2d_rows = run_d2d(o, s, rng);
    print_bw_table("device-to-device bandwidth", d2d_rows, true);
    std::fflush(stdout);
  }
  if (o.do_gemm) {
    cublasLtHandle_t lt = nullptr;
    CKLT(cublasLtCreate(&lt));
    const size_t ws_bytes = 32u << 20;
    void* ws = nullptr;
    CK(cudaMalloc(&ws, ws_bytes));
    if (!o.do_d2d) {  // clocks up before the first timing
      void *a = nullptr, *b = nullptr;
      CK(cudaMalloc(&a, 1u << 30));
      CK(cudaMalloc(&b, 1u << 30));
      fill_words(a, 1u << 30, 7, s);
      gpu_warmup(s, a, b, 1u << 30, 300.0);
      CK(cudaFree(a));
      CK(cudaFree(b));
    }
    struct Shape { int M, N, K; };
    std::vector<Shape> shapes = {{8192, 8192, 8192}};
    const int Ms[] = {1, 32, 128, 4096};
    const int NK[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {14336, 4096}};
    for (int M : Ms)
      for (auto& nk : NK) shapes.push_back({M, nk[0], nk[1]});
    for (auto& sh : shapes) {
      gemm_rows.push_back(run_gemm(o, lt, ws, ws_bytes, s, sh.M, sh.N, sh.K, rng));
      auto& r = gemm_rows.back();
      std::fprintf(stderr, "gemm %dx%dx%d: best %.2f us (%.1f TFLOP/s, %.0f GB/s), err %.2e\n",
                   r.M, r.N, r.K, r.ms_best * 1e3, r.tflops(r.ms_best), r.gbps(r.ms_best),
                   r.max_rel_err);
    }
    CK(cudaFree(ws));
    CKLT(cublasLtDestroy(lt));
    print_gemm_table(gemm_rows);
    std::fflush(stdout);
  }
  if (o.do_host) {
    host_rows = run_host(o, s, s2, o.device, rng, fastest_h2d, fastest_d2h);
    print_bw_table("pinned host <-> device", host_rows, false);
    std::printf("\nfastest small-copy method: H2D %s; D2H %s\n", fastest_h2d.c_str(),
                fastest_d2h.c_str());
    std::fflush(stdout);
  }

  std::printf("\nall checks %s\n", g_all_ok ? "passed" : "FAILED");

  if (!o.json_path.empty()) {
    std::vector<std::string> dj, gj, hj;
    for (auto& r : d2d_rows) dj.push_back(bw_json(r));
    for (auto& r : gemm_rows) gj.push_back(gemm_json(r));
    for (auto& r : host_rows) hj.push_back(bw_json(r));
    std::string j = "{\n";
    j += "  \"tool\": \"bench/cuda/floors\",\n";
    j += "  \"device\": {\"name\": \"" + json_escape(prop.name) + "\", \"cc\": \"" +
         std::to_string(prop.major) + "." + std::to_string(prop.minor) +
         "\", \"sms\": " + std::to_string(g_sms) + ", \"l2_bytes\": " + std::to_string(l2) +
         ", \"total_mem_bytes\": " + std::to_string(prop.totalGlobalMem) +
         ", \"mem_clock_khz\": " + std::to_string(mem_clock_khz) +
         ", \"bus_width_bits\": " + std::to_string(bus_bits) +
         ", \"theoretical_mem_gbps\": " + jnum(theo_gbps) +
         ", \"sm_clock_khz\": " + std::to_string(sm_clock_khz) + "},\n";
    j += "  \"cuda_runtime\": " + std::to_string(rt_ver) + ", \"cuda_driver\": " +
         std::to_string(drv_ver) + ", \"cublaslt\": " + std::to_string(lt_ver) + ",\n";
    j += "  \"reps\": " + std::to_string(o.reps) + ", \"warmup\": " + std::to_string(o.warmup) +
         ", \"statistic\": \"median\",\n";
    j += "  \"units\": {\"gbps\": \"1e9 bytes/s\", \"tflops\": \"1e12 flop/s\", "
         "\"d2d_gbps\": \"bytes read + written\", \"d2d_gbps_payload\": \"copy size / time\", "
         "\"gemm_bytes_min\": \"2*(M*K + N*K + M*N)\"},\n";
    j += "  \"d2d\": " + join_rows(dj) + ",\n";
    j += "  \"gemm\": " + join_rows(gj) + ",\n";
    j += "  \"host\": " + join_rows(hj) + ",\n";
    j += "  \"small_copy_fastest\": {\"h2d\": \"" + json_escape(fastest_h2d) + "\", \"d2h\": \"" +
         json_escape(fastest_d2h) + "\"},\n";
    j += "  \"all_checks_ok\": " + std::string(g_all_ok ? "true" : "false") + "\n}\n";
    FILE* f = std::fopen(o.json_path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", o.json_path.c_str());
      return 3;
    }
    std::fwrite(j.data(), 1, j.size(), f);
    std::fclose(f);
    std::printf("wrote %s\n", o.json_path.c_str());
  }

  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(s2));
  return g_all_ok ? 0 : 1;
}
