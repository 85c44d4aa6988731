// floors_host.cu: (c) pinned host <-> device copies (floors.cu has the overview).
#include "floors.h"

// Batched copy: copy blockIdx.y goes from srcs[y] to dsts[y], n16 16-byte words each, split
// over gridDim.x CTAs. Pointers may be mapped pinned host memory (zero-copy over PCIe).
__global__ void __launch_bounds__(256)
    batched_copy_kernel(const uint4* const* __restrict__ srcs, uint4* const* __restrict__ dsts,
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
// (c) pinned host <-> device

static void host_fill_words(void* p, size_t bytes, uint64_t seed) {
  uint64_t* w = (uint64_t*)p;
  const size_t n = bytes / 8;
  for (size_t i = 0; i < n; ++i) w[i] = word_at(seed, i);
}

std::vector<BwRow> run_host(const Opts& o, cudaStream_t s, cudaStream_t s2, int dev,
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
    if (!ok)
      r.note += std::to_string(bad) + " of " + std::to_string(samples) + " sampled words wrong; ";
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
          r.note = std::string("unavailable: ") + cudaGetErrorName(e) + " (" +
                   cudaGetErrorString(e) + ")";
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
