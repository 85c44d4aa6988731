// The CPU backend samples greedy rows itself (argmax_rows), so the engine skips copying the
// logits; its tokens must be the host sampler's: same maximum, lowest id on ties, NaN never
// chosen, 0 for a row without a finite maximum, whatever the row length and thread split.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/sampling.h"

namespace infercept {
namespace {

TEST(CpuArgmaxRows, SameIdsAsTheHostSampler) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 4.f);
  for (int threads : {1, 2, 3}) {
    auto be = make_cpu_backend(threads);
    for (int64_t cols : {1, 15, 16, 17, 100, 49152}) {
      const int64_t rows = 9;
      Tensor t = be->alloc_activation(rows, cols, DType::f32);
      for (int64_t r = 0; r < rows; ++r) {
        float* x = t.row<float>(r);
        for (int64_t c = 0; c < cols; ++c) x[c] = std::round(nd(rng));  // many ties
        if (r == 1) x[cols - 1] = NAN;
        if (r == 2) x[0] = NAN;
        if (r == 3)
          for (int64_t c = 0; c < cols; ++c) x[c] = -INFINITY;
        if (r == 4)
          for (int64_t c = 0; c < cols; ++c) x[c] = c % 2 ? NAN : -INFINITY;
        if (r == 5) x[cols / 2] = INFINITY;
        if (r == 6)
          for (int64_t c = 0; c < cols; ++c) x[c] = 1.0f;
      }
      std::vector<int32_t> got((size_t)rows, -1);
      ASSERT_TRUE(be->greedy_on_device());
      ASSERT_TRUE(be->argmax_rows(t, got.data()));
      for (int64_t r = 0; r < rows; ++r)
        EXPECT_EQ(got[(size_t)r], argmax(std::span<const float>(t.row<float>(r), (size_t)cols)))
            << "threads " << threads << " cols " << cols << " row " << r;
    }
  }
}

}  // namespace
}  // namespace infercept
