// Prefill attention on Hopper's warpgroup tensor cores (wgmma): the same tiles, plan and results
// as attention_prefill() (attention_prefill.h), for head size 128 with activations and KV cache
// of one 16-bit type, at 1.4x the mma.sync kernel's rate on long contexts (docs/PERF.md,
// "Long contexts"). It needs machine code for sm_90a, which the build makes when
// CMAKE_CUDA_ARCHITECTURES names 90a; attention_prefill() picks it where it runs.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/attention_prefill.h"

namespace infercept::cuda {

// Whether the current device is an sm_90 card and this build holds the kernel's sm_90a code.
bool wgmma_prefill_built();
// Whether attention_prefill_wgmma() takes these types and head size here.
bool wgmma_prefill_handles(DType act, DType kv, int head_dim);
// As attention_prefill() (one CTA of 256 threads per tile and query head, one CTA per
// multiprocessor, 161 KiB of shared memory).
void attention_prefill_wgmma(const AttnArgs& a, const PrefillTile* d_tiles, int n_tiles,
                             cudaStream_t s);

}  // namespace infercept::cuda
