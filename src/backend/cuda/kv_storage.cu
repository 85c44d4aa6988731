#include "backend/cuda/kv_storage.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_util.h"
#include "core/check.h"

namespace infercept::cuda {

Result<std::unique_ptr<CudaKvStorage>> allocate_kv_storage(const KvGeometry& g, bool host) {
  if (g.dtype != DType::bf16 && g.dtype != DType::f16 && g.dtype != DType::fp8_e4m3)
    return make_error("the CUDA KV cache holds bf16, f16 or fp8, not ",
                      std::string(dtype_name(g.dtype)));
  // The attention kernels load a head's fp8 codes in 16-byte pieces.
  if (g.dtype == DType::fp8_e4m3 && g.head_dim % 16 != 0)
    return make_error("the CUDA fp8 KV cache needs a head size that is a multiple of 16, not ",
                      std::to_string(g.head_dim));
  if (g.bytes_per_block_per_layer() % 16 != 0)
    return make_error("KV block of ", std::to_string(g.bytes_per_block_per_layer()),
                      " bytes is not a multiple of 16");
  const size_t bytes = g.total_bytes();
  char* base = nullptr;
  if (host) {
    // Mapped pinned memory: the copy kernels read and write it directly over PCIe.
    if (cudaHostAlloc(reinterpret_cast<void**>(&base), bytes, cudaHostAllocMapped) != cudaSuccess) {
      cudaGetLastError();
      return make_error("cannot pin ", std::to_string(bytes >> 20),
                        " MiB of host memory for the swap space");
    }
  } else if (cudaMalloc(reinterpret_cast<void**>(&base), bytes) != cudaSuccess) {
    cudaGetLastError();
    return make_error("out of GPU memory for a KV cache of ", std::to_string(bytes >> 20), " MiB");
  }
  char** planes = nullptr;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&planes), sizeof(char*) * 2 * g.n_layers));
  auto s = std::make_unique<CudaKvStorage>(g, base, host, planes);
  std::vector<char*> ptrs;
  for (int64_t l = 0; l < g.n_layers; ++l) {
    char* k = s->k(l);
    char* v = s->v(l);
    if (host) {  // the device's address of the mapped pages
      CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&k), k, 0));
      CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&v), v, 0));
    }
    ptrs.push_back(k);
    ptrs.push_back(v);
  }
  CUDA_CHECK(cudaMemcpy(planes, ptrs.data(), sizeof(char*) * ptrs.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
  return std::move(s);
}

Status make_staging(Staging& s, size_t bytes, cudaStream_t st) {
  s.bytes = bytes;
  if (cudaHostAlloc(&s.host, bytes, cudaHostAllocMapped) != cudaSuccess ||
      cudaMalloc(&s.dev, bytes) != cudaSuccess)
    return make_error("cannot allocate CUDA staging buffers");
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&s.host_dev), s.host, 0));
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
