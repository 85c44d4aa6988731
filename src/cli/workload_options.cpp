#include "cli/workload_options.h"

#include <algorithm>

namespace infercept::cli {

void add_workload_flags(CLI::App& app, WorkloadFlags& f) {
  WorkloadSpec& s = f.spec;
  const std::string g = "Workload";
  app.add_option("--workload", s.name,
                 "mixed|math|qa|ve|chat|image|tts (Table 1), sessions (long agent "
                 "sessions), or a JSON Lines trace file (docs/TRACE.md)")
      ->group(g);
  app.add_option("--rate", s.rate, "arrivals per second (Poisson)")->group(g);
  app.add_option("--duration", s.duration_s, "seconds of arrivals")->group(g);
  app.add_option("--seed", f.seed, "workload seed")->group(g);
  app.add_option("--time-scale", s.time_scale, "multiplies tool durations")->group(g);
  app.add_option("--context-scale", s.context_scale, "multiplies context lengths")->group(g);
  app.add_option("--max-context", f.max_context,
                 "clamp on a request's final context, sessions: shared prefix included (0: "
                 "none)")
      ->group(g);
  add_repeated(app, "--tokens", f.tokens,
               "AUG.generate=MIN-MAX or AUG.returned=MIN-MAX (AUG a name or *)")
      ->group(g);
  add_repeated(app, "--session", f.session,
               "sessions: system=TOKENS, turns|task|generate=MEAN[,STD], "
               "TOOL.seconds|TOOL.output=MEAN[,STD], TOOL.weight=W (TOOL a name or *)")
      ->group(g);
  app.add_option("--trace-out", f.trace_out, "write the workload as a trace file")->group(g);
  app.add_flag("--trace-only", f.trace_only, "write --trace-out and exit without running")
      ->group(g);
  f.drain_opt = app.add_option("--drain", f.drain_s,
                               "seconds requests may finish after the arrivals (default: 3x "
                               "the arrival window)")
                    ->default_str("")
                    ->group(g);
}

Result<WorkloadRun> workload_from(const WorkloadFlags& f) {
  WorkloadRun w;
  w.name = f.spec.name;
  if (is_builtin_workload(w.name)) {
    WorkloadSpec spec = f.spec;
    spec.seed = (uint64_t)f.seed;
    spec.max_context = (int32_t)f.max_context;
    for (const std::string& o : f.tokens) TRY(apply_token_override(spec, o));
    for (const std::string& o : f.session) TRY(apply_session_override(spec, o));
    if (!f.session.empty() && spec.name != "sessions") {
      return make_error("--session applies to --workload sessions only");
    }
    TRY(validate_workload_spec(spec));
    w.trace = generate_workload(spec);
    w.duration_s = spec.duration_s;
    if (spec.name == "sessions") w.shared_prefix_tokens = session_shared_prefix_tokens(spec);
  } else {
    if (!f.session.empty()) return make_error("--session applies to --workload sessions only");
    TRY_ASSIGN(w.trace, read_trace(w.name));
    for (const auto& r : w.trace) w.duration_s = std::max(w.duration_s, r.arrival_s);
    w.duration_s = std::max(w.duration_s, 1.0);
  }
  if (f.trace_only && f.trace_out.empty()) return make_error("--trace-only needs --trace-out");
  if (!f.trace_out.empty()) TRY(write_trace(f.trace_out, w.trace));
  w.drain_s = given(f.drain_opt) ? f.drain_s : 3.0 * w.duration_s;
  if (!(w.drain_s >= 0.0)) return make_error("--drain must be >= 0");
  return w;
}

}  // namespace infercept::cli
