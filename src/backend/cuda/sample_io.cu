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
  TRY(make_staging(mask_rows_, kCapacity * sizeof(int32_t), st));
  TRY(make_staging(masks_, kMaskWords * sizeof(uint64_t), st));
  return ok_status();
}

SampleIo::~SampleIo() {
  free_staging(ids_);
  free_staging(params_);
  free_staging(mask_rows_);
  free_staging(masks_);
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

const int32_t* SampleIo::upload_mask_rows(std::span<const int32_t> rows, cudaStream_t st) {
  CHECK((int64_t)rows.size() <= kCapacity);
  std::memcpy(mask_rows_.host, rows.data(), rows.size_bytes());
  copy_(mask_rows_.dev, mask_rows_.host_dev, rows.size_bytes(), st);
  return reinterpret_cast<const int32_t*>(mask_rows_.dev);
}

const uint64_t* SampleIo::upload_masks(const uint64_t* masks, size_t words, cudaStream_t st) {
  CHECK(words <= kMaskWords);
  std::memcpy(masks_.host, masks, words * sizeof(uint64_t));
  copy_(masks_.dev, masks_.host_dev, words * sizeof(uint64_t), st);
  return reinterpret_cast<const uint64_t*>(masks_.dev);
}

}  // namespace infercept::cuda
