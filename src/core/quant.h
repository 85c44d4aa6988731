// Scalar, exact conversion between float rows and the block formats of quant_blocks.h.
// Why: this is the oracle the SIMD kernels (backend/cpu/quant_dot.*) are tested against and
// the path make-model / tests use to build quantized tensors, so it favours being obviously
// right (it follows ggml's reference routines value for value) over being fast.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace infercept {

// Expands n elements of `src` (a row of type t) to float. n must be a multiple of the
// block size. Supports f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, q6_k, q8_1, q8_k.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// Converts n floats to a row of type t. Supports f32, f16, bf16 (round to nearest even),
// q8_0, q8_1 (activation formats, as ggml's x86 CPU quantizers: q8_inverse_scale and ties
// to even, so activations get the codes llama.cpp gives them), q8_k (ggml's reference) and
// q4_0, q4_1 (ggml's reference quantizers, for tests and make-model). k-quant weights are
// not produced.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// The format activations are quantized to before an integer dot product with weights of
// type `weight`; mirrors llama.cpp's CPU pairing so our logits track llama.cpp's closely:
//   q4_1 -> q8_1; q4_0, q8_0 -> q8_0; q4_k, q6_k -> q8_k; f16 -> f16;
//   f32, bf16 -> f32 (bf16 weights are widened on the fly and dotted with f32 activations:
//   rounding activations to bf16 would lose precision for no bandwidth gain worth having).
DType activation_dtype_for(DType weight);

// The multiplier that maps a q8_0/q8_1 block of largest magnitude amax onto [-127, 127]:
// 127 / amax in one rounding, as ggml's x86 activation quantizers compute it (its reference C
// quantizer takes 1 / (amax / 127), which differs in the last bit for about a third of the
// blocks and then moves codes that sit near a rounding boundary). 0 for an all-zero block.
inline float q8_inverse_scale(float amax) {
  return amax != 0.f ? 127.f / amax : 0.f;
}

// ggml's nearest_int: round to nearest, ties to even (valid for |x| < 2^22).
int nearest_int(float x);

}  // namespace infercept
