// floors.cu: hardware ceilings ("floors" for the engine's timings) on one GPU.
//
// Build: with the project (CMake target `floors`, whenever CUDA is found), or
//   make -C bench/cuda [BIN=/tmp/floors]
// Sources: this file (output and main), floors_d2d.cu, floors_gemm.cu, floors_host.cu (one
// section each), floors_common.cu and floors.h (kernels and helpers they share).
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

#include "floors.h"

// ------------------------------------------------------------------------------------------
// output

static void print_bw_table(const char* title, const std::vector<BwRow>& rows, bool d2d) {
  std::printf("\n### %s\n\n", title);
  if (d2d) {
    std::printf(
        "| test | MiB per rep | median ms | min ms | GB/s (read+written) | GB/s (size/time) | "
        "check | note |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---|---|\n");
  } else {
    std::printf(
        "| test | MiB per rep | median ms | min ms | GB/s | host enqueue us | check | note |\n");
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
  std::printf(
      "| M | N | K | sets | algos tried | heur[0] us | best us | TFLOP/s best | TFLOP/s heur[0] | "
      "GB/s best | max rel err | graph | check |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
  for (auto& r : rows)
    std::printf("| %d | %d | %d | %d | %d/%d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.M, r.N,
                r.K, r.nsets, r.n_tried, r.n_heur, fmt("%.1f", r.ms_heur0 * 1e3).c_str(),
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
    if (a == "--json")
      o.json_path = next();
    else if (a == "--reps")
      o.reps = (int)std::max(1LL, num());
    else if (a == "--warmup")
      o.warmup = (int)num();
    else if (a == "--device")
      o.device = (int)num();
    else if (a == "--copy-mb")
      o.copy_mb = (size_t)std::max(1LL, num());
    else if (a == "--host-mb")
      o.host_mb = (size_t)std::max(1LL, num());
    else if (a == "--small-kb")
      o.small_kb = (size_t)std::max(1LL, num());
    else if (a == "--small-count")
      o.small_count = (int)std::max(1LL, num());
    else if (a == "--algos")
      o.algos = (int)std::max(1LL, num());
    else if (a == "--gemm-rot-mb")
      o.gemm_rot_mb = (size_t)std::max(1LL, num());
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

  std::printf(
      "## floors: %s (sm_%d%d, %d SMs, L2 %.1f MiB, %.1f GiB, mem clock %d MHz x %d bit "
      "= %.0f GB/s theoretical, SM clock %d MHz)\n",
      prop.name, prop.major, prop.minor, g_sms, l2 / 1048576.0, prop.totalGlobalMem / 1073741824.0,
      mem_clock_khz / 1000, bus_bits, theo_gbps, sm_clock_khz / 1000);
  std::printf("CUDA runtime %d, driver %d, cuBLASLt %zu; reps %d (median), warm-up %d\n", rt_ver,
              drv_ver, lt_ver, o.reps, o.warmup);
  std::fflush(stdout);

  if ((size_t)l2 * 2 > (o.gemm_rot_mb << 20))
    std::fprintf(stderr, "warning: --gemm-rot-mb %zu is under twice L2 (%d bytes)\n", o.gemm_rot_mb,
                 l2);

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
    struct Shape {
      int M, N, K;
    };
    std::vector<Shape> shapes = {{8192, 8192, 8192}};
    const int Ms[] = {1, 32, 128, 4096};
    const int NK[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {14336, 4096}};
    for (int M : Ms)
      for (auto& nk : NK) shapes.push_back({M, nk[0], nk[1]});
    for (auto& sh : shapes) {
      gemm_rows.push_back(run_gemm(o, lt, ws, ws_bytes, s, sh.M, sh.N, sh.K, rng));
      auto& r = gemm_rows.back();
      std::fprintf(stderr, "gemm %dx%dx%d: best %.2f us (%.1f TFLOP/s, %.0f GB/s), err %.2e\n", r.M,
                   r.N, r.K, r.ms_best * 1e3, r.tflops(r.ms_best), r.gbps(r.ms_best),
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
    j += "  \"cuda_runtime\": " + std::to_string(rt_ver) +
         ", \"cuda_driver\": " + std::to_string(drv_ver) +
         ", \"cublaslt\": " + std::to_string(lt_ver) + ",\n";
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
