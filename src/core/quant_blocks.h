// Block layouts of the GGUF/ggml quantized formats, byte for byte as they sit in a file.
// The engine keeps weights in these formats on the CPU and computes integer dot products
// against activations quantized to q8_0 / q8_1 / q8_k (backend/cpu/quant_dot.*).
// A "row" of a quantized matrix is a run of consecutive blocks.
#pragma once

#include <cstdint>

namespace infercept {

constexpr int kQK = 32;    // elements per block of the simple formats
constexpr int kQKK = 256;  // elements per super-block of the k-quants
constexpr int kKScaleBytes = 12;

#pragma pack(push, 1)
// value = (q - 8) * d; element j in low nibble of qs[j], element j+16 in the high nibble.
struct BlockQ4_0 {
  uint16_t d;  // fp16
  uint8_t qs[kQK / 2];
};
// value = q * d + m; nibble order as q4_0.
struct BlockQ4_1 {
  uint16_t d;  // fp16
  uint16_t m;  // fp16
  uint8_t qs[kQK / 2];
};
// value = q * d
struct BlockQ8_0 {
  uint16_t d;  // fp16
  int8_t qs[kQK];
};
// value = q * d; s = d * sum(qs), kept so q4_1's offset term costs one multiply per block.
struct BlockQ8_1 {
  uint16_t d;  // fp16
  uint16_t s;  // fp16
  int8_t qs[kQK];
};
// 8 sub-blocks of 32 with 6-bit scales and mins packed in `scales`;
// value = d * sc * q - dmin * m.
struct BlockQ4_K {
  uint16_t d;     // fp16, super-block scale for the scales
  uint16_t dmin;  // fp16, super-block scale for the mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};
// 16 sub-blocks of 16 with 8-bit scales; 6-bit quants split in 4 low bits (ql) and 2 high
// bits (qh); value = d * scale * (q - 32).
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;  // fp16
};
// Activation format for k-quant dot products.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];  // sums of groups of 16 quants
};
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace infercept
