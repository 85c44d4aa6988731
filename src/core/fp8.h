// fp8 e4m3 (OCP "E4M3FN": 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinities,
// S.1111.111 is NaN, the largest finite value 448) <-> fp32, the KV cache's fp8 element.
//
// One definition for the host and the device (compiled by nvcc as __host__ __device__), so the
// CUDA backend quantizes and dequantizes K and V to the same bits as the CPU backend, its
// oracle. Conversion to fp8 rounds to nearest even and saturates: what is beyond 448 in
// magnitude (infinities too) becomes +-448, as CUDA's __NV_SATFINITE conversion does; a NaN
// stays NaN.
#pragma once

#include <bit>
#include <cstdint>

#if defined(__CUDACC__)
#define INFERCEPT_HOST_DEVICE __host__ __device__
#else
#define INFERCEPT_HOST_DEVICE
#endif

namespace infercept {

inline constexpr float kFp8E4m3Max = 448.0f;

namespace fp8_detail {
INFERCEPT_HOST_DEVICE inline uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<uint32_t>(f);
#endif
}
INFERCEPT_HOST_DEVICE inline float float_of(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(w);
#else
  return std::bit_cast<float>(w);
#endif
}
}  // namespace fp8_detail

INFERCEPT_HOST_DEVICE inline float fp8_e4m3_to_f32(uint8_t c) {
  const uint32_t sign = (uint32_t)(c & 0x80) << 24;
  const uint32_t e = (c >> 3) & 15u, m = c & 7u;
  if (e == 15u && m == 7u) return fp8_detail::float_of(sign | 0x7fc00000u);  // NaN
  if (e == 0u) {
    // Subnormal: m * 2^-9, exact in fp32.
    const float v = (float)m * 0.001953125f;
    return sign != 0u ? -v : v;
  }
  // Normal: (1 + m/8) * 2^(e - 7): the fp32 exponent e - 7 + 127 and the mantissa's top bits.
  return fp8_detail::float_of(sign | ((e + 120u) << 23) | (m << 20));
}

INFERCEPT_HOST_DEVICE inline uint8_t f32_to_fp8_e4m3(float x) {
  const uint32_t b = fp8_detail::bits_of(x);
  const uint8_t sign = (uint8_t)((b >> 24) & 0x80u);
  const uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint8_t)(sign | 0x7fu);  // NaN
  const int32_t exp = (int32_t)(a >> 23) - 127;         // fp32's unbiased exponent
  if (exp > 8) return (uint8_t)(sign | 0x7eu);          // >= 512 (and infinities): +-448
  uint32_t code;
  if (exp >= -6) {
    // Normal in e4m3: keep 3 of the 23 mantissa bits, rounding the 20 dropped ones to nearest
    // even; a carry out of the mantissa moves into the exponent, as it should.
    const uint32_t mant = a & 0x7fffffu;
    const uint32_t keep = mant >> 20, rest = mant & 0xfffffu;
    code = ((uint32_t)(exp + 7) << 3) + keep;
    if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u) != 0u)) ++code;
  } else {
    // Subnormal in e4m3 (|x| < 2^-6): the count of 2^-9 steps, rounded to nearest even; the
    // value M * 2^(exp - 23) with its implicit bit is M * 2^(exp - 14) steps. Code 8 (a carry
    // to the smallest normal, 2^-6) is the right encoding too.
    if (exp < -10 - 14) return sign;  // below a quarter step (fp32 subnormals too): zero
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = (uint32_t)(14 - exp);  // 21 .. 38 - 1
    if (shift >= 32u) return sign;
    const uint32_t q = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    code = q + ((rest > half || (rest == half && (q & 1u) != 0u)) ? 1u : 0u);
  }
  if (code > 0x7eu) code = 0x7eu;  // 464 and above round past 448: saturate
  return (uint8_t)(sign | code);
}

// A KV head's scale from its largest magnitude: that one maps to 448 (an all-zero head has scale
// 0 and codes 0). Quantizing divides (IEEE division on both backends, so the same bits).
INFERCEPT_HOST_DEVICE inline float fp8_e4m3_scale(float amax) {
  return amax / kFp8E4m3Max;
}
INFERCEPT_HOST_DEVICE inline uint8_t fp8_e4m3_quantize(float x, float scale) {
  return scale > 0.0f ? f32_to_fp8_e4m3(x / scale) : (uint8_t)0;
}

}  // namespace infercept
