// EngineCore::continue_paused: a new request takes over a paused one, keeping the KV of
// their common prefix wherever the policy put it (device, host, or nowhere), and generates
// exactly what a fresh request with the same prompt generates (greedy). The KV cache is
// small so that the policies really swap and discard; invariants are checked every step.
#include <gtest/gtest.h>

#include <map>

#include "engine/engine.h"
#include "test_util.h"

namespace infercept {
namespace {

CostModel cost_model() {
  CostModel c;
  c.t_fwd_samples = {{1, 0.01}, {64, 0.012}, {512, 0.06}};
  c.kv_bytes_per_token = 2.0 * 30 * 3 * 64 * 2;
  c.swap_bytes_per_second = 2e8;
  c.saturation_tokens = 64;
  return c;
}

EngineConfig config(const std::string& policy, int64_t kv_tokens) {
  EngineConfig c;
  c.model_path = testing::default_model_path();
  c.check_invariants = true;
  c.policy = policy;
  c.kv_cache_tokens = kv_tokens;
  c.swap_space_tokens = 512;
  c.max_tokens_per_step = 64;
  c.cost_model = cost_model();
  return c;
}

GenerateRequest greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

// Runs until every listed request finished; returns their generated tokens.
std::map<uint64_t, std::vector<int32_t>> run(EngineCore& e,
                                             std::map<uint64_t, std::vector<int32_t>> out) {
  size_t finished = 0;
  for (int i = 0; i < 2000 && finished < out.size(); ++i)
    for (const RequestOutput& o : e.step()) {
      if (out.count(o.id) == 0) continue;
      out[o.id].insert(out[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.finished()) ++finished;
      EXPECT_FALSE(o.intercepted);
    }
  EXPECT_EQ(finished, out.size());
  return out;
}

// What a fresh request generates, on a roomy engine of its own (one for the whole test).
std::vector<int32_t> fresh_run(const std::vector<int32_t>& prompt, int max_tokens) {
  static std::unique_ptr<EngineCore> ref = [] {
    EngineConfig c = config("preserve", 4096);
    c.prefix_cache = false;  // the reference computes every prompt itself
    auto e = EngineCore::create(c);
    EXPECT_TRUE(e.ok());
    return std::move(*e);
  }();
  const uint64_t id = *ref->add_request(greedy(prompt, max_tokens));
  return run(*ref, {{id, {}}})[id];
}

TEST(ContinuePaused, EveryPolicyEveryDivergenceMatchesAFreshRequest) {
  const std::vector<std::string> texts = {"The capital of France is", "def add(a, b):\n",
                                          "Once upon a time, in a land far away,",
                                          "Question: what is 17 * 3?\nThought:"};
  for (const std::string policy : {"preserve", "swap", "discard", "minwaste"}) {
    SCOPED_TRACE(policy);
    auto made = EngineCore::create(config(policy, 160));  // tight: 10 blocks of 16
    ASSERT_TRUE(made.ok()) << made.error().message;
    EngineCore& e = **made;
    // Requests pause after 6 tokens; a waiting request adds memory pressure meanwhile.
    std::vector<uint64_t> ids;
    std::map<uint64_t, std::vector<int32_t>> tokens;
    for (const std::string& t : texts) {
      GenerateRequest r = greedy(e.tokenizer().encode(t, true, false), 20);
      r.script.push_back({6, "tool", std::nullopt});
      ids.push_back(*e.add_request(r));
      tokens[ids.back()] = r.prompt;
    }
    size_t paused = 0;
    for (int i = 0; i < 500 && paused < ids.size(); ++i)
      for (const RequestOutput& o : e.step()) {
        tokens[o.id].insert(tokens[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
        if (o.intercepted) ++paused;
      }
    ASSERT_EQ(paused, ids.size());
    const uint64_t pressure =
        *e.add_request(greedy(e.tokenizer().encode("Count to ten:", true, false), 40));
    for (int i = 0; i < 10; ++i) e.step();  // the policy acts on the paused requests

    // Each paused request is continued by a prompt that parts from its tokens at a
    // different place: past the end, inside the generated part, inside the prompt.
    const std::vector<int32_t> tail = e.tokenizer().encode(" Result: 42. So", false, false);
    std::map<uint64_t, std::vector<int32_t>> prompts;
    for (size_t k = 0; k < ids.size(); ++k) {
      const std::vector<int32_t>& t = tokens[ids[k]];
      const int64_t n_prompt = (int64_t)t.size() - 6;
      const size_t cut = k == 0   ? t.size()
                         : k == 1 ? (size_t)n_prompt + 3
                         : k == 2 ? (size_t)n_prompt - 2
                                  : 1;
      std::vector<int32_t> p(t.begin(), t.begin() + (ptrdiff_t)cut);
      p.insert(p.end(), tail.begin(), tail.end());
      prompts[ids[k]] = p;
      int64_t computed = 0;  // the paused request's KV, where the policy left it
      for (const Sequence* q : e.scheduler().paused())
        if (q->id == ids[k]) computed = q->n_computed;
      auto reused = e.continue_paused(ids[k], greedy(p, 8));
      ASSERT_TRUE(reused.ok()) << reused.error().message;
      EXPECT_LE(*reused, (int64_t)cut);
      if (std::string(policy) == "preserve") {
        // All of the common prefix but the last prompt token, except that a cut inside a
        // full block (the prefix cache holds it) gives that block up: the next token would
        // be written into it.
        const int64_t B = e.config().block_size;
        int64_t keep = std::min<int64_t>({(int64_t)cut, (int64_t)p.size() - 1, computed});
        if (keep % B != 0 && keep / B < computed / B) keep -= keep % B;
        EXPECT_EQ(*reused, keep);
      }
    }
    EXPECT_FALSE(e.continue_paused(ids[0], greedy(tail, 4)).ok());  // not paused any more
    EXPECT_FALSE(e.continue_paused(12345, greedy(tail, 4)).ok());   // unknown
    std::map<uint64_t, std::vector<int32_t>> want;
    for (uint64_t id : ids) want[id] = {};
    want[pressure] = {};
    auto got = run(e, want);
    for (uint64_t id : ids) EXPECT_EQ(got[id], fresh_run(prompts[id], 8)) << "request " << id;
    EXPECT_EQ(e.allocator().n_held(), 0);  // what is not free is the cache's, idle
    EXPECT_EQ(e.allocator().n_free() + e.allocator().n_idle_cached(), e.allocator().n_blocks());
    EXPECT_EQ(e.host_allocator().n_held(), 0);
  }
}

TEST(ContinuePaused, PausesAtTheEndOfATurnWithToolCallsAndTakesNewParameters) {
  auto made = EngineCore::create(config("preserve", 2048));
  ASSERT_TRUE(made.ok());
  EngineCore& e = **made;
  // The turn is forced to start inside a call (an earlier exchange shows the format); the
  // model finishes the call and ends its turn.
  std::vector<ChatMessage> chat = {
      {"user", "What is the weather in London?", {}, "", ""},
      {"assistant", "", {{"call_1", "get_weather", R"({"city": "London"})"}}, "", ""},
      {"tool", R"({"temperature": 12, "sky": "rain"})", {}, "call_1", ""},
      {"assistant", "It is 12 degrees and raining in London.", {}, "", ""},
      {"user", "What is the weather in Paris?", {}, "", ""}};
  auto prompt =
      e.encode_chat(chat, {{"get_weather", "Get the weather in a city",
                            R"({"type": "object", "properties": {"city": {"type": "string"}}})"}});
  ASSERT_TRUE(prompt.ok());
  const std::string prefix = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
  std::vector<int32_t> p = *prompt;
  const auto forced = e.tokenizer().encode(prefix, false, true);
  p.insert(p.end(), forced.begin(), forced.end());
  GenerateRequest r = greedy(p, 40);
  r.params.ignore_eos = false;
  r.pause_at_tool_turn_end = true;
  r.turn_prefix = prefix;
  r.logprobs = 2;
  r.tool_duration_hints["get_weather"] = 1.5;
  const uint64_t id = *e.add_request(r);
  bool paused = false;
  for (int i = 0; i < 100 && !paused; ++i)
    for (const RequestOutput& o : e.step()) {
      ASSERT_EQ(o.logprobs.size(), o.new_tokens.size());
      ASSERT_EQ(o.top_logprobs.size(), o.new_tokens.size());
      if (!o.top_logprobs.empty()) {
        EXPECT_EQ(o.top_logprobs[0].size(), 2u);
      }
      if (o.intercepted) {
        paused = true;
        EXPECT_EQ(o.tool, "get_weather");
        EXPECT_TRUE(e.tokenizer().is_eog(o.new_tokens.back()));  // paused at the end of the turn
      }
      ASSERT_FALSE(o.finished()) << "the turn should pause, not finish ("
                                 << finish_reason_name(o.finish) << ", last token '"
                                 << e.tokenizer().token_to_bytes(o.new_tokens.back(), true) << "')";
    }
  ASSERT_TRUE(paused);
  ASSERT_EQ(e.scheduler().paused().size(), 1u);
  ASSERT_TRUE(e.scheduler().paused()[0]->interception->hint.has_value());
  EXPECT_DOUBLE_EQ(*e.scheduler().paused()[0]->interception->hint, 1.5);
  ASSERT_TRUE(e.set_interception_hint(id, 3.0).ok());
  EXPECT_DOUBLE_EQ(*e.scheduler().paused()[0]->interception->hint, 3.0);
  // Continued with a stop string and no tool triggers: it finishes normally.
  std::vector<int32_t> next = p;
  next.push_back(e.tokenizer().encode("x", false, false)[0]);
  GenerateRequest c = greedy(next, 4);
  const int64_t computed = e.scheduler().paused()[0]->n_computed, B = e.config().block_size;
  auto reused = e.continue_paused(id, c);
  ASSERT_TRUE(reused.ok());
  // The prompt, and the forced call, were all in place; a cut inside a full block (the
  // prefix cache holds it) gives that block up, the next token would be written into it.
  const auto n = (int64_t)p.size();
  EXPECT_EQ(*reused, n % B != 0 && n / B < computed / B ? n - n % B : n);
  auto got = run(e, {{id, {}}});
  EXPECT_EQ(got[id].size(), 4u);
  EXPECT_EQ(e.allocator().n_held(), 0);  // nothing leaked (idle cached blocks are the cache's)
}

}  // namespace
}  // namespace infercept
