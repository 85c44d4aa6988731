// compute_waste: the paper's four waste terms and the disk tier's two in byte-seconds (GPU memory
// held x time), as written in waste.h. Called for every paused request every step, so it is
// straight-line arithmetic plus a few t_fwd() lookups.
#include "sched/waste.h"

#include <algorithm>
#include <cmath>

namespace infercept {

Waste compute_waste(const CostModel& cost, const WasteInputs& in) {
  Waste w;
  const int64_t c = in.context_tokens;
  if (c <= 0) return w;  // nothing cached: every choice is free, and there are no chunks

  const double m = cost.kv_bytes_per_token;
  // Negative or NaN estimates (clock skew, a broken estimator) must not make preserving look
  // better than free; an infinite one (a call that never ends) is meaningful and kept.
  const double t_int = in.expected_remaining > 0.0 ? in.expected_remaining : 0.0;
  const double cf = (double)c;
  const double other = (double)std::max<int64_t>(0, in.other_tokens);
  const double batch = (double)std::max<int64_t>(0, in.batch_tokens);
  const int64_t r = std::max<int64_t>(0, in.decode_tokens);

  // Products with an infinite factor are only formed when the other factors are non-zero:
  // inf * 0 would be NaN, and NaN breaks the ordering the policy sorts by.
  w.preserve = (t_int > 0.0 && m > 0.0) ? t_int * cf * m : 0.0;

  const double t_c = cost.t_fwd(c);
  w.discard = t_c * cf * m + t_c * other * m;

  // Chunks of at most S - R tokens keep each step under the saturation point. When the
  // decode tokens alone already reach S (S <= R), a chunk still needs at least one token
  // per step to make progress, so the room is clamped to 1.
  const int64_t room = std::max<int64_t>(1, cost.saturation() - r);
  w.chunks = (c + room - 1) / room;
  // C/n rounded up: the token count of the largest chunk, since t_fwd takes whole tokens.
  const int64_t chunk = (c + w.chunks - 1) / w.chunks;
  // A chunk's cost to the others is only the time it adds to a decode step they run anyway.
  // Noisy samples could make that negative; extra work never makes a step faster.
  const double marginal = std::max(0.0, cost.t_fwd(r + chunk) - cost.t_fwd(r));
  w.discard_chunked = t_c * cf * m / 2.0 + (double)w.chunks * marginal * other * m;

  w.swap_sync = (batch > 0.0 && m > 0.0) ? 2.0 * cost.t_swap(c) * batch * m : 0.0;

  // The request's own wait for its KV: the rest of the write past the pause's end (an
  // infinite pause hides any write), then the read.
  const double write_left = std::max(0.0, cost.t_disk_write(c) - t_int);
  const double t_wait = (std::isinf(t_int) ? 0.0 : write_left) + cost.t_disk_read(c);
  w.spill = m > 0.0 ? t_wait * cf * m : 0.0;
  w.spill_sync = w.spill + w.swap_sync;
  return w;
}

}  // namespace infercept
