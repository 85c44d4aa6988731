// The simulator with a disk tier on the long-session workload: minwaste spills paused
// sessions' host KV when the host pool is full and restores it at their resumes, the jobs
// taking bytes over the profile's disk bandwidths beside the steps; every request still
// completes, and the scheduler's invariants hold after every step.
#include <gtest/gtest.h>

#include "engine/simulator.h"
#include "workload/workload.h"

namespace infercept {
namespace {

SimConfig session_config(const SimProfile& p, int64_t disk_tokens) {
  SimConfig c;
  c.cost = p.cost;
  c.copies_overlap = p.copies_overlap;
  c.artifacts = p.artifacts;
  // A device pool for a few sessions and a host pool for fewer: paused sessions' KV must go
  // somewhere.
  c.kv_cache_tokens = 48 * 1024;
  c.swap_space_tokens = 16 * 1024;
  c.disk_tokens = disk_tokens;
  c.duration_s = 20.0;
  c.check_invariants = true;
  return c;
}

std::vector<TraceRequest> sessions() {
  WorkloadSpec spec;
  spec.name = "sessions";
  spec.rate = 1.0;
  spec.duration_s = 20.0;
  spec.seed = 3;
  spec.max_context = 32768;
  spec.sessions.turns = {6.0, 2.0};
  return generate_workload(spec);
}

TEST(SimulatorDiskTier, SessionsSpillAndRestoreAndAllComplete) {
  auto p = load_sim_profile("h200-llama3-8b");
  ASSERT_TRUE(p.ok()) << p.error().message;
  const std::vector<TraceRequest> trace = sessions();
  ASSERT_FALSE(trace.empty());
  auto with = simulate(session_config(*p, 1 << 20), trace);
  ASSERT_TRUE(with.ok()) << with.error().message;
  const SimStats& st = with->stats;
  std::printf(
      "disk: %lld spills, %lld/%lld tokens spilled/restored, %lld undone; %lld recomputed\n",
      (long long)st.spill_decisions, (long long)st.spilled_tokens, (long long)st.restored_tokens,
      (long long)st.spills_undone, (long long)st.recomputed_tokens);
  EXPECT_GT(st.spilled_tokens, 0);
  EXPECT_GT(st.restored_tokens, 0);
  EXPECT_EQ(st.disk_write_failures + st.disk_read_failures, 0);
  EXPECT_DOUBLE_EQ(st.spilled_bytes, (double)st.spilled_tokens * p->cost.kv_bytes_per_token);
  int64_t completed = 0;
  for (const RequestRecord& r : with->records) completed += r.completed ? 1 : 0;
  EXPECT_EQ(completed, with->submitted);
  EXPECT_EQ(with->device_blocks_in_use, 0);
  EXPECT_EQ(with->host_blocks_in_use, 0);
  // Restored requests resumed with their KV on disk, and are reported apart.
  EXPECT_GT(with->resume_ttft.of(KvPlace::disk).size(), 0u);
  size_t by_place = 0;
  for (const auto& v : with->resume_ttft.by_place) by_place += v.size();
  EXPECT_EQ(by_place, with->resume_ttft.all.size());

  // Without the tier the same run spills nothing.
  auto without = simulate(session_config(*p, 0), trace);
  ASSERT_TRUE(without.ok()) << without.error().message;
  EXPECT_EQ(without->stats.spill_decisions, 0);
  EXPECT_EQ(without->stats.spilled_tokens, 0);
}

}  // namespace
}  // namespace infercept
