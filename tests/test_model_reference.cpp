// The forward pass against llama.cpp (tests/fixtures/reference_smollm2.json, made by
// scripts/make_reference.py with llama-cpp-python on the same GGUF file):
//   - greedy decoding, one token per step as a server decodes, follows llama.cpp's tokens
//     until a near-tie of llama.cpp's own logits; with CpuNumerics::llama_cpp
//     (every operation rounded as llama.cpp's CPU backend rounds) for 32+ tokens on at
//     least 20 of the 24 prompts, the target;
//   - the logits at every position (prompt and generated, teacher-forced in one prefill)
//     agree with llama.cpp's within kLogitTolerance.
//
// Why the tolerance is what it is: both engines quantize activations to 8 bits before
// every matmul (q8_1 for q4_1 weights, q8_0 for the q8_0 embedding) and keep K/V in f16,
// so neither computes the "exact" logits. Against an fp64 forward pass over the same
// dequantized weights, llama.cpp's logits differ by up to ~0.3 on this model (largest
// logits ~25), ours by a similar amount, in different directions. Two such independent
// roundings can add up; the bound below is the sum with margin. A real bug (wrong RoPE
// pairing, a missing norm, a transposed weight) moves logits by whole units and changes
// the argmax at most positions, which the token test catches first.
//
// llama.cpp is not stable at this level against itself either: the logits of one position
// move by 0.095 on average (0.55 at most) between evaluating the prompt in one batch and
// token by token. Greedy decoding therefore can only be compared up to the first near-tie:
// where llama.cpp's own top two logits are closer than kTieMargin, either choice is
// "correct", and after it the continuations are different texts. The token test checks
// that every early divergence happens at such a near-tie (docs/PERF.md gives the counts).
// Only with llama.cpp's own rounding everywhere do near-ties stop mattering (PERF.md 2.1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/packed_matmul.h"
#include "io/tensor_source.h"
#include "model/llama.h"
#include "test_util.h"

namespace infercept {
namespace {

// Bounds on |our logit - llama.cpp's logit| over all compared values (see above).
constexpr double kMeanLogitTolerance = 0.30;
constexpr float kMaxLogitTolerance = 2.5f;
constexpr double kP99LogitTolerance = 1.0;
// Below this top-2 gap, llama.cpp's own choice is within its rounding noise.
constexpr float kTieMargin = 1.0f;
constexpr int kMinMatchingTokens = 32;

struct Reference {
  nlohmann::json j;
  Reference() {
    j = nlohmann::json::parse(testing::read_file(testing::fixture_path("reference_smollm2.json")));
  }
};

const Reference& reference() {
  static Reference r;
  return r;
}

// Gap between llama.cpp's two largest logits at a position, from the fixture.
float reference_gap(const nlohmann::json& position) {
  const auto top = position["top_logits"].get<std::vector<float>>();
  return top[0] - top[1];
}

class ModelReference : public ::testing::Test {
 protected:
  void SetUp() override { load(); }

  void load(CpuNumerics numerics = CpuNumerics::fast) {
    auto src = open_model_source(testing::default_model_path());
    ASSERT_TRUE(src.ok()) << src.error().message;
    src_ = std::move(*src);
    model_.reset();
    kv_.reset();
    backend_ = make_cpu_backend(0, numerics);
    auto m = LlamaModel::create(*src_, *backend_, 512, 512);
    ASSERT_TRUE(m.ok()) << m.error().message;
    model_ = std::move(*m);
    const ModelConfig& c = src_->config();
    KvGeometry g{c.n_layers, 32, 16, c.n_kv_heads, c.head_dim, DType::f16};
    auto kv = backend_->create_kv_storage(g);
    ASSERT_TRUE(kv.ok());
    kv_ = std::move(*kv);
  }

  // Feeds tokens[from, to) for one sequence whose cache holds tokens[0, from); returns the
  // logits of every fed row when all_logits, else of the last.
  std::vector<float> feed(const std::vector<int32_t>& tokens, int64_t from, int64_t to,
                          bool all_logits) {
    StepInput in;
    for (int64_t p = from; p < to; ++p) {
      in.tokens.push_back(tokens[(size_t)p]);
      in.positions.push_back((int32_t)p);
      in.slots.push_back((int32_t)p);  // block table is the identity: slot == position
      if (all_logits) in.logit_rows.push_back((int32_t)(p - from));
    }
    if (!all_logits) in.logit_rows.push_back((int32_t)(to - from - 1));
    in.q_start = {0};
    in.q_len = {(int32_t)(to - from)};
    in.ctx_len = {(int32_t)to};
    in.max_blocks = 32;
    for (int32_t b = 0; b < 32; ++b) in.block_tables.push_back(b);
    const int64_t vocab = src_->config().vocab_size;
    std::vector<float> logits(in.logit_rows.size() * (size_t)vocab);
    model_->forward(in, *kv_, logits.data());
    return logits;
  }

  // Greedy decoding as the fixture was made (the prompt in one step, then one token per
  // step); returns how many prompts match llama.cpp for kMinMatchingTokens tokens or more.
  // Every earlier divergence must be at a near-tie of llama.cpp's own logits.
  int greedy_full_matches() {
    const auto& cases = reference().j["cases"];
    EXPECT_GE(cases.size(), 20u);
    const int64_t vocab = src_->config().vocab_size;
    int full_matches = 0;
    for (const auto& c : cases) {
      std::vector<int32_t> tokens = c["prompt_ids"].get<std::vector<int32_t>>();
      const size_t n_prompt = tokens.size();
      const auto expected = c["generated_ids"].get<std::vector<int32_t>>();
      int64_t fed = 0;
      size_t matching = 0;
      for (size_t i = 0; i < expected.size(); ++i) {
        auto logits = feed(tokens, fed, (int64_t)tokens.size(), false);
        fed = (int64_t)tokens.size();
        // The logits of this step against llama.cpp's of the same step (same tokens so far).
        const auto& pos = c["positions"][tokens.size() - 1];
        const auto top_ids = pos["top_ids"].get<std::vector<int32_t>>();
        const auto top_logits = pos["top_logits"].get<std::vector<float>>();
        for (size_t j = 0; j < top_ids.size(); ++j) {
          const double d = std::fabs(logits[(size_t)top_ids[j]] - top_logits[j]);
          step_diff_sum_ += d;
          step_diff_max_ = std::max(step_diff_max_, d);
          ++step_diff_n_;
        }
        const int32_t t =
            (int32_t)(std::max_element(logits.begin(), logits.begin() + vocab) - logits.begin());
        if (t != expected[i]) break;
        ++matching;
        tokens.push_back(t);
      }
      if (matching >= (size_t)kMinMatchingTokens) {
        ++full_matches;
        continue;
      }
      // Diverged early: legitimate only where llama.cpp itself was torn between two tokens,
      // closer than the two engines' rounding can separate.
      const float gap = reference_gap(c["positions"][n_prompt + matching - 1]);
      std::printf("  diverged after %zu tokens at a llama.cpp top-2 gap of %.3f: %s\n", matching,
                  gap, c["prompt"].get<std::string>().substr(0, 40).c_str());
      EXPECT_LT(gap, kTieMargin) << "prompt: " << c["prompt"].get<std::string>();
    }
    std::printf(
        "greedy steps' logits vs llama.cpp's (top 16 while the tokens agree): mean "
        "|diff| %.5f, max %.5f over %lld values\n",
        step_diff_sum_ / (double)std::max<int64_t>(1, step_diff_n_), step_diff_max_,
        (long long)step_diff_n_);
    return full_matches;
  }

  double step_diff_sum_ = 0, step_diff_max_ = 0;
  int64_t step_diff_n_ = 0;

  std::unique_ptr<ModelSource> src_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<KvStorage> kv_;
};

TEST_F(ModelReference, GreedyTokensMatchLlamaCppUntilANearTie) {
  const int full_matches = greedy_full_matches();
  std::printf("greedy: %d of %zu prompts match llama.cpp for %d+ tokens\n", full_matches,
              reference().j["cases"].size(), kMinMatchingTokens);
}

// With CpuNumerics::llama_cpp (`--cpu-numerics llama.cpp`; q4_1 products in llama.cpp's order,
// prompt rows' attention in its batched order), every operation of the forward pass rounds as
// llama.cpp's CPU backend does (docs/PERF.md 2), so greedy decoding follows llama.cpp token for
// token: the target is 20 of 24 prompts for 32+ tokens (24 measured). Needs the packed
// AVX512-VNNI kernels and AVX-512 attention.
TEST_F(ModelReference, GreedyTokensMatchLlamaCppInItsNumerics) {
  if (!packed_supported(DType::q4_1)) GTEST_SKIP() << "no AVX512-VNNI in this build";
  load(CpuNumerics::llama_cpp);
  const int full_matches = greedy_full_matches();
  std::printf("greedy, llama.cpp numerics: %d of %zu prompts match llama.cpp for %d+ tokens\n",
              full_matches, reference().j["cases"].size(), kMinMatchingTokens);
  EXPECT_GE(full_matches, 20);
}

TEST_F(ModelReference, TeacherForcedArgmaxMatchesExceptNearTies) {
  const auto& cases = reference().j["cases"];
  const int64_t vocab = src_->config().vocab_size;
  int64_t agree = 0, total = 0;
  for (const auto& c : cases) {
    std::vector<int32_t> tokens = c["prompt_ids"].get<std::vector<int32_t>>();
    for (int32_t t : c["generated_ids"].get<std::vector<int32_t>>()) tokens.push_back(t);
    auto logits = feed(tokens, 0, (int64_t)tokens.size(), true);
    for (size_t p = 0; p < tokens.size(); ++p) {
      const float* row = logits.data() + p * (size_t)vocab;
      const int32_t ours = (int32_t)(std::max_element(row, row + vocab) - row);
      const int32_t ref = c["positions"][p]["top_ids"][0].get<int32_t>();
      ++total;
      if (ours == ref) {
        ++agree;
        continue;
      }
      EXPECT_LT(reference_gap(c["positions"][p]), kTieMargin) << "position " << p;
    }
  }
  std::printf("teacher-forced argmax agrees at %lld of %lld positions\n", (long long)agree,
              (long long)total);
}

TEST_F(ModelReference, LogitsAtEveryPositionMatchLlamaCpp) {
  const auto& ref = reference().j;
  const auto fixed_ids = ref["fixed_ids"].get<std::vector<int32_t>>();
  const int64_t vocab = src_->config().vocab_size;
  std::vector<float> diffs;
  for (const auto& c : ref["cases"]) {
    std::vector<int32_t> tokens = c["prompt_ids"].get<std::vector<int32_t>>();
    for (int32_t t : c["generated_ids"].get<std::vector<int32_t>>()) tokens.push_back(t);
    const auto& positions = c["positions"];
    ASSERT_EQ(positions.size(), tokens.size());
    auto logits = feed(tokens, 0, (int64_t)tokens.size(), true);
    for (size_t p = 0; p < positions.size(); ++p) {
      const float* row = logits.data() + p * (size_t)vocab;
      const auto top_ids = positions[p]["top_ids"].get<std::vector<int32_t>>();
      const auto top_logits = positions[p]["top_logits"].get<std::vector<float>>();
      const auto fixed = positions[p]["fixed_logits"].get<std::vector<float>>();
      for (size_t i = 0; i < top_ids.size(); ++i)
        diffs.push_back(std::fabs(row[top_ids[i]] - top_logits[i]));
      for (size_t i = 0; i < fixed_ids.size(); ++i)
        diffs.push_back(std::fabs(row[fixed_ids[i]] - fixed[i]));
      for (float v : std::span<const float>(row, (size_t)vocab)) ASSERT_TRUE(std::isfinite(v));
    }
  }
  std::sort(diffs.begin(), diffs.end());
  double sum = 0;
  for (float d : diffs) sum += d;
  const double mean = sum / (double)diffs.size();
  const float p99 = diffs[diffs.size() * 99 / 100], worst = diffs.back();
  std::printf("logits vs llama.cpp: %zu values, mean |diff| %.4f, p99 %.4f, max %.4f\n",
              diffs.size(), mean, p99, worst);
  EXPECT_LE(mean, kMeanLogitTolerance);
  EXPECT_LE(p99, kP99LogitTolerance);
  EXPECT_LE(worst, kMaxLogitTolerance);
}

// --cpu-numerics takes the two names and nothing else (the message names the bad value).
TEST(CpuNumerics, ParsesTheTwoNamesAndRejectsOthers) {
  ASSERT_TRUE(parse_cpu_numerics("fast").ok());
  EXPECT_EQ(*parse_cpu_numerics("fast"), CpuNumerics::fast);
  ASSERT_TRUE(parse_cpu_numerics("llama.cpp").ok());
  EXPECT_EQ(*parse_cpu_numerics("llama.cpp"), CpuNumerics::llama_cpp);
  auto bad = parse_cpu_numerics("llamacpp");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'llamacpp'"), std::string::npos);
}

}  // namespace
}  // namespace infercept
