#include "backend/cuda/kv_storage.h"

#include <cstring>

#include "backend/cuda/cuda_util.h"
#include "core/check.h"

namespace infercept::cuda {

Status make_staging(Staging& s, size_t bytes, cudaStream_t st) {
  s.bytes = bytes;
  if (cudaHostAlloc(&s.host, bytes, cudaHostAllocDefault) != cudaSuccess ||
      cudaMalloc(&s.dev, bytes) != cudaSuccess)
    return make_error("cannot allocate CUDA staging buffers");
  CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(s.done, st));
  return ok_status();
}

void free_staging(Staging& s) {
  cudaFreeHost(s.host);
  cudaFree(s.dev);
  if (s.done) cudaEventDestroy(s.done);
  s = Staging{};
}

const int32_t* upload_indices(Staging& buf, cudaStream_t st, std::span<const int32_t> src,
                              std::span<const int32_t> dst) {
  const size_t bytes = src.size_bytes() * 2;
  CHECK_MSG(bytes <= buf.bytes, "too many blocks in one copy");
  CUDA_CHECK(cudaEventSynchronize(buf.done));
  std::memcpy(buf.host, src.data(), src.size_bytes());
  std::memcpy(buf.host + src.size_bytes(), dst.data(), dst.size_bytes());
  CUDA_CHECK(cudaMemcpyAsync(buf.dev, buf.host, bytes, cudaMemcpyHostToDevice, st));
  CUDA_CHECK(cudaEventRecord(buf.done, st));
  return reinterpret_cast<const int32_t*>(buf.dev);
}

}  // namespace infercept::cuda
