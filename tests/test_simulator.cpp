// The simulator (src/engine/simulator.h): the real scheduler and policies driven by a cost
// model in virtual time. Determinism, conservation (everything completes, both pools empty,
// scheduler invariants every step), cases whose answer is known in closed form, and the
// policy ordering on a saturated H200 profile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "engine/simulator.h"
#include "test_util.h"
#include "workload/metrics.h"
#include "workload/workload.h"

namespace infercept {
namespace {

// T_fwd(x) = 10 ms + 0.1 ms * x: linear, so interpolation is exact everywhere.
CostModel linear_cost(int64_t saturation = 64) {
  CostModel c;
  for (int64_t x : {1, 4096}) c.t_fwd_samples.emplace_back(x, 0.010 + 0.0001 * (double)x);
  c.kv_bytes_per_token = 1000.0;
  c.swap_bytes_per_second = 1e9;
  c.saturation_tokens = saturation;
  return c;
}

double tf(int64_t x) {
  return 0.010 + 0.0001 * (double)x;
}

SimConfig small_config(const std::string& policy) {
  SimConfig c;
  c.cost = linear_cost();
  c.policy = policy;
  c.kv_cache_tokens = 4096;
  c.swap_space_tokens = 4096;
  c.duration_s = 10.0;
  c.check_invariants = true;
  return c;
}

TraceRequest one_request(int32_t prompt, std::vector<Segment> segments) {
  TraceRequest r;
  r.id = 0;
  r.arrival_s = 0.0;
  r.augmentation = "test";
  r.prompt_tokens = prompt;
  r.segments = std::move(segments);
  return r;
}

SimConfig h200_config(const std::string& policy, int64_t kv_tokens) {
  auto p = load_sim_profile("h200-llama2-7b");
  EXPECT_TRUE(p.ok());
  SimConfig c;
  c.cost = p->cost;  // with its step terms (context, sequences, sampled rows)
  c.max_context = p->max_context;
  c.policy = policy;
  c.kv_cache_tokens = kv_tokens;
  c.swap_space_tokens = 64 * 2048 * 64;  // 64 GiB of 7B KV (512 KiB per token)
  return c;
}

// Three 40-token prompts arriving at t = 0 that decode `first`, 2 x `first` and 4 x `first`
// tokens without a tool call.
std::vector<TraceRequest> three_decoders(int32_t first) {
  std::vector<TraceRequest> trace;
  for (int32_t i = 0; i < 3; ++i) {
    trace.push_back(one_request(40, {Segment{first << i, "", 0.0, 0}}));
    trace.back().id = (uint64_t)i;
  }
  return trace;
}

std::vector<TraceRequest> mixed(double rate, double duration, uint64_t seed) {
  WorkloadSpec spec;
  spec.name = "mixed";
  spec.rate = rate;
  spec.duration_s = duration;
  spec.seed = seed;
  return generate_workload(spec);
}

TEST(SimulatorProfiles, BuiltinsMatchTheShapes) {
  for (const std::string& name : builtin_sim_profile_names()) {
    auto p = load_sim_profile(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_TRUE(p->cost.validate().ok());
    EXPECT_EQ(p->cost.saturation(), 128);
    EXPECT_DOUBLE_EQ(p->cost.swap_bytes_per_second, 55e9);
    EXPECT_GT(p->default_kv_cache_tokens(1), 100000) << name;  // > 100k tokens on one H200
  }
  EXPECT_DOUBLE_EQ(load_sim_profile("h200-llama2-7b")->cost.kv_bytes_per_token, 524288.0);
  EXPECT_DOUBLE_EQ(load_sim_profile("h200-llama3-8b")->cost.kv_bytes_per_token, 131072.0);
  EXPECT_DOUBLE_EQ(load_sim_profile("h200-llama2-13b")->cost.kv_bytes_per_token, 819200.0);
  // The engine of 2026-12-03 as its seed-11 paper runs priced it: a decode-only step of
  // one sequence 3.88 ms (bench-forward's D(1) 3.99 ms x 0.974), T_fwd(1) 3.98 ms (its start-up
  // profile, what its scheduler decides with), a step with a chunk 1.0139 x T_fwd, and the
  // engine's artifacts fitted with them: a chunk step's first sight of its row count 3.3 ms,
  // the graph cache of 64 entries (a new key's eager step 0.65 ms), and 0.244 / 0.343 s of
  // forward pass a second of swap-in / swap-out copy at the built-in's 55 GB/s. The 13B keeps
  // the batch-change rule fitted to its step probes and no copy interference; the 8B's has none of
  // these (not probed).
  EXPECT_NEAR(load_sim_profile("h200-llama2-7b")->cost.t_decode(1), 3.884e-3, 1e-5);
  EXPECT_NEAR(load_sim_profile("h200-llama2-7b")->cost.t_fwd(1), 3.983e-3, 1e-5);
  EXPECT_DOUBLE_EQ(load_sim_profile("h200-llama2-7b")->cost.chunk_step_scale, 1.0139);
  EXPECT_NEAR(load_sim_profile("h200-llama2-7b")->artifacts.first_sight_seconds, 3.329e-3, 1e-9);
  EXPECT_NEAR(load_sim_profile("h200-llama2-7b")->artifacts.new_batch_seconds, 0.653e-3, 1e-9);
  EXPECT_EQ(load_sim_profile("h200-llama2-7b")->artifacts.graph_cache_entries, 64);
  EXPECT_DOUBLE_EQ(load_sim_profile("h200-llama2-7b")->artifacts.copy_in_interference, 0.244);
  EXPECT_DOUBLE_EQ(load_sim_profile("h200-llama2-7b")->artifacts.copy_out_interference, 0.343);
  EXPECT_EQ(load_sim_profile("h200-llama2-13b")->artifacts.copy_in_interference, 0.0);
  EXPECT_EQ(load_sim_profile("h200-llama2-13b")->artifacts.graph_cache_entries, 0);
  EXPECT_NEAR(load_sim_profile("h200-llama2-13b")->artifacts.second_batch_seconds, 1.403e-3, 1e-9);
  EXPECT_EQ(load_sim_profile("h200-llama3-8b")->artifacts.first_sight_seconds, 0.0);
  EXPECT_GT(load_sim_profile("h200-llama2-13b")->cost.chunk_row_context_seconds, 0.0);
  EXPECT_FALSE(load_sim_profile("no-such-profile").ok());
  // Tensor parallelism divides T_fwd by N * e and multiplies the copy bandwidth by N.
  const CostModel one = load_sim_profile("h200-llama2-13b")->cost;
  const CostModel four = scale_cost_model(one, 4, default_tp_efficiency(4));
  EXPECT_NEAR(default_tp_efficiency(4), 0.81, 1e-12);
  EXPECT_NEAR(four.t_fwd(512), one.t_fwd(512) / (4 * 0.81), 1e-12);
  EXPECT_DOUBLE_EQ(four.swap_bytes_per_second, 4 * 55e9);
}

// A cost-model file's optional artifact keys (bench/step_fit.py --fit-artifacts writes them);
// without them, none.
TEST(SimulatorProfiles, FileCarriesTheEngineArtifacts) {
  const std::string dir = ::testing::TempDir();
  const std::string with = dir + "/with-artifacts.json", without = dir + "/without.json";
  const std::string samples = R"("version": 1, "kv_bytes_per_token": 524288.0,
      "swap_bytes_per_second": 55e9, "t_fwd_samples": [[1, 0.005], [512, 0.012]])";
  std::ofstream(with) << "{" << samples
                      << R"(, "first_sight_seconds": 0.004, "graph_miss_seconds": [0.001, 0.002],)"
                      << R"( "copy_interference": [0.25, 0.35]})";
  std::ofstream(without) << "{" << samples << "}";
  auto a = load_sim_profile(with);
  auto b = load_sim_profile(without);
  ASSERT_TRUE(a.ok() && b.ok()) << (a.ok() ? b.error().message : a.error().message);
  EXPECT_DOUBLE_EQ(a->artifacts.first_sight_seconds, 0.004);
  EXPECT_DOUBLE_EQ(a->artifacts.new_batch_seconds, 0.001);
  EXPECT_DOUBLE_EQ(a->artifacts.second_batch_seconds, 0.002);
  EXPECT_DOUBLE_EQ(a->artifacts.copy_in_interference, 0.25);
  EXPECT_DOUBLE_EQ(a->artifacts.copy_out_interference, 0.35);
  EXPECT_EQ(b->artifacts.first_sight_seconds + b->artifacts.new_batch_seconds +
                b->artifacts.second_batch_seconds + b->artifacts.copy_in_interference +
                b->artifacts.copy_out_interference,
            0.0);
}

// The first-sight artifact (EngineArtifacts::first_sight_seconds): a 1,200-token prompt runs
// in chunks of 512, 512 and 176 rows, so two row counts are new to the process and a second
// request of the same length adds none; with 512 among the counts the engine ran before (its
// own start-up profile), only 176 is.
TEST(Simulator, FirstSightOfAChunkRowCountIsPaidOnce) {
  SimConfig c = small_config("minwaste");
  c.max_tokens_per_step = 512;
  TraceRequest a = one_request(1200, {{2, "", 0.0, 0}});
  TraceRequest b = a;
  b.id = 1;
  b.arrival_s = 10.0;  // after the first is done: its chunks alone in their steps
  auto plain = simulate(c, {a, b});
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  c.artifacts.first_sight_seconds = 0.005;
  auto charged = simulate(c, {a, b});
  ASSERT_TRUE(charged.ok()) << charged.error().message;
  EXPECT_EQ(charged->stats.steps, plain->stats.steps);
  EXPECT_NEAR(charged->stats.forward_seconds - plain->stats.forward_seconds, 2 * 0.005, 1e-9);
  c.artifacts.seen_token_counts = {1, 16, 64, 128, 256, 512};
  auto profiled = simulate(c, {a, b});
  ASSERT_TRUE(profiled.ok()) << profiled.error().message;
  EXPECT_NEAR(profiled->stats.forward_seconds - plain->stats.forward_seconds, 0.005, 1e-9);
}

TEST(SimulatorProfiles, CpuProfileFileCopiesSynchronously) {
  const std::string path = std::string(INFERCEPT_SOURCE_DIR) +
                           "/models/SmolLM2-135M-Instruct.Q4_1.gguf.profile-cpu-2t.json";
  auto p = load_sim_profile(path);
  if (!p.ok()) GTEST_SKIP() << "no CPU profile cache: " << p.error().message;
  EXPECT_FALSE(p->copies_overlap);
  EXPECT_GE(p->cost.context_seconds_per_token(1), 0.0);  // what the profiler measured, if any
}

// One request, no interception: the time is the sum of T_fwd over its steps, exactly.
TEST(Simulator, OneRequestTakesTheSumOfItsSteps) {
  SimConfig c = small_config("minwaste");
  c.max_tokens_per_step = 512;
  // 1,200 prompt tokens: chunks of 512, 512, 176 (the last one samples), then 49 decodes.
  auto res = simulate(c, {one_request(1200, {{50, "", 0.0, 0}})});
  ASSERT_TRUE(res.ok()) << res.error().message;
  ASSERT_EQ(res->records.size(), 1u);
  const RequestRecord& r = res->records[0];
  ASSERT_TRUE(r.completed);
  const double expected = tf(512) + tf(512) + tf(176) + 49 * tf(1);
  EXPECT_NEAR(r.end_s, expected, 1e-9);
  EXPECT_NEAR(r.first_token_s, tf(512) + tf(512) + tf(176), 1e-9);
  EXPECT_EQ(r.output_tokens, 50);
  EXPECT_NEAR(normalized_latency(r), expected / 50.0, 1e-12);
  EXPECT_EQ(res->stats.steps, 3 + 49);
  EXPECT_EQ(res->stats.recomputed_tokens, 0);
  EXPECT_EQ(res->stats.prompt_tokens_computed, 1200);
  EXPECT_EQ(res->device_blocks_in_use, 0);
}

// A context cost adds its per-token price for every context token the step's sequences held
// before it (what attention reads beyond what T_fwd(x) already measured).
TEST(Simulator, ContextCostChargesTheBatchContext) {
  SimConfig c = small_config("minwaste");
  c.cost.context_samples = {{1, 1e-6}};
  auto res = simulate(c, {one_request(100, {{3, "", 0.0, 0}})});
  ASSERT_TRUE(res.ok());
  // The prefill reads no earlier KV (T_fwd(100) is exactly that step); the two decodes read
  // the 100 and 101 tokens cached before them.
  const double expected = tf(100) + tf(1) + 100e-6 + tf(1) + 101e-6;
  EXPECT_NEAR(res->records[0].end_s, expected, 1e-9);
}

// discard drops the KV at the pause and recomputes the context exactly once after the tool
// answers; preserve recomputes nothing. Both times follow from the chunking rule.
TEST(Simulator, DiscardRecomputesAPausedContextExactlyOnce) {
  // Prompt 100, generate 10, tool 5 s returning 20 tokens, generate 10 more.
  const TraceRequest tr = one_request(100, {{10, "search", 5.0, 20}, {10, "", 0.0, 0}});
  const double before_pause = tf(100) + 9 * tf(1);  // prefill samples token 1; 9 decodes

  SimConfig c = small_config("discard");
  auto d = simulate(c, {tr});
  ASSERT_TRUE(d.ok()) << d.error().message;
  ASSERT_TRUE(d->records[0].completed);
  // At the pause 109 tokens have KV (the 110th, just sampled, has not run yet): all dropped.
  EXPECT_EQ(d->stats.recomputed_tokens, 109);
  EXPECT_EQ(d->stats.recompute_rows, 109);
  EXPECT_EQ(d->stats.interceptions, 1);
  EXPECT_GT(d->stats.waste_recompute, 0.0);
  // After the resume 130 tokens lack KV: recomputation rides in chunks of at most
  // max(S - R, 32) = 64 tokens until the old high-water mark (109), then the rest at once:
  // 64, 64 (reaches 128 > 109), 2 (samples), then 9 decodes.
  const double after = tf(64) + tf(64) + tf(2) + 9 * tf(1);
  EXPECT_NEAR(d->records[0].end_s, before_pause + 5.0 + after, 1e-9);
  // The resumed turn's first token comes with the chunk that samples.
  ASSERT_EQ(d->resume_ttft.all.size(), 1u);
  EXPECT_NEAR(d->resume_ttft.all[0], tf(64) + tf(64) + tf(2), 1e-9);
  // Its KV had been dropped: the resume is counted as a recomputation.
  EXPECT_EQ(d->resume_ttft.of(KvPlace::recompute).size(), 1u);
  EXPECT_TRUE(d->resume_ttft.of(KvPlace::device).empty());
  EXPECT_EQ(d->stats.prompt_tokens_computed, 100 + 130);

  c.policy = "preserve";
  auto p = simulate(c, {tr});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->stats.recomputed_tokens, 0);
  EXPECT_EQ(p->stats.recompute_rows, 0);
  // The last sampled token and the 20 returned ones run as one prefill chunk.
  EXPECT_NEAR(p->records[0].end_s, before_pause + 5.0 + tf(21) + 9 * tf(1), 1e-9);
  ASSERT_EQ(p->resume_ttft.all.size(), 1u);
  EXPECT_NEAR(p->resume_ttft.all[0], tf(21), 1e-9);
  ASSERT_EQ(p->resume_ttft.of(KvPlace::device).size(), 1u);  // preserved whole
  EXPECT_NEAR(p->resume_ttft.of(KvPlace::device)[0], tf(21), 1e-9);
  EXPECT_GT(p->stats.waste_preserve, 0.0);
  EXPECT_EQ(p->records[0].output_tokens, 40);
  EXPECT_NEAR(p->records[0].interception_s, 5.0, 1e-9);

  // The swap policy moves the paused context to the host: the resume is counted there.
  c.policy = "swap";
  auto s = simulate(c, {tr});
  ASSERT_TRUE(s.ok());
  EXPECT_GT(s->stats.swapped_out_tokens, 0);
  EXPECT_EQ(s->resume_ttft.of(KvPlace::host).size(), 1u);
  EXPECT_EQ(s->resume_ttft.all.size(), 1u);
}

// A pause past the interception timeout gives its KV back (EngineCore's expiry); the late
// answer still works, by recomputation.
TEST(Simulator, ExpiredPauseReleasesItsKv) {
  SimConfig c = small_config("preserve");
  c.interception_timeout_s = 5.0;
  const TraceRequest tr = one_request(100, {{10, "slow", 20.0, 5}, {5, "", 0.0, 0}});
  auto res = simulate(c, {tr});
  ASSERT_TRUE(res.ok()) << res.error().message;
  ASSERT_TRUE(res->records[0].completed);
  EXPECT_EQ(res->stats.expirations, 1);
  // EngineStats counts drops of the scheduler's plans only, so an expiry's drop shows up as
  // the rows run again, not in recomputed_tokens (the same in the engine).
  EXPECT_EQ(res->stats.recompute_rows, 109);
  c.interception_timeout_s = 30.0;
  auto kept = simulate(c, {tr});
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->stats.expirations, 0);
  EXPECT_EQ(kept->stats.recompute_rows, 0);
}

// A long pause while a newcomer needs the blocks: minwaste must give the paused KV up (swap
// or discard) rather than stall the newcomer, and every block comes back in the end.
TEST(Simulator, PausedKvMakesRoomUnderPressure) {
  SimConfig c = small_config("minwaste");
  c.kv_cache_tokens = 1024;
  c.swap_space_tokens = 0;  // one host block: swapping is no way out, discarding is
  TraceRequest a = one_request(600, {{8, "human", 30.0, 10}, {8, "", 0.0, 0}});
  TraceRequest b = one_request(700, {{20, "", 0.0, 0}});
  b.id = 1;
  b.arrival_s = 1.0;
  auto res = simulate(c, {a, b});
  ASSERT_TRUE(res.ok()) << res.error().message;
  ASSERT_EQ(res->records.size(), 2u);
  for (const RequestRecord& r : res->records) EXPECT_TRUE(r.completed);
  // b is not held up for the 30 s pause: it starts within a step or two of its arrival.
  for (const RequestRecord& r : res->records) {
    if (r.id == 1) {
      EXPECT_LT(r.end_s, 2.0);
    }
  }
  EXPECT_EQ(res->stats.recomputed_tokens, 607);  // a's context, dropped once
  EXPECT_EQ(res->device_blocks_in_use, 0);
  EXPECT_EQ(res->host_blocks_in_use, 0);
}

// Same seed, same result: every record and every counter.
TEST(Simulator, Deterministic) {
  SimConfig c = h200_config("minwaste", 60000);
  c.duration_s = 60.0;
  const auto trace = mixed(6.0, 60.0, 7);
  auto r1 = simulate(c, trace);
  auto r2 = simulate(c, trace);
  ASSERT_TRUE(r1.ok() && r2.ok());
  ASSERT_EQ(r1->records.size(), r2->records.size());
  for (size_t i = 0; i < r1->records.size(); ++i) {
    const RequestRecord &x = r1->records[i], &y = r2->records[i];
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.end_s, y.end_s);
    EXPECT_EQ(x.first_token_s, y.first_token_s);
    EXPECT_EQ(x.interception_s, y.interception_s);
    EXPECT_EQ(x.output_tokens, y.output_tokens);
  }
  EXPECT_EQ(r1->stats.steps, r2->stats.steps);
  EXPECT_EQ(r1->stats.recomputed_tokens, r2->stats.recomputed_tokens);
  EXPECT_EQ(r1->stats.swapped_out_tokens, r2->stats.swapped_out_tokens);
  EXPECT_EQ(r1->stats.waste_recompute, r2->stats.waste_recompute);
  EXPECT_EQ(r1->stats.waste_preserve, r2->stats.waste_preserve);
  EXPECT_EQ(r1->end_time_s, r2->end_time_s);
  // And another seed gives another run.
  auto r3 = simulate(c, mixed(6.0, 60.0, 8));
  ASSERT_TRUE(r3.ok());
  EXPECT_NE(r1->stats.steps, r3->stats.steps);
}

// Under every policy, with the cache tight enough for preemptions, discards and swaps:
// every request completes after the drain with exactly its scripted output, both pools end
// empty, and the scheduler's invariants hold after every step (check_invariants).
TEST(Simulator, ConservationUnderEveryPolicy) {
  WorkloadSpec spec;
  spec.rate = 2.0;
  spec.duration_s = 20.0;
  spec.seed = 3;
  spec.time_scale = 0.05;     // pauses of ~1 s instead of ~20
  spec.context_scale = 0.25;  // contexts of a few hundred tokens
  const auto trace = generate_workload(spec);
  ASSERT_GT(trace.size(), 20u);
  for (const char* policy :
       {"discard", "improved-discard", "preserve", "swap", "ttl", "minwaste"}) {
    SimConfig c = small_config(policy);
    c.kv_cache_tokens = 2048;
    c.swap_space_tokens = 2048;
    c.duration_s = spec.duration_s;
    auto res = simulate(c, trace);
    ASSERT_TRUE(res.ok()) << policy << ": " << res.error().message;
    EXPECT_EQ(res->skipped, 0) << policy;
    ASSERT_EQ(res->records.size(), trace.size()) << policy;
    for (const RequestRecord& r : res->records) {
      const TraceRequest& tr = trace[r.id];
      EXPECT_TRUE(r.completed) << policy << " request " << r.id;
      EXPECT_EQ(r.output_tokens, tr.generated_tokens() + tr.returned_tokens()) << policy;
      EXPECT_GE(r.interception_s, tr.total_tool_seconds() - 1e-9) << policy;
    }
    EXPECT_EQ(res->stats.interceptions, res->stats.resumes) << policy;
    EXPECT_EQ(res->device_blocks_in_use, 0) << policy;
    EXPECT_EQ(res->host_blocks_in_use, 0) << policy;
    // A partly swapped context that is discarded later never comes back in.
    EXPECT_LE(res->stats.swapped_in_tokens, res->stats.swapped_out_tokens) << policy;
    std::printf(
        "[conservation] %-16s steps %6lld preemptions %4lld recomputed %6lld swapped %6lld\n",
        policy, (long long)res->stats.steps, (long long)res->stats.preemptions,
        (long long)res->stats.recomputed_tokens, (long long)res->stats.swapped_out_tokens);
  }
}

// The copies' interference with the forward pass (EngineArtifacts::copy_in_interference /
// copy_out_interference): eight requests that arrive at once and outgrow a small pool make
// minwaste preempt by swapping (no tools, so nothing in the schedule depends on the clock);
// with the interference every step that queues copies lasts c x their copy time longer, so the
// forward time grows by exactly c_in x (swap-in time) + c_out x (swap-out time), and the
// schedule is the same. The naive swap policy copies synchronously: its steps pay the copies
// as stalls already, and the interference leaves it unchanged.
TEST(Simulator, CopyInterferenceLengthensTheStepsThatQueueCopies) {
  std::vector<TraceRequest> trace;
  for (int32_t i = 0; i < 8; ++i) {
    trace.push_back(one_request(200, {Segment{300, "", 0.0, 0}}));
    trace.back().id = (uint64_t)i;
  }
  SimConfig c = small_config("minwaste");
  c.kv_cache_tokens = 1024;
  c.swap_space_tokens = 4096;
  auto plain = simulate(c, trace);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  ASSERT_GT(plain->stats.swapped_in_tokens, 0) << "no swaps: the pool was not tight enough";
  c.artifacts.copy_in_interference = 0.5;
  c.artifacts.copy_out_interference = 0.25;
  auto slowed = simulate(c, trace);
  ASSERT_TRUE(slowed.ok()) << slowed.error().message;
  EXPECT_EQ(slowed->stats.steps, plain->stats.steps);
  EXPECT_EQ(slowed->stats.swapped_in_tokens, plain->stats.swapped_in_tokens);
  EXPECT_EQ(slowed->stats.swapped_out_tokens, plain->stats.swapped_out_tokens);
  const double extra = 0.5 * c.cost.t_swap(plain->stats.swapped_in_tokens) +
                       0.25 * c.cost.t_swap(plain->stats.swapped_out_tokens);
  EXPECT_GT(extra, 0.0);
  // Copies queued in a step with no forward pass (copy-only plans) have no step to slow.
  EXPECT_EQ(plain->stats.copy_only_steps, 0);
  EXPECT_NEAR(slowed->stats.forward_seconds - plain->stats.forward_seconds, extra, 1e-9);

  // The swap policy swaps a paused request's whole context: requests that call a tool, their
  // arrivals staggered so that others are decoding in the steps that copy.
  std::vector<TraceRequest> callers;
  for (int32_t i = 0; i < 4; ++i) {
    callers.push_back(one_request(200, {Segment{20, "search", 0.5, 10}, Segment{40, "", 0.0, 0}}));
    callers.back().id = (uint64_t)i;
    callers.back().arrival_s = 0.1 * i;
  }
  c.policy = "swap";
  c.artifacts = {};
  auto sync_plain = simulate(c, callers);
  c.artifacts.copy_in_interference = 0.5;
  c.artifacts.copy_out_interference = 0.25;
  auto sync_slowed = simulate(c, callers);
  ASSERT_TRUE(sync_plain.ok() && sync_slowed.ok());
  ASSERT_GT(sync_plain->stats.swapped_out_tokens, 0) << "the swap policy copied nothing";
  EXPECT_DOUBLE_EQ(sync_slowed->stats.forward_seconds, sync_plain->stats.forward_seconds);
  EXPECT_DOUBLE_EQ(sync_slowed->stats.busy_seconds, sync_plain->stats.busy_seconds);
}

// The step trace (--step-trace) holds one row per step that ran or moved copies, and its
// columns add up to the run's counters: what bench/trace_diff.py compares with the engine's.
TEST(Simulator, StepTraceRowsAddUpToTheRunsCounters) {
  WorkloadSpec spec;
  spec.rate = 2.0;
  spec.duration_s = 20.0;
  spec.seed = 5;
  spec.time_scale = 0.05;
  spec.context_scale = 0.25;
  const auto trace = generate_workload(spec);
  SimConfig c = small_config("minwaste");
  c.kv_cache_tokens = 1024;  // tight: preemptions and swaps happen
  c.swap_space_tokens = 1024;
  c.duration_s = spec.duration_s;
  c.step_trace_path = ::testing::TempDir() + "sim_step_trace.csv";
  auto res = simulate(c, trace);
  ASSERT_TRUE(res.ok()) << res.error().message;
  const SimStats& st = res->stats;
  ASSERT_GT(st.preemptions + st.swapped_out_tokens, 0) << "the pool was not tight enough";

  const testing::StepTraceTotals t = testing::read_step_trace(c.step_trace_path);
  ASSERT_TRUE(t.ok) << t.error;
  EXPECT_TRUE(t.time_ordered);
  EXPECT_EQ(t.forward_rows, st.steps);
  EXPECT_GE(t.rows, st.steps + st.copy_only_steps);  // plus steps that only dropped KV
  EXPECT_NEAR(t.seconds, st.forward_seconds, 1e-3);
  EXPECT_EQ(t.preempted, st.preemptions);
  EXPECT_EQ(t.dropped_tokens, st.recomputed_tokens);
  EXPECT_EQ(t.swap_in_blocks * c.block_size, st.swapped_in_tokens);
  EXPECT_EQ(t.swap_out_blocks * c.block_size, st.swapped_out_tokens);
  EXPECT_LE(t.max_free_blocks, c.kv_cache_tokens / c.block_size);
  EXPECT_TRUE(t.longest_blocks_present);
  EXPECT_EQ(t.unknown_replay_rows, t.rows) << "the simulator does not say what a graph would do";
  EXPECT_GT(t.decode_rows, 0);
  EXPECT_EQ(t.sampled_rows, st.decode_tokens);
  EXPECT_TRUE(t.chunk_context_consistent);
  EXPECT_GT(t.chunk_context_tokens, 0) << "resumed and recomputed chunks hold context";
}

// The graph-miss charge (EngineArtifacts::new_batch_seconds): three requests decoding 6, 12 and 24
// tokens from t = 0 make decode batches of 3, 2 and 1 sequences, each a new batch whose next
// step is its second: exactly 3 x (new + second) more forward time, the schedule unchanged
// (nothing depends on the clock without tools or later arrivals). The batch-change rule and
// the graph cache model (graph_cache_entries) agree here: every count is seen twice, then
// replayed.
TEST(Simulator, GraphMissChargesNewBatchesAndTheirSecondSteps) {
  const std::vector<TraceRequest> trace = three_decoders(6);
  for (int64_t entries : {0, 64}) {
    SimConfig c = small_config("minwaste");
    auto plain = simulate(c, trace);
    ASSERT_TRUE(plain.ok()) << plain.error().message;
    c.artifacts.new_batch_seconds = 0.001;
    c.artifacts.second_batch_seconds = 0.003;
    c.artifacts.graph_cache_entries = entries;
    auto charged = simulate(c, trace);
    ASSERT_TRUE(charged.ok()) << charged.error().message;
    EXPECT_EQ(charged->stats.steps, plain->stats.steps) << entries;
    EXPECT_NEAR(charged->stats.forward_seconds - plain->stats.forward_seconds, 3 * (0.001 + 0.003),
                1e-9)
        << entries;
  }
}

// The graph cache model replays a sequence count that comes back, which the batch-change rule
// charges again: here the first request pauses for a tool and resumes, so the count goes
// 3 -> 2 -> 3. With room for one graph only, every return is a first sight again.
TEST(Simulator, GraphCacheModelReplaysACountThatComesBack) {
  SimConfig c = small_config("preserve");
  c.artifacts.new_batch_seconds = 0.001;
  c.artifacts.second_batch_seconds = 0.003;
  std::vector<TraceRequest> back = three_decoders(40);
  back[0].segments = {Segment{20, "tool", 0.05, 1}, Segment{20, "", 0.0, 0}};
  c.artifacts.graph_cache_entries = 0;
  auto rule = simulate(c, back);
  c.artifacts.graph_cache_entries = 64;
  auto model = simulate(c, back);
  ASSERT_TRUE(rule.ok() && model.ok());
  EXPECT_LT(model->stats.forward_seconds, rule->stats.forward_seconds)
      << "the count that came back replays its graph";
  c.artifacts.graph_cache_entries = 1;  // one graph: every return of a count is a first sight again
  auto small = simulate(c, back);
  ASSERT_TRUE(small.ok());
  EXPECT_GT(small->stats.forward_seconds, model->stats.forward_seconds);
}

// Step-time jitter (SimConfig::step_jitter): the same seed repeats a run exactly, another
// seed gives other step times, and since each factor has mean 1 the forward time of ~100
// steps stays within a few sigma / sqrt(steps) of the plain run's (the schedule itself does
// not depend on the clock here: no tools, no later arrivals).
TEST(Simulator, StepJitterIsSeededAndKeepsTheMeanStepTime) {
  const std::vector<TraceRequest> trace = three_decoders(32);
  SimConfig c = small_config("minwaste");
  auto plain = simulate(c, trace);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  c.step_jitter = 0.05;
  c.jitter_seed = 3;
  auto a = simulate(c, trace);
  auto b = simulate(c, trace);
  c.jitter_seed = 4;
  auto other = simulate(c, trace);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  EXPECT_EQ(a->stats.steps, plain->stats.steps);
  EXPECT_GE(a->stats.steps, 100);
  EXPECT_EQ(a->stats.forward_seconds, b->stats.forward_seconds) << "same seed, same run";
  EXPECT_NE(a->stats.forward_seconds, other->stats.forward_seconds);
  EXPECT_NE(a->stats.forward_seconds, plain->stats.forward_seconds);
  // sigma 0.05 over >= 100 steps of similar length: the sum's relative sd is <= 0.5%.
  EXPECT_NEAR(a->stats.forward_seconds / plain->stats.forward_seconds, 1.0, 0.025);
  EXPECT_NEAR(other->stats.forward_seconds / plain->stats.forward_seconds, 1.0, 0.025);
}

TEST(Simulator, StepTraceToAnUnwritablePathIsAnError) {
  SimConfig c = small_config("minwaste");
  c.step_trace_path = "/nonexistent-dir/trace.csv";
  auto res = simulate(c, {one_request(100, {Segment{10, "", 0.0, 0}})});
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.error().message.find("/nonexistent-dir/trace.csv"), std::string::npos);
}

// The paper's claim in miniature: on a saturated mixed workload (7B on one H200, KV cut to
// an A100-40GB-like 20 GiB so that paused contexts compete for memory), minwaste's mean
// normalized latency is no worse than discard's.
TEST(Simulator, MinwasteNoWorseThanDiscardWhenSaturated) {
  const double duration = 120.0;
  const auto trace = mixed(3.0, duration, 11);
  double latency[2] = {0, 0};
  const char* policies[2] = {"discard", "minwaste"};
  for (int i = 0; i < 2; ++i) {
    SimConfig c = h200_config(policies[i], 40960);  // 20 GiB of 512 KiB tokens
    c.duration_s = duration;
    auto res = simulate(c, trace);
    ASSERT_TRUE(res.ok()) << res.error().message;
    const Summary s = summarize(res->records, duration);
    EXPECT_EQ(s.completed, s.submitted) << policies[i];
    latency[i] = s.normalized_latency.mean;
    std::printf(
        "[policy] h200-llama2-7b mixed 3.0 req/s KV 40960: %-8s mean %.1f ms/token, "
        "p99 %.1f, recomputed %lld, swapped out %lld, preemptions %lld (%.2f s wall)\n",
        policies[i], 1e3 * s.normalized_latency.mean, 1e3 * s.normalized_latency.p99,
        (long long)res->stats.recomputed_tokens, (long long)res->stats.swapped_out_tokens,
        (long long)res->stats.preemptions, res->wall_seconds);
  }
  EXPECT_LE(latency[1], latency[0]);
}

TEST(Simulator, BadConfigsAreErrors) {
  SimConfig c = small_config("no-such-policy");
  EXPECT_FALSE(simulate(c, {}).ok());
  c = small_config("minwaste");
  c.estimator = "psychic";
  EXPECT_FALSE(simulate(c, {}).ok());
  c = small_config("minwaste");
  c.kv_cache_tokens = 0;
  EXPECT_FALSE(simulate(c, {}).ok());
  // A request that cannot fit at all is skipped, as bench skips it.
  c = small_config("minwaste");
  c.kv_cache_tokens = 64;
  auto res = simulate(c, {one_request(100, {{5, "", 0.0, 0}})});
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->skipped, 1);
  EXPECT_TRUE(res->records.empty());
}

}  // namespace
}  // namespace infercept
