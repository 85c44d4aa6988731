// Dot products between weight rows (f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, q6_k) and
// activation rows already converted with quantize_row(activation_dtype_for(weight), ...).
// Why: the matmuls of a CPU forward pass are these dot products; decode streams every weight
// byte once per token, so the kernels are written to keep up with memory bandwidth, and
// prefill reuses each unpacked weight block for several activation rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace infercept {

// Dot product of one weight row of n elements with one activation row in
// activation_dtype_for(weight_type) format (f32 for f32 and bf16 weights). Uses AVX2 (and
// AVX512-VNNI where compiled in) when available; integer block sums are exact, so the
// result differs from vec_dot_scalar only by float accumulation order.
float vec_dot(DType weight_type, const void* w_row, const void* act_row, int64_t n);

// The portable scalar version of vec_dot (same integer math, one block at a time); the
// reference for tests and the fallback when no SIMD is compiled in.
float vec_dot_scalar(DType weight_type, const void* w_row, const void* act_row, int64_t n);

// out[a * out_stride + r] = dot(weight row r, activation row a) for r in
// [w_row_begin, w_row_end) and a in [0, n_act_rows). Weight row r starts at
// w + r * w_row_bytes, activation row a at acts + a * act_row_bytes; every row has k
// elements. Weight rows are processed in tiles that stay in cache while all activation rows
// pass over them; callers parallelize by splitting the weight row range across threads.
void matmul_rows(DType weight_type, const void* w, size_t w_row_bytes, int64_t w_row_begin,
                 int64_t w_row_end, const void* acts, size_t act_row_bytes, int64_t n_act_rows,
                 int64_t k, float* out, int64_t out_stride);

}  // namespace infercept
