// SIMD quantization of activation rows to q8_0 / q8_1, bit for bit equal to the scalar
// oracle in core/quant.cpp (same scale, same round-half-away-from-zero), so using it changes
// speed only. Other formats fall back to core's quantize_row.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace infercept {

void quantize_row_fast(DType t, const float* src, void* dst, int64_t n);

}  // namespace infercept
