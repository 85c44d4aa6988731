// Interception scripts shared by the CPU test (tests/test_interception.cpp) and the CUDA
// one (tests/gpu/): requests that pause for tools several times, tool results appended,
// and the uninterrupted reference runs they are compared with.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>

#include "engine/engine.h"
#include "test_util.h"

namespace infercept::testing {

struct Script {
  std::string prompt;
  std::vector<int> generate;         // tokens to generate before each pause (last: then finish)
  std::vector<std::string> tools;    // tool per pause
  std::vector<std::string> results;  // tool result text per pause
  std::vector<int> wait_steps;       // engine steps the tool takes
};

inline std::vector<Script> scripts() {
  return {
      {"The capital of France is",
       {6, 5, 6},
       {"search", "calc"},
       {" Result: Paris.", " 42"},
       {3, 1}},
      {"def add(a, b):\n", {8, 4, 5}, {"python", "python"}, {"\n>>> 3", "\n>>> ok"}, {5, 2}},
      {"Question: what is 17 * 3?\nThought:",
       {5, 5, 4},
       {"calculator", "calculator"},
       {" 51", " done"},
       {1, 1}},
      {"Once upon a time",
       {7, 6, 6, 3},
       {"human", "human", "human"},
       {" Go on.", " And then?", " End."},
       {8, 4, 6}},
      {"Search the web for the tallest mountain.",
       {4, 6, 5},
       {"search", "search"},
       {" Everest, 8849 m.", " Nepal."},
       {6, 3}},
      {"List three colors:", {6, 4, 4}, {"image", "tts"}, {" [image]", " [audio]"}, {10, 2}},
      {"Translate 'cat' to French:", {3, 5, 5}, {"dict", "dict"}, {" chat", " le chat"}, {2, 7}},
      {"The weather today is", {5, 5, 5}, {"weather", "weather"}, {" 21C sunny", " 18C"}, {4, 4}},
      {"SELECT * FROM users", {6, 3, 4}, {"sql", "sql"}, {" 3 rows", " 0 rows"}, {3, 9}},
      {"A haiku about rain:", {7, 4, 6}, {"review", "review"}, {" good", " better"}, {5, 5}},
      {"Step 1: open the door. Step 2:",
       {6, 6, 6},
       {"env", "env"},
       {" You see a key.", " The door opens."},
       {1, 2}},
  };
}

inline CostModel test_cost_model() {
  CostModel c;
  c.t_fwd_samples = {{1, 0.01}, {64, 0.012}, {512, 0.06}};
  c.kv_bytes_per_token = 2.0 * 30 * 3 * 64 * 2;  // SmolLM2-135M, f16
  c.swap_bytes_per_second = 2e8;                 // ~87 tokens per 10 ms step
  c.saturation_tokens = 64;
  return c;
}

inline EngineConfig config_for(const std::string& policy, const std::string& estimator,
                               int64_t kv_tokens, const std::string& device = "cpu") {
  EngineConfig c;
  c.device = device;
  // INFERCEPT_TEST_MODEL: another checkpoint (a GPU box without the default model).
  const char* m = std::getenv("INFERCEPT_TEST_MODEL");
  c.model_path = m && *m ? m : testing::default_model_path();
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
// `after_step` (optional) runs after every engine step.
inline std::vector<Generated> run_scripts(EngineCore& e, const std::vector<Script>& ss, bool hints,
                                          EngineStats* stats_out,
                                          const std::function<void()>& after_step = {}) {
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
    if (after_step) after_step();
  }
  for (const Live& l : live) EXPECT_TRUE(l.done);
  if (stats_out) *stats_out = e.stats();
  return out;
}

// The reference: for each segment, an uninterrupted greedy run whose prompt is the whole
// context so far (prompt + earlier segments + tool results).
inline std::vector<Generated> reference(const std::vector<Script>& ss,
                                        const std::string& device = "cpu",
                                        int tensor_parallel_size = 1) {
  EngineConfig c = config_for("preserve", "elapsed", 4096, device);
  c.tensor_parallel_size = tensor_parallel_size;
  if (tensor_parallel_size > 1) c.n_threads = tensor_parallel_size;
  auto e = EngineCore::create(c);
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
        for (auto& o : (*e)->step())
          gen.insert(gen.end(), o.new_tokens.begin(), o.new_tokens.end());
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

}  // namespace infercept::testing
