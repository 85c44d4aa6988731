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
  RequestRecord record;
};

struct Resume {
  double at;
  uint64_t engine_id;
  bool operator>(const Resume& o) const { return at > o.at; }
};

}  // namespace

int run_bench(int argc, char** argv) {
  auto args = Args::parse(argc, argv, merge({kEngineFlags, kWorkloadFlags, {"json", "step-trace"}}),
                          {"quiet"});
  if (!args.ok()) return fail(args.error());
  const Args& a = *args;
  auto cfg = engine_config_from(a);
  if (!cfg.ok()) return fail(cfg.error());
  if (a.has("step-trace")) cfg->step_trace_path = a.get("step-trace");

  // The workload: a built-in generator or a trace file.
  auto run = workload_from(a);
  if (!run.ok()) return fail(run.error());
  const std::string& wl = run->name;
  const std::vector<TraceRequest>& trace = run->trace;
  const double duration = run->duration_s;

  auto engine = EngineCore::create(*cfg);
  if (!engine.ok()) return fail(engine.error());
  EngineCore& e = **engine;
  const int32_t vocab = (int32_t)e.model_config().vocab_size;
  const int64_t limit = std::min(e.max_context(), e.kv_capacity_tokens()) - 1;

  std::map<uint64_t, Live> live;  // by engine id
  std::vector<RequestRecord> records;
  std::priority_queue<Resume, std::vector<Resume>, std::greater<Resume>> resumes;
  size_t next = 0;
  int64_t skipped = 0;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - start).count(); };
  const double hard_stop = duration + run->drain_s;
  double idle_s = 0.0;       // slept while the engine had no work
  double step_wall_s = 0.0;  // inside e.step() while it had work

  while (true) {
    const double t = elapsed();
    // Arrivals whose time has come.
    while (next < trace.size() && trace[next].arrival_s <= t) {
      const TraceRequest& tr = trace[next++];
      if (tr.final_context_tokens() > limit) {
        ++skipped;  // cannot fit this engine at all
        continue;
      }
      GenerateRequest req;
      req.prompt = synth_tokens(tr.seed, 0, tr.prompt_tokens, vocab);
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
      auto id = e.add_request(std::move(req));
      if (!id.ok()) {
        ++skipped;
        continue;
      }
      Live l;
      l.trace = &tr;
      l.engine_id = *id;
      l.record.id = tr.id;
      l.record.augmentation = tr.augmentation;
      l.record.arrival_s = tr.arrival_s;
      live.emplace(*id, l);
    }
    // Tools that have answered.
    while (!resumes.empty() && resumes.top().at <= t) {
      Resume r = resumes.top();
      resumes.pop();
      Live& l = live.at(r.engine_id);
      const Segment& sg = l.trace->segments[l.segment - 1];
      Status st =
          e.resume(r.engine_id, synth_tokens(l.trace->seed, l.segment, sg.return_tokens, vocab));
      if (!st.ok()) return fail(st.error());
      l.record.interception_s += t - l.paused_at;
      l.record.output_tokens += sg.return_tokens;
    }
    if (t > hard_stop || (next >= trace.size() && live.empty())) break;
    if (!e.has_work()) {
      // Idle: sleep until the next arrival or tool answer (bounded so expiry stays live).
      double wake = hard_stop;
      if (next < trace.size()) wake = std::min(wake, trace[next].arrival_s);
      if (!resumes.empty()) wake = std::min(wake, resumes.top().at);
      const double dt = std::clamp(wake - elapsed(), 0.0, 0.05);
      std::this_thread::sleep_for(std::chrono::duration<double>(dt));
      idle_s += dt;
      e.step();  // lets the policy see paused requests and expiries
      continue;
    }
    const double step_start = elapsed();
    const std::vector<RequestOutput> outputs = e.step();
    // The whole step as the requests see it (schedule, copies, forward, sampling, output
    // handling): set against forward_seconds it shows what a cost model of the forward
    // alone leaves out (docs/BENCHMARKS.md, simulator validation).
    step_wall_s += elapsed() - step_start;
    for (const RequestOutput& o : outputs) {
      Live& l = live.at(o.id);
      const double now = elapsed();
      if (!o.new_tokens.empty() && l.record.first_token_s == 0.0) l.record.first_token_s = now;
      l.record.output_tokens += (int64_t)o.new_tokens.size();
      if (o.intercepted) {
        const Segment& sg = l.trace->segments[l.segment];
        l.segment++;
        l.paused_at = now;
        resumes.push({now + sg.tool_seconds, o.id});
      }
      if (o.finished()) {
        l.record.end_s = now;
        l.record.completed = true;
        records.push_back(l.record);
        live.erase(o.id);
      }
    }
  }
  for (auto& [id, l] : live) records.push_back(l.record);  // unfinished

  const double wall = elapsed();
  const Summary sum = summarize(records, duration);
  const EngineStats& st = e.stats();
  const double gb = 1e9;
  if (!a.flag("quiet")) {
    std::printf(
        "workload %s, policy %s, estimator %s, rate %.2f req/s, %.0f s of arrivals (%.0f s run)\n",
        wl.c_str(), cfg->policy.c_str(), cfg->estimator.c_str(),
        trace.empty() ? 0.0 : (double)trace.size() / duration, duration, wall);
    std::printf("%s",
                format_summary_table(sum, summarize_by_augmentation(records, duration)).c_str());
    std::printf(
        "interceptions %lld, recomputed tokens %lld, swapped out/in %lld/%lld tokens, "
        "preemptions %lld, skipped %lld\n",
        (long long)st.interceptions, (long long)st.recomputed_tokens,
        (long long)st.swapped_out_tokens, (long long)st.swapped_in_tokens,
        (long long)st.preemptions, (long long)skipped);
    std::printf("decisions discard/swap/preserve %lld/%lld/%lld\n", (long long)st.discard_decisions,
                (long long)st.swap_decisions, (long long)st.preserve_decisions);
    std::printf("waste (GB*s): recompute %.3f, preserve %.3f, swap stall %.3f\n",
                st.waste_recompute / gb, st.waste_preserve / gb, st.waste_swap_stall / gb);
    for (const ToolStats& ts : e.estimator().stats())
      std::printf("tool %-12s n=%-5lld p50 %.3fs p95 %.3fs p99 %.3fs\n", ts.tool.c_str(),
                  (long long)ts.count, ts.p50, ts.p95, ts.p99);
  }
  if (a.has("json")) {
    nlohmann::json j;
    j["workload"] = wl;
    j["policy"] = cfg->policy;
    j["estimator"] = cfg->estimator;
    j["rate"] = trace.empty() ? 0.0 : (double)trace.size() / duration;
    j["duration_s"] = duration;
    j["summary"] = to_json(sum);
    j["interceptions"] = st.interceptions;
    j["recomputed_tokens"] = st.recomputed_tokens;
    j["swapped_out_tokens"] = st.swapped_out_tokens;
    j["swapped_in_tokens"] = st.swapped_in_tokens;
    j["preemptions"] = st.preemptions;
    j["skipped"] = skipped;
    j["waste_byte_seconds"] = {{"recompute", st.waste_recompute},
                               {"preserve", st.waste_preserve},
                               {"swap_stall", st.waste_swap_stall}};
    j["decisions"] = {{"discard", st.discard_decisions},
                      {"swap", st.swap_decisions},
                      {"preserve", st.preserve_decisions}};
    nlohmann::json tools = nlohmann::json::array();
    for (const ToolStats& ts : e.estimator().stats())
      tools.push_back({{"tool", ts.tool},
                       {"count", ts.count},
                       {"p50", ts.p50},
                       {"p95", ts.p95},
                       {"p99", ts.p99}});
    j["tools"] = tools;
    // Where the engine's time went: a measured run set against a simulated one needs these.
    j["engine"] = {
        {"steps", st.steps},
        {"forward_seconds", st.forward_seconds},
        {"mean_step_ms", st.steps > 0 ? st.forward_seconds / (double)st.steps * 1e3 : 0.0},
        {"host_prepare_seconds", st.host_prepare_seconds},
        {"swap_seconds", st.swap_seconds},
        {"prompt_tokens_computed", st.prompt_tokens_computed},
        {"decode_tokens", st.decode_tokens},
        {"replayed_steps", st.replayed_steps},
        {"swap_preemptions", st.swap_preemptions},
        {"run_seconds", wall},
        {"step_wall_seconds", step_wall_s},
        {"idle_seconds", idle_s}};
    std::ofstream out(a.get("json"));
    if (!out) return fail(Error{"cannot write '" + a.get("json") + "'"});
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace infercept::cli
