// floors.h: what the sections of the floors benchmark share (floors.cu has the overview:
// what is measured and how; floors_d2d.cu, floors_gemm.cu and floors_host.cu one section
// each; floors_common.cu the kernels and helpers below).
#pragma once

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

#define CK(call)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "CUDA error %s (%d: %s) at %s:%d in %s\n", cudaGetErrorName(e_), \
                   (int)e_, cudaGetErrorString(e_), __FILE__, __LINE__, #call);             \
      std::exit(3);                                                                         \
    }                                                                                       \
  } while (0)

#define CKLT(call)                                                                            \
  do {                                                                                        \
    cublasStatus_t s_ = (call);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
      std::fprintf(stderr, "cuBLASLt error %d at %s:%d in %s\n", (int)s_, __FILE__, __LINE__, \
                   #call);                                                                    \
      std::exit(3);                                                                           \
    }                                                                                         \
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

// Vectorized copy, 16 bytes a thread, 4 in flight (floors_common.cu).
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n);

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

extern int g_sms;
extern int g_grid;  // bandwidth-kernel grid: 8 CTAs of 256 threads per SM
extern bool g_all_ok;

double median(std::vector<double> v);
double vmin(const std::vector<double>& v);

struct Timing {
  std::vector<double> ms;       // device time per repeat (events)
  std::vector<double> host_us;  // host time to enqueue the body per repeat
};

// Runs body() `warm` times, then `reps` times each between two events on stream s.
// body() must enqueue all of its work so that it completes before anything recorded on s
// afterwards (multi-stream bodies join back into s themselves).
Timing time_reps(cudaStream_t s, int warm, int reps, const std::function<void()>& body);
void fill_words(void* p, size_t bytes, uint64_t seed, cudaStream_t s);
void fill_bf16(void* p, size_t n, uint64_t seed, cudaStream_t s);
// Reads one 8-byte word from a device or (pinned) host pointer. Caller synchronizes first.
uint64_t read_word(const void* base, size_t word_index);
// Sampled check of a contiguous copy: word i of dst must be word_at(seed, i).
bool check_contig(const void* dst, size_t nwords, uint64_t seed, int samples, std::mt19937_64& rng,
                  long* bad_out = nullptr);
std::string json_escape(const std::string& s);
std::string jnum(double v);
std::string fmt(const char* f, double v);

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

void record_timing(BwRow& r, const Timing& t);
// Brings clocks up: repeated copy kernels for about ms_target milliseconds.
void gpu_warmup(cudaStream_t s, const void* src, void* dst, size_t bytes, double ms_target);

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

// The three sections.
std::vector<BwRow> run_d2d(const Opts& o, cudaStream_t s, std::mt19937_64& rng);
GemmRow run_gemm(const Opts& o, cublasLtHandle_t lt, void* ws, size_t ws_bytes, cudaStream_t s,
                 int M, int N, int K, std::mt19937_64& rng);
std::vector<BwRow> run_host(const Opts& o, cudaStream_t s, cudaStream_t s2, int dev,
                            std::mt19937_64& rng, std::string& fastest_h2d,
                            std::string& fastest_d2h);
