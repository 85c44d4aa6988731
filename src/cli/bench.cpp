// `infercept bench`: the offline agent benchmark. Open-loop Poisson arrivals of requests
// that pause for tools (scripted interceptions whose durations follow the brief's Table 1,
// or a trace file), driven in-process against EngineCore in real time: a tool "runs" by the
// clock, then its returned tokens are appended and the request resumes. Prints the paper's
// metrics (normalized latency, TTFT, throughput) and the waste breakdown, as a table and JSON.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <random>
#include <thread>

#include "cli/common.h"
#include "cli/workload_options.h"
#include "workload/metrics.h"
#include "workload/trace.h"
#include "workload/workload.h"

namespace infercept::cli {

namespace {

// Token content of a prompt or a tool result: ids drawn from the ordinary part of the
// vocabulary, deterministic for (request seed, purpose, index).
std::vector<int32_t> synth_tokens(uint64_t seed, uint64_t salt, int64_t n, int32_t vocab) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + salt);
  const int32_t lo = std::min<int32_t>(100, vocab - 1), hi = std::min<int32_t>(20000, vocab - 1);
  std::vector<int32_t> out((size_t)n);
  for (auto& t : out) t = lo + (int32_t)(rng() % (uint64_t)(hi - lo + 1));
  return out;
}

struct Live {
  const TraceRequest* trace = nullptr;
  uint64_t engine_id = 0;
  size_t segment = 0;
  double paused_at = 0.0;
  double resumed_at = -1.0;              // the tool answered and no token has come since
  KvPlace resumed_kv = KvPlace::device;  // where its KV was then
  RequestRecord record;
};

struct Resume {
  double at;
  uint64_t engine_id;
  bool operator>(const Resume& o) const { return at > o.at; }
};

struct BenchFlags {
  EngineFlags engine;
  WorkloadFlags workload;
  std::string json_path, step_trace;
  bool quiet = false;
  int64_t shared_prefix = 0;
  CLI::Option* shared_prefix_opt = nullptr;
};

void add_bench_flags(CLI::App& app, BenchFlags& f) {
  app.add_option("--json", f.json_path, "also write the results as JSON to this file");
  app.add_option("--step-trace", f.step_trace, "write one CSV row per engine step to this file");
  app.add_flag("--quiet", f.quiet, "print no table");
  f.shared_prefix_opt =
      app.add_option("--shared-prefix", f.shared_prefix,
                     "tokens of one system prompt every request starts with (the prefix "
                     "cache's workload), in front of the drawn prompt (default: the "
                     "workload's, sessions: its system prompt and tools; else 0)")
          ->check(CLI::Range((int64_t)0, (int64_t)1 << 20));
  add_workload_flags(app, f.workload);
  add_engine_flags(app, f.engine);
}

// The benchmark's request loop in real time: arrivals are added when their time comes, a
// paused request's tool "runs" by the clock and its returned tokens resume it, and each
// request's record is kept for the metrics.
class BenchLoop {
 public:
  BenchLoop(EngineCore& e, const WorkloadRun& run, int64_t shared_prefix)
      : e_(e),
        trace_(run.trace),
        hard_stop_(run.duration_s + run.drain_s),
        vocab_((int32_t)e.model_config().vocab_size),
        limit_(std::min(e.max_context(), e.kv_capacity_tokens()) - 1),
        prefix_(synth_tokens(0x5eedull, 0xf1ull, shared_prefix, vocab_)),
        progress_("bench") {}

  Status run() {
    while (true) {
      const double t = elapsed();
      admit_arrivals(t);
      TRY(deliver_tool_answers(t));
      if (t > hard_stop_ || (next_ >= trace_.size() && live_.empty())) break;
      if (e_.has_work())
        run_step();
      else
        wait_idle();
      progress_.update(elapsed(), (int64_t)records_.size());
    }
    progress_.finish();
    for (auto& [id, l] : live_) records_.push_back(l.record);  // unfinished
    wall_s_ = elapsed();
    return ok_status();
  }

  const std::vector<RequestRecord>& records() const { return records_; }
  int64_t skipped() const { return skipped_; }
  double wall_s() const { return wall_s_; }
  double idle_s() const { return idle_s_; }
  double step_wall_s() const { return step_wall_s_; }
  // Seconds from a tool's answer to the request's next token (a resumed turn's first token).
  const ResumeTtft& resume_ttft() const { return resume_ttft_; }
  int64_t shared_prefix_tokens() const { return (int64_t)prefix_.size(); }

 private:
  using clock = std::chrono::steady_clock;
  double elapsed() const { return std::chrono::duration<double>(clock::now() - start_).count(); }

  // Arrivals whose time has come, as requests with their tool pauses scripted.
  void admit_arrivals(double t) {
    while (next_ < trace_.size() && trace_[next_].arrival_s <= t) {
      const TraceRequest& tr = trace_[next_++];
      if (tr.final_context_tokens() + (int64_t)prefix_.size() > limit_) {
        ++skipped_;  // cannot fit this engine at all
        continue;
      }
      GenerateRequest req;
      req.prompt = prefix_;
      const auto own = synth_tokens(tr.seed, 0, tr.prompt_tokens, vocab_);
      req.prompt.insert(req.prompt.end(), own.begin(), own.end());
      req.params.temperature = 0.0f;
      req.params.ignore_eos = true;
      req.params.max_tokens = (int32_t)tr.generated_tokens();
      for (const Segment& sg : tr.segments) {
        if (sg.is_last()) break;
        ScriptedInterception si;
        si.after_generated = sg.generate_tokens;
        si.tool = sg.tool;
        si.hint = sg.tool_seconds;
        req.script.push_back(si);
      }
      auto id = e_.add_request(std::move(req));
      if (!id.ok()) {
        ++skipped_;
        continue;
      }
      Live l;
      l.trace = &tr;
      l.engine_id = *id;
      l.record.id = tr.id;
      l.record.augmentation = tr.augmentation;
      l.record.arrival_s = tr.arrival_s;
      live_.emplace(*id, l);
    }
  }

  // Tools that have answered: their returned tokens resume the paused requests.
  Status deliver_tool_answers(double t) {
    while (!resumes_.empty() && resumes_.top().at <= t) {
      Resume r = resumes_.top();
      resumes_.pop();
      Live& l = live_.at(r.engine_id);
      const Segment& sg = l.trace->segments[l.segment - 1];
      TRY_ASSIGN(l.resumed_kv, e_.kv_place(r.engine_id));
      TRY(e_.resume(r.engine_id, synth_tokens(l.trace->seed, l.segment, sg.return_tokens, vocab_)));
      l.record.interception_s += t - l.paused_at;
      l.record.output_tokens += sg.return_tokens;
      l.resumed_at = t;
    }
    return ok_status();
  }

  // Idle: sleep until the next arrival or tool answer (bounded so expiry stays live).
  void wait_idle() {
    double wake = hard_stop_;
    if (next_ < trace_.size()) wake = std::min(wake, trace_[next_].arrival_s);
    if (!resumes_.empty()) wake = std::min(wake, resumes_.top().at);
    const double dt = std::clamp(wake - elapsed(), 0.0, 0.05);
    std::this_thread::sleep_for(std::chrono::duration<double>(dt));
    idle_s_ += dt;
    e_.step();  // lets the policy see paused requests and expiries
  }

  // One engine step, and what it did to each request: first tokens, pauses, ends.
  void run_step() {
    const double step_start = elapsed();
    const std::vector<RequestOutput> outputs = e_.step();
    // The whole step as the requests see it (schedule, copies, forward, sampling, output
    // handling): set against forward_seconds it shows what a cost model of the forward
    // alone leaves out (docs/BENCHMARKS.md, simulator validation).
    step_wall_s_ += elapsed() - step_start;
    for (const RequestOutput& o : outputs) {
      Live& l = live_.at(o.id);
      const double now = elapsed();
      if (!o.new_tokens.empty() && l.record.first_token_s == 0.0) l.record.first_token_s = now;
      if (!o.new_tokens.empty() && l.resumed_at >= 0.0) {
        resume_ttft_.add(l.resumed_kv, now - l.resumed_at);
        l.resumed_at = -1.0;
      }
      l.record.output_tokens += (int64_t)o.new_tokens.size();
      if (o.intercepted) {
        const Segment& sg = l.trace->segments[l.segment];
        l.segment++;
        l.paused_at = now;
        resumes_.push({now + sg.tool_seconds, o.id});
      }
      if (o.finished()) {
        l.record.end_s = now;
        l.record.completed = true;
        records_.push_back(l.record);
        live_.erase(o.id);
      }
    }
  }

  EngineCore& e_;
  const std::vector<TraceRequest>& trace_;
  const double hard_stop_;
  const int32_t vocab_;
  const int64_t limit_;
  const std::vector<int32_t> prefix_;  // --shared-prefix
  ProgressLine progress_;
  ResumeTtft resume_ttft_;
  const clock::time_point start_ = clock::now();
  std::map<uint64_t, Live> live_;  // by engine id
  std::vector<RequestRecord> records_;
  std::priority_queue<Resume, std::vector<Resume>, std::greater<Resume>> resumes_;
  size_t next_ = 0;
  int64_t skipped_ = 0;
  double idle_s_ = 0.0;       // slept while the engine had no work
  double step_wall_s_ = 0.0;  // inside e.step() while it had work
  double wall_s_ = 0.0;
};

double arrival_rate(const WorkloadRun& run) {
  return run.trace.empty() ? 0.0 : (double)run.trace.size() / run.duration_s;
}

void print_results(const EngineConfig& cfg, const WorkloadRun& run, const BenchLoop& loop,
                   const EngineCore& e) {
  const Summary sum = summarize(loop.records(), run.duration_s);
  const EngineStats& st = e.stats();
  const double gb = 1e9;
  std::printf(
      "workload %s, policy %s, estimator %s, rate %.2f req/s, %.0f s of arrivals (%.0f s run)\n",
      run.name.c_str(), cfg.policy.c_str(), cfg.estimator.c_str(), arrival_rate(run),
      run.duration_s, loop.wall_s());
  std::printf(
      "%s",
      format_summary_table(sum, summarize_by_augmentation(loop.records(), run.duration_s)).c_str());
  std::printf(
      "interceptions %lld, recomputed tokens %lld, swapped out/in %lld/%lld tokens, "
      "preemptions %lld, skipped %lld\n",
      (long long)st.interceptions, (long long)st.recomputed_tokens,
      (long long)st.swapped_out_tokens, (long long)st.swapped_in_tokens, (long long)st.preemptions,
      (long long)loop.skipped());
  const double decode_step =
      st.decode_only_steps > 0 ? st.decode_only_seconds / (double)st.decode_only_steps : 0.0;
  std::printf(
      "prefix cache %s: hit %.1f%% of %lld prompt tokens looked up; evicted/demoted/promoted "
      "%lld/%lld/%lld blocks; decode step %.2f ms\n",
      cfg.prefix_cache ? "on" : "off", 100.0 * st.prefix_hit_rate(),
      (long long)st.prefix_query_tokens, (long long)st.prefix_evicted_blocks,
      (long long)st.prefix_demoted_blocks, (long long)st.prefix_promoted_blocks, decode_step * 1e3);
  std::printf("%s", format_resume_ttft(loop.resume_ttft()).c_str());
  if (!cfg.kv_disk_dir.empty()) print_disk_tier(st);
  std::printf("decisions discard/swap/preserve %lld/%lld/%lld\n", (long long)st.discard_decisions,
              (long long)st.swap_decisions, (long long)st.preserve_decisions);
  std::printf("waste (GB*s): recompute %.3f, preserve %.3f, swap stall %.3f\n",
              st.waste_recompute / gb, st.waste_preserve / gb, st.waste_swap_stall / gb);
  for (const ToolStats& ts : e.estimator().stats())
    std::printf("tool %-12s n=%-5lld p50 %.3fs p95 %.3fs p99 %.3fs\n", ts.tool.c_str(),
                (long long)ts.count, ts.p50, ts.p95, ts.p99);
}

nlohmann::json results_json(const EngineConfig& cfg, const WorkloadRun& run, const BenchLoop& loop,
                            const EngineCore& e) {
  const EngineStats& st = e.stats();
  nlohmann::json j;
  j["workload"] = run.name;
  j["policy"] = cfg.policy;
  j["estimator"] = cfg.estimator;
  j["rate"] = arrival_rate(run);
  j["duration_s"] = run.duration_s;
  j["summary"] = to_json(summarize(loop.records(), run.duration_s));
  j["interceptions"] = st.interceptions;
  j["recomputed_tokens"] = st.recomputed_tokens;
  j["swapped_out_tokens"] = st.swapped_out_tokens;
  j["swapped_in_tokens"] = st.swapped_in_tokens;
  j["preemptions"] = st.preemptions;
  j["skipped"] = loop.skipped();
  j["waste_byte_seconds"] = {{"recompute", st.waste_recompute},
                             {"preserve", st.waste_preserve},
                             {"swap_stall", st.waste_swap_stall}};
  j["prefix_cache"] = prefix_cache_json(st, cfg.prefix_cache, loop.shared_prefix_tokens());
  j["disk_tier"] = disk_tier_json(st, !cfg.kv_disk_dir.empty());
  j["resume_ttft_s"] = resume_ttft_json(loop.resume_ttft());
  j["decode_step_s"] =
      st.decode_only_steps > 0 ? st.decode_only_seconds / (double)st.decode_only_steps : 0.0;
  j["decisions"] = {{"discard", st.discard_decisions},
                    {"swap", st.swap_decisions},
                    {"preserve", st.preserve_decisions},
                    {"prefetch", st.prefetches}};
  nlohmann::json tools = nlohmann::json::array();
  for (const ToolStats& ts : e.estimator().stats())
    tools.push_back({{"tool", ts.tool},
                     {"count", ts.count},
                     {"p50", ts.p50},
                     {"p95", ts.p95},
                     {"p99", ts.p99}});
  j["tools"] = tools;
  // Where the engine's time went: a measured run set against a simulated one needs these.
  j["engine"] = {{"steps", st.steps},
                 {"forward_seconds", st.forward_seconds},
                 {"mean_step_ms", st.steps > 0 ? st.forward_seconds / (double)st.steps * 1e3 : 0.0},
                 {"host_prepare_seconds", st.host_prepare_seconds},
                 {"swap_seconds", st.swap_seconds},
                 {"prompt_tokens_computed", st.prompt_tokens_computed},
                 {"decode_tokens", st.decode_tokens},
                 {"replayed_steps", st.replayed_steps},
                 {"swap_preemptions", st.swap_preemptions},
                 {"run_seconds", loop.wall_s()},
                 {"step_wall_seconds", loop.step_wall_s()},
                 {"idle_seconds", loop.idle_s()}};
  return j;
}

}  // namespace

int run_bench(int argc, char** argv) {
  CLI::App app{
      "The offline agent benchmark: Poisson arrivals of requests that pause for tools, "
      "run in real time against the engine; prints normalized latency, TTFT, "
      "throughput and the waste breakdown.",
      "infercept bench"};
  set_up_app(app,
             "infercept bench --workload mixed --policy minwaste --rate 1 --duration 60 "
             "--time-scale 0.1 --context-scale 0.25 --kv-cache-tokens 1024");
  BenchFlags f;
  add_bench_flags(app, f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto cfg = engine_config_from(f.engine);
  if (!cfg.ok()) return fail(cfg.error());
  if (!f.step_trace.empty()) cfg->step_trace_path = f.step_trace;
  auto run = workload_from(f.workload);
  if (!run.ok()) return fail(run.error());
  if (f.workload.trace_only) return 0;
  const int64_t shared_prefix =
      given(f.shared_prefix_opt) ? f.shared_prefix : run->shared_prefix_tokens;
  if (shared_prefix > ((int64_t)1 << 20)) return fail(Error{"shared prefix over 2^20 tokens"});
  auto engine = EngineCore::create(*cfg);
  if (!engine.ok()) return fail(engine.error());
  EngineCore& e = **engine;

  BenchLoop loop(e, *run, shared_prefix);
  if (Status st = loop.run(); !st.ok()) return fail(st.error());
  if (!f.quiet) print_results(*cfg, *run, loop, e);
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    if (!out) return fail(Error{"cannot write '" + f.json_path + "'"});
    out << results_json(*cfg, *run, loop, e).dump(2) << "\n";
  }
  return 0;
}

}  // namespace infercept::cli
