#include "core/dtype.h"

#include "core/check.h"
#include "core/quant_blocks.h"

namespace infercept {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::q8_0:
      return "q8_0";
    case DType::q4_0:
      return "q4_0";
    case DType::q4_1:
      return "q4_1";
    case DType::q4_k:
      return "q4_k";
    case DType::q6_k:
      return "q6_k";
    case DType::q8_1:
      return "q8_1";
    case DType::q8_k:
      return "q8_k";
    case DType::fp8_e4m3:
      return "fp8_e4m3";
  }
  return "?";
}

int64_t dtype_block_elems(DType t) {
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::i32:
    case DType::fp8_e4m3:
      return 1;
    case DType::q8_0:
    case DType::q4_0:
    case DType::q4_1:
    case DType::q8_1:
      return kQK;
    case DType::q4_k:
    case DType::q6_k:
    case DType::q8_k:
      return kQKK;
  }
  return 1;
}

size_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::q8_0:
      return sizeof(BlockQ8_0);
    case DType::q4_0:
      return sizeof(BlockQ4_0);
    case DType::q4_1:
      return sizeof(BlockQ4_1);
    case DType::q4_k:
      return sizeof(BlockQ4_K);
    case DType::q6_k:
      return sizeof(BlockQ6_K);
    case DType::q8_1:
      return sizeof(BlockQ8_1);
    case DType::q8_k:
      return sizeof(BlockQ8_K);
    case DType::fp8_e4m3:
      return 1;
  }
  return 0;
}

size_t dtype_row_bytes(DType t, int64_t n) {
  const int64_t be = dtype_block_elems(t);
  CHECK(n % be == 0);
  return (size_t)(n / be) * dtype_block_bytes(t);
}

}  // namespace infercept
