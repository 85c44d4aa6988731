// The InferCept waste model: GPU memory x time (byte-seconds) that each way of handling a
// paused request's KV cache costs. Symbols as in docs (and the paper):
//   C        context tokens of the paused request
//   M        KV bytes per token (CostModel::kv_bytes_per_token)
//   T_int    expected remaining interception time (from a DurationEstimator)
//   C_other  context tokens held by the other running requests
//   C_batch  context tokens of the whole running batch
//   R        decode tokens of a step (the running requests)
//   S        saturation point
// Preserve:          W_p  = T_int * C * M
// Discard, at once:  W_d  = T_fwd(C) * C * M + T_fwd(C) * C_other * M
// Discard, chunked:  W_cd = T_fwd(C) * C * M / 2 + n * (T_fwd(R + C/n) - T_fwd(R)) * C_other * M
//                    with n = ceil(C / max(1, S - R)) chunks; the second term is each chunk's
//                    marginal time over a plain decode step (the authors' code's reading).
// Swap, synchronous: W_s  = 2 * T_swap(C) * C_batch * M
// Swap within the per-step budget, overlapped with the forward pass, costs ~0: the budget
// is handed out, not compared.
// T_fwd here is CostModel::t_fwd, the paper's, not CostModel::step_seconds: the context the
// running batch reads and its sequence count are paid whatever is decided for a paused
// request (it is in the batch under none of the choices), so they cancel in a chunk's
// marginal time; adding them to T_fwd(C) would tilt decisions toward preserve for a cost
// no choice changes (docs/DESIGN.md, "Interception").
#pragma once

#include <cstdint>

#include "sched/cost_model.h"

namespace infercept {

struct WasteInputs {
  int64_t context_tokens = 0;     // C
  double expected_remaining = 0;  // T_int, seconds
  int64_t other_tokens = 0;       // C_other
  int64_t batch_tokens = 0;       // C_batch
  int64_t decode_tokens = 0;      // R
};

struct Waste {
  double preserve = 0;
  double discard = 0;          // recomputed at once
  double discard_chunked = 0;  // recomputed in chunks riding along decode steps
  double swap_sync = 0;
  int64_t chunks = 0;  // n
};

Waste compute_waste(const CostModel& cost, const WasteInputs& in);

}  // namespace infercept
