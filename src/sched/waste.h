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
// Spill to disk (kv/disk_tier.h): the KV leaves the device as a swap-out does, goes on from
// the host pool to a group file, and comes back file -> host -> device at the resume. The
// file legs run on the tier's I/O thread beside the forward pass, so they stall nobody else;
// what they cost is the resumed request's own wait, priced as discard prices its recompute
// (its blocks are taken at the resume and idle until its KV is back). The read starts at
// the resume (no prefetch yet) and cannot start before the write has ended:
//                    T_wait = max(0, T_dw(C) - T_int) + T_dr(C)
// Spill, device legs within the swap budget:  W_sp = T_wait * C * M
// Spill, device legs synchronous:             W_ss = W_sp + W_s
// with T_dw, T_dr the disk write and read times (CostModel::t_disk_write / t_disk_read). A
// spill never beats a swap on this measure (a swap has no T_wait); it is the choice when the
// host pool is full, and it beats preserve for pauses longer than T_wait and discard where
// the disk reads C back faster than the model recomputes it and stalls the batch.
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
  double spill = 0;       // to disk and back, device legs within the swap budget
  double spill_sync = 0;  // the same with synchronous device legs (spill + swap_sync)
  int64_t chunks = 0;     // n
};

Waste compute_waste(const CostModel& cost, const WasteInputs& in);

}  // namespace infercept
