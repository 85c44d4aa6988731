// Scalar reference (de)quantization. Why this file exists: every fast kernel is checked
// against it, so each routine is a plain loop over the documented block layout, in the same
// arithmetic order as ggml's reference code (so quantized activations match llama.cpp's bit
// for bit and our logits can be compared with its logits).
#include "core/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/fp8.h"
#include "core/half.h"
#include "core/quant_blocks.h"

namespace infercept {

int nearest_int(float x) {
  // Adding 1.5 * 2^23 puts the integer part in the low mantissa bits, rounded by the FPU
  // (ties to even); valid while |x| < 2^22.
  const float v = x + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

namespace {

// The 6-bit scale and min of sub-block j (0..7) of a q4_K super-block. Bytes 0-3 hold the
// low 6 bits of scales 0-3, bytes 4-7 the low 6 bits of mins 0-3; for j >= 4 the low 4 bits
// come from byte 8+(j-4) (scale: low nibble, min: high nibble) and the high 2 bits from the
// top bits of bytes j-4 (scale) and j (min).
void q4k_scale_min(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = (float)((b[i].qs[j] & 0x0f) - 8) * d;
      y[j + kQK / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    const float m = fp16_to_fp32(b[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = (float)(b[i].qs[j] & 0x0f) * d + m;
      y[j + kQK / 2] = (float)(b[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = (float)b[i].qs[j] * d;
  }
}

void dequant_q8_1(const BlockQ8_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = (float)b[i].qs[j] * d;
  }
}

void dequant_q8_k(const BlockQ8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    for (int j = 0; j < kQKK; ++j) y[j] = b[i].d * (float)b[i].qs[j];
  }
}

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const float dmin = fp16_to_fp32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    // Each 64-element chunk: 32 bytes, low nibbles = sub-block 2c, high = sub-block 2c+1.
    for (int c = 0; c < 4; ++c, q += 32) {
      int sc0, m0, sc1, m1;
      q4k_scale_min(2 * c, b[i].scales, &sc0, &m0);
      q4k_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
      const float d0 = d * (float)sc0, mm0 = dmin * (float)m0;
      const float d1 = d * (float)sc1, mm1 = dmin * (float)m1;
      for (int l = 0; l < 32; ++l) *y++ = d0 * (float)(q[l] & 0x0f) - mm0;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (float)(q[l] >> 4) - mm1;
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    // Two halves of 128: within a half, element l (l < 32) of each quarter q=0..3 takes its
    // low 4 bits from ql[l] / ql[l+32] (low nibble for q=0,1, high for q=2,3) and its high
    // 2 bits from bits 2q..2q+1 of qh[l]; the scale is per 16 elements.
    for (int h = 0; h < 2; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q0 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * (float)sc[is + 0] * (float)q0;
        y[l + 32] = d * (float)sc[is + 2] * (float)q1;
        y[l + 64] = d * (float)sc[is + 4] * (float)q2;
        y[l + 96] = d * (float)sc[is + 6] * (float)q3;
      }
    }
  }
}

void quant_q8_0(const float* x, BlockQ8_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = q8_inverse_scale(amax);
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) b[i].qs[j] = (int8_t)nearest_int(x[j] * id);
  }
}

void quant_q8_1(const float* x, BlockQ8_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = q8_inverse_scale(amax);
    b[i].d = fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      b[i].qs[j] = (int8_t)nearest_int(x[j] * id);
      sum += b[i].qs[j];
    }
    // As ggml: the float d (not its fp16 rounding) times the integer sum.
    b[i].s = fp32_to_fp16((float)sum * d);
  }
}

void quant_q8_k(const float* x, BlockQ8_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float amax = 0.f, max = 0.f;  // max: the signed value of largest magnitude
    for (int j = 0; j < kQKK; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.f) {
      std::memset(&b[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQKK; ++j) {
      b[i].qs[j] = (int8_t)std::min(127, nearest_int(iscale * x[j]));
    }
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b[i].qs[16 * g + l];
      b[i].bsums[g] = (int16_t)sum;
    }
    b[i].d = 1.f / iscale;
  }
}

void quant_q4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < kQK; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    const float d = max / -8.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      // x*id lies in [-8, 8]; +8.5 and truncation rounds half up into 0..16, clamped to 15.
      const int q0 = std::min(15, (int)(int8_t)(x[j] * id + 8.5f));
      const int q1 = std::min(15, (int)(int8_t)(x[j + kQK / 2] * id + 8.5f));
      b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}

void quant_q4_1(const float* x, BlockQ4_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min = x[0], max = x[0];
    for (int j = 1; j < kQK; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 15.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    b[i].d = fp32_to_fp16(d);
    b[i].m = fp32_to_fp16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, (int)(int8_t)((x[j] - min) * id + 0.5f));
      const int q1 = std::min(15, (int)(int8_t)((x[j + kQK / 2] - min) * id + 0.5f));
      b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  CHECK(n % dtype_block_elems(t) == 0);
  const int64_t nb = n / dtype_block_elems(t);
  switch (t) {
    case DType::f32:
      std::memcpy(dst, src, (size_t)n * sizeof(float));
      return;
    case DType::f16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
      return;
    }
    case DType::bf16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
      return;
    }
    case DType::q8_0:
      dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
      return;
    case DType::q4_0:
      dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
      return;
    case DType::q4_1:
      dequant_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
      return;
    case DType::q4_k:
      dequant_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
      return;
    case DType::q6_k:
      dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
      return;
    case DType::q8_1:
      dequant_q8_1(static_cast<const BlockQ8_1*>(src), dst, nb);
      return;
    case DType::q8_k:
      dequant_q8_k(static_cast<const BlockQ8_K*>(src), dst, nb);
      return;
    case DType::fp8_e4m3: {  // the codes' values, unscaled
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_f32(s[i]);
      return;
    }
    case DType::i32:
      break;
  }
  CHECK_MSG(false, "dequantize_row: unsupported type");
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  CHECK(n % dtype_block_elems(t) == 0);
  const int64_t nb = n / dtype_block_elems(t);
  switch (t) {
    case DType::f32:
      std::memcpy(dst, src, (size_t)n * sizeof(float));
      return;
    case DType::f16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
      return;
    }
    case DType::bf16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
      return;
    }
    case DType::q8_0:
      quant_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
      return;
    case DType::q8_1:
      quant_q8_1(src, static_cast<BlockQ8_1*>(dst), nb);
      return;
    case DType::q8_k:
      quant_q8_k(src, static_cast<BlockQ8_K*>(dst), nb);
      return;
    case DType::q4_0:
      quant_q4_0(src, static_cast<BlockQ4_0*>(dst), nb);
      return;
    case DType::q4_1:
      quant_q4_1(src, static_cast<BlockQ4_1*>(dst), nb);
      return;
    default:
      break;
  }
  CHECK_MSG(false, "quantize_row: unsupported type");
}

DType activation_dtype_for(DType weight) {
  switch (weight) {
    case DType::q4_1:
      return DType::q8_1;
    case DType::q4_0:
    case DType::q8_0:
      return DType::q8_0;
    case DType::q4_k:
    case DType::q6_k:
      return DType::q8_k;
    case DType::f16:
      return DType::f16;
    case DType::f32:
    case DType::bf16:
      return DType::f32;
    default:
      break;
  }
  CHECK_MSG(false, "activation_dtype_for: not a weight type");
  return DType::f32;
}

}  // namespace infercept
