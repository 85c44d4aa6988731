// The engine over tensor-parallel ranks (EngineConfig::tensor_parallel_size, CPU backend):
// the scheduler and the policies are the same, and every rank moves its share of each block
// (swaps on preemption and around a paused request's tool call). What a request generates
// does not depend on what it is batched with or on where its KV went in between, as with one
// rank; and against one rank the tokens agree as far as the reordered sums allow.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/random_checkpoint.h"
#include "engine_runs.h"
#include "test_util.h"

#include <unistd.h>

namespace infercept {
namespace {

EngineConfig config(int tp, const std::string& policy) {
  EngineConfig c;
  c.model_path = testing::default_model_path();
  c.check_invariants = true;
  c.tensor_parallel_size = tp;
  c.n_threads = 3;
  c.policy = policy;
  return c;
}

using testing::run_all;

GenerateRequest greedy(const EngineCore& e, const std::string& text, int32_t max_tokens) {
  GenerateRequest r;
  r.prompt = e.tokenizer().encode(text, true, false);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

const std::vector<std::string> kPrompts = {"The capital of France is",
                                           "def fibonacci(n):\n    ",
                                           "1, 2, 3, 4, 5,",
                                           "The three laws of thermodynamics are",
                                           "SELECT name FROM users WHERE",
                                           "Dear team,\n\nI am"};

// Six requests with a 12-block cache: minwaste preempts by swapping, every rank copying its
// share of the KV heads out and back; each request's tokens are those it generates alone.
TEST(EngineTensorParallel, ThreeRanksUnderPressureSwapAndKeepEveryToken) {
  EngineConfig c = config(3, "minwaste");
  c.kv_cache_tokens = 192;
  c.max_tokens_per_step = 64;
  auto e = EngineCore::create(c);
  ASSERT_TRUE(e.ok()) << e.error().message;
  std::vector<std::vector<int32_t>> alone;
  for (const std::string& p : kPrompts) {
    auto id = (*e)->add_request(greedy(**e, p, 32));
    ASSERT_TRUE(id.ok()) << id.error().message;
    alone.push_back(run_all(**e)[*id]);
  }
  std::vector<uint64_t> ids;
  for (const std::string& p : kPrompts) ids.push_back(*(*e)->add_request(greedy(**e, p, 32)));
  auto together = run_all(**e);
  EXPECT_GT((*e)->stats().swap_preemptions, 0) << "the cache was meant to run out";
  EXPECT_GT((*e)->stats().swapped_in_tokens, 0);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(together[ids[i]], alone[i]) << kPrompts[i];
  EXPECT_EQ((*e)->allocator().n_held(), 0);
  EXPECT_EQ((*e)->host_allocator().n_held(), 0);

  // Against one rank: the same tokens, but for a near-tie that the reordered sums may tip
  // (the default model quantizes activations to q8 blocks): most of them, from the start.
  auto one = EngineCore::create(config(1, "minwaste"));
  ASSERT_TRUE(one.ok()) << one.error().message;
  size_t same_prefix = 0, total = 0;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    auto id = (*one)->add_request(greedy(**one, kPrompts[i], 32));
    const std::vector<int32_t> ref = run_all(**one)[*id];
    size_t k = 0;
    while (k < ref.size() && k < alone[i].size() && ref[k] == alone[i][k]) ++k;
    same_prefix += k;
    total += ref.size();
    EXPECT_GE(k, 4u) << kPrompts[i];
  }
  std::printf("3 ranks against 1: %zu of %zu tokens before the first difference\n", same_prefix,
              total);
  EXPECT_GE(same_prefix * 10, total * 7);
}

// On a bf16 checkpoint (f32 activations, no q8 rounding) the sums' order moves logits by
// ~1e-5 of their range: over 2 ranks the tokens are those of one, request for request.
TEST(EngineTensorParallel, TwoRanksOfABf16CheckpointGenerateWhatOneDoes) {
  auto shape = find_llama_shape("qwen2-tiny");
  ASSERT_TRUE(shape.ok());
  const std::string dir = ::testing::TempDir() + "/tp_engine_" + std::to_string(getpid());
  RandomCheckpointOptions o;
  o.shape = *shape;
  o.out_dir = dir;
  o.tokenizer_source = testing::default_model_path();
  o.n_threads = 2;
  ASSERT_TRUE(write_random_checkpoint(o).ok());
  std::vector<std::vector<int32_t>> out[2];
  for (int tp : {1, 2}) {
    EngineConfig c = config(tp, "minwaste");
    c.model_path = dir;
    c.kv_cache_tokens = 1024;
    auto e = EngineCore::create(c);
    ASSERT_TRUE(e.ok()) << e.error().message;
    std::vector<uint64_t> ids;
    for (const std::string& p : kPrompts) ids.push_back(*(*e)->add_request(greedy(**e, p, 24)));
    auto got = run_all(**e);
    for (uint64_t id : ids) out[tp - 1].push_back(got[id]);
  }
  EXPECT_EQ(out[1], out[0]);
  std::filesystem::remove_all(dir);
}

// A paused request's KV swapped to the host (the swap policy) and back, on every rank: the
// resumed request continues exactly as when its KV stayed on the device (preserve).
TEST(EngineTensorParallel, PausedKvSwappedOutAndBackOnEveryRank) {
  std::vector<int32_t> runs[2];
  int64_t swapped[2] = {0, 0};
  const char* policies[2] = {"preserve", "swap"};
  for (int k = 0; k < 2; ++k) {
    auto e = EngineCore::create(config(3, policies[k]));
    ASSERT_TRUE(e.ok()) << e.error().message;
    GenerateRequest r = greedy(**e, "1, 2, 3, 4, 5,", 24);
    ScriptedInterception pause;
    pause.after_generated = 8;
    pause.tool = "calc";
    r.script.push_back(pause);
    auto id = (*e)->add_request(r);
    ASSERT_TRUE(id.ok()) << id.error().message;
    bool paused = false;
    for (int i = 0; i < 200 && (*e)->has_work(); ++i)
      for (const RequestOutput& o : (*e)->step()) {
        runs[k].insert(runs[k].end(), o.new_tokens.begin(), o.new_tokens.end());
        paused = paused || o.intercepted;
      }
    ASSERT_TRUE(paused);
    for (int i = 0; i < 3; ++i) (*e)->step();  // the policy moves the paused KV
    ASSERT_TRUE((*e)->resume(*id, {28, 29}).ok());
    for (int i = 0; i < 200 && (*e)->has_work(); ++i)
      for (const RequestOutput& o : (*e)->step())
        runs[k].insert(runs[k].end(), o.new_tokens.begin(), o.new_tokens.end());
    swapped[k] = (*e)->stats().swapped_out_tokens;
    EXPECT_EQ((*e)->stats().recomputed_tokens, 0) << policies[k];
    EXPECT_EQ((*e)->allocator().n_held(), 0);
  }
  EXPECT_EQ(swapped[0], 0);
  EXPECT_GT(swapped[1], 0) << "the swap policy moved nothing";
  EXPECT_EQ(runs[1], runs[0]);
  EXPECT_GE(runs[0].size(), 24u);
}

TEST(EngineTensorParallel, WhatCannotRunIsAClearError) {
  // 9 query heads do not split over 2 ranks.
  auto two = EngineCore::create(config(2, "minwaste"));
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.error().message.find("query heads (9)"), std::string::npos) << two.error().message;
  EngineConfig cuda = config(3, "minwaste");
  cuda.device = "cuda";
  auto on_cuda = EngineCore::create(cuda);
  ASSERT_FALSE(on_cuda.ok());
  // (No GPU here: the first rank's device is refused, or the build has no CUDA backend.)
  EXPECT_NE(on_cuda.error().message.find("CUDA"), std::string::npos) << on_cuda.error().message;
  auto zero = EngineCore::create(config(0, "minwaste"));
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("--tensor-parallel-size"), std::string::npos);
}

}  // namespace
}  // namespace infercept
