// Tests for backend/cpu/vec_math.h. Why: attention's scores are summed 16 positions at a time
// by hsum16x16 and the tails by the same tree, and a row must get the same bits whichever
// served it; exp16 replaces libm in softmax and SiLU, so its error is bounded here.
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

TEST(VecMath, ExpWithinTwoUlpOfLibmAndUnderflowsToZero) {
  float worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    alignas(64) float out[16];
    _mm512_storeu_ps(out, exp16(_mm512_set1_ps(x)));
    const double ref = std::exp((double)x);
    const float ulp = std::nextafter((float)ref, INFINITY) - (float)ref;
    worst = std::max(worst, (float)(std::fabs(out[0] - ref) / ulp));
  }
  EXPECT_LE(worst, 2.0f);
  alignas(64) float out[16];
  _mm512_storeu_ps(out, exp16(_mm512_set1_ps(-1e4f)));
  EXPECT_EQ(out[0], 0.0f);
  _mm512_storeu_ps(out, exp16(_mm512_set1_ps(0.0f)));
  EXPECT_EQ(out[0], 1.0f);
}

#else
TEST(VecMath, SkippedWithoutAvx512) {
  GTEST_SKIP() << "built without AVX-512";
}
#endif

}  // namespace
}  // namespace infercept
