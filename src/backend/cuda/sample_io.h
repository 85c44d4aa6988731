// A step's small host <-> device transfers: the per-row sampling parameters in, the sampled
// token ids out, and the path every such transfer takes (the step's input uploads too).
//
// They go through the SMs (cuda::copy_bytes over mapped pinned memory), not a copy engine: on
// a copy engine they queued behind the swap engine's bulk copies of the same direction, and a
// step waited for a whole swap-in (docs/DESIGN.md, "The CUDA backend").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "backend/cuda/kv_storage.h"
#include "core/result.h"

namespace infercept::cuda {

// Copies `bytes` (a few KB) between pinned, mapped host memory and the device on `st`, by a
// kernel. `dst`/`src` are device addresses (of the mapped pages on the host side).
struct SmallCopy {
  void operator()(void* dst, const void* src, size_t bytes, cudaStream_t st) const;
};

class SampleIo {
 public:
  static constexpr int64_t kCapacity = 1 << 16;  // rows sampled per step, at most

  SampleIo() = default;
  SampleIo(const SampleIo&) = delete;
  SampleIo& operator=(const SampleIo&) = delete;
  ~SampleIo();

  // The two mirrored buffers (Staging: pinned, mapped host side and device side); `st` is
  // the stream their first `done` is recorded on.
  Status init(cudaStream_t st);
  const SmallCopy& small_copy() const { return copy_; }

  // Where the sampling kernels write their ids.
  int32_t* ids_dev() const { return reinterpret_cast<int32_t*>(ids_.dev); }
  // The rows' parameters on the device, copied in on `st` (the previous step's sync freed the
  // pinned side).
  const DeviceSampleRow* upload_params(std::span<const DeviceSampleRow> rows, cudaStream_t st);
  // Backend::mask_rows' row indices and masks on the device, copied in on `st`; the pinned
  // side must be free (the stream synchronized since the last upload). At most
  // kMaskWords words of masks at once (128 rows of a 256k vocabulary): more rows go in turns.
  static constexpr size_t kMaskWords = size_t{1} << 19;
  const int32_t* upload_mask_rows(std::span<const int32_t> rows, cudaStream_t st);
  const uint64_t* upload_masks(const uint64_t* masks, size_t words, cudaStream_t st);
  // The ids of the first `rows` rows into out, after everything queued on `st`.
  void ids_to_host(int64_t rows, int32_t* out, cudaStream_t st);

 private:
  SmallCopy copy_;
  Staging ids_;        // int32 token ids, device -> host
  Staging params_;     // DeviceSampleRow, host -> device
  Staging mask_rows_;  // int32 row indices of masked rows, host -> device
  Staging masks_;      // uint64 mask words, host -> device
};

}  // namespace infercept::cuda
