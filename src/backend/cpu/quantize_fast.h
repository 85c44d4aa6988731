// SIMD quantization of activation rows to q8_0 / q8_1, bit for bit equal to the scalar
// oracle in core/quant.cpp (same multiplier, same rounding: ties to even), so using it changes
// speed only. Other formats fall back to core's quantize_row.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace infercept {

void quantize_row_fast(DType t, const float* src, void* dst, int64_t n);

// One 32-element block as quantize_row_fast quantizes it for q8_0 and q8_1: writes the 32
// quants to q, their sum to *sum, and returns the scale d before its rounding to f16 (the
// block stores fp32_to_fp16(d), and q8_1's s is fp32_to_fp16(*sum * d)).
float quantize_block32_fast(const float* x, int8_t* q, int* sum);

}  // namespace infercept
