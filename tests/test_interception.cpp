// Interception end to end on the default model: requests pause for tools several times,
// tool results are appended, generation goes on. With greedy decoding, what a request
// generates after each resume must be token for token the same under every policy, and the
// same as one uninterrupted run whose prompt is the full context so far. The KV cache is
// kept small so that swaps, discards and preemptions really happen.
#include <gtest/gtest.h>

#include <map>

#include "engine/engine.h"
#include "test_util.h"

namespace infercept {
namespace {

struct Script {
  std::string prompt;
  std::vector<int> generate;       // tokens to generate before each pause (last: then finish)
  std::vector<std::string> tools;  // tool per pause
  std::vector<std::string> results;  // tool result text per pause
  std::vector<int> wait_steps;     // engine steps the tool takes
};

std::vector<Script> scripts() {
  return {
      {"The capital of France is", {6, 5, 6}, {"search", "calc"}, {" Result: Paris.", " 42"}, {3, 1}},
      {"def add(a, b):\n", {8, 4, 5}, {"python", "python"}, {"\n>>> 3", "\n>>> ok"}, {5, 2}},
      {"Question: what is 17 * 3?\nThought:", {5, 5, 4}, {"calculator", "calculator"}, {" 51", " done"}, {1, 1}},
      {"Once upon a time", {7, 6, 6, 3}, {"human", "human", "human"}, {" Go on.", " And then?", " End."}, {8, 4, 6}},
      {"Search the web for the tallest mountain.", {4, 6, 5}, {"search", "search"}, {" Everest, 8849 m.", " Nepal."}, {6, 3}},
      {"List three colors:", {6, 4, 4}, {"image", "tts"}, {" [image]", " [audio]"}, {10, 2}},
      {"Translate 'cat' to French:", {3, 5, 5}, {"dict", "dict"}, {" chat", " le chat"}, {2, 7}},
      {"The weather today is", {5, 5, 5}, {"weather", "weather"}, {" 21C sunny", " 18C"}, {4, 4}},
      {"SELECT * FROM users", {6, 3, 4}, {"sql", "sql"}, {" 3 rows", " 0 rows"}, {3, 9}},
      {"A haiku about rain:", {7, 4, 6}, {"review", "review"}, {" good", " better"}, {5, 5}},
      {"Step 1: open the door. Step 2:", {6, 6, 6}, {"env", "env"}, {" You see a key.", " The door opens."}, {1, 2}},
  };
}

CostModel test_cost_model() {
  CostModel c;
  c.t_fwd_samples = {{1, 0.01}, {64, 0.012}, {512, 0.06}};
  c.kv_bytes_per_token = 2.0 * 30 * 3 * 64 * 2;  // SmolLM2-135M, f16
  c.swap_bytes_per_second = 2e8;                  // ~87 tokens per 10 ms step
  c.saturation_tokens = 64;
  return c;
}

EngineConfig config_for(const std::string& policy, const std::string& estimator,
                        int64_t kv_tokens) {
  EngineConfig c;
  c.model_path = testing::default_model_path();
  c.check_invariants = true;
  c.policy = policy;
  c.estimator = estimator;
  c.kv_cache_tokens = kv_tokens;
  c.swap_space_tokens = 512;
  c.max_tokens_per_step = 64;
  c.cost_model = test_cost_model();
  return c;
}

using Generated = std::vector<std::vector<int32_t>>;  // per segment

// Runs every script concurrently through its pauses; returns generated tokens per segment.
std::vector<Generated> run_scripts(EngineCore& e, const std::vector<Script>& ss, bool hints,
                                   EngineStats* stats_out) {
  struct Live {
    uint64_t id;
    size_t seg = 0;
    int resume_in = -1;
    bool done = false;
  };
  std::vector<Generated> out(ss.size());
  std::vector<Live> live;
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < ss.size(); ++i) {
    GenerateRequest r;
    r.prompt = e.tokenizer().encode(ss[i].prompt, true, false);
    r.params.temperature = 0.0f;
    r.params.ignore_eos = true;
    int total = 0;
    for (int g : ss[i].generate) total += g;
    r.params.max_tokens = total;
    for (size_t k = 0; k + 1 < ss[i].generate.size(); ++k) {
      ScriptedInterception si;
      si.after_generated = ss[i].generate[k];
      si.tool = ss[i].tools[k];
      if (hints) si.hint = 30.0;  // a long pause: worth moving or dropping under pressure
      r.script.push_back(si);
    }
    auto id = e.add_request(std::move(r));
    EXPECT_TRUE(id.ok()) << id.error().message;
    live.push_back({*id});
    index[*id] = i;
    out[i].resize(ss[i].generate.size());
  }
  for (int guard = 0; guard < 20000; ++guard) {
    bool all_done = true;
    for (Live& l : live) {
      all_done = all_done && l.done;
      if (l.resume_in > 0 && --l.resume_in == 0) {
        const size_t i = index[l.id];
        auto toks = e.tokenizer().encode(ss[i].results[l.seg - 1], false, false);
        Status st = e.resume(l.id, toks);
        EXPECT_TRUE(st.ok()) << st.error().message;
      }
    }
    if (all_done) break;
    for (const RequestOutput& o : e.step()) {
      Live& l = live[index[o.id]];
      auto& seg = out[index[o.id]][l.seg];
      seg.insert(seg.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.intercepted) {
        l.seg++;
        l.resume_in = ss[index[o.id]].wait_steps[l.seg - 1];
      }
      if (o.finished()) l.done = true;
    }
  }
  for (const Live& l : live) EXPECT_TRUE(l.done);
  if (stats_out) *stats_out = e.stats();
  return out;
}

// The reference: for each segment, an uninterrupted greedy run whose prompt is the whole
// context so far (prompt + earlier segments + tool results).
std::vector<Generated> reference(const std::vector<Script>& ss) {
  auto e = EngineCore::create(config_for("preserve", "elapsed", 4096));
  EXPECT_TRUE(e.ok());
  std::vector<Generated> out(ss.size());
  for (size_t i = 0; i < ss.size(); ++i) {
    std::vector<int32_t> ctx = (*e)->tokenizer().encode(ss[i].prompt, true, false);
    for (size_t k = 0; k < ss[i].generate.size(); ++k) {
      GenerateRequest r;
      r.prompt = ctx;
      r.params.temperature = 0.0f;
      r.params.ignore_eos = true;
      r.params.max_tokens = ss[i].generate[k];
      auto id = (*e)->add_request(std::move(r));
      std::vector<int32_t> gen;
      while ((*e)->has_work())
        for (auto& o : (*e)->step()) gen.insert(gen.end(), o.new_tokens.begin(), o.new_tokens.end());
      out[i].push_back(gen);
      ctx.insert(ctx.end(), gen.begin(), gen.end());
      if (k < ss[i].results.size()) {
        auto res = (*e)->tokenizer().encode(ss[i].results[k], false, false);
        ctx.insert(ctx.end(), res.begin(), res.end());
      }
      (void)id;
    }
  }
  return out;
}

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
  std::printf("%s: %lld interceptions, %lld preemptions, %lld recomputed tokens, %lld swapped out, "
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
  EXPECT_EQ((*e)->allocator().n_free(), (*e)->allocator().n_blocks());
  EXPECT_EQ((*e)->host_allocator().n_free(), (*e)->host_allocator().n_blocks());
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
  EXPECT_FALSE((*e)->resume(id + 100, {1}).ok());       // unknown id
  EXPECT_FALSE((*e)->resume(id, {-5}).ok());            // bad token
  ASSERT_TRUE((*e)->resume(id, {28}).ok());
  EXPECT_FALSE((*e)->resume(id, {28}).ok());            // not paused any more
  while ((*e)->has_work()) (*e)->step();
  EXPECT_EQ((*e)->allocator().n_free(), (*e)->allocator().n_blocks());

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
  EXPECT_EQ((*e)->allocator().n_free(), (*e)->allocator().n_blocks());
}

}  // namespace
}  // namespace infercept
