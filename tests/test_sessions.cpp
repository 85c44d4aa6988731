// The long-agent-session generator (src/workload/sessions.h): pure functions, no model. The
// statistical tests draw thousands of sessions with fixed seeds, so they are deterministic;
// their tolerances (5% on means, 10% on standard deviations) are several standard errors wide.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "workload/sessions.h"
#include "workload/workload.h"

namespace infercept {
namespace {

WorkloadSpec sessions_spec() {
  WorkloadSpec spec;
  spec.name = "sessions";
  return spec;
}

// Sessions 0..n-1 of seed 2024, drawn directly (no arrival process).
std::vector<TraceRequest> draw(const WorkloadSpec& spec, int n) {
  std::vector<TraceRequest> out;
  for (int i = 0; i < n; ++i)
    out.push_back(generate_session(spec, (uint64_t)i, 0.0, mix64(2024 ^ mix64((uint64_t)i))));
  return out;
}

struct Stat {
  double n = 0, sum = 0, sum2 = 0;
  void add(double x) {
    n += 1;
    sum += x;
    sum2 += x * x;
  }
  double mean() const { return sum / n; }
  double std() const { return std::sqrt((sum2 - sum * sum / n) / (n - 1)); }
};

bool close(double x, double want, double tol) {
  return std::abs(x - want) <= tol * std::abs(want);
}

TEST(Sessions, MomentsMatchTheProfile) {
  const WorkloadSpec spec = sessions_spec();
  const SessionProfile& p = spec.sessions;
  const auto sessions = draw(spec, 4000);
  Stat turns, task, gen, context;
  std::map<std::string, Stat> pause, output;
  double weight_total = 0, mean_output = 0;
  for (const SessionTool& t : p.tools) weight_total += t.weight;
  for (const SessionTool& t : p.tools)
    mean_output += t.weight / weight_total * t.output_tokens.mean;
  const int64_t system = session_shared_prefix_tokens(spec);
  int64_t in_regime = 0;
  for (const TraceRequest& r : sessions) {
    turns.add(r.n_interceptions());
    task.add(r.prompt_tokens);
    const double ctx = (double)(system + r.final_context_tokens());
    context.add(ctx);
    in_regime += ctx >= 10'000 && ctx <= 150'000;
    for (const Segment& s : r.segments) {
      gen.add(s.generate_tokens);
      if (s.is_last()) continue;
      pause[s.tool].add(s.tool_seconds);
      output[s.tool].add(s.return_tokens);
    }
  }
  EXPECT_TRUE(close(turns.mean(), p.turns.mean, 0.05)) << turns.mean();
  EXPECT_TRUE(close(turns.std(), p.turns.std, 0.10)) << turns.std();
  EXPECT_TRUE(close(task.mean(), p.task_tokens.mean, 0.05)) << task.mean();
  EXPECT_TRUE(close(gen.mean(), p.generate_tokens.mean, 0.05)) << gen.mean();
  EXPECT_TRUE(close(gen.std(), p.generate_tokens.std, 0.10)) << gen.std();
  double calls = 0;
  for (const auto& [name, s] : pause) calls += s.n;
  for (const SessionTool& t : p.tools) {
    ASSERT_TRUE(pause.count(t.name)) << t.name;
    EXPECT_NEAR(pause[t.name].n / calls, t.weight / weight_total, 0.01) << t.name;
    EXPECT_TRUE(close(pause[t.name].mean(), t.seconds.mean, 0.08))
        << t.name << " pause " << pause[t.name].mean();
    EXPECT_TRUE(close(output[t.name].mean(), t.output_tokens.mean, 0.08))
        << t.name << " output " << output[t.name].mean();
  }
  // The whole context: shared prefix + task + (generated + output) per turn + the answer.
  const double want = (double)system + p.task_tokens.mean +
                      p.turns.mean * (p.generate_tokens.mean + mean_output) +
                      p.generate_tokens.mean;
  EXPECT_TRUE(close(context.mean(), want, 0.05)) << context.mean() << " vs " << want;
  // The regime the defaults are for: contexts of 10k-150k tokens.
  EXPECT_GE((double)in_regime / (double)sessions.size(), 0.95);
}

TEST(Sessions, EverySessionGrowsMonotonicallyAndEndsInAnAnswer) {
  const WorkloadSpec spec = sessions_spec();
  std::set<std::string> tools;
  for (const SessionTool& t : spec.sessions.tools) tools.insert(t.name);
  for (const TraceRequest& r : draw(spec, 500)) {
    ASSERT_GE(r.n_interceptions(), 1);
    EXPECT_EQ(r.augmentation, "sessions");
    EXPECT_GE(r.prompt_tokens, spec.min_prompt_tokens);
    int64_t context = r.prompt_tokens;
    for (const Segment& s : r.segments) {
      const int64_t before = context;
      context += s.generate_tokens + s.return_tokens;
      EXPECT_GT(context, before);  // every turn generates at least one token
      if (!s.is_last()) {
        EXPECT_TRUE(tools.count(s.tool)) << s.tool;
        EXPECT_GE(s.tool_seconds, 0.0);
      }
    }
    EXPECT_TRUE(r.segments.back().is_last());
    EXPECT_EQ(context, r.final_context_tokens());
  }
}

TEST(Sessions, SameSpecSameTraceAndSharedArrivals) {
  WorkloadSpec spec = sessions_spec();
  spec.rate = 2.0;
  spec.duration_s = 30.0;
  spec.seed = 5;
  const auto a = generate_workload(spec);
  const auto b = generate_workload(spec);
  ASSERT_GT(a.size(), 30u);
  EXPECT_EQ(a, b);
  spec.seed = 6;
  EXPECT_NE(generate_workload(spec), a);
  // Arrivals depend on (seed, rate, duration) alone, as for the Table 1 workloads.
  spec.seed = 5;
  spec.name = "mixed";
  const auto mixed = generate_workload(spec);
  ASSERT_EQ(mixed.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(mixed[i].arrival_s, a[i].arrival_s);
  // One session pinned: a change that moves old seeds (draw order, transforms) fails here.
  // bench/agent_workload.py draws the same (tests/workload_py_test.py).
  const TraceRequest r = generate_session(sessions_spec(), 0, 0.0, mix64(2024 ^ mix64(0)));
  EXPECT_EQ(r.n_interceptions(), 31);
  EXPECT_EQ(r.prompt_tokens, 286);
  EXPECT_EQ(r.segments[0].tool, "run_tests");
  EXPECT_EQ(r.segments[0].generate_tokens, 64);
  EXPECT_EQ(r.segments[0].return_tokens, 5924);
  EXPECT_EQ(r.final_context_tokens(), 92310);
}

TEST(Sessions, ClampDropsTurnsAndKeepsTheRest) {
  const WorkloadSpec free_spec = sessions_spec();
  const auto free = draw(free_spec, 1000);
  for (int32_t limit : {32768, 131072}) {
    WorkloadSpec spec = sessions_spec();
    spec.max_context = limit;
    const int64_t system = session_shared_prefix_tokens(spec);
    const auto clamped = draw(spec, 1000);
    int64_t cut = 0;
    for (size_t i = 0; i < free.size(); ++i) {
      const TraceRequest& f = free[i];
      const TraceRequest& c = clamped[i];
      EXPECT_LE(system + c.final_context_tokens(), limit);
      ASSERT_GE(c.n_interceptions(), 1);
      ASSERT_LE(c.n_interceptions(), f.n_interceptions());
      cut += c.n_interceptions() < f.n_interceptions();
      // The kept turns are the drawn ones; the answer is the drawn answer.
      EXPECT_EQ(c.prompt_tokens, f.prompt_tokens);
      for (int32_t k = 0; k < c.n_interceptions(); ++k) EXPECT_EQ(c.segments[k], f.segments[k]);
      EXPECT_EQ(c.segments.back(), f.segments.back());
      if (c.n_interceptions() < f.n_interceptions()) {
        // It stopped because the next turn would not fit.
        const Segment& next = f.segments[c.n_interceptions()];
        EXPECT_GT(system + c.final_context_tokens() + next.generate_tokens + next.return_tokens,
                  limit);
      }
    }
    EXPECT_GT(cut, 0) << limit;  // the defaults do reach past 32k and 128k
  }
  // The tightest clamp the spec allows: one turn, trimmed to fit exactly.
  WorkloadSpec tight = sessions_spec();
  tight.max_context = (int32_t)(session_shared_prefix_tokens(tight) + tight.min_prompt_tokens + 2);
  ASSERT_TRUE(validate_workload_spec(tight).ok());
  for (const TraceRequest& r : draw(tight, 50)) {
    EXPECT_EQ(r.n_interceptions(), 1);
    EXPECT_EQ(session_shared_prefix_tokens(tight) + r.final_context_tokens(), tight.max_context);
  }
  tight.max_context -= 1;
  EXPECT_FALSE(validate_workload_spec(tight).ok());
}

TEST(Sessions, ScalesShrinkTokensAndPauses) {
  const WorkloadSpec base = sessions_spec();
  WorkloadSpec small = sessions_spec();
  small.context_scale = 0.01;
  small.time_scale = 0.001;
  EXPECT_EQ(session_shared_prefix_tokens(base), base.sessions.system_tokens);
  EXPECT_EQ(session_shared_prefix_tokens(small), std::llround(base.sessions.system_tokens * 0.01));
  const auto a = draw(base, 300);
  const auto b = draw(small, 300);
  double ctx_a = 0, ctx_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    // Scales change sizes, not the shape: same turns, same tools, pauses scaled exactly.
    ASSERT_EQ(a[i].segments.size(), b[i].segments.size());
    for (size_t k = 0; k + 1 < a[i].segments.size(); ++k) {
      EXPECT_EQ(a[i].segments[k].tool, b[i].segments[k].tool);
      EXPECT_DOUBLE_EQ(b[i].segments[k].tool_seconds, a[i].segments[k].tool_seconds * 0.001);
    }
    ctx_a += (double)a[i].final_context_tokens();
    ctx_b += (double)b[i].final_context_tokens();
  }
  // Rounding and the one-token floors keep a small context a bit above the exact 1%.
  EXPECT_GT(ctx_b, 0.005 * ctx_a);
  EXPECT_LT(ctx_b, 0.03 * ctx_a);
}

TEST(Sessions, OverridesAndValidation) {
  WorkloadSpec spec = sessions_spec();
  ASSERT_TRUE(validate_workload_spec(spec).ok());
  ASSERT_TRUE(apply_session_override(spec, "turns=4,2").ok());
  EXPECT_EQ(spec.sessions.turns.mean, 4.0);
  EXPECT_EQ(spec.sessions.turns.std, 2.0);
  ASSERT_TRUE(apply_session_override(spec, "system=300").ok());
  EXPECT_EQ(spec.sessions.system_tokens, 300);
  ASSERT_TRUE(apply_session_override(spec, "generate=20").ok());
  EXPECT_EQ(spec.sessions.generate_tokens.std, 0.0);
  ASSERT_TRUE(apply_session_override(spec, "*.output=100,50").ok());
  for (const SessionTool& t : spec.sessions.tools) EXPECT_EQ(t.output_tokens.mean, 100.0);
  ASSERT_TRUE(apply_session_override(spec, "human.weight=0").ok());
  ASSERT_TRUE(apply_session_override(spec, "run_tests.seconds=30,5").ok());
  for (const TraceRequest& r : draw(spec, 200)) {
    for (size_t k = 0; k + 1 < r.segments.size(); ++k) EXPECT_NE(r.segments[k].tool, "human");
  }
  for (const char* bad :
       {"turns=0,1", "turns=3,-1", "turns=a", "system=-1", "system=1.5", "nope=1", "zz.output=1,1",
        "grep.size=1", "grep.weight=-1", "grep.seconds=", "turns"}) {
    EXPECT_FALSE(apply_session_override(spec, bad).ok()) << bad;
  }
  ASSERT_TRUE(apply_session_override(spec, "*.weight=0").ok());
  EXPECT_FALSE(validate_workload_spec(spec).ok());  // no tool can be called
  WorkloadSpec dup = sessions_spec();
  dup.sessions.tools.push_back(dup.sessions.tools[0]);
  EXPECT_FALSE(validate_workload_spec(dup).ok());
  EXPECT_TRUE(is_builtin_workload("sessions"));
}

}  // namespace
}  // namespace infercept
