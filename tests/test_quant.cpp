// Tests for core/quant (the scalar oracle) and backend/cpu/quant_dot (the fast kernels).
// Why: a wrong nibble order or scale packing would silently garble every logit, so each
// format is first pinned to hand-derived values, and the SIMD dot products are then checked
// against double-precision dots of the dequantized data and against the scalar kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant_dot.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/quant_blocks.h"

namespace infercept {
namespace {

std::vector<float> dequant(DType t, const void* src, int64_t n) {
  std::vector<float> out((size_t)n);
  dequantize_row(t, src, out.data(), n);
  return out;
}

// ---------------------------------------------------------------------------------------
// Hand-made blocks with hand-derived values.

TEST(Dequantize, F32F16Bf16) {
  const float f[3] = {1.5f, -0.25f, 3e-8f};
  EXPECT_EQ(dequant(DType::f32, f, 3), (std::vector<float>{1.5f, -0.25f, 3e-8f}));
  // 0x3c00 = 1, 0xc000 = -2, 0x3555 = 1 + 0x155/1024 times 2^-2, 0x0001 = 2^-24 (subnormal),
  // 0x7bff = 65504 (largest finite), 0x8000 = -0.
  const uint16_t h[6] = {0x3c00, 0xc000, 0x3555, 0x0001, 0x7bff, 0x8000};
  const auto hv = dequant(DType::f16, h, 6);
  EXPECT_EQ(hv[0], 1.f);
  EXPECT_EQ(hv[1], -2.f);
  EXPECT_EQ(hv[2], (1.f + 341.f / 1024.f) * 0.25f);
  EXPECT_EQ(hv[3], std::ldexp(1.f, -24));
  EXPECT_EQ(hv[4], 65504.f);
  EXPECT_TRUE(hv[5] == 0.f && std::signbit(hv[5]));
  // bf16 is the top half of an f32: 0x3f80 = 1, 0xc040 = -3, 0x4049 = 3.140625.
  const uint16_t b[3] = {0x3f80, 0xc040, 0x4049};
  EXPECT_EQ(dequant(DType::bf16, b, 3), (std::vector<float>{1.f, -3.f, 3.140625f}));
}

TEST(Dequantize, Q4_0) {
  BlockQ4_0 blk;
  blk.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) blk.qs[j] = (uint8_t)(j | ((15 - j) << 4));
  const auto v = dequant(DType::q4_0, &blk, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], (float)(j - 8) * 0.5f) << j;            // low nibble j -> element j
    EXPECT_EQ(v[j + 16], (float)(7 - j) * 0.5f) << j + 16;  // high nibble 15-j -> element j+16
  }
  EXPECT_EQ(v[0], -4.f);
  EXPECT_EQ(v[16], 3.5f);
}

TEST(Dequantize, Q4_1) {
  BlockQ4_1 blk;
  blk.d = 0x3400;  // 0.25
  blk.m = 0xbc00;  // -1
  for (int j = 0; j < 16; ++j) blk.qs[j] = (uint8_t)(j | ((15 - j) << 4));
  const auto v = dequant(DType::q4_1, &blk, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], (float)j * 0.25f - 1.f) << j;
    EXPECT_EQ(v[j + 16], (float)(15 - j) * 0.25f - 1.f) << j + 16;
  }
  EXPECT_EQ(v[15], 2.75f);
  EXPECT_EQ(v[16], 2.75f);
}

TEST(Dequantize, Q8_0AndQ8_1) {
  BlockQ8_0 b0;
  b0.d = 0x4000;  // 2
  BlockQ8_1 b1;
  b1.d = 0x3800;  // 0.5
  b1.s = 0;
  for (int j = 0; j < 32; ++j) b0.qs[j] = b1.qs[j] = (int8_t)(j - 16);
  const auto v0 = dequant(DType::q8_0, &b0, 32);
  const auto v1 = dequant(DType::q8_1, &b1, 32);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(v0[j], (float)(j - 16) * 2.f);
    EXPECT_EQ(v1[j], (float)(j - 16) * 0.5f);
  }
}

TEST(Dequantize, Q8_K) {
  BlockQ8_K b;
  b.d = 0.125f;
  for (int j = 0; j < 256; ++j) b.qs[j] = (int8_t)(j - 128);
  const auto v = dequant(DType::q8_k, &b, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(v[j], (float)(j - 128) * 0.125f);
}

TEST(Dequantize, Q4_K) {
  BlockQ4_K b;
  b.d = 0x3800;     // 0.5
  b.dmin = 0x3400;  // 0.25
  // Scales/mins chosen by hand, then packed by hand:
  //   sc = {1, 2, 3, 4, 17, 34, 51, 15}, mn = {5, 6, 7, 8, 16, 9, 42, 63}.
  // Bytes 0-3: sc[0..3] | (sc[4..7] >> 4) << 6; bytes 4-7: mn[0..3] | (mn[4..7] >> 4) << 6;
  // bytes 8-11: (sc[4..7] & 15) | (mn[4..7] & 15) << 4.
  const uint8_t scales[12] = {0x41, 0x82, 0xc3, 0x04, 0x45, 0x06,
                              0x87, 0xc8, 0x01, 0x92, 0xa3, 0xff};
  std::memcpy(b.scales, scales, 12);
  const int sc[8] = {1, 2, 3, 4, 17, 34, 51, 15};
  const int mn[8] = {5, 6, 7, 8, 16, 9, 42, 63};
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = (uint8_t)((l % 16) | ((15 - l % 16) << 4));
  }
  const auto v = dequant(DType::q4_k, &b, 256);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      // Chunk c: low nibbles are elements 64c..64c+31 (sub-block 2c), high nibbles the next 32.
      EXPECT_EQ(v[64 * c + l], 0.5f * (float)(sc[2 * c] * (l % 16)) - 0.25f * (float)mn[2 * c])
          << c << " " << l;
      EXPECT_EQ(v[64 * c + 32 + l],
                0.5f * (float)(sc[2 * c + 1] * (15 - l % 16)) - 0.25f * (float)mn[2 * c + 1])
          << c << " " << l;
    }
  }
  // A few spelled out: element 1 = 0.5*1*1 - 0.25*5; element 255 (sub-block 7, high nibble
  // 15-15=0) = -0.25*63; element 192 (sub-block 6, q=0) = -0.25*42; element 193 = 0.5*51 - 10.5.
  EXPECT_EQ(v[1], -0.75f);
  EXPECT_EQ(v[255], -15.75f);
  EXPECT_EQ(v[192], -10.5f);
  EXPECT_EQ(v[193], 15.f);
}

TEST(Dequantize, Q6_K) {
  BlockQ6_K b;
  b.d = 0x3800;  // 0.5
  for (int g = 0; g < 16; ++g) b.scales[g] = (int8_t)(g - 8);
  // Everywhere: low nibble 0xA, high nibble 0x5; qh = 0b11'10'01'00, so the 6-bit quant of
  // quarter k (elements 32k..32k+31 of each half) is: k=0: 10, k=1: 10|16=26, k=2: 5|32=37,
  // k=3: 5|48=53; minus 32: -22, -6, 5, 21.
  std::memset(b.ql, 0x5a, sizeof(b.ql));
  std::memset(b.qh, 0xe4, sizeof(b.qh));
  // Exceptions: ql[1] = 0x3c feeds element 1 (low 12 -> 12-32 = -20) and element 65 (high 3,
  // qh bits 4-5 = 2 -> 3|32 = 35 -> 3). qh[33] = 0b00'01'10'11 is l=1 of the second half:
  // element 129: 10|48 = 58 -> 26, 161: 10|32 = 42 -> 10, 193: 5|16 = 21 -> -11, 225: 5 -> -27.
  b.ql[1] = 0x3c;
  b.qh[33] = 0x1b;
  const int base[4] = {-22, -6, 5, 21};
  std::vector<int> q(256);
  for (int e = 0; e < 256; ++e) q[e] = base[(e % 128) / 32];
  q[1] = -20;
  q[65] = 3;
  q[129] = 26;
  q[161] = 10;
  q[193] = -11;
  q[225] = -27;
  const auto v = dequant(DType::q6_k, &b, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(v[e], 0.5f * (float)(e / 16 - 8) * (float)q[e]) << e;
  }
  EXPECT_EQ(v[1], 0.5f * -8.f * -20.f);
  EXPECT_EQ(v[255], 0.5f * 7.f * 21.f);
}

TEST(Quantize, HandValues) {
  // q8_0: amax 127 -> d = 1, values round half to even (ggml's x86 activation quantizer).
  float x[32] = {};
  x[0] = 127.f;
  x[1] = -2.5f;
  x[2] = 0.49f;
  x[3] = -127.f;
  BlockQ8_0 b0;
  quantize_row(DType::q8_0, x, &b0, 32);
  EXPECT_EQ(b0.d, 0x3c00);
  EXPECT_EQ(b0.qs[0], 127);
  EXPECT_EQ(b0.qs[1], -2);
  EXPECT_EQ(b0.qs[2], 0);
  EXPECT_EQ(b0.qs[3], -127);
  // q8_1: s = d * sum(qs) = 127 - 2 - 127 = -2.
  BlockQ8_1 b1;
  quantize_row(DType::q8_1, x, &b1, 32);
  EXPECT_EQ(fp16_to_fp32(b1.s), -2.f);
  // q8_K: the signed value of largest magnitude maps to -127, so d = max / -127 = -1 here;
  // rounding ties go to even (-2.5 -> -2, -3.5 -> -4).
  std::vector<float> xk(256, 0.f);
  xk[0] = 127.f;
  xk[1] = 2.5f;
  xk[2] = 3.5f;
  xk[20] = 100.f;
  BlockQ8_K bk;
  quantize_row(DType::q8_k, xk.data(), &bk, 256);
  EXPECT_EQ(bk.d, -1.f);
  EXPECT_EQ(bk.qs[0], -127);
  EXPECT_EQ(bk.qs[1], -2);
  EXPECT_EQ(bk.qs[2], -4);
  EXPECT_EQ(bk.qs[20], -100);
  EXPECT_EQ(bk.bsums[0], -127 - 2 - 4);
  EXPECT_EQ(bk.bsums[1], -100);
  for (int g = 2; g < 16; ++g) EXPECT_EQ(bk.bsums[g], 0);
  // All zero: d = 0 and zero quants.
  std::fill(xk.begin(), xk.end(), 0.f);
  quantize_row(DType::q8_k, xk.data(), &bk, 256);
  EXPECT_EQ(bk.d, 0.f);
  EXPECT_EQ(bk.bsums[3], 0);
  // q4_0: the max-magnitude value -8 gives d = -8 / -8 = 1 and maps to q 0; +8 would be
  // q 16 and clamps to 15 (value 7).
  float y[32] = {};
  y[0] = -8.f;
  y[1] = 8.f;
  y[17] = 3.f;
  BlockQ4_0 b4;
  quantize_row(DType::q4_0, y, &b4, 32);
  const auto v4 = dequant(DType::q4_0, &b4, 32);
  EXPECT_EQ(b4.d, 0x3c00);
  EXPECT_EQ(v4[0], -8.f);     // -8 + 8.5 -> q 0
  EXPECT_EQ(v4[1], 7.f);      // 8 + 8.5 = 16.5 -> 16, clamped to 15
  EXPECT_EQ(v4[17], 3.f);     // 3 + 8.5 -> 11
  EXPECT_EQ(v4[5], 0.f);      // 0 + 8.5 -> 8
  EXPECT_EQ(b4.qs[1], 0xbf);  // element 1 (q 15) low, element 17 (q 11) high
  EXPECT_EQ(b4.qs[0], 0x80);
  // q4_1: min -1, max 2 -> d = 0.2, m = -1; 0.5 -> (1.5 / 0.2) + 0.5 = 8 -> 8 * 0.2 - 1.
  float z[32];
  for (float& e : z) e = 0.5f;
  z[3] = -1.f;
  z[30] = 2.f;
  BlockQ4_1 b41;
  quantize_row(DType::q4_1, z, &b41, 32);
  EXPECT_EQ(b41.m, 0xbc00);
  EXPECT_EQ(b41.qs[3] & 0x0f, 0);
  EXPECT_EQ(b41.qs[14] >> 4, 15);
  EXPECT_EQ(b41.qs[0] & 0x0f, 8);
}

TEST(Quantize, ActivationPairing) {
  EXPECT_EQ(activation_dtype_for(DType::q4_1), DType::q8_1);
  EXPECT_EQ(activation_dtype_for(DType::q4_0), DType::q8_0);
  EXPECT_EQ(activation_dtype_for(DType::q8_0), DType::q8_0);
  EXPECT_EQ(activation_dtype_for(DType::q4_k), DType::q8_k);
  EXPECT_EQ(activation_dtype_for(DType::q6_k), DType::q8_k);
  EXPECT_EQ(activation_dtype_for(DType::f16), DType::f16);
  EXPECT_EQ(activation_dtype_for(DType::bf16), DType::f32);
  EXPECT_EQ(activation_dtype_for(DType::f32), DType::f32);
}

// ---------------------------------------------------------------------------------------
// Round trips.

std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale = 1.f) {
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v((size_t)n);
  for (float& e : v) e = dist(rng);
  return v;
}

TEST(Quantize, RoundTripErrorBounds) {
  std::mt19937 rng(1);
  const int64_t n = 1024;
  for (int rep = 0; rep < 4; ++rep) {
    const auto x = random_floats(rng, n, rep == 0 ? 1e-3f : (float)rep);
    for (DType t : {DType::q8_0, DType::q8_1, DType::q8_k, DType::q4_0, DType::q4_1, DType::f16,
                    DType::bf16, DType::f32}) {
      std::vector<uint8_t> buf(dtype_row_bytes(t, n));
      quantize_row(t, x.data(), buf.data(), n);
      const auto y = dequant(t, buf.data(), n);
      const int64_t be = dtype_block_elems(t);
      for (int64_t b0 = 0; b0 < n; b0 += be) {
        float amax = 0.f, mn = x[b0], mx = x[b0];
        for (int64_t j = b0; j < b0 + be; ++j) {
          amax = std::max(amax, std::fabs(x[j]));
          mn = std::min(mn, x[j]);
          mx = std::max(mx, x[j]);
        }
        for (int64_t j = b0; j < b0 + be; ++j) {
          // Half a quantization step, plus the largest quant times the error of storing the
          // step (and q4_1's min) in fp16; fp16 steps may be subnormal for tiny data.
          auto f16_err = [](float v) { return std::fabs(v - fp16_to_fp32(fp32_to_fp16(v))); };
          float bound = 0.f;
          switch (t) {
            case DType::q8_0:
            case DType::q8_1: {
              const float d = amax / 127.f;
              bound = 0.501f * d + 127.f * f16_err(d);
              break;
            }
            case DType::q8_k:
              bound = 0.501f * amax / 127.f;
              break;
            // the value opposite the max-magnitude one may clamp: a whole step
            case DType::q4_0: {
              const float d = amax / 8.f;
              bound = 1.001f * d + 8.f * f16_err(d);
              break;
            }
            case DType::q4_1: {
              const float d = (mx - mn) / 15.f;
              bound = 0.501f * d + 15.f * f16_err(d) + f16_err(mn);
              break;
            }
            // relative half-ulp, or half the smallest subnormal step
            case DType::f16:
              bound = std::max(std::fabs(x[j]) * 0x1p-11f, 0x1p-25f);
              break;
            case DType::bf16:
              bound = std::fabs(x[j]) * 0x1p-8f;
              break;
            default:
              bound = 0.f;
              break;
          }
          ASSERT_LE(std::fabs(y[j] - x[j]), bound)
              << dtype_name(t) << " rep " << rep << " j " << j << " x " << x[j];
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Dot products.

const DType kWeightTypes[] = {DType::f32,  DType::f16,  DType::bf16, DType::q8_0,
                              DType::q4_0, DType::q4_1, DType::q4_k, DType::q6_k};

void put_f16(uint16_t* p, float v) {
  *p = fp32_to_fp16(v);
}

// A random weight row: quantized random floats where we have a quantizer; random bytes with
// sane fp16 scales for the k-quants (every bit pattern of their quants and scales is valid).
// For q8_0 every fourth row is raw random bytes, so -128 quants are covered too.
std::vector<uint8_t> random_weight_row(std::mt19937& rng, DType t, int64_t n, int variant) {
  std::vector<uint8_t> buf(dtype_row_bytes(t, n));
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  std::uniform_int_distribution<int> byte(0, 255);
  if (t == DType::q4_k) {
    auto* b = reinterpret_cast<BlockQ4_K*>(buf.data());
    for (int64_t i = 0; i < n / kQKK; ++i) {
      put_f16(&b[i].d, scale(rng));
      put_f16(&b[i].dmin, scale(rng));
      for (uint8_t& e : b[i].scales) e = (uint8_t)byte(rng);
      for (uint8_t& e : b[i].qs) e = (uint8_t)byte(rng);
    }
  } else if (t == DType::q6_k) {
    auto* b = reinterpret_cast<BlockQ6_K*>(buf.data());
    for (int64_t i = 0; i < n / kQKK; ++i) {
      put_f16(&b[i].d, scale(rng));
      for (uint8_t& e : b[i].ql) e = (uint8_t)byte(rng);
      for (uint8_t& e : b[i].qh) e = (uint8_t)byte(rng);
      for (int8_t& e : b[i].scales) e = (int8_t)byte(rng);
    }
  } else if (t == DType::q8_0 && variant % 4 == 3) {
    auto* b = reinterpret_cast<BlockQ8_0*>(buf.data());
    for (int64_t i = 0; i < n / kQK; ++i) {
      put_f16(&b[i].d, scale(rng));
      for (int8_t& e : b[i].qs) e = (int8_t)byte(rng);
    }
  } else {
    // offset so q4_1's min term matters
    auto x = random_floats(rng, n);
    for (float& e : x) e += 0.3f;
    quantize_row(t, x.data(), buf.data(), n);
  }
  return buf;
}

std::vector<uint8_t> quantized_acts(const std::vector<float>& x, DType wt) {
  const DType at = activation_dtype_for(wt);
  std::vector<uint8_t> buf(dtype_row_bytes(at, (int64_t)x.size()));
  quantize_row(at, x.data(), buf.data(), (int64_t)x.size());
  return buf;
}

struct RefDot {
  double dot;
  double abs;  // sum of |w_i a_i|: the scale for relative tolerances
};

// Double-precision dot of dequantize(w) and dequantize(act). For q4_1 the kernel uses the
// q8_1 block's stored s = fp16(d * sum(qs)) for the min term, exactly as llama.cpp does; the
// rounding of s to fp16 is a property of the format, not kernel error, so it is added here.
RefDot ref_dot(DType wt, const void* w, const void* a, int64_t n) {
  const DType at = activation_dtype_for(wt);
  const auto wf = dequant(wt, w, n);
  const auto af = dequant(at, a, n);
  RefDot r{0.0, 0.0};
  for (int64_t i = 0; i < n; ++i) {
    r.dot += (double)wf[i] * (double)af[i];
    r.abs += std::fabs((double)wf[i] * (double)af[i]);
  }
  if (wt == DType::q4_1) {
    const auto* xb = static_cast<const BlockQ4_1*>(w);
    const auto* yb = static_cast<const BlockQ8_1*>(a);
    for (int64_t i = 0; i < n / kQK; ++i) {
      int sum = 0;
      for (int j = 0; j < kQK; ++j) sum += yb[i].qs[j];
      const double exact_s = (double)fp16_to_fp32(yb[i].d) * sum;
      r.dot += (double)fp16_to_fp32(xb[i].m) * ((double)fp16_to_fp32(yb[i].s) - exact_s);
    }
  }
  return r;
}

std::vector<int64_t> lengths_for(DType t) {
  if (dtype_block_elems(t) == kQKK) return {256, 512, 1536, 4096};
  if (dtype_block_elems(t) == kQK) return {32, 64, 96, 224, 576, 1536, 4096};
  return {1, 7, 8, 33, 64, 577, 1536, 4099};
}

TEST(VecDot, MatchesDoubleReferenceAndScalar) {
  std::mt19937 rng(7);
  for (DType wt : kWeightTypes) {
    for (int64_t n : lengths_for(wt)) {
      for (int variant = 0; variant < 4; ++variant) {
        const auto w = random_weight_row(rng, wt, n, variant);
        const auto x = random_floats(rng, n, variant == 1 ? 20.f : 1.f);
        const auto a = quantized_acts(x, wt);
        const RefDot ref = ref_dot(wt, w.data(), a.data(), n);
        const float fast = vec_dot(wt, w.data(), a.data(), n);
        const float slow = vec_dot_scalar(wt, w.data(), a.data(), n);
        const double tol = 1e-4 * ref.abs + 1e-30;
        EXPECT_NEAR(fast, ref.dot, tol) << dtype_name(wt) << " n=" << n << " v=" << variant;
        EXPECT_NEAR(slow, ref.dot, tol) << dtype_name(wt) << " n=" << n << " v=" << variant;
        EXPECT_NEAR(fast, slow, 1e-5 * ref.abs + 1e-30)
            << dtype_name(wt) << " n=" << n << " v=" << variant;
      }
    }
  }
}

TEST(VecDot, ExtremeActivationsStayExact) {
  // Activations at +-127 and weights at their extremes: maddubs pair sums must not saturate.
  for (DType wt : kWeightTypes) {
    const int64_t n = 512;
    std::mt19937 rng(3);
    const auto w = random_weight_row(rng, wt, n, 3);
    std::vector<float> x((size_t)n);
    for (int64_t i = 0; i < n; ++i) x[i] = (i % 3 == 0) ? -1.f : 1.f;
    const auto a = quantized_acts(x, wt);
    const RefDot ref = ref_dot(wt, w.data(), a.data(), n);
    EXPECT_NEAR(vec_dot(wt, w.data(), a.data(), n), ref.dot, 1e-4 * ref.abs + 1e-30)
        << dtype_name(wt);
  }
}

// ---------------------------------------------------------------------------------------
// matmul_rows.

struct Shape {
  int64_t rows, acts, k, begin, end;
};

// Checks a [acts, stride] product that was to fill rows [begin, end) only: untouched
// sentinels outside, and inside each value against the scalar oracle (and, when
// `against_double`, against the double-precision reference too).
void expect_row_range_matches(DType wt, const std::vector<float>& out, int64_t stride, int64_t rows,
                              int64_t acts, int64_t begin, int64_t end, const uint8_t* w,
                              size_t wrb, const uint8_t* a, size_t arb, int64_t k, float sentinel,
                              bool against_double) {
  for (int64_t j = 0; j < acts; ++j) {
    for (int64_t r = 0; r < stride; ++r) {
      const float got = out[(size_t)(j * stride + r)];
      if (r < begin || r >= end) {
        EXPECT_EQ(got, sentinel) << "wrote outside the row range";
        continue;
      }
      const void* wr = w + (size_t)r * wrb;
      const void* ar = a + (size_t)j * arb;
      const RefDot ref = ref_dot(wt, wr, ar, k);
      EXPECT_NEAR(got, vec_dot_scalar(wt, wr, ar, k), 1e-5 * ref.abs + 1e-30)
          << dtype_name(wt) << " rows=" << rows << " acts=" << acts << " k=" << k << " r=" << r
          << " a=" << j;
      if (against_double) {
        EXPECT_NEAR(got, ref.dot, 1e-4 * ref.abs + 1e-30) << dtype_name(wt);
      }
    }
  }
}

TEST(MatmulRows, MatchesNaive) {
  std::mt19937 rng(11);
  const Shape shapes[] = {
      {1, 1, 0, 0, 1},    {37, 1, 0, 0, 37},    {37, 1, 0, 5, 31},
      {16, 4, 0, 0, 16},  {100, 5, 0, 3, 97},   {9, 7, 0, 1, 8},
      {70, 13, 0, 0, 70}, {130, 2, 0, 17, 129}, {5, 9, 0, 2, 3},
  };
  for (DType wt : kWeightTypes) {
    const DType at = activation_dtype_for(wt);
    for (const Shape& s0 : shapes) {
      for (int64_t k : {dtype_block_elems(wt) == kQKK ? (int64_t)512 : (int64_t)96,
                        dtype_block_elems(wt) == kQKK ? (int64_t)1536 : (int64_t)576}) {
        const Shape s{s0.rows, s0.acts, k, s0.begin, s0.end};
        const size_t wrb = dtype_row_bytes(wt, k), arb = dtype_row_bytes(at, k);
        std::vector<uint8_t> w(wrb * (size_t)s.rows), a(arb * (size_t)s.acts);
        for (int64_t r = 0; r < s.rows; ++r) {
          const auto row = random_weight_row(rng, wt, k, (int)r);
          std::memcpy(w.data() + (size_t)r * wrb, row.data(), wrb);
        }
        for (int64_t j = 0; j < s.acts; ++j) {
          const auto row = quantized_acts(random_floats(rng, k), wt);
          std::memcpy(a.data() + (size_t)j * arb, row.data(), arb);
        }
        const int64_t stride = s.rows + 3;
        const float sentinel = -12345.f;
        std::vector<float> out((size_t)(stride * s.acts), sentinel);
        matmul_rows(wt, w.data(), wrb, s.begin, s.end, a.data(), arb, s.acts, k, out.data(),
                    stride);
        expect_row_range_matches(wt, out, stride, s.rows, s.acts, s.begin, s.end, w.data(), wrb,
                                 a.data(), arb, k, sentinel, /*against_double=*/false);
      }
    }
  }
}

TEST(MatmulRows, EmptyRangeWritesNothing) {
  float out[4] = {1.f, 2.f, 3.f, 4.f};
  matmul_rows(DType::q4_1, nullptr, 20, 3, 3, nullptr, 36, 2, 32, out, 2);
  matmul_rows(DType::q4_1, nullptr, 20, 0, 2, nullptr, 36, 0, 32, out, 2);
  EXPECT_EQ(out[0], 1.f);
  EXPECT_EQ(out[3], 4.f);
}

}  // namespace
}  // namespace infercept

// The SIMD activation quantizer must give the scalar oracle's bits exactly: the CPU backend
// uses it for every row, and batch invariance and the llama.cpp comparison rest on it.
#include "backend/cpu/quantize_fast.h"
namespace infercept {
namespace {
TEST(QuantizeFast, BitIdenticalToTheScalarOracle) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (DType t : {DType::q8_0, DType::q8_1}) {
    for (int64_t n : {32, 64, 576, 1536}) {
      std::vector<float> x((size_t)n);
      for (auto& v : x) v = nd(rng);
      x[3] = 0.5f * 127.0f / 127.0f;  // include exact halves after scaling sometimes
      if (n > 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block
      const size_t bytes = dtype_row_bytes(t, n);
      std::vector<uint8_t> a(bytes), b(bytes);
      quantize_row(t, x.data(), a.data(), n);
      quantize_row_fast(t, x.data(), b.data(), n);
      EXPECT_EQ(a, b) << dtype_name(t) << " n=" << n;
    }
    // Exact ties: amax 127 gives scale 1, so these sit exactly on .5 after scaling.
    std::vector<float> ties = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, -1.5f, 126.5f};
    ties.resize(32, 3.5f);
    const size_t bytes = dtype_row_bytes(t, 32);
    std::vector<uint8_t> a(bytes), b(bytes);
    quantize_row(t, ties.data(), a.data(), 32);
    quantize_row_fast(t, ties.data(), b.data(), 32);
    EXPECT_EQ(a, b) << dtype_name(t) << " ties";
  }
}
}  // namespace
}  // namespace infercept

// ---------------------------------------------------------------------------------------
// matmul_packed: the interleaved-weight VNNI kernels that serve q4_0/q4_1/q8_0 matmuls. They
// must agree with the scalar oracle up to float order, and a row's result must not depend on
// how many activation rows share the call or how rows are split between threads: that is
// what keeps a request's tokens the same alone and inside a batch.
#include "backend/cpu/packed_matmul.h"
namespace infercept {
namespace {

const DType kPackedTypes[] = {DType::q4_0, DType::q4_1, DType::q8_0};

struct PackedCase {
  std::vector<uint8_t> w, a;
  size_t wrb = 0, arb = 0;
  std::vector<uint8_t> storage;  // holds the packed copy at a 64-byte aligned offset
  void* packed = nullptr;
};

PackedCase make_packed_case(std::mt19937& rng, DType wt, int64_t rows, int64_t acts, int64_t k,
                            float act_scale) {
  PackedCase c;
  const DType at = activation_dtype_for(wt);
  c.wrb = dtype_row_bytes(wt, k);
  c.arb = dtype_row_bytes(at, k);
  c.w.resize(c.wrb * (size_t)rows);
  c.a.resize(c.arb * (size_t)acts);
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = random_weight_row(rng, wt, k, (int)r);
    std::memcpy(c.w.data() + (size_t)r * c.wrb, row.data(), c.wrb);
  }
  for (int64_t j = 0; j < acts; ++j) {
    const auto row = quantized_acts(random_floats(rng, k, act_scale), wt);
    std::memcpy(c.a.data() + (size_t)j * c.arb, row.data(), c.arb);
  }
  c.storage.resize(packed_bytes(wt, rows, k) + 64);
  c.packed = c.storage.data() + (64 - reinterpret_cast<uintptr_t>(c.storage.data()) % 64) % 64;
  pack_weight(wt, c.w.data(), c.wrb, rows, k, c.packed);
  return c;
}

TEST(MatmulPacked, MatchesScalarOracle) {
  struct S {
    int64_t rows, acts, begin, end;
  };
  // Odd row counts (a partial last group), one to many activation rows (every tile
  // remainder), and thread-style sub-ranges that start on a 16-row group.
  const S shapes[] = {{1, 1, 0, 1},     {16, 1, 0, 16},  {37, 1, 0, 37},  {37, 3, 16, 37},
                      {100, 5, 0, 100}, {70, 8, 16, 48}, {70, 13, 0, 70}, {130, 33, 32, 130},
                      {5, 9, 0, 5},     {80, 1, 16, 80}};
  std::mt19937 rng(21);
  for (DType wt : kPackedTypes) {
    if (!packed_supported(wt)) GTEST_SKIP() << "no AVX512-VNNI in this build";
    for (const S& s : shapes) {
      for (int64_t k : {32, 96, 576}) {
        for (float act_scale : {1.f, 20.f}) {
          PackedCase c = make_packed_case(rng, wt, s.rows, s.acts, k, act_scale);
          PackedActs pa;
          prepare_acts(wt, c.a.data(), c.arb, s.acts, k, pa);
          const int64_t stride = s.rows + 3;
          const float sentinel = -12345.f;
          std::vector<float> out((size_t)(stride * s.acts), sentinel);
          matmul_packed(wt, c.packed, s.rows, s.begin, s.end, pa, out.data(), stride);
          expect_row_range_matches(wt, out, stride, s.rows, s.acts, s.begin, s.end, c.w.data(),
                                   c.wrb, c.a.data(), c.arb, k, sentinel, /*against_double=*/true);
        }
      }
    }
  }
}

TEST(MatmulPacked, RowResultsIndependentOfBatchAndSplit) {
  std::mt19937 rng(5);
  const int64_t rows = 83, acts = 19, k = 224;
  for (DType wt : kPackedTypes) {
    if (!packed_supported(wt)) GTEST_SKIP() << "no AVX512-VNNI in this build";
    PackedCase c = make_packed_case(rng, wt, rows, acts, k, 1.f);
    PackedActs all;
    prepare_acts(wt, c.a.data(), c.arb, acts, k, all);
    std::vector<float> batched((size_t)(rows * acts));
    matmul_packed(wt, c.packed, rows, 0, rows, all, batched.data(), rows);
    // Every row alone (decode), and every window of 3 rows (a different tile remainder).
    for (int64_t j = 0; j < acts; ++j) {
      PackedActs one;
      prepare_acts(wt, c.a.data() + (size_t)j * c.arb, c.arb, 1, k, one);
      std::vector<float> alone((size_t)rows);
      matmul_packed(wt, c.packed, rows, 0, rows, one, alone.data(), rows);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(alone[(size_t)r], batched[(size_t)(j * rows + r)])
            << dtype_name(wt) << " act " << j << " row " << r;
    }
    for (int64_t j = 0; j + 3 <= acts; ++j) {
      PackedActs three;
      prepare_acts(wt, c.a.data() + (size_t)j * c.arb, c.arb, 3, k, three);
      std::vector<float> out((size_t)(3 * rows));
      // split as two threads would: [0, 48) and [48, rows)
      matmul_packed(wt, c.packed, rows, 0, 48, three, out.data(), rows);
      matmul_packed(wt, c.packed, rows, 48, rows, three, out.data(), rows);
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(out[(size_t)(i * rows + r)], batched[(size_t)((j + i) * rows + r)])
              << dtype_name(wt) << " act " << j + i << " row " << r;
    }
  }
}

TEST(MatmulPacked, ExtremeOperandsStayExact) {
  // Activations at +-127 against weights at their extremes (q8_0 bytes over the full
  // -128..127 range): the biased unsigned operand and its correction must stay exact.
  for (DType wt : kPackedTypes) {
    if (!packed_supported(wt)) GTEST_SKIP() << "no AVX512-VNNI in this build";
    const int64_t rows = 20, k = 512;
    std::mt19937 rng(3);
    std::vector<uint8_t> w;
    const size_t wrb = dtype_row_bytes(wt, k);
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = random_weight_row(rng, wt, k, 3);
      w.insert(w.end(), row.begin(), row.end());
    }
    std::vector<float> x((size_t)k);
    for (int64_t i = 0; i < k; ++i) x[(size_t)i] = (i % 3 == 0) ? -1.f : 1.f;
    const auto a = quantized_acts(x, wt);
    std::vector<uint8_t> storage(packed_bytes(wt, rows, k) + 64);
    void* packed = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
    pack_weight(wt, w.data(), wrb, rows, k, packed);
    PackedActs pa;
    prepare_acts(wt, a.data(), a.size(), 1, k, pa);
    std::vector<float> out((size_t)rows);
    matmul_packed(wt, packed, rows, 0, rows, pa, out.data(), rows);
    for (int64_t r = 0; r < rows; ++r) {
      const RefDot ref = ref_dot(wt, w.data() + (size_t)r * wrb, a.data(), k);
      EXPECT_NEAR(out[(size_t)r], ref.dot, 1e-4 * ref.abs + 1e-30) << dtype_name(wt) << " " << r;
    }
  }
}

// The CPU backend quantizes f32 rows straight into the panels (quantize_acts_rows); the
// panels must hold what quantizing to the block format and prepare_acts would give.
TEST(MatmulPacked, QuantizeStraightIntoPanelsEqualsQuantizeThenPrepare) {
  std::mt19937 rng(5);
  const int64_t k = 576;
  for (DType wt : kPackedTypes) {
    if (!packed_supported(wt)) GTEST_SKIP() << "no AVX512-VNNI in this build";
    for (int64_t n : {1, 5, 8, 13, 32}) {
      std::vector<float> x;
      for (int64_t r = 0; r < n; ++r) {
        const auto row = random_floats(rng, k, r % 3 == 0 ? 0.01f : 3.0f);
        x.insert(x.end(), row.begin(), row.end());
      }
      std::fill(x.begin(), x.begin() + 32, 0.0f);  // an all-zero block
      const DType at = activation_dtype_for(wt);
      const size_t arb = dtype_row_bytes(at, k);
      std::vector<uint8_t> blocks(arb * (size_t)n);
      for (int64_t r = 0; r < n; ++r)
        quantize_row_fast(at, x.data() + r * k, blocks.data() + (size_t)r * arb, k);
      PackedActs want, got;
      prepare_acts(wt, blocks.data(), arb, n, k, want);
      resize_acts(wt, n, k, got);
      // In two calls, as threads would split the rows.
      quantize_acts_rows(wt, x.data(), k, 0, n / 2, got);
      quantize_acts_rows(wt, x.data() + (n / 2) * k, k, n / 2, n, got);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < k / 32; ++i) {
          const size_t j = (size_t)((r / 8 * (k / 32) + i) * 8 + r % 8);
          ASSERT_EQ(std::memcmp(got.qs.data() + j * 32, want.qs.data() + j * 32, 32), 0)
              << dtype_name(wt) << " n " << n << " row " << r << " block " << i;
          ASSERT_EQ(got.d[j], want.d[j]);
          if (wt == DType::q4_1)
            ASSERT_EQ(got.s[j], want.s[j]);
          else
            ASSERT_EQ(got.corr[j], want.corr[j]);
        }
    }
  }
}

}  // namespace
}  // namespace infercept

// ---------------------------------------------------------------------------------------
// Q4_1Order::ggml: q4_1 products in the order of ggml's x86 ggml_vec_dot_q4_1_q8_1, which
// llama.cpp's CPU backend runs for every q4_1 product. Checked bit for bit against a scalar
// model of that function, for every tile shape (one to many activation rows, thread splits),
// since greedy decoding follows llama.cpp only while every product has its bits.
namespace infercept {
namespace {

float ggml_q4_1_dot(const uint8_t* w_row, const uint8_t* a_row, int64_t k) {
  const auto* x = reinterpret_cast<const BlockQ4_1*>(w_row);
  const auto* y = reinterpret_cast<const BlockQ8_1*>(a_row);
  float acc[8] = {};
  float summs = 0.f;
  for (int64_t b = 0; b < k / 32; ++b) {
    summs = std::fma(fp16_to_fp32(x[b].m), fp16_to_fp32(y[b].s), summs);
    const float d = fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d);
    for (int l = 0; l < 8; ++l) {  // one 32-bit lane of the 256-bit vpdpbusd: elements 4l..4l+3
      int isum = 0;
      for (int t = 0; t < 4; ++t) {
        const int e = 4 * l + t;
        const int q = e < 16 ? x[b].qs[e] & 15 : x[b].qs[e - 16] >> 4;
        isum += q * y[b].qs[e];
      }
      acc[l] = std::fma(d, (float)isum, acc[l]);
    }
  }
  // hsum_float_8: halves, then pairs two apart, then the last pair; then the min terms.
  float r4[4];
  for (int l = 0; l < 4; ++l) r4[l] = acc[l + 4] + acc[l];
  return ((r4[0] + r4[2]) + (r4[1] + r4[3])) + summs;
}

TEST(MatmulPacked, Q4_1InGgmlOrderIsBitIdenticalToGgmlsDot) {
  if (!packed_supported(DType::q4_1)) GTEST_SKIP() << "no AVX512-VNNI in this build";
  struct S {
    int64_t rows, acts, begin, end;
  };
  const S shapes[] = {{1, 1, 0, 1},    {37, 1, 0, 37},  {37, 3, 16, 37},    {100, 5, 0, 100},
                      {70, 8, 16, 48}, {70, 13, 0, 70}, {130, 33, 32, 130}, {80, 2, 16, 80}};
  std::mt19937 rng(31);
  for (const S& s : shapes) {
    for (int64_t k : {32, 96, 576}) {
      for (float act_scale : {1.f, 20.f}) {
        PackedCase c = make_packed_case(rng, DType::q4_1, s.rows, s.acts, k, act_scale);
        PackedActs pa;
        prepare_acts(DType::q4_1, c.a.data(), c.arb, s.acts, k, pa);
        std::vector<float> out((size_t)(s.rows * s.acts), -1.f);
        matmul_packed(DType::q4_1, c.packed, s.rows, s.begin, s.end, pa, out.data(), s.rows,
                      Q4_1Order::ggml);
        for (int64_t a = 0; a < s.acts; ++a)
          for (int64_t r = s.begin; r < s.end; ++r)
            ASSERT_EQ(
                out[(size_t)(a * s.rows + r)],
                ggml_q4_1_dot(c.w.data() + (size_t)r * c.wrb, c.a.data() + (size_t)a * c.arb, k))
                << "rows " << s.rows << " acts " << s.acts << " k " << k << " act " << a << " row "
                << r;
      }
    }
  }
}

}  // namespace
}  // namespace infercept
