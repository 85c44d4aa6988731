#include "cli/common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace infercept::cli {

const std::set<std::string> kEngineFlags = {"model",
                                            "threads",
                                            "kv-cache-mb",
                                            "kv-cache-tokens",
                                            "block-size",
                                            "kv-cache-gb",
                                            "swap-space-gb",
                                            "swap-space-mb",
                                            "policy",
                                            "estimator",
                                            "interception-timeout",
                                            "max-batch-tokens",
                                            "max-partial-prefills",
                                            "long-prefill-tokens",
                                            "interrupt-prefill",
                                            "max-seqs",
                                            "chat-template",
                                            "kv-dtype",
                                            "device",
                                            "gpu-memory-utilization",
                                            "cuda-graphs",
                                            "cpu-numerics",
                                            "dtype"};
const std::set<std::string> kSamplingFlags = {"max-tokens",
                                              "temperature",
                                              "top-p",
                                              "top-k",
                                              "min-p",
                                              "seed",
                                              "repetition-penalty",
                                              "presence-penalty",
                                              "frequency-penalty",
                                              "stop"};

std::set<std::string> merge(std::initializer_list<std::set<std::string>> sets) {
  std::set<std::string> out;
  for (const auto& s : sets) out.insert(s.begin(), s.end());
  return out;
}

std::string default_model_path() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("INFERCEPT_MODEL"); env != nullptr && *env) return env;
  const std::string name = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (fs::exists(name)) return name;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (fs::path dir = exe.parent_path(); !ec && !dir.empty() && dir != dir.root_path();
       dir = dir.parent_path())
    if (fs::exists(dir / name)) return (dir / name).string();
  return name;  // the error message will name the path tried
}

Result<EngineConfig> engine_config_from(const Args& a) {
  EngineConfig c;
  c.model_path = a.get("model", default_model_path());
  TRY_ASSIGN(int64_t threads, a.get_int("threads", 0));
  TRY_ASSIGN(c.kv_cache_mb, a.get_double("kv-cache-mb", c.kv_cache_mb));
  if (a.has("kv-cache-gb")) {
    TRY_ASSIGN(double gb, a.get_double("kv-cache-gb", 0.0));
    c.kv_cache_mb = gb * 1024.0;
  }
  TRY_ASSIGN(c.swap_space_mb, a.get_double("swap-space-mb", c.swap_space_mb));
  if (a.has("swap-space-gb")) {
    TRY_ASSIGN(double gb, a.get_double("swap-space-gb", 0.0));
    c.swap_space_mb = gb * 1024.0;
  }
  c.policy = a.get("policy", c.policy);
  c.estimator = a.get("estimator", c.estimator);
  TRY_ASSIGN(c.interception_timeout_s,
             a.get_double("interception-timeout", c.interception_timeout_s));
  TRY_ASSIGN(c.kv_cache_tokens, a.get_int("kv-cache-tokens", 0));
  TRY_ASSIGN(c.block_size, a.get_int("block-size", c.block_size));
  TRY_ASSIGN(c.max_tokens_per_step, a.get_int("max-batch-tokens", c.max_tokens_per_step));
  TRY_ASSIGN(c.max_partial_prefills, a.get_int("max-partial-prefills", c.max_partial_prefills));
  TRY_ASSIGN(c.long_prefill_tokens, a.get_int("long-prefill-tokens", c.long_prefill_tokens));
  TRY_ASSIGN(c.max_seqs, a.get_int("max-seqs", c.max_seqs));
  const std::string interrupt = a.get("interrupt-prefill", "on");
  if (interrupt != "on" && interrupt != "off")
    return make_error("--interrupt-prefill must be on or off, got '", interrupt, "'");
  c.interrupt_prefill = interrupt == "on";
  c.n_threads = (int)threads;
  c.chat_template = a.get("chat-template");
  c.device = a.get("device", "cpu");
  TRY_ASSIGN(c.gpu_memory_utilization, a.get_double("gpu-memory-utilization", 0.0));
  const std::string graphs = a.get("cuda-graphs", "on");
  if (graphs != "on" && graphs != "off")
    return make_error("--cuda-graphs must be on or off, got '", graphs, "'");
  c.cuda_graphs = graphs == "on";
  if (a.has("cpu-numerics")) {
    TRY_ASSIGN(CpuNumerics numerics, parse_cpu_numerics(a.get("cpu-numerics")));
    c.cpu_numerics = numerics;
  }
  const std::string dt = a.get("dtype", "bf16");
  if (dt == "bf16")
    c.compute_dtype = DType::bf16;
  else if (dt == "f16")
    c.compute_dtype = DType::f16;
  else
    return make_error("--dtype must be bf16 or f16, got '", dt, "'");
  c.kv_cache_size_given = a.has("kv-cache-gb") || a.has("kv-cache-mb") || a.has("kv-cache-tokens");
  const std::string kv = a.get("kv-dtype", "f16");
  if (kv == "f16")
    c.kv_dtype = DType::f16;
  else if (kv == "bf16")
    c.kv_dtype = DType::bf16;
  else if (kv == "f32")
    c.kv_dtype = DType::f32;
  else
    return make_error("--kv-dtype must be f16, bf16 or f32, got '", kv, "'");
  if (c.kv_cache_mb <= 0 || c.swap_space_mb < 0 || c.interception_timeout_s <= 0)
    return make_error(
        "--kv-cache-gb/mb must be > 0, --swap-space-gb/mb >= 0, "
        "--interception-timeout > 0");
  if (threads < 0 || c.block_size <= 0 || c.max_tokens_per_step <= 0 || c.max_seqs <= 0)
    return make_error(
        "--threads must be >= 0; --block-size, --max-batch-tokens and --max-seqs > 0");
  if (c.max_partial_prefills < 1 || c.long_prefill_tokens < 0)
    return make_error(
        "--max-partial-prefills must be >= 1 (1 = FCFS), --long-prefill-tokens >= 0 (0 = "
        "automatic)");
  return c;
}

Result<SamplingParams> sampling_params_from(const Args& a, float default_temperature) {
  SamplingParams p;
  TRY_ASSIGN(int64_t max_tokens, a.get_int("max-tokens", 256));
  TRY_ASSIGN(double t, a.get_double("temperature", default_temperature));
  TRY_ASSIGN(double top_p, a.get_double("top-p", 1.0));
  TRY_ASSIGN(int64_t top_k, a.get_int("top-k", 0));
  TRY_ASSIGN(double min_p, a.get_double("min-p", 0.0));
  TRY_ASSIGN(double rep, a.get_double("repetition-penalty", 1.0));
  TRY_ASSIGN(double pres, a.get_double("presence-penalty", 0.0));
  TRY_ASSIGN(double freq, a.get_double("frequency-penalty", 0.0));
  p.max_tokens = (int32_t)max_tokens;
  p.temperature = (float)t;
  p.top_p = (float)top_p;
  p.top_k = (int32_t)top_k;
  p.min_p = (float)min_p;
  p.repetition_penalty = (float)rep;
  p.presence_penalty = (float)pres;
  p.frequency_penalty = (float)freq;
  if (a.has("seed")) {
    TRY_ASSIGN(int64_t seed, a.get_int("seed", 0));
    p.seed = (uint64_t)seed;
  }
  p.stop = a.get_all("stop");
  TRY(p.validate());
  return p;
}

int fail(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.message.c_str());
  return 1;
}

}  // namespace infercept::cli
