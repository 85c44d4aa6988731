#include "cli/workload_options.h"

#include <algorithm>

#include "workload/workload.h"

namespace infercept::cli {

const std::set<std::string> kWorkloadFlags = {
    "workload",      "rate",        "duration", "seed",      "time-scale",
    "context-scale", "max-context", "tokens",   "trace-out", "drain"};

Result<WorkloadRun> workload_from(const Args& a) {
  WorkloadRun w;
  w.name = a.get("workload", "mixed");
  if (is_builtin_workload(w.name)) {
    WorkloadSpec spec;
    spec.name = w.name;
    TRY_ASSIGN(spec.rate, a.get_double("rate", 1.0));
    TRY_ASSIGN(spec.duration_s, a.get_double("duration", 60.0));
    TRY_ASSIGN(int64_t seed, a.get_int("seed", 0));
    TRY_ASSIGN(spec.time_scale, a.get_double("time-scale", 1.0));
    TRY_ASSIGN(spec.context_scale, a.get_double("context-scale", 1.0));
    TRY_ASSIGN(int64_t max_context, a.get_int("max-context", 0));
    spec.seed = (uint64_t)seed;
    spec.max_context = (int32_t)max_context;
    for (const std::string& o : a.get_all("tokens")) TRY(apply_token_override(spec, o));
    TRY(validate_workload_spec(spec));
    w.trace = generate_workload(spec);
    w.duration_s = spec.duration_s;
  } else {
    TRY_ASSIGN(w.trace, read_trace(w.name));
    for (const auto& r : w.trace) w.duration_s = std::max(w.duration_s, r.arrival_s);
    w.duration_s = std::max(w.duration_s, 1.0);
  }
  if (a.has("trace-out")) TRY(write_trace(a.get("trace-out"), w.trace));
  TRY_ASSIGN(w.drain_s, a.get_double("drain", 3.0 * w.duration_s));
  if (!(w.drain_s >= 0.0)) return make_error("--drain must be >= 0");
  return w;
}

}  // namespace infercept::cli
