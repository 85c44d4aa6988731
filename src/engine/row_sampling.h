// Where a step's sampled rows are drawn (docs/DESIGN.md, "Sampling"). Plain rows (no
// penalties, no logprobs) are drawn where the logits are, so only token ids cross to the
// host: greedy ones where the backend has an argmax, top-k/top-p/min-p ones where it samples
// too. A constrained row is such a row too where the backend applies token masks
// (Backend::mask_rows): its mask goes over, its logits stay. Rows with penalties or logprobs
// need their logits on the host, and only those rows are copied there (a constrained one is
// masked there): one such request does not send a whole batch's logits over, and a row is
// drawn the same way whatever shares its step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/sampling.h"

namespace infercept {

// One sampled row of a step, in logit-row order.
struct RowToSample {
  const SamplingParams* params = nullptr;
  Sampler* sampler = nullptr;      // draws the row's uniform when it is sampled on the device
  bool needs_host_logits = false;  // logprobs or penalties
  // Constrained decoding: the row's token mask (a bit per id), filled by the time draw() runs
  // (the engine's mask worker computes it during the forward pass). Null: unconstrained.
  const std::vector<uint64_t>* mask = nullptr;
};

class RowSampling {
 public:
  // Decides each row's place. Returns true when some row is drawn on the backend: the forward
  // pass then leaves the logits there (and draw() follows); false, it copies every row to the
  // host as usual.
  bool plan(const Backend& backend, std::span<const RowToSample> rows);
  // After the forward pass, with plan() true: the host rows' logits to host_logits (row i at
  // i x vocab, runs of adjacent rows in one copy, before the backend's sampler overwrites
  // them), then the device rows' masks applied there and those rows drawn on the backend.
  void draw(Backend& backend, const Tensor& logits, std::span<const RowToSample> rows,
            float* host_logits, int64_t vocab);

  bool on_host(size_t row) const { return host_[row] != 0; }
  int32_t device_token(size_t row) const { return tokens_[row]; }
  int64_t host_rows() const { return n_host_; }

 private:
  std::vector<uint8_t> host_;
  std::vector<int32_t> tokens_;
  std::vector<DeviceSampleRow> device_rows_;
  std::vector<int32_t> masked_rows_;    // device rows with a mask, and their masks packed
  std::vector<uint64_t> packed_masks_;  // (mask_rows' layout)
  int64_t n_host_ = 0;
  bool device_all_greedy_ = true;
};

}  // namespace infercept
