// A sequence as the scheduler sees it: its tokens (prompt, then generated), how many of them
// have their KV in the cache, its blocks, and where it is in its life cycle. No model, no
// backend: the scheduler only plans which tokens run and which blocks they use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/block_allocator.h"

namespace infercept {

enum class SeqState { waiting, running, finished };

struct Sequence {
  uint64_t id = 0;
  double arrival_time = 0.0;  // seconds; queues are ordered by it (FCFS)
  std::vector<int32_t> tokens;  // prompt followed by generated tokens
  int64_t n_prompt = 0;
  int64_t n_computed = 0;  // tokens whose KV is in the cache (a prefix of `tokens`)
  BlockTable blocks;
  SeqState state = SeqState::waiting;
  int64_t n_preemptions = 0;
  int64_t n_recomputed = 0;  // tokens prefilled again after a preemption

  int64_t n_generated() const { return (int64_t)tokens.size() - n_prompt; }
  // Tokens still to be fed to the model before the next token can be sampled.
  int64_t n_uncomputed() const { return (int64_t)tokens.size() - n_computed; }
};

}  // namespace infercept
