// Interception end to end on the default model: requests pause for tools several times,
// tool results are appended, generation goes on. With greedy decoding, what a request
// generates after each resume must be token for token the same under every policy, and the
// same as one uninterrupted run whose prompt is the full context so far. The KV cache is
// kept small so that swaps, discards and preemptions really happen.
#include <gtest/gtest.h>

#include <map>

#include "engine/engine.h"
#include "interception_scripts.h"
#include "test_util.h"

namespace infercept {
namespace {

using namespace testing;

class InterceptionPolicies : public ::testing::TestWithParam<std::string> {};

TEST_P(InterceptionPolicies, SameTokensAsAnUninterruptedRunUnderMemoryPressure) {
  static const std::vector<Generated> ref = reference(scripts());
  const std::string policy = GetParam();
  // 10 blocks of 16 tokens for 11 requests of 25-45 tokens: they cannot all stay.
  auto e = EngineCore::create(config_for(policy, "oracle", 160));
  ASSERT_TRUE(e.ok()) << e.error().message;
  EngineStats st;
  auto got = run_scripts(**e, scripts(), /*hints=*/true, &st);
  for (size_t i = 0; i < ref.size(); ++i)
    for (size_t k = 0; k < ref[i].size(); ++k)
      EXPECT_EQ(got[i][k], ref[i][k]) << policy << ": script " << i << " segment " << k;
  EXPECT_EQ(st.interceptions, 23);
  EXPECT_EQ(st.resumes, st.interceptions);
  std::printf(
      "%s: %lld interceptions, %lld preemptions, %lld recomputed tokens, %lld swapped out, "
      "%lld swapped in, decisions discard/swap/preserve %lld/%lld/%lld\n",
      policy.c_str(), (long long)st.interceptions, (long long)st.preemptions,
      (long long)st.recomputed_tokens, (long long)st.swapped_out_tokens,
      (long long)st.swapped_in_tokens, (long long)st.discard_decisions,
      (long long)st.swap_decisions, (long long)st.preserve_decisions);
  if (policy == "swap") {
    EXPECT_GT(st.swapped_out_tokens, 0);
  }
  if (policy == "discard" || policy == "improved-discard") {
    EXPECT_GT(st.recomputed_tokens, 0);
  }
  if (policy == "minwaste") {
    EXPECT_GT(st.swapped_out_tokens + st.recomputed_tokens, 0);
  }
  EXPECT_EQ((*e)->allocator().n_held(), 0);  // nothing leaked (idle cached blocks are the cache's)
  EXPECT_EQ((*e)->host_allocator().n_held(), 0);
}

INSTANTIATE_TEST_SUITE_P(All, InterceptionPolicies,
                         ::testing::Values("discard", "improved-discard", "preserve", "swap", "ttl",
                                           "minwaste"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(Interception, ToolCallSyntaxAndStringsPauseAndErrorsAreClear) {
  auto e = EngineCore::create(config_for("minwaste", "learned", 1024));
  ASSERT_TRUE(e.ok()) << e.error().message;
  GenerateRequest r;
  r.prompt = (*e)->tokenizer().encode("1, 2, 3, 4, 5,", true, false);
  r.params.temperature = 0.0f;
  r.params.max_tokens = 30;
  r.params.ignore_eos = true;
  r.intercept_strings = {" 7,"};
  auto id = *(*e)->add_request(r);
  bool paused = false;
  std::string tool;
  for (int i = 0; i < 100 && (*e)->has_work() && !paused; ++i)
    for (auto& o : (*e)->step())
      if (o.intercepted) {
        paused = true;
        tool = o.tool;
      }
  ASSERT_TRUE(paused);
  EXPECT_EQ(tool, " 7,");
  EXPECT_FALSE((*e)->has_work());
  EXPECT_FALSE((*e)->resume(id + 100, {1}).ok());  // unknown id
  EXPECT_FALSE((*e)->resume(id, {-5}).ok());       // bad token
  ASSERT_TRUE((*e)->resume(id, {28}).ok());
  EXPECT_FALSE((*e)->resume(id, {28}).ok());  // not paused any more
  while ((*e)->has_work()) (*e)->step();
  EXPECT_EQ((*e)->allocator().n_held(), 0);  // nothing leaked (idle cached blocks are the cache's)

  // A token marked as an interception pauses the request right after it is sampled.
  GenerateRequest rt = r;
  rt.intercept_strings.clear();
  rt.intercept_token_ids = {(*e)->tokenizer().encode(" 6", false, false)[0]};
  auto id2 = *(*e)->add_request(rt);
  std::string tool2;
  for (int i = 0; i < 100 && (*e)->has_work() && tool2.empty(); ++i)
    for (auto& o : (*e)->step())
      if (o.intercepted) tool2 = o.tool;
  EXPECT_EQ(tool2, "token:" + std::to_string(rt.intercept_token_ids[0]));
  ASSERT_TRUE((*e)->release(id2).ok());  // KV dropped, tokens kept
  ASSERT_TRUE((*e)->resume(id2, {28}).ok());
  bool finished = false;
  for (int i = 0; i < 200 && !finished; ++i)
    for (auto& o : (*e)->step()) {
      if (o.intercepted) {
        ASSERT_TRUE((*e)->resume(o.id, {28}).ok());  // the token came again
      }
      finished = finished || o.finished();
    }
  EXPECT_TRUE(finished);
  EXPECT_EQ((*e)->allocator().n_held(), 0);  // nothing leaked (idle cached blocks are the cache's)
}

}  // namespace
}  // namespace infercept
