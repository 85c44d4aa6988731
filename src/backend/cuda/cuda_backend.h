// The CUDA backend's factory and its options (the interface it implements:
// backend/backend.h; the class: cuda_backend_impl.h). Plain C++, so that the engine and the
// CPU-only build (cuda_stub/no_cuda.cpp) see the same declarations.
//
// Every choice the backend makes at creation is a field here, passed down by the engine
// (EngineConfig::cuda) or by a test; nothing is read from the environment. The defaults are
// the production configuration. The fields past `graphs` turn a measured optimization off or
// bound it: the path they fall back to is the composed one every other shape still takes, so
// tests run both on one device and compare bits (docs/DESIGN.md, "The CUDA backend").
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"
#include "core/dtype.h"
#include "core/result.h"

namespace infercept {

struct CudaBackendOptions {
  int device = 0;
  DType activation_dtype = DType::bf16;  // bf16 or f16: weights are converted to it
  // Decode steps recorded as CUDA graphs and replayed (one launch instead of ~10 a layer);
  // --cuda-graphs on|off.
  bool graphs = true;
  // Products of at most this many rows go to the GEMV kernel (0 = always cuBLASLt). Two: at
  // four rows the kernel lost to cuBLASLt on the 13B shape.
  int gemv_max_rows = 2;
  // Products of gemv_max_rows + 1 up to this many rows go to the tensor-core GEMV (gemv_mma;
  // at most cuda::kGemvMmaMaxRows = 16; 0 = none: cuBLASLt and the composed ops). Eight, one
  // mma fragment of rows: at 12 and 16 rows the 13B lost 4-11%.
  int gemv_mma_max_rows = 8;
  // The fused layer groups (norm_project, norm_gated_ffn, project_add as one GEMV launch at
  // few rows); false: composed of the plain ops, their oracle.
  bool fused = true;
  // Programmatic dependent launches on sm_90 and later (kernels start their loads while the
  // kernel before drains; ignored below sm_90).
  bool programmatic = true;
  // sm_90: a step of 1-2 decode rows alone runs RoPE, the KV store and the attention in
  // decode_rope_attention (one launch, partitions merged in distributed shared memory);
  // false: the RoPE store kernel and the decode kernel apart.
  bool attn_fused = true;
  // With attn_fused: the attention waits for its KV head's rows of the Q/K/V product
  // (GemvHeadSignal) instead of for the whole product.
  bool attn_signal = true;
  // With attn_fused: a KV head's query heads are cut across blocks of at most this many
  // (the largest divisor of the group up to it; DecodeRopeArgs::group_split). 0: blocks of at
  // most 2 query heads. The partitions, and so the bits, do not depend on the cut.
  int attn_group_split = 0;
  // With attn_fused and fused: the O projection's launch runs the attention too
  // (attend_project); false: the attention and the projection as two launches.
  bool attn_project = true;
};

// The CUDA backend (backend/cuda/); an error when this build has no CUDA or no device.
Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options);

// One NCCL communicator per CUDA backend (rank r = backends[r], one GPU each), for a
// tensor-parallel group in this process: the all-reduce is queued on each backend's compute
// stream. NCCL is loaded when this is first called (libnccl.so.2, as the CUDA toolkit or the
// nvidia-nccl PyPI wheel installs it), so a binary runs without it until a group is asked
// for; NVLink multicast is turned off (NCCL_NVLS_ENABLE=0) before NCCL starts. Errors: NCCL
// missing or failing to start, a backend that is not CUDA, two ranks on one device.
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    std::span<Backend* const> backends);
// Whether this build includes the CUDA backend.
bool cuda_backend_built();

}  // namespace infercept
