// Sampling on the device: the next token of many rows of f32 logits without copying the rows
// to the host (a batch of 128 rows of a 128k vocabulary is 64 MB a step over PCIe).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"

namespace infercept::cuda {

// One block per row (`logits` [rows, cols] with row stride `stride`, overwritten with the
// weights). Greedy rows: the argmax, lowest id on ties. Others: w = exp((l - max) / T),
// kept are the top_k largest, then the most-likely-first prefix holding top_p of their mass,
// then w >= min_p; `u` in [0, 1) picks by inverse CDF over the kept ones in id order. The
// cut-offs are found by bisection on the bits of the (positive) f32 weights, so each is
// exact: the weight of the token where the count or the mass crosses its target.
void sample_rows(float* logits, int64_t rows, int64_t cols, int64_t stride,
                 const DeviceSampleRow* params, int32_t* out, cudaStream_t s);

// Constrained decoding's masks (Backend::mask_rows): row rows[i] of `logits` keeps the ids
// whose bit is set in masks[i * words ..] and gets -inf elsewhere (ids past words * 64 too).
// A thread per logit; the 32 threads of a warp share one mask word.
void mask_rows(float* logits, int64_t cols, int64_t stride, const int32_t* rows, int64_t n_rows,
               const uint64_t* masks, int64_t words, cudaStream_t s);

}  // namespace infercept::cuda
