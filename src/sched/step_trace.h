// A per-step record of what the scheduler planned and what the step cost, written as CSV by
// the engine (`infercept bench --step-trace F`) and by the simulator (`infercept simulate
// --step-trace F`) from the same fields, so that a measured run and its simulation can be
// laid side by side step by step (bench/trace_diff.py): where the two first part (free
// blocks, preemptions, prompt rows) says which part of the cost model or of the event
// timing is off, which the end-of-run means cannot (docs/BENCHMARKS.md, "The simulator against the
// engine").
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "core/result.h"
#include "kv/block_allocator.h"
#include "sched/scheduler.h"

namespace infercept {

struct StepTraceRow {
  double t = 0.0;        // the clock at which the step was planned (seconds)
  double seconds = 0.0;  // the forward pass (0 for a step that only moved copies)
  int64_t sequences = 0, decode_rows = 0, prompt_rows = 0, chunks = 0;
  int64_t context_tokens = 0;  // KV the step's sequences held before it
  int64_t free_blocks = 0;     // device blocks free after planning
  int64_t running = 0, paused = 0, waiting = 0;
  int64_t preempted = 0, dropped_tokens = 0, discards = 0;
  int64_t swap_in_blocks = 0, swap_out_blocks = 0;
  // Rows whose token is sampled: a step with none (a prefill chunk alone) returns before the
  // GPU has run it, so the engine's `seconds` for it is its launch (and a wait for the step
  // before it); the steps after it hold the rest, at the latest the next one that samples
  // (bench/step_fit.py fits over such groups; bench/trace_diff.py replays the pipeline).
  int64_t sampled_rows = 0;
  // The sequences computing more than one row, as CostModel::step_seconds prices them
  // (StepChunk): the context they held (part of context_tokens), and each one's rows and
  // context, written "rows:context;rows:context".
  int64_t chunk_context_tokens = 0;
  std::string chunk_list;
  // Blocks of the step's longest sequence: the CUDA engine's block-table width follows it
  // (block_table_width), and the width is part of the launch signature its graphs are kept by.
  int64_t longest_blocks = 0;
  // The engine: 1 when the step's forward was replayed or captured from a CUDA graph, 0 when
  // it ran eagerly; -1 where nobody knows (the simulator, a step with no forward).
  int64_t replayed = -1;
};

// A plan that ran, moved or dropped anything: the steps a trace holds (an idle wake-up that
// found nothing to do is not one).
bool plan_did_something(const StepPlan& plan);

// The fields a plan and the scheduler's queues give; `t` and `seconds` are the caller's.
StepTraceRow step_trace_row(const StepPlan& plan, const Scheduler& sched,
                            const BlockAllocator& device, double t);

class StepTraceWriter {
 public:
  // Opens (truncates) `path` and writes the header; an error names the path.
  static Result<std::unique_ptr<StepTraceWriter>> open(const std::string& path);
  ~StepTraceWriter();
  StepTraceWriter(const StepTraceWriter&) = delete;
  StepTraceWriter& operator=(const StepTraceWriter&) = delete;

  void write(const StepTraceRow& row);

 private:
  explicit StepTraceWriter(std::FILE* f) : f_(f) {}
  std::FILE* f_;
};

}  // namespace infercept
