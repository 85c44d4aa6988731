// KV bookkeeping: which blocks of a pool are free, and how many owners each used block has.
// It knows ids and reference counts only; the bytes live in the backend's KvStorage. Refcounts
// let two sequences share a prefix block later (prefix reuse) without copying.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace infercept {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t n_blocks);

  int32_t n_blocks() const { return (int32_t)refcount_.size(); }
  int32_t n_free() const { return (int32_t)free_.size(); }
  int32_t n_used() const { return n_blocks() - n_free(); }
  bool can_allocate(int32_t n) const { return n <= n_free(); }

  // A free block with refcount 1, or nullopt when none is left (not an error: the caller
  // waits or preempts).
  std::optional<int32_t> allocate();
  // Adds an owner to a used block.
  void retain(int32_t block);
  // Drops an owner; the block is free again when none is left.
  void release(int32_t block);
  int32_t refcount(int32_t block) const;

  // free + used == total, refcounts of free blocks are 0, no block is free twice. Aborts
  // (CHECK) on violation: called in tests and debug builds after every step.
  void check_invariants() const;

 private:
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;  // stack: the most recently freed block is reused first
};

// The blocks of one sequence, in position order, and how many tokens they hold.
struct BlockTable {
  std::vector<int32_t> blocks;
  int64_t n_tokens = 0;  // tokens whose KV is written

  // Blocks needed to hold `tokens` tokens.
  static int64_t blocks_for(int64_t tokens, int64_t block_size) {
    return (tokens + block_size - 1) / block_size;
  }
  // Slot (block * block_size + offset) of token position `pos`.
  int32_t slot(int64_t pos, int64_t block_size) const;
};

}  // namespace infercept
