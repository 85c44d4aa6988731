// The engine end to end on the default model: batch invariance (a request yields the same
// tokens alone and inside a batch of 16 others), preemption under memory pressure (every
// request finishes, with the tokens it would have produced alone), stop conditions, and
// clear errors for bad requests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "engine_runs.h"
#include "test_util.h"

namespace infercept {
namespace {

// The block tables' width moves in powers of two (16 blocks up), never past what a sequence
// can hold (rounded to 16), and always holds the longest sequence.
TEST(Engine, BlockTableWidthMovesInPowersOfTwo) {
  EXPECT_EQ(block_table_width(0, 256), 16);
  EXPECT_EQ(block_table_width(1, 256), 16);
  EXPECT_EQ(block_table_width(16, 256), 16);
  EXPECT_EQ(block_table_width(17, 256), 32);
  EXPECT_EQ(block_table_width(100, 256), 128);
  EXPECT_EQ(block_table_width(129, 256), 256);
  EXPECT_EQ(block_table_width(256, 256), 256);
  EXPECT_EQ(block_table_width(150, 200), 208);  // the cap, 200 rounded up to 16
  EXPECT_EQ(block_table_width(300, 200), 304);  // never narrower than the longest
  int distinct = 0, last = -1;
  for (int32_t b = 1; b <= 256; ++b) {
    const int32_t w = block_table_width(b, 256);
    EXPECT_GE(w, b);
    if (w != last) ++distinct, last = w;
  }
  EXPECT_EQ(distinct, 5);  // 16, 32, 64, 128, 256 (16 widths before, one per 16 blocks)
}

EngineConfig base_config() {
  EngineConfig c;
  c.model_path = testing::default_model_path();
  c.check_invariants = true;
  return c;
}

std::unique_ptr<EngineCore> make_engine(const EngineConfig& c) {
  auto e = EngineCore::create(c);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
  return e.ok() ? std::move(*e) : nullptr;
}

using testing::run_all;

std::vector<std::string> varied_prompts() {
  return {"The capital of France is",
          "def fibonacci(n):\n    ",
          "Once upon a time, in a kingdom far away, there lived a",
          "1, 2, 3, 4, 5,",
          "The three laws of thermodynamics are",
          "Q: What is the boiling point of water?\nA:",
          "東京は日本の首都です。",
          "A KV cache stores the keys and values computed for previous tokens so that attention "
          "does not recompute them at every step. When a request pauses for a tool call, the "
          "server decides whether to keep, swap or drop its cache. The trade-off is",
          "SELECT name FROM users WHERE",
          "Dear team,\n\nI am writing to",
          "The quick brown fox",
          "In 1969, humans first",
          "Photosynthesis converts",
          "<html><body><h1>",
          "Rust's borrow checker ensures that",
          "The recipe calls for two cups of flour and",
          "Hi"};
}

TEST(Engine, BatchInvarianceSameTokensAloneAndInABatchOf17) {
  auto e = make_engine(base_config());
  ASSERT_TRUE(e);
  const auto prompts = varied_prompts();
  ASSERT_EQ(prompts.size(), 17u);
  auto make_req = [&](const std::string& p) {
    GenerateRequest r;
    r.prompt = e->tokenizer().encode(p, true, false);
    r.params.temperature = 0.0f;
    r.params.max_tokens = 24;
    r.params.ignore_eos = true;
    return r;
  };
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) {
    auto id = e->add_request(make_req(p));
    ASSERT_TRUE(id.ok());
    alone.push_back(run_all(*e)[*id]);
    ASSERT_EQ(alone.back().size(), 24u);
  }
  std::vector<uint64_t> ids;
  for (const auto& p : prompts) ids.push_back(*e->add_request(make_req(p)));
  auto together = run_all(*e);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(together[ids[i]], alone[i]) << "prompt " << i << ": " << prompts[i];
  EXPECT_EQ(e->allocator().n_held(), 0);  // nothing leaked (idle cached blocks are the cache's)
}

// Rows that need their logits on the host (logprobs, penalties) take only their own rows
// there: the plain greedy rows beside them are still drawn where the logits are (before, one
// such request sent every row of its steps to the host), and every request's tokens are those
// it yields alone.
TEST(Engine, LogprobsAndPenaltyRowsAloneGoToTheHost) {
  auto e = make_engine(base_config());
  ASSERT_TRUE(e);
  const auto prompts = varied_prompts();
  constexpr int kTokens = 16;
  auto make_req = [&](size_t i) {
    GenerateRequest r;
    r.prompt = e->tokenizer().encode(prompts[i], true, false);
    r.params.temperature = 0.0f;
    r.params.max_tokens = kTokens;
    r.params.ignore_eos = true;
    if (i == 1) r.logprobs = 2;
    if (i == 3) r.params.frequency_penalty = 0.5f;
    return r;
  };
  constexpr size_t kRequests = 5;
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < kRequests; ++i) {
    auto id = e->add_request(make_req(i));
    ASSERT_TRUE(id.ok()) << id.error().message;
    alone.push_back(run_all(*e)[*id]);
    ASSERT_EQ(alone.back().size(), (size_t)kTokens);
  }
  // Alone, exactly the two special requests' rows went to the host.
  ASSERT_EQ(e->stats().host_sampled_rows, 2 * kTokens);

  const int64_t host_before = e->stats().host_sampled_rows;
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < kRequests; ++i) ids.push_back(*e->add_request(make_req(i)));
  std::map<uint64_t, std::vector<int32_t>> together;
  std::map<uint64_t, size_t> logprob_entries;
  for (int guard = 0; e->has_work() && guard < 10000; ++guard)
    for (const RequestOutput& o : e->step()) {
      together[o.id].insert(together[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
      logprob_entries[o.id] += o.logprobs.size();
      if (o.id == ids[1]) {
        ASSERT_EQ(o.top_logprobs.size(), o.new_tokens.size());
        for (const auto& top : o.top_logprobs) EXPECT_EQ(top.size(), 2u);
      }
    }
  for (size_t i = 0; i < kRequests; ++i) EXPECT_EQ(together[ids[i]], alone[i]) << prompts[i];
  EXPECT_EQ(logprob_entries[ids[1]], (size_t)kTokens);
  EXPECT_EQ(logprob_entries[ids[0]], 0u);
  // The batched steps sent the same two requests' rows to the host, and no other row.
  EXPECT_EQ(e->stats().host_sampled_rows - host_before, 2 * kTokens);
  EXPECT_EQ(e->allocator().n_held(), 0);  // nothing leaked (idle cached blocks are the cache's)
}

// Preemption by recomputation (every policy but minwaste; minwaste with no host room too),
// and by swapping to the host tier (minwaste, when a copy costs less than recomputing).
class EnginePreemption : public ::testing::TestWithParam<std::string> {};

TEST_P(EnginePreemption, UnderMemoryPressureEveryRequestStillFinishesIdentically) {
  EngineConfig c = base_config();
  c.kv_cache_tokens = 192;  // 12 blocks: far less than 8 requests need at once
  c.max_tokens_per_step = 64;
  c.policy = GetParam();
  // The process id in the name: suites of other checkouts may run at the same time.
  c.step_trace_path = ::testing::TempDir() + "engine_step_trace_" + GetParam() + "_" +
                      std::to_string(::getpid()) + ".csv";
  auto e = make_engine(c);
  ASSERT_TRUE(e);
  const auto prompts = varied_prompts();
  auto make_req = [&](size_t i) {
    GenerateRequest r;
    r.prompt = e->tokenizer().encode(prompts[i], true, false);
    r.params.temperature = 0.0f;
    r.params.max_tokens = 40;
    r.params.ignore_eos = true;
    return r;
  };
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < 8; ++i) {
    auto id = e->add_request(make_req(i));
    ASSERT_TRUE(id.ok()) << id.error().message;
    alone.push_back(run_all(*e)[*id]);
  }
  const int64_t preemptions_before = e->stats().preemptions;
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < 8; ++i) ids.push_back(*e->add_request(make_req(i)));
  auto together = run_all(*e);
  EXPECT_GT(e->stats().preemptions, preemptions_before) << "the cache was meant to run out";
  if (GetParam() == "minwaste") {
    EXPECT_GT(e->stats().swap_preemptions, 0) << "the host tier had room: copies are cheaper";
    EXPECT_GT(e->stats().swapped_in_tokens, 0);
  } else {
    EXPECT_EQ(e->stats().swap_preemptions, 0);
    EXPECT_GT(e->stats().recomputed_tokens, 0);
  }
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(together[ids[i]], alone[i]) << prompts[i];
  EXPECT_EQ(e->allocator().n_held(), 0);  // nothing leaked (idle cached blocks are the cache's)
  EXPECT_EQ(e->host_allocator().n_held(), 0);

  // The step trace (what bench/trace_diff.py lays beside a simulation) adds up to the stats.
  const EngineStats st = e->stats();  // a copy: the engine goes next
  e.reset();                          // closes the trace
  const testing::StepTraceTotals t = testing::read_step_trace(c.step_trace_path);
  ASSERT_TRUE(t.ok) << t.error;
  EXPECT_TRUE(t.time_ordered);
  EXPECT_EQ(t.forward_rows, st.steps);
  EXPECT_NEAR(t.seconds, st.forward_seconds, 1e-3);
  EXPECT_EQ(t.prompt_rows, st.prompt_tokens_computed);
  EXPECT_EQ(t.preempted, st.preemptions);
  EXPECT_EQ(t.dropped_tokens, st.recomputed_tokens);
  EXPECT_EQ(t.swap_in_blocks * c.block_size, st.swapped_in_tokens);
  EXPECT_EQ(t.swap_out_blocks * c.block_size, st.swapped_out_tokens);
  EXPECT_LE(t.max_free_blocks, c.kv_cache_tokens / c.block_size);
  EXPECT_EQ(t.sampled_rows, st.decode_tokens);
  EXPECT_TRUE(t.chunk_context_consistent);
  EXPECT_GT(t.chunk_context_tokens, 0) << "recomputed and resumed chunks hold context";
  EXPECT_TRUE(t.longest_blocks_present);
  // The CPU backend replays nothing: every forward row says 0, the rest (no forward) -1.
  EXPECT_EQ(t.replayed_rows, 0);
  EXPECT_EQ(t.unknown_replay_rows, t.rows - t.forward_rows);
}

INSTANTIATE_TEST_SUITE_P(Policies, EnginePreemption, ::testing::Values("preserve", "minwaste"));

TEST(Engine, MaxTokensStopStringsAndStopTokens) {
  auto e = make_engine(base_config());
  ASSERT_TRUE(e);
  GenerateRequest r;
  r.prompt = e->tokenizer().encode("1, 2, 3, 4, 5,", true, false);
  r.params.temperature = 0.0f;
  r.params.max_tokens = 30;
  r.params.ignore_eos = true;
  // Greedy text without stops, to derive a stop string that must cut it.
  auto id = *e->add_request(r);
  std::string full;
  FinishReason fr = FinishReason::none;
  int64_t n_tokens = 0;
  while (e->has_work())
    for (auto& o : e->step()) {
      full += o.text;
      n_tokens += (int64_t)o.new_tokens.size();
      if (o.finished()) fr = o.finish;
    }
  (void)id;
  EXPECT_EQ(fr, FinishReason::length);
  EXPECT_EQ(n_tokens, 30);
  ASSERT_NE(full.find(" 8,"), std::string::npos) << full;

  r.params.stop = {" 8,"};
  e->add_request(r).value();
  std::string cut;
  while (e->has_work())
    for (auto& o : e->step()) {
      cut += o.text;
      if (o.finished()) fr = o.finish;
    }
  EXPECT_EQ(fr, FinishReason::stop);
  EXPECT_EQ(cut, full.substr(0, full.find(" 8,")));

  // The first generated token as a stop token ends the request after one token.
  r.params.stop.clear();
  const auto first = e->tokenizer().encode(full, false, false)[0];
  r.params.stop_token_ids = {first};
  e->add_request(r).value();
  n_tokens = 0;
  while (e->has_work())
    for (auto& o : e->step()) {
      n_tokens += (int64_t)o.new_tokens.size();
      if (o.finished()) fr = o.finish;
    }
  EXPECT_EQ(fr, FinishReason::stop);
  EXPECT_EQ(n_tokens, 1);
}

TEST(Engine, BadRequestsAreClearErrors) {
  EngineConfig c = base_config();
  c.kv_cache_tokens = 64;
  auto e = make_engine(c);
  ASSERT_TRUE(e);
  GenerateRequest empty;
  auto r1 = e->add_request(empty);
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.error().message.find("empty"), std::string::npos);

  GenerateRequest too_long;
  too_long.prompt.assign(100, 42);
  auto r2 = e->add_request(too_long);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error().message.find("100 tokens"), std::string::npos) << r2.error().message;

  GenerateRequest bad_id;
  bad_id.prompt = {1, 2, 999999};
  EXPECT_FALSE(e->add_request(bad_id).ok());

  GenerateRequest bad_params;
  bad_params.prompt = {1, 2, 3};
  bad_params.params.top_p = 0.0f;
  EXPECT_FALSE(e->add_request(bad_params).ok());
  EXPECT_FALSE(e->has_work());
}

TEST(Engine, MissingModelIsAnErrorNamingThePath) {
  EngineConfig c = base_config();
  c.model_path = "/nonexistent/model.gguf";
  auto e = EngineCore::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("/nonexistent/model.gguf"), std::string::npos);
}

TEST(Engine, ThreadedEngineStreamsToCallbacks) {
  auto core = make_engine(base_config());
  ASSERT_TRUE(core);
  auto prompt = core->tokenizer().encode("The capital of France is", true, false);
  Engine engine(std::move(core));
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> got;
  bool done = false;
  GenerateRequest r;
  r.prompt = prompt;
  r.params.temperature = 0.0f;
  r.params.max_tokens = 8;
  r.params.ignore_eos = true;
  auto id = engine.submit(r, [&](const RequestOutput& o) {
    std::lock_guard<std::mutex> lock(mu);
    got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
    if (o.finished()) {
      done = true;
      cv.notify_all();
    }
  });
  ASSERT_TRUE(id.ok());
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; }));
  EXPECT_EQ(got.size(), 8u);
}

// A step that only advances prefills is given up when a newcomer is announced
// (interrupt_step), never two in a row, and never one that samples: the requests still get
// exactly the tokens they get without interruptions, and the KV comes back whole.
TEST(Engine, InterruptedPrefillStepsChangeNoTokens) {
  EngineConfig c = base_config();
  c.long_prefill_tokens = 16;
  c.prefix_cache = false;  // the same prompts run again and must prefill again
  auto e = make_engine(c);
  ASSERT_TRUE(e);
  std::string text;
  for (const std::string& p : varied_prompts()) text += p + " ";
  auto make_req = [&](const std::string& p, int64_t max_tokens) {
    GenerateRequest r;
    r.prompt = e->tokenizer().encode(p, true, false);
    r.params.temperature = 0.0f;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    return r;
  };
  const GenerateRequest long_req = make_req(text, 6), short_req = make_req("Hi there", 40);
  ASSERT_GT((int64_t)long_req.prompt.size(), 8 * e->long_prefill_chunk());
  auto long_id = e->add_request(long_req);
  ASSERT_TRUE(long_id.ok());
  const std::vector<int32_t> long_alone = run_all(*e)[*long_id];
  auto short_id = e->add_request(short_req);
  ASSERT_TRUE(short_id.ok());
  const std::vector<int32_t> short_alone = run_all(*e)[*short_id];
  ASSERT_EQ(e->stats().interrupted_steps, 0);

  // Alone, announced before every step: every other step is given up.
  const int64_t steps0 = e->stats().steps;
  long_id = e->add_request(long_req);
  std::map<uint64_t, std::vector<int32_t>> got;
  for (int guard = 0; e->has_work() && guard < 10000; ++guard) {
    e->interrupt_step();
    for (const RequestOutput& o : e->step())
      got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
  }
  EXPECT_EQ(got[*long_id], long_alone);
  const int64_t prefill_steps =
      ((int64_t)long_req.prompt.size() + e->long_prefill_chunk() - 1) / e->long_prefill_chunk() - 1;
  EXPECT_EQ(e->stats().interrupted_steps, prefill_steps);   // each prefill step once
  EXPECT_EQ(e->stats().steps - steps0, prefill_steps + 6);  // then ran, as the decode steps
  EXPECT_GT(e->stats().interrupted_seconds, 0.0);

  // Beside a decoding request: its steps sample, so none of them is given up.
  const int64_t interrupted0 = e->stats().interrupted_steps;
  short_id = e->add_request(short_req);
  e->step();  // the short prompt's prefill
  long_id = e->add_request(long_req);
  got.clear();
  for (int guard = 0; e->has_work() && guard < 10000; ++guard) {
    e->interrupt_step();
    for (const RequestOutput& o : e->step())
      got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
  }
  EXPECT_EQ(got[*long_id], long_alone);
  EXPECT_EQ(got[*short_id].size() + 1, short_alone.size());  // one before the loop
  EXPECT_TRUE(std::equal(got[*short_id].begin(), got[*short_id].end(), short_alone.begin() + 1));
  // Once the short one finished, the long prefill's remaining steps were given up as above.
  EXPECT_LT(e->stats().interrupted_steps - interrupted0, prefill_steps);
  EXPECT_EQ(e->allocator().n_held(), 0);  // nothing leaked (idle cached blocks are the cache's)

  // Turned off: nothing is given up.
  c.interrupt_prefill = false;
  auto off = make_engine(c);
  ASSERT_TRUE(off);
  long_id = off->add_request(long_req);
  got.clear();
  for (int guard = 0; off->has_work() && guard < 10000; ++guard) {
    off->interrupt_step();
    for (const RequestOutput& o : off->step())
      got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
  }
  EXPECT_EQ(got[*long_id], long_alone);
  EXPECT_EQ(off->stats().interrupted_steps, 0);
}

// The threaded engine announces short newcomers itself: a short request submitted while a
// long prompt prefills gets its tokens, and so does the long one, as alone.
TEST(Engine, ShortRequestDuringALongPrefillOnTheThreadedEngine) {
  EngineConfig c = base_config();
  c.long_prefill_tokens = 16;
  auto core = make_engine(c);
  ASSERT_TRUE(core);
  std::string text;
  for (const std::string& p : varied_prompts()) text += p + " ";
  auto make_req = [&](const std::string& p, int64_t max_tokens) {
    GenerateRequest r;
    r.prompt = core->tokenizer().encode(p, true, false);
    r.params.temperature = 0.0f;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    return r;
  };
  const GenerateRequest long_req = make_req(text + text, 4), short_req = make_req("Hi there", 4);
  std::vector<int32_t> long_alone, short_alone;
  {
    auto id = core->add_request(long_req);
    long_alone = run_all(*core)[*id];
    id = core->add_request(short_req);
    short_alone = run_all(*core)[*id];
  }
  Engine engine(std::move(core));
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<int32_t>> got;
  int finished = 0;
  auto cb = [&](const RequestOutput& o) {
    std::lock_guard<std::mutex> lock(mu);
    got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    if (o.finished()) {
      ++finished;
      cv.notify_all();
    }
  };
  auto long_id = engine.submit(long_req, cb);
  ASSERT_TRUE(long_id.ok());
  std::vector<uint64_t> short_ids;
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    auto id = engine.submit(short_req, cb);
    ASSERT_TRUE(id.ok());
    short_ids.push_back(*id);
  }
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return finished == 4; }));
  EXPECT_EQ(got[*long_id], long_alone);
  for (uint64_t id : short_ids) EXPECT_EQ(got[id], short_alone);
}

// Device selection errors are values with a clear message, never a crash: an unknown
// device, a malformed cuda:N, and a GPU-only sizing flag on the CPU.
TEST(Engine, DeviceSelectionErrorsAreClear) {
  EngineConfig c = base_config();
  c.device = "tpu";
  auto e = EngineCore::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("unknown --device 'tpu'"), std::string::npos)
      << e.error().message;
  c.device = "cuda:x";
  e = EngineCore::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("cuda:N"), std::string::npos) << e.error().message;
  c.device = "cpu";
  c.gpu_memory_utilization = 0.9;
  e = EngineCore::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("needs a GPU"), std::string::npos) << e.error().message;
  // Where CUDA cannot be had (no GPU here, or a build without it) the error names CUDA.
  c.gpu_memory_utilization = 0.0;
  c.device = "cuda";
  auto g = EngineCore::create(c);
  if (!g.ok()) {
    EXPECT_NE(g.error().message.find("CUDA"), std::string::npos) << g.error().message;
  }
}

}  // namespace
}  // namespace infercept
