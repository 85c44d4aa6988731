// Duration estimators: the paper's elapsed rule, the oracle hint, and the learned per-tool
// distribution checked against analytic E[D - e | D > e] of known distributions.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "sched/duration_estimator.h"

namespace infercept {
namespace {

std::unique_ptr<DurationEstimator> make(const std::string& name) {
  auto r = make_duration_estimator(name);
  EXPECT_TRUE(r.ok()) << name;
  return std::move(r).value();
}

TEST(DurationEstimator, FactoryNamesAndErrors) {
  for (const char* n : {"learned", "elapsed", "oracle"}) EXPECT_EQ(make(n)->name(), n);
  auto bad = make_duration_estimator("psychic");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("psychic"), std::string::npos);
  EXPECT_NE(bad.error().message.find("learned"), std::string::npos);
}

TEST(DurationEstimator, ElapsedIsThePapersRule) {
  auto e = make("elapsed");
  EXPECT_DOUBLE_EQ(e->expected_remaining("qa", 0.0, std::nullopt), 0.0);
  EXPECT_DOUBLE_EQ(e->expected_remaining("qa", 0.7, std::nullopt), 0.7);
  EXPECT_DOUBLE_EQ(e->expected_remaining("qa", 0.7, 100.0), 0.7);  // hints are not its business
  EXPECT_DOUBLE_EQ(e->expected_remaining("qa", -1.0, std::nullopt), 0.0);
  // Learning does not change its estimate (only the statistics).
  for (int i = 0; i < 50; ++i) e->observe("qa", 10.0);
  EXPECT_DOUBLE_EQ(e->expected_remaining("qa", 0.7, std::nullopt), 0.7);
  ASSERT_EQ(e->stats().size(), 1u);
  EXPECT_EQ(e->stats()[0].count, 50);
}

TEST(DurationEstimator, OracleUsesTheHint) {
  auto o = make("oracle");
  EXPECT_DOUBLE_EQ(o->expected_remaining("t", 2.0, 5.0), 3.0);
  EXPECT_DOUBLE_EQ(o->expected_remaining("t", 0.0, 5.0), 5.0);
  EXPECT_DOUBLE_EQ(o->expected_remaining("t", 2.0, std::nullopt), 2.0);  // no hint: elapsed
  // Overran its hint: the hint was wrong, fall back to elapsed rather than "returns now".
  EXPECT_DOUBLE_EQ(o->expected_remaining("t", 3.0, 1.0), 3.0);
  EXPECT_DOUBLE_EQ(o->expected_remaining("t", 3.0, std::nan("")), 3.0);
}

TEST(DurationEstimator, LearnedBehavesAsElapsedUntilFiveSamples) {
  auto l = make("learned");
  EXPECT_DOUBLE_EQ(l->expected_remaining("img", 1.5, std::nullopt), 1.5);
  for (int i = 0; i < 4; ++i) l->observe("img", 20.0);
  EXPECT_DOUBLE_EQ(l->expected_remaining("img", 1.5, std::nullopt), 1.5);
  EXPECT_FALSE(l->quantile("img", 0.95).has_value());
  l->observe("img", 20.0);
  // Five calls of 20 s, one pseudo-observation of the elapsed rule: (5 * 18.5 + 1.5) / 6.
  EXPECT_NEAR(l->expected_remaining("img", 1.5, std::nullopt), (5 * 18.5 + 1.5) / 6, 1e-12);
  ASSERT_TRUE(l->quantile("img", 0.95).has_value());
  EXPECT_DOUBLE_EQ(*l->quantile("img", 0.95), 20.0);
  // Other tools are unaffected; hints are ignored.
  EXPECT_DOUBLE_EQ(l->expected_remaining("calc", 1.5, 9.0), 1.5);
}

TEST(DurationEstimator, LearnedConvergesOnExponential) {
  // Exponential, mean 2 s: memoryless, E[D - e | D > e] = 2 for every e. The samples are the
  // distribution's quantiles at (i + 0.5) / n, fed in a shuffled order.
  const double mean = 2.0;
  const int n = 1024;
  std::vector<double> d;
  for (int i = 0; i < n; ++i) d.push_back(-mean * std::log(1.0 - (i + 0.5) / n));
  std::mt19937 rng(7);
  std::shuffle(d.begin(), d.end(), rng);
  auto l = make("learned");
  for (double x : d) l->observe("chat", x);
  for (double e : {0.0, 0.5, 1.0, 2.0, 4.0}) {
    const double got = l->expected_remaining("chat", e, std::nullopt);
    EXPECT_NEAR(got, mean, 0.1 * mean) << "elapsed " << e;
  }
  // p50 = 2 ln 2, p95 = 2 ln 20, p99 = 2 ln 100.
  EXPECT_NEAR(*l->quantile("chat", 0.50), mean * std::log(2.0), 0.02);
  EXPECT_NEAR(*l->quantile("chat", 0.95), mean * std::log(20.0), 0.05);
  EXPECT_NEAR(*l->quantile("chat", 0.99), mean * std::log(100.0), 0.2);
}

TEST(DurationEstimator, LearnedConvergesOnTwoPointMixtureWithEviction) {
  // Half the calls take 0.1 s, half take 10 s (even odds keep the sampling noise of a
  // 1024-call window near 3%, well inside the 10% checked). Analytic:
  //   E[rem | 0]    = 0.5 * 0.1 + 0.5 * 10      = 5.05
  //   E[rem | 0.05] = 0.5 * 0.05 + 0.5 * 9.95   = 5.0
  //   E[rem | 0.5]  = 9.5 (only the long calls are left)
  //   E[rem | 5]    = 5
  // The first 3000 calls come from another regime (all 50 s); the window must forget them.
  auto l = make("learned");
  for (int i = 0; i < 3000; ++i) l->observe("search", 50.0);
  std::mt19937 rng(11);
  std::bernoulli_distribution is_long(0.5);
  for (int i = 0; i < 5000; ++i) l->observe("search", is_long(rng) ? 10.0 : 0.1);
  const std::pair<double, double> cases[] = {{0.0, 5.05}, {0.05, 5.0}, {0.5, 9.5}, {5.0, 5.0}};
  for (auto [e, want] : cases) {
    EXPECT_NEAR(l->expected_remaining("search", e, std::nullopt), want, 0.1 * want) << e;
  }
  // Past every call in the window, nothing is known: the elapsed rule.
  EXPECT_DOUBLE_EQ(l->expected_remaining("search", 30.0, std::nullopt), 30.0);
  EXPECT_DOUBLE_EQ(*l->quantile("search", 0.01), 0.1);
  EXPECT_DOUBLE_EQ(*l->quantile("search", 0.99), 10.0);
  ASSERT_EQ(l->stats().size(), 1u);
  EXPECT_EQ(l->stats()[0].count, 8000);  // all calls, though only the window is kept
  EXPECT_LT(l->stats()[0].mean, 6.0);    // the 50 s regime is gone
}

TEST(DurationEstimator, QuantilesAndStats) {
  auto l = make("learned");
  for (int i = 1; i <= 100; ++i) l->observe("calc", (double)i);
  for (int i = 0; i < 3; ++i) l->observe("human", 30.0);
  // Linear interpolation between order statistics: h = q * (n - 1).
  EXPECT_DOUBLE_EQ(*l->quantile("calc", 0.5), 50.5);
  EXPECT_NEAR(*l->quantile("calc", 0.95), 95.05, 1e-9);
  EXPECT_NEAR(*l->quantile("calc", 0.99), 99.01, 1e-9);
  EXPECT_DOUBLE_EQ(*l->quantile("calc", 0.0), 1.0);
  EXPECT_DOUBLE_EQ(*l->quantile("calc", 1.0), 100.0);
  EXPECT_FALSE(l->quantile("human", 0.5).has_value());  // too few calls to trust
  EXPECT_FALSE(l->quantile("nobody", 0.5).has_value());
  const auto st = l->stats();
  ASSERT_EQ(st.size(), 2u);  // sorted by tool name
  EXPECT_EQ(st[0].tool, "calc");
  EXPECT_EQ(st[0].count, 100);
  EXPECT_DOUBLE_EQ(st[0].mean, 50.5);
  EXPECT_DOUBLE_EQ(st[0].p50, 50.5);
  EXPECT_NEAR(st[0].p95, 95.05, 1e-9);
  EXPECT_NEAR(st[0].p99, 99.01, 1e-9);
  EXPECT_EQ(st[1].tool, "human");
  EXPECT_EQ(st[1].count, 3);  // shown to the user even before it is used
  EXPECT_DOUBLE_EQ(st[1].p99, 30.0);
}

TEST(DurationEstimator, IgnoresBrokenDurations) {
  auto l = make("learned");
  for (int i = 0; i < 10; ++i) l->observe("t", 1.0);
  l->observe("t", std::nan(""));
  l->observe("t", -5.0);
  l->observe("t", std::numeric_limits<double>::infinity());
  EXPECT_EQ(l->stats()[0].count, 10);
  EXPECT_DOUBLE_EQ(l->stats()[0].mean, 1.0);
  EXPECT_TRUE(std::isfinite(l->expected_remaining("t", 0.2, std::nullopt)));
}

TEST(DurationEstimator, ExpectedRemainingIsCheap) {
  // Called for every paused request every step; a full window must still answer in well
  // under a microsecond-scale budget. Generous bound so a loaded CI machine passes.
  auto l = make("learned");
  std::mt19937 rng(3);
  std::exponential_distribution<double> exp(1.0);
  for (int i = 0; i < 4096; ++i) l->observe("t", exp(rng));
  const auto t0 = std::chrono::steady_clock::now();
  double sink = 0;
  for (int i = 0; i < 200000; ++i) sink += l->expected_remaining("t", (i % 100) * 0.03, {});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(sink, 0.0);
  EXPECT_LT(s / 200000, 5e-6) << "seconds per call";
}

}  // namespace
}  // namespace infercept
