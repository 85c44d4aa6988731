// Direct probes of the step terms the simulator prices beyond T_fwd(x) (CostModel::step_seconds
// and EngineArtifacts), run by `infercept profile` on the engine's own model, backend and KV
// pools: each term is a difference of steps built and timed here, never a fit to the step
// traces of workload runs. Each point is the median of its timed runs after two untimed ones
// (T_fwd keeps the profiler's best-of-N: a floor, which the policies read; the simulator adds
// up steps as they come). What each probe runs, and what it gives:
//   - D(n): a decode-only step of n one-row sequences at position 0 (each its own block), its
//     rows sampled where the engine samples them (argmax on the backend); on CUDA the third
//     and later runs replay the step's graph, as the engine's steady decode steps do.
//   - a(n): the same step with every row holding 0, C/2 and C tokens of context in blocks of
//     its own; the least-squares slope of the step time against the context read (n x held).
//   - p(rows), q: one prefill chunk of `rows` rows holding H tokens of context against the
//     same chunk with none; per context token s(rows) = (t_H - t_0) / H. q is how s grows with
//     the rows between the two largest chunks probed (the attention FLOPs), p(rows) = s(rows)
//     - q x rows (the context read whatever the rows).
//   - kT: a step of one chunk (no context, not sampled) beside decode rows (sampled), against
//     the profile's T_fwd of its query tokens; the mean over the chunk sizes probed. D(n)
//     and kT include the per-sequence and per-sampled-row costs, so the profile's b and r
//     (sequence_seconds, sample_seconds_per_row) are 0.
//   - the graph cache: for sequence counts no other probe ran, the first decode-only step
//     (probe pass + eager run) and the second (capture + instantiate) over the replays after
//     them, the median over the counts; the cache's size is the backend's own constant
//     (Backend::step_graph_capacity). A backend that records no steps (the CPU) has no graph
//     cache: both prices and the size are 0 without a probe.
//   - first sight: a chunk step of a query-token count no other probe ran, its first run over
//     its later ones, less the same for the nearest count already run (a change of shape
//     alone), 0 where that is within the later runs' spread (noise), the median over the
//     counts (on CUDA cuBLASLt's plan and lazy kernel loads; on the CPU measured as it comes:
//     a larger count's scratch is allocated and first touched, ~0).
//   - copy interference: a decode step whose first row attends over K blocks being swapped in
//     (a resumed request run in the step that brings it back) or whose second row stores into
//     a block being swapped out (a step reusing what a swap-out frees), against the same step
//     with no copy: (forward with - forward without) / (K blocks' copy time at the profile's
//     bandwidth), K chosen so that the copy takes about half the step (the copy stays hidden,
//     as the swap budget keeps it). The same with copies of blocks the step does not touch
//     gives the bandwidth contention alone (written beside, for comparison). On the CPU the
//     copies run on the engine thread before the step (a stall the simulator charges in
//     full), so what the forward gains is ~0.
// Budget: about 250 steps in all (D and a: 3 contexts x 7 batch sizes x 5 runs; chunks: 2 x 4
// x 5; kT 10; graph cache 15; first sight 24, up to 1,543 rows; copies ~20), plus filling the
// probed KV once (one prefill, then block copies). On a card with an 8B model that is an
// estimate of 3-6 s (decode steps of 8-15 ms, the largest chunks ~60 ms), against ~20 s to load
// the weights: not yet timed on a card. On the 2-core development CPU with the 135M default
// model the probes took 37 s (`INFERCEPT_LOG=info infercept profile --max-tokens-profiled 512
// --kv-cache-tokens 140000`), the CPU's attention over 64 x 2,048 tokens being the bulk. Probes
// that do not fit the pools or the step limits are left out (their terms stay absent), never an
// error.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"
#include "engine/profile_file.h"
#include "model/llama.h"
#include "sched/cost_model.h"

namespace infercept {

struct ProbeOptions {
  std::vector<int64_t> decode_batches = {1, 2, 4, 8, 16, 32, 64};  // D(n), a(n)
  int64_t decode_context = 2048;  // C: the longest context per decode row (less if the pool is)
  std::vector<int64_t> chunk_rows = {2, 9, 64, 256};  // p(rows); the last two also give q
  int64_t chunk_context = 2048;                       // H
  std::vector<int64_t> mixed_chunk_rows = {64, 256};  // kT's chunks
  int64_t mixed_decode_rows = 16;                     // beside them
  int fresh_counts = 3;   // new sequence counts (graph cache) and row counts (first sight)
  int64_t copy_rows = 8;  // decode rows of the copy-interference step
  int repeats = 3;        // the median of this many timed runs per point
};

struct ProbeResult {
  EngineArtifacts artifacts;
  std::optional<std::pair<double, double>> copy_interference_untouched;  // in, out
  double seconds = 0.0;  // wall time the probes took
};

// Runs the probes on `device` (otherwise unused: every block may be overwritten) and `host`,
// and sets cost's decode_samples, context_samples, chunk_context_samples,
// chunk_row_context_seconds, chunk_step_scale, sequence_seconds and sample_seconds_per_row
// (cost's T_fwd samples and bandwidth must already be measured: kT and K read them).
// `max_seqs`: the most sequences a step may carry (the model's logit rows).
Result<ProbeResult> probe_step_terms(StepModel& model, Backend& backend, KvStorage& device,
                                     KvStorage& host, int64_t block_size, int64_t max_seqs,
                                     const ProbeOptions& options, CostModel& cost);

}  // namespace infercept
