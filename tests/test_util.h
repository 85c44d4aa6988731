// Shared helpers for tests: where the default model and the fixtures are.
#pragma once

#include <cstdint>
#include <string>

namespace infercept::testing {

// Path of the default model (fetched by `make test` before tests run).
std::string default_model_path();
// Path of a file under tests/fixtures/.
std::string fixture_path(const std::string& name);
// Whole file as a string; empty if it cannot be read.
std::string read_file(const std::string& path);

// Column sums of a step trace (--step-trace, src/sched/step_trace.h), read back from its CSV.
struct StepTraceTotals {
  bool ok = false;  // the file was there, with the expected header and well-formed rows
  std::string error;
  int64_t rows = 0, forward_rows = 0;  // every row; rows of steps with a forward pass
  double seconds = 0.0;
  int64_t decode_rows = 0, prompt_rows = 0, preempted = 0, dropped_tokens = 0;
  int64_t swap_in_blocks = 0, swap_out_blocks = 0;
  int64_t max_free_blocks = 0;
  int64_t sampled_rows = 0, chunk_context_tokens = 0;
  bool time_ordered = true;
  bool chunk_context_consistent = true;  // every row: chunks' context within the step's
  // Every forward row names its longest sequence's blocks (> 0), and `replayed` is -1, 0 or 1.
  bool longest_blocks_present = true;
  int64_t replayed_rows = 0, unknown_replay_rows = 0;  // rows with replayed 1; with -1
};
StepTraceTotals read_step_trace(const std::string& path);

}  // namespace infercept::testing
