// A decode step's attention and output projection in one launch (Backend::
// self_attention_project on sm_90, 1-2 decode rows alone; PERF 4.5q).
//
// Why: at batch 1 the attention kernel between the Q/K/V product and the O projection cost
// the 7B step 16.6 us a layer, and a kernel in its place that only waited for the product's
// per-head counters and returned cost 12 of them: the O projection was launched only once
// every attention block had started, at the product's end, and its blocks found room only as
// the attention's left, so its launch, its placement and its first weight loads were all on
// the path. Here the O projection's own blocks do the attention: launched as the product's
// programmatic dependent, they are placed as the product's blocks retire, fetch their rows
// of the output weight into L2, and take the attention's work items (a row's KV head, or a
// share of its query heads, and a partition of its keys) by ticket; the last partition of a
// group merges the partitions' softmax states and counts the group done; then every block
// waits for all groups and runs its rows of the product, added into the residual.
//
// No deadlock: an item waits only for the Q/K/V product (whose blocks were all placed before
// any of these), items are taken only by blocks already running, and a block waits for the
// groups only after it found no item left to take.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/cuda/attention.h"
#include "backend/cuda/decode_rope_attention.h"

namespace infercept::cuda {

// Counters a launch uses (ints, zero before it and after it), each kind in a 128-byte line of
// its own (every block polls the groups-done count while items count their partitions):
// tickets, groups done, blocks past the wait, then one partition count per group (rows x KV
// heads x group_split).
constexpr int kAttendProjectTickets = 0, kAttendProjectGroupsDone = 32, kAttendProjectPassed = 64,
              kAttendProjectPartCounts = 96;
constexpr int kAttendProjectMaxGroups = 256;
constexpr int kAttendProjectCounters = kAttendProjectPartCounts + kAttendProjectMaxGroups;
// Partitions a row's keys are cut into: partition_keys each (64 by default: one 32-key chunk
// for each of an item's two warps, so an item's latency is one chunk's), but no more than
// give each of `blocks` one item over n_groups groups (a block taking two items in turn cost
// more than the longer items), at most 32.
constexpr int kAttendProjectMaxParts = 32;
int attend_project_parts(std::span<const int32_t> ctx_len, int partition_keys, int n_groups,
                         int blocks);

struct AttendProjectArgs {
  const void* wo;  // [m, k] the output projection, the activation type; k = n_heads * head_dim
  int m, k;
  void* residual;  // [rows, m]: += attention output @ wo^T, rounded as project_add rounds it
  int64_t residual_stride;
  int* counters;  // kAttendProjectCounters, this layer's
};

// `a` and `r` as for decode_rope_attention (r.parts partitions a row, attend_project_parts;
// a.partial_acc and
// a.partial_ml hold rows x n_heads x r.parts pairs; a.out receives the attention output,
// which the product then reads). rows: 1 or 2.
void attend_project(const AttnArgs& a, const DecodeRopeArgs& r, const AttendProjectArgs& p,
                    int rows, cudaStream_t s);
// Whether attend_project takes this shape: sm_90, head_dim 32/64/128, at most 4 query heads an
// item, the KV cache in the activation type, k a multiple of 8 and the weight and the
// attention output 16-byte aligned, the groups within kAttendProjectMaxGroups.
bool attend_project_fits(const AttnArgs& a, const DecodeRopeArgs& r, const AttendProjectArgs& p,
                         int rows);

}  // namespace infercept::cuda
