// What the interception policy needs to know about the machine, all of it measured by the
// profiler (`infercept profile`) rather than hard-coded: the forward time as a function of
// the query tokens in a step, the KV bytes per token, and the host<->device copy bandwidth.
// From these follow the saturation point S (tokens per step up to which a step costs about
// the same as a decode step) and the swap budget per step (what can be copied while the
// forward pass runs).
//
// T_fwd(x) is one sequence of x query tokens with no context before them. A real step also
// reads the KV its sequences already hold and carries several sequences; optional terms
// (absent = 0, and then step_seconds() is T_fwd(x) exactly, as before they existed) price
// that for the simulator's clock (docs/DESIGN.md, "Interception", "Simulator"):
//   step = B + a(n) * (context read by decode-like rows) + sum over chunks p(rows) * context
//          + b * (n - 1) + r * (sampled rows - 1)
// with n the sequences in the step and B = D(n) for a decode-only step (every sequence one
// row) when decode samples are given, else T_fwd(x). Why each term:
//  - a(n) falls with n: attention over few sequences cannot fill a GPU (on the H200 0.59 us
//    per token at 1 sequence, 0.19 from 32; bench-forward decode steps, 2026-12-01).
//  - D(n): the engine replays decode-only steps from CUDA graphs (GEMV kernels, no launch
//    gaps), while T_fwd(x) of the profiler is one sequence of x tokens run eagerly: on the
//    H200 D(1) = 4.3 ms against T_fwd(1) = 6.2 (docs/DESIGN.md, "The CUDA backend": CUDA graphs).
//  - p(rows): a prefill chunk (a new prompt's later chunks, a resumed request's returned
//    tokens, discard's recomputation) reads its cached context through other kernels than a
//    decode row. On CUDA a chunk of 9-63 rows is one 32-row item per KV head that streams the
//    whole context on CUDA cores, and one of >= 64 rows goes to the tensor-core prefill kernel,
//    one CTA per 128-row tile and head; neither splits the context across the chip as decode
//    does, so a chunk pays per context token several times a decode row's price, whatever its
//    rows (docs/bench/step-probe, BENCHMARKS.md). Chunks below the smallest sample's rows
//    (on CUDA up to 8, which the decode kernels split like decode rows) pay a(n).
// The policies keep the paper's T_fwd(x) (waste.h says why).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"

namespace infercept {

// One sequence of a step that computes more than one row: a prefill chunk.
struct StepChunk {
  int64_t rows = 0;     // query rows of this sequence this step
  int64_t context = 0;  // KV tokens it held before the step
};

// What a step carries, beyond its query tokens, that costs time.
struct StepShape {
  int64_t query_tokens = 0;    // x: rows computed this step
  int64_t context_tokens = 0;  // KV tokens the sequences held before the step (read by attention)
  int64_t sequences = 0;       // sequences in the step
  int64_t sampled_rows = 0;    // rows whose logits are sampled
  // The sequences with more than one row (their context is part of context_tokens); none:
  // a decode-only step.
  std::vector<StepChunk> chunks;
  bool decode_only() const { return chunks.empty(); }
};

struct CostModel {
  // (query tokens, seconds) samples of one forward step, ascending in tokens; t_fwd()
  // interpolates linearly between them and extrapolates from the last two.
  std::vector<std::pair<int64_t, double>> t_fwd_samples;
  double kv_bytes_per_token = 0.0;     // M: 2 * layers * kv_heads * head_dim * elem bytes
  double swap_bytes_per_second = 0.0;  // B: one direction, host <-> device
  // The local-disk tier (kv/disk_tier.h): sustained bytes per second of writing KV group
  // files from the host pool and reading them back. `infercept profile --kv-disk-dir DIR`
  // measures them (measure_disk_bandwidth); the defaults are deliberately conservative for a
  // datacenter NVMe drive (PCIe 4 parts are rated ~3-7 GB/s sequential; sustained writes
  // past the drive's cache fall to ~1-2 GB/s), so the waste model does not favour the disk
  // on a slower drive than assumed.
  double disk_write_bytes_per_second = 1.0e9;
  double disk_read_bytes_per_second = 2.0e9;
  int64_t saturation_tokens = 0;  // S; 0 = derive from the samples
  // a(n): (sequences in the step, seconds per context token they held before it) samples,
  // ascending in sequences; interpolated linearly, flat outside. Empty: no context term. One
  // sample is a constant (what `infercept profile` measures: one decode row).
  std::vector<std::pair<int64_t, double>> context_samples;
  // b: seconds per sequence of the step past the first (T_fwd(x) has one).
  double sequence_seconds = 0.0;
  // r: seconds per sampled row past the first (T_fwd(x) samples one).
  double sample_seconds_per_row = 0.0;
  // D(n): (sequences, seconds) of a decode-only step of n one-row sequences with no context,
  // ascending; interpolated linearly, flat outside. Empty: T_fwd(n) prices those steps too.
  std::vector<std::pair<int64_t, double>> decode_samples;
  // p(rows): (least rows, seconds per context token) for prefill chunks, ascending in rows; a
  // chunk takes the last sample whose rows it reaches. Empty, or below the first: a(n).
  std::vector<std::pair<int64_t, double>> chunk_context_samples;
  // q: seconds per (chunk row x context token) of a chunk of 2+ rows: the part of its
  // attention that grows with its rows (FLOPs), beside p's part that does not (the KV read).
  // One p per row bucket alone prices a bucket's short chunks like its longest.
  double chunk_row_context_seconds = 0.0;
  // kT: a step with a prefill chunk lasts kT x T_fwd(x) plus the terms above (what the
  // engine's chunk steps cost over its profiled T_fwd: probed by `infercept profile`, a chunk
  // beside decode rows; fitted to step traces for the built-in profiles). T_fwd itself
  // stays the profiled curve, because the scheduler's decisions read it (the waste terms,
  // the swap budget) as the engine's do: a simulation that scaled it would decide otherwise.
  double chunk_step_scale = 1.0;

  double t_fwd(int64_t tokens) const;
  // a(n): seconds per context token read by a step of n sequences.
  double context_seconds_per_token(int64_t sequences) const;
  // D(n), or T_fwd(n) without decode samples.
  double t_decode(int64_t sequences) const;
  // p(rows) of a chunk, or a(sequences) when no chunk sample applies.
  double chunk_seconds_per_token(int64_t rows, int64_t sequences) const;
  // The duration of a step of this shape: T_fwd(x) plus the terms above; 0 for no rows.
  double step_seconds(const StepShape& step) const;
  bool has_step_terms() const {
    return !context_samples.empty() || sequence_seconds > 0.0 || sample_seconds_per_row > 0.0 ||
           !decode_samples.empty() || !chunk_context_samples.empty() ||
           chunk_row_context_seconds > 0.0 || chunk_step_scale != 1.0;
  }
  // Seconds to copy `tokens` tokens of KV one way.
  double t_swap(int64_t tokens) const;
  // Seconds to write `tokens` tokens of KV from the host pool to disk, and to read them back.
  double t_disk_write(int64_t tokens) const;
  double t_disk_read(int64_t tokens) const;
  // The most tokens whose copy fits in `seconds` (the per-step swap budget N_i).
  int64_t swap_budget_tokens(double seconds) const;
  // S: where T_fwd(x) leaves its flat regime: the largest sampled token count reached while
  // every stretch between samples grows by at most `tolerance` per doubling of x and the
  // total by at most (1 + tolerance)^2. Used when saturation_tokens is 0.
  int64_t derive_saturation(double tolerance = 0.2) const;
  int64_t saturation() const {
    return saturation_tokens > 0 ? saturation_tokens : derive_saturation();
  }

  Status validate() const;
  // JSON text <-> CostModel (the profiler's cache file). The step terms are optional keys:
  // "context_seconds_per_token" (a number: one sample at 1 sequence, i.e. a constant; or
  // [[sequences, seconds], ...]), "sequence_seconds", "sample_seconds_per_row",
  // "decode_seconds" ([[sequences, seconds], ...]) and "chunk_context_seconds_per_token"
  // ([[least rows, seconds], ...]). A file without them loads with none, and to_json writes
  // them only when present, so such a file round-trips unchanged. Likewise
  // "disk_write_bytes_per_second" and "disk_read_bytes_per_second", written only when they
  // differ from the defaults.
  std::string to_json() const;
  static Result<CostModel> from_json(const std::string& text, const std::string& path);
};

}  // namespace infercept
