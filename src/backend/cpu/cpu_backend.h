// The CPU backend's factory and its options (the interface it implements: backend/backend.h).
// Every choice the backend makes at creation is a field here, passed down by the engine
// (EngineConfig) or by a test; nothing is read from the environment.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/result.h"

namespace infercept {

// How the CPU backend rounds (docs/PERF.md 2):
//   fast: its own orders, chosen for speed and for a row's bits depending on its position
//     and operands only (recomputed and resumed rows are bit-exact);
//   llama_cpp: llama.cpp's CPU bits throughout (q4_1 products in ggml's order, attention in
//     the order llama.cpp picks by batch size): greedy decoding follows llama.cpp token for
//     token, at ~40% of batch-32 throughput and without that bit-exactness.
enum class CpuNumerics { fast, llama_cpp };
// "fast" | "llama.cpp", else an error naming the value.
Result<CpuNumerics> parse_cpu_numerics(const std::string& name);

struct CpuBackendOptions {
  int n_threads = 0;                         // 0 = all cores
  CpuNumerics numerics = CpuNumerics::fast;  // --cpu-numerics (EngineConfig::cpu_numerics)
  // Where the build has AVX512-VNNI, q4_0/q4_1/q8_0 weights also get a copy repacked at load
  // for the packed kernels (packed_matmul.h). false keeps every weight in its file layout only
  // (matmul_rows, the path of builds without VNNI): half the weight memory, for A/B
  // measurements and for tests that compare the two layouts.
  bool pack_weights = true;
};

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options);
inline std::unique_ptr<Backend> make_cpu_backend(int n_threads,
                                                 CpuNumerics numerics = CpuNumerics::fast) {
  CpuBackendOptions o;
  o.n_threads = n_threads;
  o.numerics = numerics;
  return make_cpu_backend(o);
}

}  // namespace infercept
