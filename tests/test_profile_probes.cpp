// `infercept profile`'s step-term probes (engine/profile_probes.h) on the CPU backend with the
// default model: the profile file carries every term the simulator prices, finite and
// non-negative, the simulator loads it and each term moves the simulated step as
// CostModel::step_seconds and the artifacts say; an older file without the keys still loads.
// Small probe counts keep it to seconds; the values are this machine's, so the tests check
// their shape and their use, not their size.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/profile_file.h"
#include "engine/simulator.h"
#include "test_util.h"

namespace infercept {
namespace {

using json = nlohmann::json;

ProbeOptions small_probes() {
  ProbeOptions o;
  o.decode_batches = {1, 2, 4};
  o.decode_context = 64;
  o.chunk_rows = {2, 9, 32};
  o.chunk_context = 64;
  o.mixed_chunk_rows = {16, 32};
  o.mixed_decode_rows = 3;
  o.fresh_counts = 1;
  o.copy_rows = 3;
  o.repeats = 1;
  return o;
}

// Profiles the default model once (with the probes) into a file of its own.
class ProfileProbes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string("/tmp/infercept-profile-probes-" + std::to_string(getpid()) + ".json");
    EngineConfig c;
    c.model_path = testing::default_model_path();
    c.n_threads = 2;
    c.max_tokens_per_step = 64;
    c.max_seqs = 8;
    c.kv_cache_tokens = 2048;
    c.swap_space_tokens = 1024;
    c.force_profile = true;
    c.profile_path = *path_;
    c.profile_tokens = {1, 8, 32, 64};
    c.step_probes = small_probes();
    auto e = EngineCore::create(c);
    ASSERT_TRUE(e.ok()) << e.error().message;
  }
  static void TearDownTestSuite() {
    std::remove(path_->c_str());
    delete path_;
  }
  static std::string* path_;
};
std::string* ProfileProbes::path_ = nullptr;

TEST_F(ProfileProbes, TheFileHasEveryTermFiniteAndNonNegative) {
  const json j = json::parse(testing::read_file(*path_), nullptr, false);
  ASSERT_TRUE(j.is_object());
  auto check_series = [&](const char* key, size_t n) {
    ASSERT_TRUE(j.contains(key)) << key;
    ASSERT_TRUE(j[key].is_array()) << key;
    EXPECT_EQ(j[key].size(), n) << key;
    for (const json& s : j[key]) {
      EXPECT_GE(s[0].get<int64_t>(), 1) << key;
      EXPECT_TRUE(std::isfinite(s[1].get<double>()) && s[1].get<double>() >= 0.0) << key;
    }
  };
  check_series("decode_seconds", 3);                   // D(1), D(2), D(4)
  check_series("context_seconds_per_token", 3);        // a(n) at the same n
  check_series("chunk_context_seconds_per_token", 3);  // p(2), p(9), p(32)
  for (const char* key : {"chunk_row_context_seconds", "chunk_step_scale", "sequence_seconds",
                          "sample_seconds_per_row", "first_sight_seconds"}) {
    ASSERT_TRUE(j.contains(key) && j[key].is_number()) << key;
    EXPECT_TRUE(std::isfinite(j[key].get<double>()) && j[key].get<double>() >= 0.0) << key;
  }
  EXPECT_GT(j["chunk_step_scale"].get<double>(), 0.0);
  for (const char* key :
       {"graph_miss_seconds", "copy_interference", "copy_interference_untouched"}) {
    ASSERT_TRUE(j.contains(key) && j[key].is_array() && j[key].size() == 2) << key;
    for (const json& v : j[key])
      EXPECT_TRUE(std::isfinite(v.get<double>()) && v.get<double>() >= 0.0) << key;
  }
  // The CPU records no steps: no graph cache, and nothing to miss in it. Its copies run on
  // the engine thread.
  EXPECT_EQ(j["graph_cache_entries"].get<int64_t>(), 0);
  EXPECT_EQ(j["graph_miss_seconds"][0].get<double>(), 0.0);
  EXPECT_EQ(j["copies_overlap"].get<bool>(), false);
  EXPECT_GT(j["max_context"].get<int64_t>(), 0);
  // D(n) and kT hold the per-sequence and per-row costs: no b or r on top.
  EXPECT_EQ(j["sequence_seconds"].get<double>(), 0.0);
  EXPECT_EQ(j["sample_seconds_per_row"].get<double>(), 0.0);
}

TEST_F(ProfileProbes, TheSimulatorLoadsItAndPricesStepsWithIt) {
  auto p = load_sim_profile(*path_);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_FALSE(p->copies_overlap);  // from the file's key, whatever its name
  const CostModel& c = p->cost;
  ASSERT_EQ(c.decode_samples.size(), 3u);
  ASSERT_EQ(c.context_samples.size(), 3u);
  ASSERT_EQ(c.chunk_context_samples.size(), 3u);
  // A decode-only step of 2 sequences holding 100 tokens: D(2) + a(2) * 100.
  StepShape decode;
  decode.query_tokens = 2, decode.sequences = 2, decode.sampled_rows = 2;
  decode.context_tokens = 100;
  EXPECT_NEAR(c.step_seconds(decode),
              c.decode_samples[1].second + c.context_samples[1].second * 100, 1e-12);
  // A step of a 9-row chunk holding 50 tokens beside one decode row holding 30:
  // kT * T_fwd(10) + a(2) * 30 + (p(9) + q * 9) * 50.
  StepShape chunk;
  chunk.query_tokens = 10, chunk.sequences = 2, chunk.sampled_rows = 1;
  chunk.context_tokens = 80;
  chunk.chunks = {{9, 50}};
  const double a2 = c.context_samples[1].second, p9 = c.chunk_context_samples[1].second;
  EXPECT_NEAR(
      c.step_seconds(chunk),
      c.chunk_step_scale * c.t_fwd(10) + a2 * 30 + (p9 + c.chunk_row_context_seconds * 9) * 50,
      1e-12);
  // Each term moves the step by what the formula says.
  auto moved = [&](auto change, const StepShape& s) {
    CostModel m = c;
    change(m);
    return m.step_seconds(s) - c.step_seconds(s);
  };
  EXPECT_NEAR(moved([](CostModel& m) { m.decode_samples[1].second += 0.001; }, decode), 0.001,
              1e-12);
  EXPECT_NEAR(moved([](CostModel& m) { m.context_samples[1].second += 1e-6; }, decode), 100e-6,
              1e-12);
  EXPECT_NEAR(moved([](CostModel& m) { m.chunk_step_scale += 0.5; }, chunk), 0.5 * c.t_fwd(10),
              1e-12);
  EXPECT_NEAR(moved([](CostModel& m) { m.chunk_context_samples[1].second += 1e-6; }, chunk), 50e-6,
              1e-12);
  EXPECT_NEAR(moved([](CostModel& m) { m.chunk_row_context_seconds += 1e-8; }, chunk),
              9 * 50 * 1e-8, 1e-12);
  // The decode-only step is priced by D(n), not kT or the chunk terms.
  EXPECT_NEAR(moved([](CostModel& m) { m.chunk_step_scale += 0.5; }, decode), 0.0, 1e-15);
}

// The artifacts reach the simulated clock: one request, its prompt in one chunk step, then
// decode-only steps of one sequence (one graph key: eager, captured, then replayed). With the
// cache of the file's size the request ends first sight + new key + capture later than
// without them; the copies' interference is tested with the simulator (test_simulator.cpp).
TEST_F(ProfileProbes, TheFilesArtifactsReachTheSimulatedClock) {
  auto p = load_sim_profile(*path_);
  ASSERT_TRUE(p.ok());
  TraceRequest r;
  r.id = 0;
  r.arrival_s = 0.0;
  r.prompt_tokens = 40;
  r.segments = {Segment{20, "", 0.0, 0}};
  auto end_with = [&](const EngineArtifacts& a) {
    SimConfig s;
    s.cost = p->cost;
    // One prompt chunk whatever the probes measured: the chunking rules read the measured
    // step times (the saturation point, the automatic long-prefill chunk), and on a slow or
    // loaded machine they split the prompt into chunks of two row counts (two first sights).
    s.cost.saturation_tokens = 4096;
    s.long_prefill_tokens = 4096;
    s.copies_overlap = p->copies_overlap;
    s.kv_cache_tokens = 4096;
    s.swap_space_tokens = 1024;
    s.artifacts = a;
    auto res = simulate(s, {r});
    EXPECT_TRUE(res.ok());
    EXPECT_EQ(res->records.size(), 1u);
    return res->records.at(0).end_s;
  };
  EngineArtifacts a = p->artifacts;
  a.first_sight_seconds = 0.004;
  a.new_batch_seconds = 0.002;
  a.second_batch_seconds = 0.003;
  a.graph_cache_entries = 64;
  EXPECT_NEAR(end_with(a) - end_with(EngineArtifacts{}), 0.004 + 0.002 + 0.003, 1e-9);
}

// A cache written before the probes existed (T_fwd, the bandwidth, one context constant)
// loads with none of the new terms: D(n) falls back to T_fwd, no artifacts, and the file's
// name decides the copies.
TEST(ProfileFile, AnOlderFileWithoutTheKeysLoads) {
  const std::string path =
      "/tmp/infercept-old-profile-" + std::to_string(getpid()) + ".profile-cpu-2t.json";
  {
    std::ofstream f(path);
    f << R"({"version": 1, "t_fwd_samples": [[1, 0.01], [64, 0.02]], "kv_bytes_per_token": 1000,
             "swap_bytes_per_second": 1e9, "saturation_tokens": 0,
             "context_seconds_per_token": 1e-6, "sequence_seconds": 2e-5})";
  }
  auto p = load_sim_profile(path);
  std::remove(path.c_str());
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->cost.decode_samples.empty());
  EXPECT_TRUE(p->cost.chunk_context_samples.empty());
  EXPECT_EQ(p->cost.chunk_step_scale, 1.0);
  EXPECT_EQ(p->artifacts.first_sight_seconds, 0.0);
  EXPECT_EQ(p->artifacts.graph_cache_entries, 0);
  EXPECT_EQ(p->artifacts.copy_in_interference, 0.0);
  EXPECT_FALSE(p->copies_overlap);  // `.profile-cpu-` in its name
  EXPECT_DOUBLE_EQ(p->cost.t_decode(4), p->cost.t_fwd(4));
}

// The writer adds the keys to the cost model's JSON and the reader gets them back; the cost
// model's own reader ignores them.
TEST(ProfileFile, ExtrasRoundTrip) {
  CostModel c;
  c.t_fwd_samples = {{1, 0.01}, {64, 0.02}};
  c.kv_bytes_per_token = 1000;
  c.swap_bytes_per_second = 1e9;
  ProfileExtras e;
  e.artifacts.first_sight_seconds = 0.003;
  e.artifacts.new_batch_seconds = 0.001;
  e.artifacts.second_batch_seconds = 0.005;
  e.artifacts.graph_cache_entries = 64;
  e.artifacts.copy_in_interference = 0.2;
  e.artifacts.copy_out_interference = 0.3;
  e.copies_overlap = true;
  e.max_context = 8192;
  e.copy_interference_untouched = std::pair{0.01, 0.02};
  const std::string text = profile_file_json(c, e);
  const ProfileExtras back = read_profile_extras(text);
  EXPECT_EQ(back.artifacts.first_sight_seconds, 0.003);
  EXPECT_EQ(back.artifacts.new_batch_seconds, 0.001);
  EXPECT_EQ(back.artifacts.second_batch_seconds, 0.005);
  EXPECT_EQ(back.artifacts.graph_cache_entries, 64);
  EXPECT_EQ(back.artifacts.copy_in_interference, 0.2);
  EXPECT_EQ(back.artifacts.copy_out_interference, 0.3);
  EXPECT_EQ(back.copies_overlap, std::optional<bool>(true));
  EXPECT_EQ(back.max_context, 8192);
  ASSERT_TRUE(back.copy_interference_untouched);
  EXPECT_EQ(back.copy_interference_untouched->second, 0.02);
  auto m = CostModel::from_json(text, "x");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->t_fwd_samples, c.t_fwd_samples);
  EXPECT_FALSE(read_profile_extras(CostModel{c}.to_json()).copies_overlap);
}

}  // namespace
}  // namespace infercept
