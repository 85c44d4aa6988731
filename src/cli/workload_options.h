// The workload of `bench` and `simulate`, from the same flags: a built-in Table-1 generator
// (--workload NAME --rate --duration --seed --time-scale --context-scale --max-context
// --tokens AUG.FIELD=MIN-MAX) or a trace file (--workload FILE), written out with
// --trace-out, and how long to let requests finish after the arrivals (--drain, default 3x
// the arrival window).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "cli/args.h"
#include "workload/trace.h"

namespace infercept::cli {

extern const std::set<std::string> kWorkloadFlags;

struct WorkloadRun {
  std::string name;  // the built-in workload or the trace file
  std::vector<TraceRequest> trace;
  double duration_s = 0.0;  // arrival window (a trace's: its last arrival, at least 1 s)
  double drain_s = 0.0;
};

Result<WorkloadRun> workload_from(const Args& a);

}  // namespace infercept::cli
