// A step's decode rows on every thread of the CPU pool (decode_rows_phased), for steps where
// paged_attention_cpu's one work item a decode row would leave threads waiting for the
// longest row; the arithmetic is attention_rows.h's, so a row's bits do not depend on the path.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/attention.h"

namespace infercept::cpu_attention {

// Decode rows are spread over every thread (decode_rows_phased) when one work item a row would
// leave threads waiting for the longest: a row alone on the pool, or a long row beside short
// ones (SmolLM2-135M on the 2-core development machine, a 4,000-position row beside 1-3 of
// 500: 21-23 ms a step as items, 16-20 spread). Where the items already balance (two equal rows on
// two threads) the three parallel regions and the scores' round trip through shared memory only
// cost, so it is taken when the items' greedy schedule is at least kPhasedMinGain times an even
// share and the longest decode row has at least kPhasedMinPositions: spread, three rows of 1,000
// took 9.7-9.8 ms against 10.9, of 750 8.1-8.8 against 9.2-9.3, of 500 and 300 no less (the
// regions' fork and join are then a visible share; docs/bench/cpu-long-decode/threshold.txt).
constexpr int64_t kPhasedMinPositions = 768;
constexpr double kPhasedMinGain = 1.15;

// The cost of one work item of paged_attention_cpu in query-head positions (a query head's
// score and value pass over one position).
struct ItemCost {
  bool decode;  // a decode row's item
  double cost;
};

// Whether the decode rows had better go to every one of `n_threads` threads than be one item
// each: the items' greedy schedule against an even share of the decode work beside the other
// items' own schedule.
bool spreading_pays(const std::vector<ItemCost>& items, int n_threads);

// One decode row of a step.
struct DecodeRow {
  int64_t row;           // its query (and output) row
  const int32_t* table;  // its block table
  int64_t n_pos;         // positions it attends to
};

// The rows' attention in the default order on every thread of the pool, in three phases whose
// arithmetic is the one-item path's: the scores of whole kPosChunk-position chunks (all rows'
// chunks split among the threads by positions), the softmax of each (row, query head), and P*V
// (the (row, query head) pairs split by positions: a thread's whole rows stream their values'
// whole slots, a partial row gathers one KV head at a time). Each output element is the same
// FMA chain in position order, continued chunk by chunk. `stop` as paged_attention_cpu's.
void decode_rows_phased(ThreadPool& pool, const Tensor& q, const PagedKvView& kv,
                        std::span<const DecodeRow> rows, int64_t n_heads, float scale, Tensor out,
                        const std::atomic<bool>* stop);

}  // namespace infercept::cpu_attention
