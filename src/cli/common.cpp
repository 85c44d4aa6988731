#include "cli/common.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "workload/metrics.h"

namespace infercept::cli {

void set_up_app(CLI::App& app, const std::string& example) {
  app.option_defaults()->always_capture_default();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(34);
  app.footer("Example:\n  " + example);
}

std::optional<int> parse_flags(CLI::App& app, int argc, char** argv) {
  // CLI11 takes the arguments last first.
  std::vector<std::string> args(argv, argv + argc);
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s: %s\n('%s --help' lists its flags)\n", app.get_name().c_str(),
                 e.what(), app.get_name().c_str());
    return 2;
  }
  return std::nullopt;
}

CLI::Option* add_repeated(CLI::App& app, const std::string& name, std::vector<std::string>& out,
                          const std::string& help) {
  return app.add_option(name, out, help + " (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false)
      ->default_str("");
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

void add_engine_flags(CLI::App& app, EngineFlags& f) {
  EngineConfig& c = f.config;
  c.model_path = default_model_path();
  const std::string g = "Engine";
  app.add_option("-m,--model", c.model_path, "a .gguf file or a Hugging Face checkpoint directory")
      ->group(g);
  app.add_option("--device", c.device, "cpu, cuda or cuda:N")->group(g);
  app.add_option("--threads", f.threads, "CPU threads (0: all cores)")->group(g);
  app.add_option("--tensor-parallel-size", c.tensor_parallel_size,
                 "ranks the model and its KV cache are split over (CPU backend: threads)")
      ->group(g);
  f.kv_cache_mb_opt =
      app.add_option("--kv-cache-mb", c.kv_cache_mb, "KV cache size in MiB")->group(g);
  f.kv_cache_gb_opt =
      app.add_option("--kv-cache-gb", f.kv_cache_gb, "KV cache size in GiB (instead of MiB)")
          ->default_str("")
          ->group(g);
  f.kv_cache_tokens_opt = app.add_option("--kv-cache-tokens", c.kv_cache_tokens,
                                         "KV cache size in tokens (0: from the MiB)")
                              ->group(g);
  app.add_option("--gpu-memory-utilization", c.gpu_memory_utilization,
                 "share of GPU memory to use, KV cache sized from it (0: off)")
      ->group(g);
  app.add_option("--swap-space-mb", c.swap_space_mb, "host pool for swapped-out KV, MiB")->group(g);
  f.swap_space_gb_opt =
      app.add_option("--swap-space-gb", f.swap_space_gb, "host pool in GiB (instead of MiB)")
          ->default_str("")
          ->group(g);
  app.add_option("--kv-disk-dir", c.kv_disk_dir,
                 "directory of the disk tier for paused requests' KV (off when not given)")
      ->group(g);
  app.add_option("--kv-disk-gb", c.kv_disk_gb, "size of the disk tier in GB (with --kv-disk-dir)")
      ->group(g);
  app.add_option("--block-size", c.block_size, "tokens per KV block")->group(g);
  app.add_option("--max-batch-tokens", c.max_tokens_per_step,
                 "tokens per step (the chunked-prefill budget)")
      ->group(g);
  app.add_option("--max-seqs", c.max_seqs, "sequences per step")->group(g);
  app.add_option("--max-partial-prefills", c.max_partial_prefills,
                 "unfinished prefills sharing a step (1: FCFS)")
      ->group(g);
  app.add_option("--long-prefill-tokens", c.long_prefill_tokens,
                 "chunk of a long prefill sharing a step (0: automatic)")
      ->group(g);
  app.add_option("--interrupt-prefill", f.interrupt_prefill,
                 "give up a prefill-only step for a short newcomer")
      ->check(CLI::IsMember({"on", "off"}))
      ->group(g);
  app.add_option("--prefix-cache", f.prefix_cache,
                 "keep full KV blocks indexed by their prefix for later requests of a namespace")
      ->check(CLI::IsMember({"on", "off"}))
      ->group(g);
  app.add_option("--policy", c.policy,
                 "paused KV: discard|improved-discard|preserve|swap|ttl|minwaste")
      ->group(g);
  app.add_option("--estimator", c.estimator, "tool durations: oracle|elapsed|learned")->group(g);
  app.add_option("--interception-timeout", c.interception_timeout_s,
                 "seconds a request may stay paused before its KV is released")
      ->group(g);
  app.add_option("--chat-template", c.chat_template,
                 "chatml|llama3|llama2: a built-in template instead of the model's own")
      ->group(g);
  app.add_option("--chat-template-file", c.chat_template_file,
                 "a Jinja chat template to use instead of the model's own")
      ->check(CLI::ExistingFile)
      ->group(g);
  app.add_option("--kv-dtype", f.kv_dtype,
                 "KV cache element type; fp8 (e4m3, a scale per token and head) halves the KV "
                 "bytes of f16/bf16")
      ->check(CLI::IsMember({"f16", "bf16", "f32", "fp8", "fp8_e4m3"}))
      ->group(g);
  app.add_option("--dtype", f.dtype, "weights and activations on a GPU")
      ->check(CLI::IsMember({"bf16", "f16"}))
      ->group(g);
  app.add_option("--cuda-graphs", f.cuda_graphs, "replay decode steps as CUDA graphs")
      ->check(CLI::IsMember({"on", "off"}))
      ->group(g);
  f.cpu_numerics_opt =
      app.add_option("--cpu-numerics", f.cpu_numerics,
                     "fast|llama.cpp: round as llama.cpp's CPU backend does (default: fast)")
          ->group(g);
}

void print_disk_tier(const StepStats& st) {
  std::printf(
      "disk tier: %lld spills, spilled/restored %lld/%lld tokens (%.2f/%.2f GB), failures "
      "write/read %lld/%lld, spills undone by an early resume %lld, KV brought a tier closer "
      "before its tool answered %lld\n",
      (long long)st.spill_decisions, (long long)st.spilled_tokens, (long long)st.restored_tokens,
      st.spilled_bytes / 1e9, st.restored_bytes / 1e9, (long long)st.disk_write_failures,
      (long long)st.disk_read_failures, (long long)st.spills_undone, (long long)st.prefetches);
}

static std::string fmt_ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  return buf;
}

static nlohmann::json percentiles_with_count(const std::vector<double>& seconds) {
  const Percentiles p = percentiles(seconds);
  return {{"mean", p.mean},
          {"p50", p.p50},
          {"p90", p.p90},
          {"p99", p.p99},
          {"count", (int64_t)seconds.size()}};
}

nlohmann::json resume_ttft_json(const ResumeTtft& r) {
  nlohmann::json j = percentiles_with_count(r.all);
  nlohmann::json by = nlohmann::json::object();
  for (int i = 0; i < kKvPlaces; ++i) {
    const auto place = (KvPlace)i;
    if (!r.of(place).empty()) by[kv_place_name(place)] = percentiles_with_count(r.of(place));
  }
  j["by_kv"] = std::move(by);
  return j;
}

std::string format_resume_ttft(const ResumeTtft& r) {
  const Percentiles all = percentiles(r.all);
  std::string out = "resumed turns' first token: mean " + fmt_ms(all.mean) + ", p50 " +
                    fmt_ms(all.p50) + ", p90 " + fmt_ms(all.p90) + " (" +
                    std::to_string(r.all.size()) + " resumes)";
  std::string parts;
  for (int i = 0; i < kKvPlaces; ++i) {
    const auto place = (KvPlace)i;
    if (r.of(place).empty()) continue;
    const Percentiles p = percentiles(r.of(place));
    parts += std::string(parts.empty() ? "" : "; ") + kv_place_name(place) +
             " n=" + std::to_string(r.of(place).size()) + " p50 " + fmt_ms(p.p50) + " p90 " +
             fmt_ms(p.p90);
  }
  if (!parts.empty()) out += "; by where the KV was: " + parts;
  return out + "\n";
}

nlohmann::json disk_tier_json(const StepStats& st, bool on) {
  return {{"on", on},
          {"spill_decisions", st.spill_decisions},
          {"spilled_tokens", st.spilled_tokens},
          {"restored_tokens", st.restored_tokens},
          {"spilled_bytes", st.spilled_bytes},
          {"restored_bytes", st.restored_bytes},
          {"write_failures", st.disk_write_failures},
          {"read_failures", st.disk_read_failures},
          {"spills_undone", st.spills_undone}};
}

nlohmann::json prefix_cache_json(const StepStats& st, bool on, int64_t shared_prefix_tokens) {
  return {{"on", on},
          {"shared_prefix_tokens", shared_prefix_tokens},
          {"query_tokens", st.prefix_query_tokens},
          {"hit_tokens", st.prefix_hit_tokens},
          {"hit_rate", st.prefix_hit_rate()},
          {"evicted_blocks", st.prefix_evicted_blocks},
          {"demoted_blocks", st.prefix_demoted_blocks},
          {"promoted_blocks", st.prefix_promoted_blocks}};
}

Result<EngineConfig> engine_config_from(const EngineFlags& f) {
  EngineConfig c = f.config;
  if (given(f.kv_cache_gb_opt)) c.kv_cache_mb = f.kv_cache_gb * 1024.0;
  if (given(f.swap_space_gb_opt)) c.swap_space_mb = f.swap_space_gb * 1024.0;
  c.kv_cache_size_given =
      given(f.kv_cache_gb_opt) || given(f.kv_cache_mb_opt) || given(f.kv_cache_tokens_opt);
  c.n_threads = (int)f.threads;
  c.interrupt_prefill = f.interrupt_prefill == "on";
  c.prefix_cache = f.prefix_cache == "on";
  c.cuda_graphs = f.cuda_graphs == "on";
  if (given(f.cpu_numerics_opt)) {
    TRY_ASSIGN(CpuNumerics numerics, parse_cpu_numerics(f.cpu_numerics));
    c.cpu_numerics = numerics;
  }
  c.compute_dtype = f.dtype == "f16" ? DType::f16 : DType::bf16;
  c.kv_dtype = f.kv_dtype == "bf16"            ? DType::bf16
               : f.kv_dtype == "f32"           ? DType::f32
               : f.kv_dtype.starts_with("fp8") ? DType::fp8_e4m3
                                               : DType::f16;
  if (c.kv_cache_mb <= 0 || c.swap_space_mb < 0 || c.interception_timeout_s <= 0)
    return make_error(
        "--kv-cache-gb/mb must be > 0, --swap-space-gb/mb >= 0, "
        "--interception-timeout > 0");
  if (!c.kv_disk_dir.empty() && !(c.kv_disk_gb > 0))
    return make_error("--kv-disk-dir needs --kv-disk-gb N with N > 0 (the disk tier's size)");
  if (c.kv_disk_dir.empty() && c.kv_disk_gb != 0)
    return make_error("--kv-disk-gb needs --kv-disk-dir (the directory of the disk tier)");
  if (c.tensor_parallel_size < 1)
    return make_error("--tensor-parallel-size must be >= 1 (got ",
                      std::to_string(c.tensor_parallel_size), ")");
  if (f.threads < 0 || c.block_size <= 0 || c.max_tokens_per_step <= 0 || c.max_seqs <= 0)
    return make_error(
        "--threads must be >= 0; --block-size, --max-batch-tokens and --max-seqs > 0");
  if (c.max_partial_prefills < 1 || c.long_prefill_tokens < 0)
    return make_error(
        "--max-partial-prefills must be >= 1 (1 = FCFS), --long-prefill-tokens >= 0 (0 = "
        "automatic)");
  return c;
}

void add_sampling_flags(CLI::App& app, SamplingFlags& f, float default_temperature) {
  SamplingParams& p = f.params;
  p.temperature = default_temperature;
  const std::string g = "Sampling";
  app.add_option("--max-tokens", p.max_tokens, "tokens to generate at most")->group(g);
  app.add_option("--temperature", p.temperature, "0: greedy")->group(g);
  app.add_option("--top-p", p.top_p, "nucleus sampling (1: off)")->group(g);
  app.add_option("--top-k", p.top_k, "0: off")->group(g);
  app.add_option("--min-p", p.min_p, "relative to the most likely token (0: off)")->group(g);
  f.seed_opt = app.add_option("--seed", f.seed, "sampling seed (default: one per request)")
                   ->default_str("")
                   ->group(g);
  app.add_option("--repetition-penalty", p.repetition_penalty, "1: off")->group(g);
  app.add_option("--presence-penalty", p.presence_penalty, "0: off")->group(g);
  app.add_option("--frequency-penalty", p.frequency_penalty, "0: off")->group(g);
  add_repeated(app, "--stop", p.stop, "stop string")->group(g);
}

Result<SamplingParams> sampling_params_from(const SamplingFlags& f) {
  SamplingParams p = f.params;
  if (given(f.seed_opt)) p.seed = (uint64_t)f.seed;
  TRY(p.validate());
  return p;
}

int fail(const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.message.c_str());
  return 1;
}

namespace {
double wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

ProgressLine::ProgressLine(std::string what)
    : what_(std::move(what)), tty_(isatty(fileno(stderr)) != 0) {}

void ProgressLine::update(double elapsed_s, int64_t done) {
  if (!tty_) return;
  const double now = wall_now();
  if (last_wall_ >= 0.0 && now - last_wall_ < 0.5) return;
  // The rate over the time since the last redraw, so it follows the run's current pace.
  if (last_wall_ >= 0.0 && elapsed_s > last_elapsed_)
    rate_ = (double)(done - last_done_) / (elapsed_s - last_elapsed_);
  last_wall_ = now;
  last_elapsed_ = elapsed_s;
  last_done_ = done;
  std::fprintf(stderr, "\r\033[K%s: %.0f s, %lld requests done, %.2f/s", what_.c_str(), elapsed_s,
               (long long)done, rate_);
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::show(const std::string& text) {
  if (!tty_) return;
  std::fprintf(stderr, "\r\033[K%s: %s", what_.c_str(), text.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::finish() {
  if (!shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace infercept::cli
