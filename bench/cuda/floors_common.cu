// floors_common.cu: the kernels and helpers the floors sections share (floors.h).
#include "floors.h"

int g_sms = 132;
int g_grid = 132 * 8;  // bandwidth-kernel grid: 8 CTAs of 256 threads per SM
bool g_all_ok = true;

static __global__ void fill_u64_kernel(uint64_t* p, size_t n, uint64_t seed) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = word_at(seed, i);
}

// uniform in [-1, 1)
static __global__ void fill_bf16_kernel(__nv_bfloat16* p, size_t n, uint64_t seed) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float u = (float)(word_at(seed, i) >> 40) * (1.0f / 16777216.0f);
    p[i] = __float2bfloat16(2.0f * u - 1.0f);
  }
}

// ------------------------------------------------------------------------------------------
// bandwidth kernels

__global__ void __launch_bounds__(256)
    copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
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

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double vmin(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::min_element(v.begin(), v.end());
}

// Runs body() `warm` times, then `reps` times each between two events on stream s.
// body() must enqueue all of its work so that it completes before anything recorded on s
// afterwards (multi-stream bodies join back into s themselves).
Timing time_reps(cudaStream_t s, int warm, int reps, const std::function<void()>& body) {
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

void fill_words(void* p, size_t bytes, uint64_t seed, cudaStream_t s) {
  fill_u64_kernel<<<g_grid, 256, 0, s>>>((uint64_t*)p, bytes / 8, seed);
  CK_LAUNCH();
}
void fill_bf16(void* p, size_t n, uint64_t seed, cudaStream_t s) {
  fill_bf16_kernel<<<g_grid, 256, 0, s>>>((__nv_bfloat16*)p, n, seed);
  CK_LAUNCH();
}

// Reads one 8-byte word from a device or (pinned) host pointer. Caller synchronizes first.
uint64_t read_word(const void* base, size_t word_index) {
  uint64_t w = 0;
  CK(cudaMemcpy(&w, (const uint64_t*)base + word_index, 8, cudaMemcpyDefault));
  return w;
}

// Sampled check of a contiguous copy: word i of dst must be word_at(seed, i).
bool check_contig(const void* dst, size_t nwords, uint64_t seed, int samples, std::mt19937_64& rng,
                  long* bad_out) {
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

std::string json_escape(const std::string& s) {
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
std::string jnum(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}
std::string fmt(const char* f, double v) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

void record_timing(BwRow& r, const Timing& t) {
  r.ms_med = median(t.ms);
  r.ms_min = vmin(t.ms);
  r.host_us_med = median(t.host_us);
}

void gpu_warmup(cudaStream_t s, const void* src, void* dst, size_t bytes, double ms_target) {
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
