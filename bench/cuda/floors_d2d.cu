// floors_d2d.cu: (a) device-to-device bandwidth (floors.cu has the overview).
#include "floors.h"

// Reads every 16-byte word; writes only if the XOR hits a magic value (practically never), so
// the loads cannot be removed and (almost) no bytes are written.
__global__ void __launch_bounds__(256)
    read_kernel(const uint4* __restrict__ src, size_t n, uint4* __restrict__ sink) {
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

std::vector<BwRow> run_d2d(const Opts& o, cudaStream_t s, std::mt19937_64& rng) {
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
    Timing t = time_reps(s, o.warmup, o.reps,
                         [&] { CK(cudaMemcpyAsync(dst, src, S, cudaMemcpyDeviceToDevice, s)); });
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
