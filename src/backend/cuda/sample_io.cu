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

Status SampleIo::init(cudaStream_t st) {
  if (const char* c = std::getenv("INFERCEPT_STEP_COPIES"); c != nullptr)
    copy_.by_kernel = std::string(c) != "engine";
  TRY(make_staging(ids_, kCapacity * sizeof(int32_t), st));
  TRY(make_staging(params_, kCapacity * sizeof(DeviceSampleRow), st));
  return ok_status();
}

SampleIo::~SampleIo() {
  free_staging(ids_);
  free_staging(params_);
}

const DeviceSampleRow* SampleIo::upload_params(std::span<const DeviceSampleRow> rows,
                                               cudaStream_t st) {
  CHECK((int64_t)rows.size() <= kCapacity);
  std::memcpy(params_.host, rows.data(), rows.size_bytes());
  copy_(params_.dev, params_.host_dev, params_.host, rows.size_bytes(), cudaMemcpyHostToDevice, st);
  return reinterpret_cast<const DeviceSampleRow*>(params_.dev);
}

void SampleIo::ids_to_host(int64_t rows, int32_t* out, cudaStream_t st) {
  CHECK(rows <= kCapacity);
  const size_t bytes = (size_t)rows * sizeof(int32_t);
  copy_(ids_.host_dev, ids_.dev, ids_.host, bytes, cudaMemcpyDeviceToHost, st);
  CUDA_CHECK(cudaStreamSynchronize(st));
  std::memcpy(out, ids_.host, bytes);
}

}  // namespace infercept::cuda
