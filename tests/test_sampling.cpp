// Sampler: greedy ties, the filter chain (penalties -> temperature -> top_k -> top_p -> min_p),
// distributions over many seeded draws, reproducibility, validation, logprob helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "engine/sampling.h"

namespace infercept {
namespace {

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> out;
  for (double v : p) out.push_back(static_cast<float>(std::log(v)));
  return out;
}

std::vector<int> histogram(Sampler& s, const std::vector<float>& logits, int draws) {
  std::vector<int> h(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++h[static_cast<size_t>(s.sample(logits, {}, {}))];
  return h;
}

// Pearson chi-square of observed counts against expected probabilities (zero-probability
// cells must be empty).
double chi_square(const std::vector<int>& h, const std::vector<double>& p, int draws) {
  double chi = 0.0;
  for (size_t i = 0; i < h.size(); ++i) {
    if (p[i] == 0.0) {
      EXPECT_EQ(h[i], 0) << "token " << i << " should never be drawn";
      continue;
    }
    const double e = p[i] * draws;
    chi += (h[i] - e) * (h[i] - e) / e;
  }
  return chi;
}

std::vector<double> normalized(std::vector<double> p) {
  double s = 0.0;
  for (double v : p) s += v;
  for (double& v : p) v /= s;
  return p;
}

SamplingParams params_with(float temperature, uint64_t seed = 1234) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

std::vector<float> random_logits(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

TEST(Sampling, ArgmaxLowestIndexOnTies) {
  EXPECT_EQ(argmax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{5.0f, 5.0f}), 0);
  EXPECT_EQ(argmax(std::vector<float>{NAN, 1.0f, NAN, 2.0f}), 3);
  const float ninf = -INFINITY;
  EXPECT_EQ(argmax(std::vector<float>{ninf, ninf}), 0);
}

TEST(Sampling, GreedyTiesLowestIndex) {
  Sampler s(params_with(0.0f), 0);
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 2.0f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(logits, {}, {}), 1);
}

TEST(Sampling, TinyTemperatureIsGreedy) {
  Sampler s(params_with(1e-7f), 0);
  auto logits = random_logits(1000, 3);
  EXPECT_EQ(s.sample(logits, {}, {}), argmax(logits));
}

TEST(Sampling, TemperatureOneMatchesSoftmax) {
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  Sampler s(params_with(1.0f), 0);
  const int draws = 40000;
  auto h = histogram(s, log_probs(p), draws);
  // 3 degrees of freedom: P(chi2 > 25) < 2e-5; a broken sampler lands in the thousands.
  EXPECT_LT(chi_square(h, p, draws), 25.0);
}

TEST(Sampling, TemperatureFlattensAndSharpens) {
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  for (float t : {0.5f, 2.0f}) {
    std::vector<double> q;
    for (double v : p) q.push_back(std::pow(v, 1.0 / t));
    q = normalized(q);
    Sampler s(params_with(t, 99), 0);
    const int draws = 40000;
    auto h = histogram(s, log_probs(p), draws);
    EXPECT_LT(chi_square(h, q, draws), 25.0) << "temperature " << t;
  }
}

TEST(Sampling, TopK1EqualsGreedy) {
  for (uint64_t seed = 0; seed < 5; ++seed) {
    auto logits = random_logits(5000, seed);
    SamplingParams p = params_with(1.5f, seed);
    p.top_k = 1;
    Sampler s(p, 0);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(logits, {}, {}), argmax(logits));
  }
}

TEST(Sampling, TopKRenormalizesOverTheK) {
  const std::vector<double> p = {0.1, 0.4, 0.2, 0.3};
  SamplingParams sp = params_with(1.0f);
  sp.top_k = 2;
  Sampler s(sp, 0);
  const int draws = 20000;
  auto h = histogram(s, log_probs(p), draws);
  EXPECT_LT(chi_square(h, {0.0, 0.4 / 0.7, 0.0, 0.3 / 0.7}, draws), 20.0);
}

TEST(Sampling, TopKLargerThanVocabIsOff) {
  const std::vector<double> p = {0.25, 0.25, 0.5};
  SamplingParams sp = params_with(1.0f);
  sp.top_k = 100;
  Sampler s(sp, 0);
  const int draws = 20000;
  auto h = histogram(s, log_probs(p), draws);
  EXPECT_LT(chi_square(h, p, draws), 20.0);
}

TEST(Sampling, TopPSmallKeepsOnlyTop) {
  auto logits = random_logits(50000, 7);
  SamplingParams sp = params_with(1.0f);
  sp.top_p = 0.01f;  // the top token of this row has more mass than that
  Sampler s(sp, 0);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits, {}, {}), argmax(logits));
}

TEST(Sampling, TopPKeepsSmallestPrefixReachingMass) {
  const std::vector<double> p = {0.05, 0.3, 0.5, 0.15};
  SamplingParams sp = params_with(1.0f);
  sp.top_p = 0.7f;  // 0.5 < 0.7 <= 0.5 + 0.3
  Sampler s(sp, 0);
  const int draws = 20000;
  auto h = histogram(s, log_probs(p), draws);
  EXPECT_LT(chi_square(h, {0.0, 0.3 / 0.8, 0.5 / 0.8, 0.0}, draws), 20.0);
}

TEST(Sampling, TopPOnLargeFlatVocab) {
  // 60000 equal logits land in one bucket that must be sorted; ties go to the lowest ids,
  // so top_p = 0.3 keeps ids [0, 18000).
  std::vector<float> logits(60000, 0.0f);
  SamplingParams sp = params_with(1.0f);
  sp.top_p = 0.3f;
  Sampler s(sp, 0);
  int32_t max_id = 0;
  for (int i = 0; i < 300; ++i) max_id = std::max(max_id, s.sample(logits, {}, {}));
  EXPECT_LE(max_id, 18000);
  EXPECT_GT(max_id, 15000);  // and it does use most of that range
}

TEST(Sampling, TopPAppliesAfterTopK) {
  const std::vector<double> p = {0.4, 0.3, 0.2, 0.1};
  SamplingParams sp = params_with(1.0f);
  sp.top_k = 2;     // keeps 0.4, 0.3 -> renormalized 0.571, 0.429
  sp.top_p = 0.5f;  // 0.571 >= 0.5: only the first survives
  Sampler s(sp, 0);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(log_probs(p), {}, {}), 0);
}

TEST(Sampling, MinP) {
  const std::vector<double> p = {0.15, 0.5, 0.05, 0.3};
  {
    SamplingParams sp = params_with(1.0f);
    sp.min_p = 0.2f;  // threshold 0.1: drops 0.05
    Sampler s(sp, 0);
    const int draws = 20000;
    auto h = histogram(s, log_probs(p), draws);
    EXPECT_LT(chi_square(h, {0.15 / 0.95, 0.5 / 0.95, 0.0, 0.3 / 0.95}, draws), 20.0);
  }
  {
    SamplingParams sp = params_with(1.0f);
    sp.min_p = 0.7f;  // threshold 0.35: only the best
    Sampler s(sp, 0);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(log_probs(p), {}, {}), 1);
  }
}

TEST(Sampling, RepetitionPenaltyDividesPositiveLogits) {
  std::vector<float> logits = {2.0f, 1.9f, -1.0f};
  SamplingParams sp = params_with(0.0f);
  sp.repetition_penalty = 1.2f;  // 2.0 / 1.2 = 1.67 < 1.9
  Sampler s(sp, 0);
  const std::vector<int32_t> prompt = {0, 0, 2};
  EXPECT_EQ(s.sample(logits, prompt, {}), 1);
  EXPECT_EQ(s.sample(logits, {}, prompt), 1);  // generated tokens count too
  EXPECT_EQ(s.sample(logits, {}, {}), 0);
}

TEST(Sampling, RepetitionPenaltyMultipliesNegativeLogits) {
  std::vector<float> logits = {-0.5f, -0.55f, -3.0f};
  SamplingParams sp = params_with(0.0f);
  sp.repetition_penalty = 1.2f;  // -0.5 * 1.2 = -0.6 < -0.55
  Sampler s(sp, 0);
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{0}, {}), 1);
  sp.repetition_penalty = 0.5f;  // < 1 favours repeats: -0.55 * 0.5 = -0.275 > -0.5
  Sampler s2(sp, 0);
  EXPECT_EQ(s2.sample(logits, std::vector<int32_t>{1}, {}), 1);
}

TEST(Sampling, PresenceAndFrequencyOnlyCountGenerated) {
  std::vector<float> logits = {2.0f, 1.0f, 0.0f};
  const std::vector<int32_t> three_zeros = {0, 0, 0};
  {
    SamplingParams sp = params_with(0.0f);
    sp.presence_penalty = 2.0f;
    Sampler s(sp, 0);
    EXPECT_EQ(s.sample(logits, three_zeros, {}), 0);  // prompt does not count
    EXPECT_EQ(s.sample(logits, {}, three_zeros), 1);  // 2 - 2 = 0 < 1
  }
  {
    SamplingParams sp = params_with(0.0f);
    sp.presence_penalty = 0.5f;  // once, not per occurrence: 1.5 > 1
    Sampler s(sp, 0);
    EXPECT_EQ(s.sample(logits, {}, three_zeros), 0);
  }
  {
    SamplingParams sp = params_with(0.0f);
    sp.frequency_penalty = 0.5f;  // per occurrence: 2 - 1.5 = 0.5 < 1
    Sampler s(sp, 0);
    EXPECT_EQ(s.sample(logits, {}, std::vector<int32_t>{0}), 0);  // 1.5 > 1
    EXPECT_EQ(s.sample(logits, {}, three_zeros), 1);
  }
  {
    SamplingParams sp = params_with(0.0f);
    sp.frequency_penalty = -1.0f;  // negative: encourage repeats
    Sampler s(sp, 0);
    EXPECT_EQ(s.sample(logits, {}, std::vector<int32_t>{2, 2, 2}), 2);  // 0 + 3 > 2
  }
}

TEST(Sampling, PenaltiesIgnoreOutOfRangeIds) {
  std::vector<float> logits = {1.0f, 2.0f};
  SamplingParams sp = params_with(0.0f);
  sp.repetition_penalty = 2.0f;
  sp.frequency_penalty = 1.0f;
  Sampler s(sp, 0);
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{-1, 5}, std::vector<int32_t>{7}), 1);
}

TEST(Sampling, GreedyWithPenaltiesMatchesTopK1) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto logits = random_logits(3000, seed + 100);
    std::vector<int32_t> prompt, gen;
    std::mt19937 g(static_cast<uint32_t>(seed));
    for (int i = 0; i < 30; ++i) prompt.push_back(static_cast<int32_t>(g() % 3000));
    for (int i = 0; i < 30; ++i) gen.push_back(static_cast<int32_t>(g() % 3000));
    prompt.push_back(argmax(logits));  // make sure the penalties can matter
    SamplingParams sp = params_with(0.0f, seed);
    sp.repetition_penalty = 1.3f;
    sp.presence_penalty = 0.4f;
    sp.frequency_penalty = 0.3f;
    Sampler greedy(sp, 0);
    sp.temperature = 0.8f;
    sp.top_k = 1;
    Sampler k1(sp, 0);
    EXPECT_EQ(greedy.sample(logits, prompt, gen), k1.sample(logits, prompt, gen));
  }
}

TEST(Sampling, SameSeedSameSequence) {
  auto logits = random_logits(32000, 5);
  for (float t : {0.3f, 1.0f}) {
    SamplingParams sp = params_with(t, 42);
    sp.top_p = 0.95f;
    sp.top_k = 50;
    Sampler a(sp, 0), b(sp, 0);
    std::vector<int32_t> sa, sb;
    for (int i = 0; i < 200; ++i) sa.push_back(a.sample(logits, {}, sa));
    // b is interleaved with an unrelated sampler: each request owns its generator.
    Sampler other(params_with(1.0f, 7), 0);
    for (int i = 0; i < 200; ++i) {
      other.sample(logits, {}, {});
      sb.push_back(b.sample(logits, {}, sb));
    }
    EXPECT_EQ(sa, sb);
  }
}

TEST(Sampling, SeedSelectsTheSequence) {
  auto logits = random_logits(1000, 9);
  for (auto& x : logits) x *= 0.1f;  // flat enough that draws vary
  auto run = [&](SamplingParams sp, uint64_t default_seed) {
    Sampler s(sp, default_seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.sample(logits, {}, {}));
    return out;
  };
  SamplingParams unseeded;
  EXPECT_EQ(run(unseeded, 11), run(unseeded, 11));
  EXPECT_NE(run(unseeded, 11), run(unseeded, 12));
  EXPECT_EQ(run(params_with(1.0f, 5), 11), run(params_with(1.0f, 5), 12));  // explicit wins
  EXPECT_NE(run(params_with(1.0f, 5), 0), run(params_with(1.0f, 6), 0));
}

TEST(Sampling, MaskedLogitsNeverDrawn) {
  const float ninf = -INFINITY;
  std::vector<float> logits = {ninf, 0.0f, ninf, 0.0f, NAN};
  Sampler s(params_with(1.0f), 0);
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(s.sample(logits, {}, {}));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3}));
}

TEST(Sampling, ValidateAcceptsDefaults) {
  EXPECT_TRUE(SamplingParams{}.validate().ok());
}

TEST(Sampling, ValidateNamesTheBadField) {
  auto expect_error = [](SamplingParams p, const std::string& field) {
    Status st = p.validate();
    ASSERT_FALSE(st.ok()) << field;
    EXPECT_NE(st.error().message.find(field), std::string::npos) << st.error().message;
  };
  SamplingParams p;
  p.temperature = -0.1f;
  expect_error(p, "temperature");
  p = {};
  p.temperature = NAN;
  expect_error(p, "temperature");
  p = {};
  p.top_k = -2;
  expect_error(p, "top_k");
  p = {};
  p.top_p = 0.0f;
  expect_error(p, "top_p");
  p.top_p = 1.5f;
  expect_error(p, "top_p");
  p = {};
  p.min_p = -0.1f;
  expect_error(p, "min_p");
  p.min_p = 1.1f;
  expect_error(p, "min_p");
  p = {};
  p.repetition_penalty = 0.0f;
  expect_error(p, "repetition_penalty");
  p = {};
  p.presence_penalty = 2.5f;
  expect_error(p, "presence_penalty");
  p = {};
  p.frequency_penalty = -3.0f;
  expect_error(p, "frequency_penalty");
  p = {};
  p.max_tokens = 0;
  expect_error(p, "max_tokens");
  p = {};
  p.stop = {"ok", ""};
  expect_error(p, "stop[1]");
  p = {};
  p.stop_token_ids = {3, -1};
  expect_error(p, "stop_token_ids[1]");

  p = {};
  p.top_k = -1;  // vLLM's "off"
  p.temperature = 0.0f;
  p.min_p = 1.0f;
  p.top_p = 1.0f;
  EXPECT_TRUE(p.validate().ok());
}

TEST(Sampling, LogSoftmaxAndTopLogprobs) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  double z = 0.0;
  for (float v : logits) z += std::exp(static_cast<double>(v));
  for (int32_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(log_softmax_at(logits, i), logits[static_cast<size_t>(i)] - std::log(z), 1e-5);
  }
  auto top = top_logprobs(logits, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 1);  // tie with 3: lowest id first
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 2);
  EXPECT_NEAR(top[2].logprob, log_softmax_at(logits, 2), 1e-6);
  EXPECT_EQ(top_logprobs(logits, 10).size(), 5u);
  EXPECT_TRUE(top_logprobs(logits, 0).empty());

  auto big = random_logits(50000, 1);
  auto all = top_logprobs(big, 50000);
  double mass = 0.0;
  for (const auto& t : all) mass += std::exp(static_cast<double>(t.logprob));
  EXPECT_NEAR(mass, 1.0, 1e-3);
  auto top20 = top_logprobs(big, 20);
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(top20[i].id, all[i].id);
  EXPECT_EQ(top20[0].id, argmax(big));
}

}  // namespace
}  // namespace infercept
