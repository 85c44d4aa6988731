// KV storage of the CUDA backend (a paged pool on the device, or the pinned host pool that
// swapped-out blocks go to) and the pinned staging buffers that carry small host arrays to
// the device. Storage only: which block belongs to whom is the scheduler's business
// (kv/block_allocator.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.h"
#include "core/result.h"

namespace infercept::cuda {

class CudaKvStorage final : public KvStorage {
 public:
  CudaKvStorage(const KvGeometry& g, char* base, bool host, char** d_planes)
      : g_(g), base_(base), host_(host), d_planes_(d_planes) {}
  ~CudaKvStorage() override {
    if (host_)
      cudaFreeHost(base_);
    else
      cudaFree(base_);
    cudaFree(d_planes_);
  }
  const KvGeometry& geometry() const override { return g_; }
  size_t plane_bytes() const { return g_.bytes_per_block_per_layer() * (size_t)g_.n_blocks; }
  // Plane 2l is layer l's K, 2l + 1 its V.
  char* k(int64_t l) const { return base_ + (size_t)(2 * l) * plane_bytes(); }
  char* v(int64_t l) const { return base_ + (size_t)(2 * l + 1) * plane_bytes(); }
  char** planes() const { return d_planes_; }  // device array of 2 * n_layers pointers
  bool host() const { return host_; }
  uint8_t* host_plane(int64_t plane) const override {
    return host_ ? reinterpret_cast<uint8_t*>(base_ + (size_t)plane * plane_bytes()) : nullptr;
  }

 private:
  KvGeometry g_;
  char* base_;
  bool host_;
  char** d_planes_;
};

// The device pool (host = false) or the pinned, mapped host pool (host = true) of geometry
// g, with the device array of its plane pointers filled; a clear error when the memory is
// not there or the geometry is not one the CUDA kernels take.
Result<std::unique_ptr<CudaKvStorage>> allocate_kv_storage(const KvGeometry& g, bool host);

// A pinned host buffer mirrored on the device, filled from the front and uploaded in pieces.
struct Staging {
  char* host = nullptr;
  char* host_dev = nullptr;  // the device's address of the (mapped) host pages
  char* dev = nullptr;
  size_t bytes = 0, used = 0;
  cudaEvent_t done = nullptr;  // recorded after the last upload: the host side may refill
};

// Allocates both sides and records `done` on `st` (so the first refill need not wait).
Status make_staging(Staging& s, size_t bytes, cudaStream_t st);
void free_staging(Staging& s);

// Uploads src then dst (block indices) into `buf` on `st`, after waiting for the last use of
// `buf`; returns the device copy: src at [0, n), dst at [n, 2n).
const int32_t* upload_indices(Staging& buf, cudaStream_t st, std::span<const int32_t> src,
                              std::span<const int32_t> dst);

}  // namespace infercept::cuda
