// The step terms of the cost model (CostModel::step_seconds: T_fwd(x) plus the context a step
// reads, its sequences past the first, its sampled rows past the first): what each term
// adds, that a model without them is T_fwd alone and its JSON unchanged, that a model with
// them round-trips, that tensor parallelism scales the device terms only, that the built-in
// H200 7B profile reproduces the decode steps it was fitted to, and that the simulator's
// clock charges them.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/simulator.h"
#include "sched/cost_model.h"

namespace infercept {
namespace {

// T_fwd(x) = 10 ms + 0.1 ms * x, exact everywhere.
CostModel linear() {
  CostModel c;
  c.t_fwd_samples = {{1, 0.0101}, {4096, 0.010 + 0.0001 * 4096}};
  c.kv_bytes_per_token = 1000.0;
  c.swap_bytes_per_second = 1e9;
  c.saturation_tokens = 64;
  return c;
}

double tf(int64_t x) {
  return 0.010 + 0.0001 * (double)x;
}

StepShape shape(int64_t x, int64_t context, int64_t sequences, int64_t sampled) {
  StepShape s;
  s.query_tokens = x;
  s.context_tokens = context;
  s.sequences = sequences;
  s.sampled_rows = sampled;
  return s;
}

TEST(StepCost, WithoutTermsAStepIsTfwdAlone) {
  const CostModel c = linear();
  EXPECT_FALSE(c.has_step_terms());
  for (const StepShape& s :
       {shape(1, 0, 1, 1), shape(32, 32 * 1024, 32, 32), shape(512, 9000, 7, 3)})
    EXPECT_DOUBLE_EQ(c.step_seconds(s), c.t_fwd(s.query_tokens));
  EXPECT_EQ(c.step_seconds(shape(0, 5000, 3, 0)), 0.0);  // nothing to run costs nothing
}

TEST(StepCost, EachTermAddsItsPrice) {
  CostModel c = linear();
  c.context_samples = {{1, 2e-7}};  // a constant
  c.sequence_seconds = 3e-5;
  c.sample_seconds_per_row = 1e-5;
  EXPECT_TRUE(c.has_step_terms());
  // 32 decode rows at context 1,024: 32,768 tokens read, 31 more sequences, 31 more rows.
  EXPECT_NEAR(c.step_seconds(shape(32, 32768, 32, 32)),
              tf(32) + 32768 * 2e-7 + 31 * 3e-5 + 31 * 1e-5, 1e-12);
  // One sequence, one sampled row, no context: exactly what T_fwd measured.
  EXPECT_DOUBLE_EQ(c.step_seconds(shape(100, 0, 1, 1)), tf(100));
  // Longer contexts cost more by exactly a per token, whatever else the step holds.
  EXPECT_NEAR(c.step_seconds(shape(8, 8 * 3000, 8, 8)) - c.step_seconds(shape(8, 8 * 1000, 8, 8)),
              8 * 2000 * 2e-7, 1e-12);
  // A chunk that samples nothing does not earn a negative row term.
  EXPECT_NEAR(c.step_seconds(shape(64, 0, 1, 0)), tf(64), 1e-12);
}

TEST(StepCost, AFileWithoutTermsLoadsAndWritesAsBefore) {
  // The profiler's cache as it was written before the step terms existed.
  const CostModel old = linear();
  const std::string text = old.to_json();
  EXPECT_EQ(text.find("context_seconds_per_token"), std::string::npos);
  EXPECT_EQ(text.find("sequence_seconds"), std::string::npos);
  auto back = CostModel::from_json(text, "old.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(back->context_samples.empty());
  EXPECT_EQ(back->context_seconds_per_token(8), 0.0);
  EXPECT_EQ(back->sequence_seconds, 0.0);
  EXPECT_EQ(back->sample_seconds_per_row, 0.0);
  EXPECT_EQ(back->to_json(), text);
  EXPECT_DOUBLE_EQ(back->step_seconds(shape(16, 16000, 16, 16)), back->t_fwd(16));
}

TEST(StepCost, AFileWithTermsRoundTrips) {
  CostModel c = linear();
  c.context_samples = {{1, 5.87e-7}, {8, 3.32e-7}, {32, 1.9234567891e-7}};
  c.sequence_seconds = 3.3e-5;
  c.sample_seconds_per_row = 1.95e-5;
  auto back = CostModel::from_json(c.to_json(), "with.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->context_samples, c.context_samples);  // doubles survive exactly
  EXPECT_EQ(back->sequence_seconds, c.sequence_seconds);
  EXPECT_EQ(back->sample_seconds_per_row, c.sample_seconds_per_row);
  EXPECT_EQ(back->to_json(), c.to_json());
  // A constant (what the profiler measures) is written and read as a plain number.
  CostModel k = linear();
  k.context_samples = {{1, 4.2e-7}};
  EXPECT_NE(k.to_json().find("\"context_seconds_per_token\": 4.2e-07"), std::string::npos);
  auto kb = CostModel::from_json(k.to_json(), "k.json");
  ASSERT_TRUE(kb.ok());
  EXPECT_EQ(kb->context_samples, k.context_samples);
  EXPECT_EQ(kb->context_seconds_per_token(64), 4.2e-7);
}

// a(n) interpolates linearly between its samples in the step's sequences and stays flat
// outside them, like T_fwd(x) in tokens below the first sample.
TEST(StepCost, ContextCostFollowsTheSequencesInTheStep) {
  CostModel c = linear();
  c.context_samples = {{1, 6e-7}, {4, 4e-7}, {32, 2e-7}};
  EXPECT_EQ(c.context_seconds_per_token(1), 6e-7);
  EXPECT_EQ(c.context_seconds_per_token(0), 6e-7);
  EXPECT_NEAR(c.context_seconds_per_token(2), 6e-7 - 2e-7 / 3.0, 1e-18);
  EXPECT_NEAR(c.context_seconds_per_token(18), 3e-7, 1e-18);
  EXPECT_EQ(c.context_seconds_per_token(500), 2e-7);
  // 2 sequences reading 1,000 cached tokens each against 32 reading the same each.
  EXPECT_NEAR(c.step_seconds(shape(2, 2000, 2, 2)), tf(2) + 2000 * c.context_seconds_per_token(2),
              1e-12);
  EXPECT_NEAR(c.step_seconds(shape(32, 32000, 32, 32)), tf(32) + 32000 * 2e-7, 1e-12);
}

TEST(StepCost, BadTermsAreRejected) {
  for (double bad : {-1e-7, std::nan(""), (double)INFINITY}) {
    CostModel c = linear();
    c.sequence_seconds = bad;
    EXPECT_FALSE(c.validate().ok()) << bad;
    c = linear();
    c.context_samples = {{1, bad}};
    EXPECT_FALSE(c.validate().ok()) << bad;
  }
  CostModel c = linear();
  c.context_samples = {{4, 1e-7}, {2, 1e-7}};  // not ascending
  EXPECT_FALSE(c.validate().ok());
  c.context_samples = {{0, 1e-7}};
  EXPECT_FALSE(c.validate().ok());
  auto text = R"({"t_fwd_samples": [[1, 0.02]], "kv_bytes_per_token": 2,
                  "swap_bytes_per_second": 3, "context_seconds_per_token": "fast"})";
  EXPECT_FALSE(CostModel::from_json(text, "x").ok());
  text = R"({"t_fwd_samples": [[1, 0.02]], "kv_bytes_per_token": 2,
             "swap_bytes_per_second": 3, "context_seconds_per_token": -1})";
  EXPECT_FALSE(CostModel::from_json(text, "x").ok());
  text = R"({"t_fwd_samples": [[1, 0.02]], "kv_bytes_per_token": 2,
             "swap_bytes_per_second": 3, "context_seconds_per_token": [[1.5, 1e-7]]})";
  EXPECT_FALSE(CostModel::from_json(text, "x").ok());
}

TEST(StepCost, TensorParallelismScalesTheDeviceTermsOnly) {
  CostModel c = linear();
  c.context_samples = {{1, 2e-7}, {8, 1e-7}};
  c.sequence_seconds = 3e-5;
  c.sample_seconds_per_row = 1e-5;
  const CostModel two = scale_cost_model(c, 2, 0.9);
  EXPECT_NEAR(two.context_seconds_per_token(1), 2e-7 / 1.8, 1e-18);
  EXPECT_NEAR(two.context_seconds_per_token(8), 1e-7 / 1.8, 1e-18);
  EXPECT_NEAR(two.sequence_seconds, 3e-5 / 1.8, 1e-15);
  EXPECT_EQ(two.sample_seconds_per_row, 1e-5);  // the host's work
}

// The built-in 7B profile against the decode steps it was measured from (docs/bench/step-context3:
// bench-forward on the H200 with the engine of 2026-12-03, greedy on the device, step ms at
// each batch and context, every sequence of a step at the same context). The built-in
// carries D(n) x 0.9744 and a(n) x 1.6068, the scales the step traces of the seed-11
// paper runs gave them (docs/BENCHMARKS.md, "The simulator against the engine": the batches
// of a real run hold sequences of mixed contexts, whose attention reads the context less
// evenly), so undone, a decode-only step of n sequences at context c is D(n) / 0.9744 + a(n) /
// 1.6068 * n * c within 2.5% of every measured step (the per-batch fit's worst was 2.1%, at 64
// sequences).
TEST(StepCost, BuiltinProfileReproducesTheMeasuredDecodeSteps) {
  auto p = load_sim_profile("h200-llama2-7b");
  ASSERT_TRUE(p.ok());
  const CostModel& c = p->cost;
  EXPECT_TRUE(c.has_step_terms());
  struct Measured {
    int64_t n, context;
    double step_ms;
  };
  const Measured measured[] = {
      {1, 3072, 4.572},   {2, 2048, 5.103},   {3, 256, 5.485},
      {4, 2048, 6.652},   {8, 1024, 7.069},   {12, 3072, 11.040},
      {16, 3072, 14.129}, {32, 1024, 10.707}, {64, 2048, 26.604},
  };
  for (const Measured& m : measured) {
    const StepShape s = shape(m.n, m.n * m.context, m.n, m.n);
    ASSERT_TRUE(s.decode_only());
    const double measured_terms = c.t_decode(m.n) / 0.9744 + c.context_seconds_per_token(m.n) /
                                                                 1.6068 * (double)(m.n * m.context);
    EXPECT_NEAR(measured_terms * 1e3, m.step_ms, 0.025 * m.step_ms) << m.n << " x " << m.context;
    // The built-in prices the same step with the scales (what the simulator's clock charges).
    EXPECT_NEAR(c.step_seconds(s),
                c.t_decode(m.n) + c.context_seconds_per_token(m.n) * (double)(m.n * m.context),
                1e-12);
  }
  // Longer contexts cost more by exactly a(n) per token.
  const StepShape short_ctx = shape(32, 32 * 1024, 32, 32);
  const StepShape long_ctx = shape(32, 32 * 3072, 32, 32);
  EXPECT_NEAR(c.step_seconds(long_ctx) - c.step_seconds(short_ctx),
              32 * 2048 * c.context_seconds_per_token(32), 1e-12);
  // Since the split-context decode attention the price per context token hardly depends on
  // the batch (0.15-0.18 us), where the first CUDA engine read it ~3x slower at 1-2 sequences.
  EXPECT_LT(c.context_seconds_per_token(1), 1.3 * c.context_seconds_per_token(64));
}

// The simulator's clock: two requests that run side by side pay the per-sequence term on
// every shared step, and the context term on what each held before the step.
TEST(StepCost, SimulatorChargesSequencesAndContext) {
  SimConfig cfg;
  cfg.cost = linear();
  cfg.cost.sequence_seconds = 1e-3;
  cfg.cost.context_samples = {{1, 1e-6}};
  cfg.kv_cache_tokens = 4096;
  cfg.swap_space_tokens = 4096;
  cfg.duration_s = 10.0;
  cfg.check_invariants = true;
  std::vector<TraceRequest> trace(2);
  for (int i = 0; i < 2; ++i) {
    trace[i].id = i;
    trace[i].arrival_s = 0.0;
    trace[i].augmentation = "test";
    trace[i].prompt_tokens = 100;
    trace[i].segments = {{3, "", 0.0, 0}};
  }
  auto res = simulate(cfg, trace);
  ASSERT_TRUE(res.ok()) << res.error().message;
  ASSERT_EQ(res->records.size(), 2u);
  // Both prompts in one step (200 rows, 2 sequences, nothing cached before), then two decode
  // steps of 2 rows reading 2 x 100 and 2 x 101 cached tokens.
  const double expected = (tf(200) + 1e-3) + (tf(2) + 1e-3 + 200e-6) + (tf(2) + 1e-3 + 202e-6);
  for (const RequestRecord& r : res->records) {
    ASSERT_TRUE(r.completed);
    EXPECT_NEAR(r.end_s, expected, 1e-9);
  }
  EXPECT_EQ(res->stats.steps, 3);
}

StepShape with_chunks(StepShape s, std::vector<StepChunk> chunks) {
  s.chunks = std::move(chunks);
  return s;
}

// D(n) prices a decode-only step (every sequence one row: what the engine replays from a
// CUDA graph); a step with a chunk keeps T_fwd(x) of its rows.
TEST(StepCost, DecodeOnlyStepsTakeTheirOwnCurve) {
  CostModel c = linear();
  c.context_samples = {{1, 4e-7}};
  c.decode_samples = {{1, 0.004}, {2, 0.0045}, {32, 0.006}};
  EXPECT_TRUE(c.has_step_terms());
  EXPECT_EQ(c.t_decode(1), 0.004);
  EXPECT_NEAR(c.t_decode(17), 0.00525, 1e-15);
  EXPECT_EQ(c.t_decode(64), 0.006);  // flat outside the samples
  EXPECT_EQ(c.t_decode(0), 0.0);
  // 4 decode rows at context 1,000: D(4) plus the context at a(n), not T_fwd(4).
  EXPECT_NEAR(c.step_seconds(shape(4, 4000, 4, 4)), c.t_decode(4) + 4000 * 4e-7, 1e-12);
  // The same step with one sequence computing 3 rows (a resume of 2 returned tokens): T_fwd.
  EXPECT_NEAR(c.step_seconds(with_chunks(shape(6, 4000, 4, 4), {{3, 1000}})), tf(6) + 4000 * 4e-7,
              1e-12);
  // Without decode samples t_decode is T_fwd.
  EXPECT_EQ(linear().t_decode(8), tf(8));
}

// p(rows) is a step function of the chunk's rows (the kernel that serves it), and replaces
// a(n) for that chunk's context only; chunks below the first sample pay a(n).
TEST(StepCost, PrefillChunksPayTheirOwnContextPrice) {
  CostModel c = linear();
  c.context_samples = {{1, 4e-7}, {32, 2e-7}};
  c.chunk_context_samples = {{9, 6.5e-6}, {64, 1.35e-6}};
  EXPECT_EQ(c.chunk_seconds_per_token(9, 3), 6.5e-6);
  EXPECT_EQ(c.chunk_seconds_per_token(63, 3), 6.5e-6);
  EXPECT_EQ(c.chunk_seconds_per_token(64, 3), 1.35e-6);
  EXPECT_EQ(c.chunk_seconds_per_token(512, 3), 1.35e-6);
  EXPECT_EQ(c.chunk_seconds_per_token(8, 1), c.context_seconds_per_token(1));  // decode-like
  EXPECT_EQ(c.chunk_seconds_per_token(3, 32), c.context_seconds_per_token(32));
  // 3 decode rows at context 800 beside a 51-row chunk over 2,000 cached tokens, 4 sequences.
  const double a = c.context_seconds_per_token(4);
  const StepShape s = with_chunks(shape(54, 3 * 800 + 2000, 4, 4), {{51, 2000}});
  EXPECT_NEAR(c.step_seconds(s), tf(54) + a * 2400 + 6.5e-6 * 2000, 1e-12);
  // A decode row at 1,000, a 512-row chunk over 1,500 and a 5-row one over 700: each chunk
  // pays for its own context, the 5-row one a(n) like the decode row.
  const StepShape two = with_chunks(shape(518, 1000 + 1500 + 700, 3, 3), {{512, 1500}, {5, 700}});
  EXPECT_NEAR(c.step_seconds(two), tf(518) + c.context_seconds_per_token(3) * 1700 + 1.35e-6 * 1500,
              1e-12);
  // A first chunk (nothing cached) costs T_fwd alone, whatever its price per token.
  EXPECT_DOUBLE_EQ(c.step_seconds(with_chunks(shape(512, 0, 1, 1), {{512, 0}})), tf(512));
  // Without chunk samples the chunk's context is read at a(n), as before the term existed.
  CostModel old = c;
  old.chunk_context_samples.clear();
  EXPECT_NEAR(old.step_seconds(s), tf(54) + a * 4400, 1e-12);
}

// q prices a chunk's rows x context (its attention FLOPs) on top of p(rows): a 100-row chunk
// pays a fifth of a 500-row one's share over the same context; lone rows never pay it.
TEST(StepCost, ChunkRowsTimesContextTerm) {
  CostModel c = linear();
  c.context_samples = {{1, 4e-7}};
  c.chunk_context_samples = {{9, 2e-7}};
  c.chunk_row_context_seconds = 4e-9;
  const double a = c.context_seconds_per_token(3);
  const StepShape big = with_chunks(shape(501, 1000 + 2000, 2, 2), {{500, 2000}});
  const StepShape small = with_chunks(shape(101, 1000 + 2000, 2, 2), {{100, 2000}});
  EXPECT_NEAR(c.step_seconds(big),
              tf(501) + c.context_seconds_per_token(2) * 1000 + 2e-7 * 2000 + 4e-9 * 500 * 2000,
              1e-12);
  EXPECT_NEAR(c.step_seconds(big) - c.step_seconds(small) - (tf(501) - tf(101)), 4e-9 * 400 * 2000,
              1e-12);
  // A decode row (one row) over the same context: a(n) only.
  EXPECT_NEAR(c.step_seconds(shape(3, 3000, 3, 3)), tf(3) + a * 3000, 1e-12);
  EXPECT_TRUE(c.has_step_terms());
  // Round trip, absent when 0, and a negative one rejected.
  auto back = CostModel::from_json(c.to_json(), "q.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->chunk_row_context_seconds, 4e-9);
  CostModel none = linear();
  EXPECT_EQ(none.to_json().find("chunk_row_context_seconds"), std::string::npos);
  c.chunk_row_context_seconds = -1e-9;
  EXPECT_FALSE(c.validate().ok());
}

// kT scales the steps that carry a chunk, never T_fwd itself (the scheduler reads T_fwd) nor
// decode-only steps.
TEST(StepCost, ChunkStepScaleTimesOnlyStepsWithAChunk) {
  CostModel c = linear();
  c.chunk_step_scale = 1.25;
  EXPECT_DOUBLE_EQ(c.t_fwd(300), tf(300));
  EXPECT_NEAR(c.step_seconds(with_chunks(shape(300, 0, 1, 1), {{300, 0}})), 1.25 * tf(300), 1e-12);
  EXPECT_NEAR(c.step_seconds(shape(4, 0, 4, 4)), tf(4), 1e-12);  // decode-only, no D(n)
  c.decode_samples = {{1, 0.004}, {8, 0.005}};
  EXPECT_NEAR(c.step_seconds(shape(4, 0, 4, 4)), c.t_decode(4), 1e-12);
  EXPECT_TRUE(c.has_step_terms());
  auto back = CostModel::from_json(c.to_json(), "k.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->chunk_step_scale, 1.25);
  EXPECT_EQ(linear().to_json().find("chunk_step_scale"), std::string::npos);
  for (double bad : {0.0, -1.0, 1e9}) {
    CostModel b = linear();
    b.chunk_step_scale = bad;
    EXPECT_FALSE(b.validate().ok()) << bad;
  }
}

TEST(StepCost, DecodeAndChunkTermsRoundTripAndValidate) {
  CostModel c = linear();
  c.decode_samples = {{1, 0.00426}, {2, 0.00439}, {32, 0.0062}};
  c.chunk_context_samples = {{9, 6.5e-6}, {64, 1.35e-6}};
  const std::string text = c.to_json();
  EXPECT_NE(text.find("\"decode_seconds\""), std::string::npos);
  EXPECT_NE(text.find("\"chunk_context_seconds_per_token\""), std::string::npos);
  auto back = CostModel::from_json(text, "terms.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->decode_samples, c.decode_samples);
  EXPECT_EQ(back->chunk_context_samples, c.chunk_context_samples);
  EXPECT_EQ(back->to_json(), text);
  // Not ascending, zero rows, a zero or negative decode step, a negative price.
  for (auto bad : {std::vector<std::pair<int64_t, double>>{{4, 1e-3}, {2, 1e-3}},
                   std::vector<std::pair<int64_t, double>>{{0, 1e-3}},
                   std::vector<std::pair<int64_t, double>>{{1, 0.0}},
                   std::vector<std::pair<int64_t, double>>{{1, -1e-3}}}) {
    CostModel d = linear();
    d.decode_samples = bad;
    EXPECT_FALSE(d.validate().ok());
  }
  CostModel k = linear();
  k.chunk_context_samples = {{9, -1e-6}};
  EXPECT_FALSE(k.validate().ok());
  k.chunk_context_samples = {{9, 0.0}};  // free chunk context is allowed (a CPU may have none)
  EXPECT_TRUE(k.validate().ok());
  auto text2 = R"({"t_fwd_samples": [[1, 0.02]], "kv_bytes_per_token": 2,
                   "swap_bytes_per_second": 3, "decode_seconds": 0.004})";
  EXPECT_FALSE(CostModel::from_json(text2, "x").ok());
  // Tensor parallelism divides both, like T_fwd.
  const CostModel two = scale_cost_model(c, 2, 0.9);
  EXPECT_NEAR(two.t_decode(1), 0.00426 / 1.8, 1e-15);
  EXPECT_NEAR(two.chunk_seconds_per_token(64, 1), 1.35e-6 / 1.8, 1e-18);
}

// The simulator's clock with both terms: a resumed request's returned tokens are a chunk
// over its cached context; the other request's lone decode steps take D(n); the statistics
// count decode-only steps and their seconds.
TEST(StepCost, SimulatorChargesChunksAndDecodeSteps) {
  SimConfig cfg;
  cfg.cost = linear();
  cfg.cost.context_samples = {{1, 1e-6}};
  cfg.cost.decode_samples = {{1, 0.002}, {2, 0.003}};
  cfg.cost.chunk_context_samples = {{9, 1e-5}};
  cfg.kv_cache_tokens = 4096;
  cfg.swap_space_tokens = 4096;
  cfg.duration_s = 10.0;
  cfg.policy = "preserve";
  cfg.check_invariants = true;
  // One request: a 100-token prompt, 2 tokens, a 1-s tool returning 20 tokens, 1 more token.
  std::vector<TraceRequest> trace(1);
  trace[0].id = 0;
  trace[0].augmentation = "test";
  trace[0].prompt_tokens = 100;
  trace[0].segments = {{2, "tool", 1.0, 20}, {1, "", 0.0, 0}};
  auto res = simulate(cfg, trace);
  ASSERT_TRUE(res.ok()) << res.error().message;
  ASSERT_EQ(res->records.size(), 1u);
  ASSERT_TRUE(res->records[0].completed);
  // Prefill (T_fwd(100), nothing cached), one decode step over 100 cached tokens (D(1)), then
  // after the tool the 21 rows (the last generated token and the 20 returned) over the 101
  // tokens computed before them, at the chunk price.
  const double before_tool = tf(100) + (0.002 + 100e-6);
  const double resume = tf(21) + 101 * 1e-5;
  EXPECT_NEAR(res->records[0].end_s, before_tool + 1.0 + resume, 1e-9);
  EXPECT_EQ(res->stats.steps, 3);
  EXPECT_EQ(res->stats.decode_only_steps, 1);
  EXPECT_NEAR(res->stats.decode_only_seconds, 0.002 + 100e-6, 1e-12);
}

}  // namespace
}  // namespace infercept
