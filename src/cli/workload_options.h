// The workload of `bench` and `simulate`, from the same flags: a built-in generator
// (--workload NAME --rate --duration --seed --time-scale --context-scale --max-context; Table 1
// with --tokens AUG.FIELD=MIN-MAX, long agent sessions with --session KEY=VALUE) or a trace
// file (--workload FILE), written out with --trace-out (--trace-only: and nothing else), and
// how long to let requests finish after the arrivals (--drain, default 3x the arrival window).
#pragma once

#include <string>
#include <vector>

#include "cli/common.h"
#include "workload/trace.h"
#include "workload/workload.h"

namespace infercept::cli {

struct WorkloadFlags {
  WorkloadSpec spec;
  int64_t seed = 0, max_context = 0;
  std::vector<std::string> tokens, session;
  std::string trace_out;
  bool trace_only = false;
  double drain_s = 0.0;
  CLI::Option* drain_opt = nullptr;
};
void add_workload_flags(CLI::App& app, WorkloadFlags& f);

struct WorkloadRun {
  std::string name;  // the built-in workload or the trace file
  std::vector<TraceRequest> trace;
  double duration_s = 0.0;  // arrival window (a trace's: its last arrival, at least 1 s)
  double drain_s = 0.0;
  // The shared prefix the workload itself asks for (sessions: the system prompt and tool
  // definitions); --shared-prefix overrides it. 0 for Table 1 and trace files.
  int64_t shared_prefix_tokens = 0;
};

Result<WorkloadRun> workload_from(const WorkloadFlags& f);

}  // namespace infercept::cli
