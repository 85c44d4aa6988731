#include "backend/cuda/sample_io.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kernels.h"
#include "core/check.h"

namespace infercept::cuda {

void SmallCopy::operator()(void* dst, const void* src, const void* host, size_t bytes,
                           cudaMemcpyKind kind, cudaStream_t st) const {
  if (by_kernel) {
    copy_bytes(dst, src, bytes, st);
  } else if (kind == cudaMemcpyHostToDevice) {
    CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, kind, st));
  } else {
    CUDA_CHECK(cudaMemcpyAsync(const_cast<void*>(host), src, bytes, kind, st));
  }
}

namespace {
// A pinned host buffer of `bytes` mapped into the device's address space.
template <typename T>
Status alloc_mapped(size_t bytes, T*& host, T*& host_dev) {
  if (cudaHostAlloc(reinterpret_cast<void**>(&host), bytes, cudaHostAllocMapped) != cudaSuccess)
    return make_error("cannot allocate ", std::to_string(bytes), " bytes of pinned host memory");
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_dev), host, 0));
  return ok_status();
}
}  // namespace

Status SampleIo::init() {
  if (const char* c = std::getenv("INFERCEPT_STEP_COPIES"); c != nullptr)
    copy_.by_kernel = std::string(c) != "engine";
  if (cudaMalloc(reinterpret_cast<void**>(&ids_dev_), kCapacity * 4) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&params_dev_), kCapacity * sizeof(DeviceSampleRow)) !=
          cudaSuccess)
    return make_error("cannot allocate the device's sampling buffers");
  TRY(alloc_mapped(kCapacity * 4, ids_host_, ids_host_dev_));
  TRY(alloc_mapped(kCapacity * sizeof(DeviceSampleRow), params_host_, params_host_dev_));
  return ok_status();
}

SampleIo::~SampleIo() {
  cudaFree(ids_dev_);
  cudaFreeHost(ids_host_);
  cudaFree(params_dev_);
  cudaFreeHost(params_host_);
}

const DeviceSampleRow* SampleIo::upload_params(std::span<const DeviceSampleRow> rows,
                                               cudaStream_t st) {
  CHECK((int64_t)rows.size() <= kCapacity);
  std::memcpy(params_host_, rows.data(), rows.size_bytes());
  copy_(params_dev_, params_host_dev_, params_host_, rows.size_bytes(), cudaMemcpyHostToDevice, st);
  return params_dev_;
}

void SampleIo::ids_to_host(int64_t rows, int32_t* out, cudaStream_t st) {
  CHECK(rows <= kCapacity);
  copy_(ids_host_dev_, ids_dev_, ids_host_, (size_t)rows * 4, cudaMemcpyDeviceToHost, st);
  CUDA_CHECK(cudaStreamSynchronize(st));
  std::memcpy(out, ids_host_, (size_t)rows * 4);
}

}  // namespace infercept::cuda
