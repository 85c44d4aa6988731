// A sequence as the scheduler sees it: its tokens (prompt, then generated and returned
// tool tokens), how many of them have their KV somewhere, where that KV lives, and where the
// sequence is in its life cycle. No model, no backend: the scheduler only plans which tokens
// run and which blocks they use and move.
//
// Life cycle: waiting -> running -> intercepted (paused for a tool) -> resumed (the tool
// answered, its tokens appended) -> running ... -> finished. While intercepted, the KV is a
// prefix on the device (`blocks`) and the rest on the host (`host_blocks`), or gone; the
// policy moves it between the two every step. With a disk tier the host suffix may go on to a
// disk copy (DiskState) and come back into host blocks before it is swapped in.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kv/block_allocator.h"
#include "kv/prefix_cache.h"

namespace infercept {

enum class SeqState { waiting, running, intercepted, finished };

// Where the suffix after the device prefix of a paused request's KV is, with a disk tier:
//   none     in `host_blocks` (or nowhere: everything on the device, or dropped)
//   writing  in `host_blocks`, being written to disk copy `disk_copy` (the blocks are read
//            by the write and stay held until it ends)
//   on_disk  in disk copy `disk_copy` only (`disk_blocks` blocks); `host_blocks` is empty
//   reading  being read from the copy into `host_blocks` (reserved, disk_blocks of them)
enum class DiskState { none, writing, on_disk, reading };

struct InterceptionInfo {
  std::string tool;
  double call_time = 0.0;      // seconds (engine clock)
  std::optional<double> hint;  // expected duration from the client, if any
  bool resumed = false;        // the tool answered; the sequence wants to run again
  double resume_time = 0.0;
  bool expired = false;  // nobody answered in time: KV released, tokens kept
};

struct Sequence {
  uint64_t id = 0;
  double arrival_time = 0.0;    // seconds; every queue is ordered by it (FCFS)
  std::vector<int32_t> tokens;  // prompt, then generated (and returned tool) tokens
  int64_t n_prompt = 0;
  int64_t n_computed = 0;            // tokens whose KV exists: device prefix, then host suffix
  int64_t n_computed_peak = 0;       // most tokens ever computed: below it, prefill recomputes
  BlockTable blocks;                 // device blocks (a prefix of the context)
  std::vector<int32_t> host_blocks;  // host blocks holding the positions after `blocks`
  SeqState state = SeqState::waiting;
  std::optional<InterceptionInfo> interception;  // set while intercepted
  DiskState disk = DiskState::none;
  uint64_t disk_copy = 0;     // the disk copy's id (the scheduler's) while disk != none
  int64_t disk_blocks = 0;    // blocks the copy holds (it may hold more than n_computed needs)
  bool disk_refused = false;  // a spill of this pause failed: not tried again before the next

  // The prefix cache (Scheduler with SchedulerConfig::prefix_cache): the namespace whose
  // cached KV this sequence may share, and the keys of its leading device blocks that the
  // cache indexes (blocks.blocks[i] is the cached block of key cache_keys[i]).
  uint64_t cache_ns = 0;
  std::vector<uint64_t> cache_keys;
  bool cache_stopped = false;  // a key collision: nothing further of this context is indexed
  // Where the scheduler's last look into the prefix cache for this context stopped, so that
  // the next one, while it waits, goes on from there (PrefixCache::peek with a memo).
  mutable PrefixCache::PeekMemo peek_memo;
  int64_t n_cache_hit = 0;  // tokens the last admission found cached (0 after restart)

  // Accounting (the KPIs of docs/DESIGN.md).
  int64_t n_preemptions = 0;
  bool swap_preempted = false;           // its KV went to the host when it was preempted (minwaste)
  int64_t n_recomputed = 0;              // tokens whose KV was dropped and had to be computed again
  int64_t n_swapped_out = 0;             // tokens copied device -> host (in whole blocks)
  int64_t n_swapped_in = 0;              // tokens copied host -> device (in whole blocks)
  int64_t n_spilled = 0;                 // tokens written host -> disk (whole blocks, written)
  int64_t n_restored = 0;                // tokens read disk -> host (whole blocks, read)
  double preserved_token_seconds = 0.0;  // device tokens held while paused, over time
  int64_t n_interceptions = 0;

  int64_t n_generated() const { return (int64_t)tokens.size() - n_prompt; }
  // Tokens still to be fed to the model before the next token can be sampled.
  int64_t n_uncomputed() const { return (int64_t)tokens.size() - n_computed; }
  int64_t device_tokens(int64_t block_size) const {
    return std::min<int64_t>(n_computed, (int64_t)blocks.blocks.size() * block_size);
  }
  // Tokens whose KV is off the device: in host blocks, or with a disk tier on disk.
  int64_t host_tokens(int64_t block_size) const { return n_computed - device_tokens(block_size); }
  bool on_disk() const { return disk == DiskState::on_disk; }
  bool is_recomputing() const { return n_computed < n_computed_peak; }
  bool is_paused() const { return state == SeqState::intercepted; }
};

// Where a paused request's KV is when its tool answers: on the device (preserved, whole), in
// part on the host (none on disk, none dropped), in part on disk or on its way there or back,
// or in part dropped (it will be recomputed). Resumed turns' first token is reported by it:
// the target holds only the first two to the decode step's scale.
enum class KvPlace { device, host, disk, recompute };
inline constexpr int kKvPlaces = 4;
inline const char* kv_place_name(KvPlace p) {
  switch (p) {
    case KvPlace::device:
      return "device";
    case KvPlace::host:
      return "host";
    case KvPlace::disk:
      return "disk";
    case KvPlace::recompute:
      return "recompute";
  }
  return "?";
}
// (The token sampled last before the pause has no KV yet in any case: more than that one
// uncomputed token means some was dropped.)
inline KvPlace kv_place(const Sequence& s, int64_t block_size) {
  if (s.n_uncomputed() > 1 || s.n_computed == 0) return KvPlace::recompute;
  if (s.disk != DiskState::none && s.disk != DiskState::writing) return KvPlace::disk;
  return s.host_tokens(block_size) > 0 ? KvPlace::host : KvPlace::device;
}

}  // namespace infercept
