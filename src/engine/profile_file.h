// The profile file `infercept profile` writes and `infercept simulate --profile FILE` reads:
// the cost model's JSON (CostModel::to_json, which the engine reads at start-up) plus the keys
// only the simulator reads: the costs of the engine that its scheduler does not see
// (EngineArtifacts) and whether the backend's copies overlap the forward pass. CostModel's
// reader ignores these keys, and a file without them (an older cache, or the engine's quick
// start-up profile) loads with none.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sched/cost_model.h"

namespace infercept {

// What the CUDA engine pays that its scheduler does not see, so not terms of the cost model
// (which the scheduler decides with). `infercept profile` measures them on the engine itself
// (engine/profile_probes.h); the built-in H200 profiles fitted them to step traces (the 13B
// to its step probes, 2026-12-01, the 7B to paper runs at another seed than the
// validation's, 2026-12-03; docs/BENCHMARKS.md "The simulator against the engine"). In the
// file: "first_sight_seconds", "graph_miss_seconds": [new, second], "graph_cache_entries" and
// "copy_interference": [in, out]; absent: 0, none.
struct EngineArtifacts {
  // A step with chunks whose query-token count (its GEMMs' row count) the process has not run
  // before: cuBLASLt's heuristic and a kernel's lazy load (docs/DESIGN.md, "The CUDA backend":
  // GEMM plans). Counts in `seen_token_counts` count as run: an engine that profiled itself
  // at start-up ran its profile's counts (1, 16, 64, 128, 256, 512), one that loaded the
  // cached profile (every process after the first on a model) ran none, the default.
  double first_sight_seconds = 0.0;
  std::vector<int64_t> seen_token_counts;
  // Decode-only steps and the CUDA graph cache: with graph_cache_entries 0, a step whose
  // sequence count differs from the last decode-only step's pays new_batch_seconds (a new
  // launch signature: probed, run eagerly), the step after it second_batch_seconds (captured
  // and instantiated). With graph_cache_entries > 0 the cache itself (StepGraphCache: that
  // many graphs, least recently used out, keyed here by the sequence count and the block
  // tables' width): a cached key pays nothing, a key's first sight new_batch_seconds, its
  // second second_batch_seconds.
  double new_batch_seconds = 0.0;
  double second_batch_seconds = 0.0;
  int64_t graph_cache_entries = 0;
  // Seconds a step's forward pass gains per second of swap-in (in) and swap-out (out) copy
  // queued with it. The CUDA swap engine's copies run under the forward pass, but a layer
  // that stores into a block a copy still reads or writes, or attends over a block being
  // swapped in, waits for that layer's copy, and such a step runs eagerly rather than from
  // its graph (cuda/swap_engine.h); where memory is tight the step reuses what a swap-out
  // frees and runs what a swap-in brings at once. Step traces of the 7B near its knee:
  // 0.15-0.34 s a second of copy (docs/BENCHMARKS.md, "The simulator against the engine").
  double copy_in_interference = 0.0;
  double copy_out_interference = 0.0;
};

// The keys beside the cost model's.
struct ProfileExtras {
  EngineArtifacts artifacts;
  // "copies_overlap": the backend's block copies run under the forward pass (CUDA's copy
  // streams) rather than on the engine thread (the CPU). Absent in older files: the reader
  // then goes by the file's name (simulator.h).
  std::optional<bool> copies_overlap;
  int64_t max_context = 0;  // "max_context": the model's context length; 0 = absent
  // "copy_interference_untouched": [in, out], the same probe as copy_interference with copies
  // of blocks the step does not touch (bandwidth contention alone). Written for comparison;
  // the simulator does not read it.
  std::optional<std::pair<double, double>> copy_interference_untouched;
};

// The extra keys of a profile file's text; absent or malformed keys are left at their
// defaults (the cost model's own reader reports what is wrong with the file).
ProfileExtras read_profile_extras(const std::string& text);

// The file: cost.to_json() with the extra keys added.
std::string profile_file_json(const CostModel& cost, const ProfileExtras& extras);

}  // namespace infercept
