#include "backend/cuda/sample_io.h"

#include <cstring>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kernels.h"
#include "core/check.h"

namespace infercept::cuda {

void SmallCopy::operator()(void* dst, const void* src, size_t bytes, cudaStream_t st) const {
  copy_bytes(dst, src, bytes, st);
}

Status SampleIo::init(cudaStream_t st) {
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
  copy_(params_.dev, params_.host_dev, rows.size_bytes(), st);
  return reinterpret_cast<const DeviceSampleRow*>(params_.dev);
}

void SampleIo::ids_to_host(int64_t rows, int32_t* out, cudaStream_t st) {
  CHECK(rows <= kCapacity);
  const size_t bytes = (size_t)rows * sizeof(int32_t);
  copy_(ids_.host_dev, ids_.dev, bytes, st);
  CUDA_CHECK(cudaStreamSynchronize(st));
  std::memcpy(out, ids_.host, bytes);
}

}  // namespace infercept::cuda
