// One step loop for the engine and the simulator (engine/step_loop.h): the same trace through
// the engine (the default model on the CPU, its clock virtual with a fixed step time) and
// through the simulator (a flat cost model of that step time) gives the same schedule, the
// same policy decisions and the same token counts, step by step (their step traces match
// row for row), and the same totals.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <functional>
#include <queue>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/simulator.h"
#include "test_util.h"

namespace infercept {
namespace {

constexpr double kStep = 0.02;  // seconds: every forward pass, in both

CostModel flat_cost() {
  CostModel c;
  c.t_fwd_samples = {{1, kStep}, {512, kStep}};
  c.kv_bytes_per_token = 18432.0;
  c.swap_bytes_per_second = 1e15;  // copies take no time: none can stall either run
  return c;
}

// Requests with tool calls whose pauses overlap, on a cache too small for all of them at
// once (preemption, and the policy's decisions under memory pressure).
std::vector<TraceRequest> make_trace() {
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 10; ++i) {
    TraceRequest r;
    r.id = (uint64_t)i;
    r.arrival_s = 0.05 * i;
    r.prompt_tokens = 40 + 23 * (i % 5);
    for (int k = 0; k < 2; ++k)
      r.segments.push_back({6 + (i + k) % 5, "tool" + std::to_string((i + k) % 3),
                            0.1 + 0.07 * ((i * 3 + k) % 4), 5 + (i % 4) * 3});
    r.segments.push_back({5 + i % 3, "", 0.0, 0});
    trace.push_back(r);
  }
  return trace;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}

// A trace row without its last column (replayed: the engine knows, the simulator does not).
std::string without_replayed(const std::string& row) {
  return row.substr(0, row.rfind(','));
}

struct ResumeAt {
  double at;
  uint64_t order;
  size_t index;
  bool operator>(const ResumeAt& o) const { return at != o.at ? at > o.at : order > o.order; }
};

// The simulator's event loop (simulate() in simulator.cpp) around EngineCore: arrivals and
// tool answers between steps, idle ticks while only paused requests exist.
void run_engine(EngineCore& e, const std::vector<TraceRequest>& trace, double idle_tick) {
  std::priority_queue<ResumeAt, std::vector<ResumeAt>, std::greater<ResumeAt>> resumes;
  std::vector<uint64_t> ids(trace.size());
  std::unordered_map<uint64_t, size_t> index_of;
  std::vector<size_t> segment(trace.size(), 0);
  uint64_t order = 0;
  size_t next = 0;
  int64_t live = 0;
  double t = 0.0;
  // Tool answers are due at the pause's end + the tool's time.
  auto step_and_pause = [&] {
    for (const RequestOutput& o : e.step()) {
      const size_t i = index_of.at(o.id);
      if (o.finished()) --live;
      if (o.intercepted) {
        const Segment& sg = trace[i].segments[segment[i]++];
        resumes.push({e.now() + sg.tool_seconds, order++, i});
      }
    }
    t = e.now();
  };
  for (int guard = 0; guard < 1000000; ++guard) {
    e.advance_clock(t);
    while (next < trace.size() && trace[next].arrival_s <= t) {
      const size_t i = next++;
      const TraceRequest& tr = trace[i];
      GenerateRequest req;
      req.prompt.assign((size_t)tr.prompt_tokens, 100 + (int32_t)i);
      int64_t total = 0;
      for (const Segment& sg : tr.segments) {
        total += sg.generate_tokens;
        if (!sg.is_last()) req.script.push_back({sg.generate_tokens, sg.tool, sg.tool_seconds});
      }
      req.params.max_tokens = total;
      req.params.ignore_eos = true;
      req.params.temperature = 0.0f;
      auto id = e.add_request(std::move(req));
      ASSERT_TRUE(id.ok()) << id.error().message;
      ids[i] = *id;
      index_of[*id] = i;
      ++live;
    }
    while (!resumes.empty() && resumes.top().at <= t) {
      const ResumeAt ev = resumes.top();
      resumes.pop();
      const Segment& sg = trace[ev.index].segments[segment[ev.index] - 1];
      ASSERT_TRUE(e.resume(ids[ev.index], std::vector<int32_t>((size_t)sg.return_tokens, 7)).ok());
    }
    if (next >= trace.size() && live == 0) return;
    const bool busy = e.has_work();
    if (busy) {
      const int64_t before = e.stats().steps + e.stats().copy_only_steps;
      step_and_pause();
      if (e.stats().steps + e.stats().copy_only_steps > before) continue;
    }
    double wake = std::numeric_limits<double>::infinity();
    if (next < trace.size()) wake = std::min(wake, trace[next].arrival_s);
    if (!resumes.empty()) wake = std::min(wake, resumes.top().at);
    ASSERT_TRUE(wake > t) << "nothing left to wait for at t = " << t;
    if (e.scheduler().n_paused() == 0 && !busy) {
      t = wake;
      continue;
    }
    t = std::min(wake, t + idle_tick);
    if (busy) continue;
    e.advance_clock(t);
    step_and_pause();
  }
  FAIL() << "the engine run did not end";
}

class StepLoopParity : public ::testing::TestWithParam<const char*> {};

TEST_P(StepLoopParity, EngineAndSimulatorStepAlike) {
  const std::string policy = GetParam();
  const std::vector<TraceRequest> trace = make_trace();
  const std::string dir = ::testing::TempDir();
  const std::string engine_trace =
      dir + "/engine-" + policy + "-" + std::to_string(getpid()) + ".csv";
  const std::string sim_trace = dir + "/sim-" + policy + "-" + std::to_string(getpid()) + ".csv";
  const CostModel cost = flat_cost();
  const int64_t kv_tokens = 640, swap_tokens = 4096;

  EngineConfig ec;
  ec.model_path = testing::default_model_path();
  ec.cost_model = cost;
  ec.kv_cache_tokens = kv_tokens;
  ec.swap_space_tokens = swap_tokens;
  ec.policy = policy;
  ec.virtual_step_seconds = kStep;
  ec.step_trace_path = engine_trace;
  ec.check_invariants = true;
  ec.prefix_cache = false;  // the simulator's tokens carry no content to share
  auto engine = EngineCore::create(ec);
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  const double idle_tick = 0.05;
  run_engine(**engine, trace, idle_tick);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  const EngineStats es = (*engine)->stats();
  const int64_t engine_blocks_in_use = (*engine)->allocator().n_used();
  const int64_t max_context = (*engine)->max_context();
  engine->reset();  // closes its step trace

  SimConfig sc;
  sc.cost = cost;
  sc.kv_cache_tokens = kv_tokens;
  sc.swap_space_tokens = swap_tokens;
  sc.max_context = max_context;
  sc.policy = policy;
  sc.duration_s = 1000.0;
  sc.idle_tick_s = idle_tick;
  sc.step_trace_path = sim_trace;
  sc.check_invariants = true;
  auto sim = simulate(sc, trace);
  ASSERT_TRUE(sim.ok()) << sim.error().message;

  // Step by step: every row of the two step traces (plan, decisions, copies, rows, time).
  const auto engine_rows = read_lines(engine_trace), sim_rows = read_lines(sim_trace);
  ASSERT_GT(engine_rows.size(), 50u);
  ASSERT_EQ(engine_rows.size(), sim_rows.size());
  for (size_t i = 0; i < engine_rows.size(); ++i)
    ASSERT_EQ(without_replayed(engine_rows[i]), without_replayed(sim_rows[i])) << "row " << i;

  // The totals.
  const SimStats& ss = sim->stats;
  EXPECT_EQ(es.steps, ss.steps);
  EXPECT_EQ(es.interceptions, ss.interceptions);
  EXPECT_EQ(es.interceptions, 20);
  EXPECT_EQ(es.resumes, ss.resumes);
  EXPECT_EQ(es.discard_decisions, ss.discard_decisions);
  EXPECT_EQ(es.swap_decisions, ss.swap_decisions);
  EXPECT_EQ(es.preserve_decisions, ss.preserve_decisions);
  EXPECT_EQ(es.swapped_out_tokens, ss.swapped_out_tokens);
  EXPECT_EQ(es.swapped_in_tokens, ss.swapped_in_tokens);
  EXPECT_EQ(es.preemptions, ss.preemptions);
  EXPECT_EQ(es.recomputed_tokens, ss.recomputed_tokens);
  EXPECT_EQ(es.prompt_tokens_computed, ss.prompt_tokens_computed);
  EXPECT_EQ(es.decode_tokens, ss.decode_tokens);
  EXPECT_DOUBLE_EQ(es.waste_recompute, ss.waste_recompute);
  EXPECT_DOUBLE_EQ(es.waste_preserve, ss.waste_preserve);
  EXPECT_EQ(engine_blocks_in_use, 0);
  // The trace is tight enough that every policy decides under pressure.
  if (policy == "minwaste") {
    EXPECT_GT(es.discard_decisions, 0);
    EXPECT_GT(es.swap_decisions, 0);
    EXPECT_GT(es.preserve_decisions, 0);
    EXPECT_GT(es.preemptions, 0);
  } else if (policy == "discard") {
    EXPECT_EQ(es.discard_decisions, es.interceptions);
  } else {
    EXPECT_GT(es.preserve_decisions, 0);
    EXPECT_GT(es.recomputed_tokens, 0);  // a preserved pause gave blocks up under pressure
  }
  EXPECT_EQ(sim->device_blocks_in_use, 0);
  std::remove(engine_trace.c_str());
  std::remove(sim_trace.c_str());
}

INSTANTIATE_TEST_SUITE_P(Policies, StepLoopParity,
                         ::testing::Values("minwaste", "discard", "preserve"));

}  // namespace
}  // namespace infercept
