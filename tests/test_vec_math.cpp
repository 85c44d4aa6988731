// Tests for backend/cpu/vec_math.h. Why: attention's scores are summed 16 positions at a time
// by hsum16x16 and the tails by the same tree, and a row must get the same bits whichever
// served it; exp16 replaces libm in softmax and SiLU, so its error is bounded here, and it
// must give ggml's expf bits (llama.cpp's softmax and SiLU), checked against a scalar model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/vec_math.h"

namespace infercept {
namespace {

#if INFERCEPT_VEC_AVX512

TEST(VecMath, TreeOfSixteenSumsMatchesOneSumBitForBit) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ud(-1e3f, 1e3f);
  for (int trial = 0; trial < 200; ++trial) {
    alignas(64) float x[16][16];
    __m512 v[16];
    for (int i = 0; i < 16; ++i) {
      for (float& e : x[i]) e = ud(rng) * (trial % 2 ? 1e-3f : 1.0f);
      v[i] = _mm512_loadu_ps(x[i]);
    }
    alignas(64) float s[16];
    _mm512_storeu_ps(s, hsum16x16(v));
    for (int i = 0; i < 16; ++i) {
      const float one = hsum16(v[i]);
      ASSERT_EQ(std::memcmp(&s[i], &one, sizeof(float)), 0) << "lane " << i;
      double ref = 0;
      for (float e : x[i]) ref += e;
      EXPECT_NEAR(one, ref, 1e-3 * (std::fabs(ref) + 1e3));
    }
  }
}

TEST(VecMath, ExpWithinThreeUlpOfLibmAndUnderflowsToZero) {
  float worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    alignas(64) float out[16];
    _mm512_storeu_ps(out, exp16(_mm512_set1_ps(x)));
    const double ref = std::exp((double)x);
    const float ulp = std::nextafter((float)ref, INFINITY) - (float)ref;
    worst = std::max(worst, (float)(std::fabs(out[0] - ref) / ulp));
  }
  EXPECT_LE(worst, 3.0f);  // ggml's bound: 1.45 ulp plus 0.5 (measured 2.14)
  alignas(64) float out[16];
  _mm512_storeu_ps(out, exp16(_mm512_set1_ps(-1e4f)));
  EXPECT_EQ(out[0], 0.0f);
  _mm512_storeu_ps(out, exp16(_mm512_set1_ps(0.0f)));
  EXPECT_EQ(out[0], 1.0f);
}

// ggml's 16-lane expf (vec.h, AVX-512 branch), one lane, operation for operation.
float ggml_expf(float x) {
  const float shift = 0x1.8p23f;
  const float n = std::fma(x, 0x1.715476p+0f, shift) - shift;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  return std::ldexp(j, (int)n);
}

TEST(VecMath, ExpIsGgmlsExpBitForBit) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> ud(-110.f, 95.f);
  for (int i = 0; i < 200000; ++i) {
    const float x = i < 1000 ? -0.5f + (float)i * 1e-3f : ud(rng);
    alignas(64) float out[16];
    _mm512_storeu_ps(out, exp16(_mm512_set1_ps(x)));
    const float want = ggml_expf(x);
    ASSERT_EQ(std::memcmp(&out[0], &want, sizeof(float)), 0) << "x = " << x;
  }
  alignas(64) float out[16];
  _mm512_storeu_ps(out, exp16(_mm512_set1_ps(-INFINITY)));
  EXPECT_EQ(out[0], 0.0f);  // softmax's masked positions
}

#else
TEST(VecMath, SkippedWithoutAvx512) {
  GTEST_SKIP() << "built without AVX-512";
}
#endif

}  // namespace
}  // namespace infercept
