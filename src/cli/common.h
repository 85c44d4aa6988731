// What the subcommands share: how their flags are declared and parsed (CLI11, one app per
// subcommand), the engine and sampling flag groups (declared once, added to each subcommand
// that takes them), the default model, and the error and progress output.
//
// A subcommand declares its flags by binding each to the field it sets, so the default a
// `--help` prints is the value the code starts from. Conventions: `--flag value` and
// `--flag=value`; `-h`/`--help` prints the flags, their defaults and an example (exit 0); a
// positional argument, an unknown flag or a value of the wrong type is an error naming it
// (exit 2); a single-valued flag given twice takes the last value; repeatable flags
// (--stop, --tokens, --api-key) take one value per occurrence.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/resume_ttft.h"

namespace infercept::cli {

// Sets the conventions above on `app` (named "infercept <command>") and appends the example.
void set_up_app(CLI::App& app, const std::string& example);

// Parses a subcommand's arguments (argv without the program and command names). Returns
// nullopt to go on, or the exit code to return: 0 after --help, 2 after an error.
std::optional<int> parse_flags(CLI::App& app, int argc, char** argv);

// A flag that may be given several times, one value each.
CLI::Option* add_repeated(CLI::App& app, const std::string& name, std::vector<std::string>& out,
                          const std::string& help);

// Whether a flag was given on the command line.
inline bool given(const CLI::Option* o) {
  return o != nullptr && o->count() > 0;
}

// The default model: $INFERCEPT_MODEL, else models/<default> under the working directory or
// next to the binary's source tree.
std::string default_model_path();

// The disk tier's counters (spills, restores, failures) for the JSON reports.
nlohmann::json disk_tier_json(const StepStats& st, bool on);
void print_disk_tier(const StepStats& st);
// The prefix cache's counters as bench and simulate write them (--json).
nlohmann::json prefix_cache_json(const StepStats& st, bool on, int64_t shared_prefix_tokens);
// Resumed turns' first token (seconds from each tool's answer to the request's next token):
// mean, p50, p90, p99 and count, as bench and simulate write them (--json), with the same
// under "by_kv" for each place the KV was in when the tool answered (places with resumes).
nlohmann::json resume_ttft_json(const ResumeTtft& r);
// The same as one text line: all, then each place with resumes ("device n=12 p50 3.10 ms").
std::string format_resume_ttft(const ResumeTtft& r);

// Engine flags: --model --threads --kv-cache-gb/--kv-cache-mb --kv-cache-tokens --block-size
// --max-batch-tokens --max-partial-prefills --long-prefill-tokens --interrupt-prefill
// --prefix-cache --max-seqs --chat-template --kv-dtype --swap-space-gb/--swap-space-mb
// --policy --estimator --interception-timeout --device --gpu-memory-utilization --cuda-graphs
// --cpu-numerics --dtype --kv-disk-dir --kv-disk-gb. Bound to `config`'s fields where the
// units match, to the others here.
struct EngineFlags {
  EngineConfig config;
  int64_t threads = 0;
  double kv_cache_gb = 0.0, swap_space_gb = 0.0;
  std::string interrupt_prefill = "on", prefix_cache = "on", cuda_graphs = "on", cpu_numerics,
              dtype = "bf16", kv_dtype = "f16";
  CLI::Option *kv_cache_gb_opt = nullptr, *kv_cache_mb_opt = nullptr,
              *kv_cache_tokens_opt = nullptr, *swap_space_gb_opt = nullptr,
              *cpu_numerics_opt = nullptr;
};
void add_engine_flags(CLI::App& app, EngineFlags& f);
Result<EngineConfig> engine_config_from(const EngineFlags& f);

// Sampling flags: --max-tokens --temperature --top-p --top-k --min-p --seed
// --repetition-penalty --presence-penalty --frequency-penalty --stop (repeatable).
struct SamplingFlags {
  SamplingParams params;
  int64_t seed = 0;
  CLI::Option* seed_opt = nullptr;
};
void add_sampling_flags(CLI::App& app, SamplingFlags& f, float default_temperature);
Result<SamplingParams> sampling_params_from(const SamplingFlags& f);

// Prints "error: <message>" to stderr and returns 1.
int fail(const Error& e);

// A progress line on stderr for long runs: "<what>: 42 s, 120 requests done, 2.9/s", redrawn
// in place at most every half second, only when stderr is a terminal (scripts and tests see
// nothing). finish() clears it before the results are printed.
class ProgressLine {
 public:
  explicit ProgressLine(std::string what);
  // `elapsed_s`: the run's clock (wall or simulated); `done`: requests finished so far.
  void update(double elapsed_s, int64_t done);
  // A line of its own, e.g. what a run that reports no progress is doing.
  void show(const std::string& text);
  void finish();

 private:
  std::string what_;
  bool tty_ = false, shown_ = false;
  double last_wall_ = -1.0, last_elapsed_ = 0.0;
  int64_t last_done_ = 0;
  double rate_ = 0.0;
};

}  // namespace infercept::cli
