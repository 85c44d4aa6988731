// The disk tier in the scheduler, as pure logic: minwaste spills a paused request's host KV
// when the host pool is full and someone else needs it, restores it when its tool answers
// (or ahead of it, as it swaps host KV back ahead of a due tool),
// and a failed write or read keeps the KV on the host or drops it for recomputation. The
// disk jobs are a fake mover that ends every job in the step after it was planned.
#include <gtest/gtest.h>

#include <memory>

#include "core/check.h"
#include "kv/block_allocator.h"
#include "sched/duration_estimator.h"
#include "sched/policy.h"
#include "sched/scheduler.h"

namespace infercept {
namespace {

struct SpillHarness {
  CostModel cost;
  std::unique_ptr<DurationEstimator> est;
  std::unique_ptr<Policy> policy;
  SchedulerConfig cfg{4, 64, 16, 0.7};  // pressure below 70% of the device pool free
  BlockAllocator device{20}, host{12};
  std::unique_ptr<Scheduler> sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<DiskMove> in_flight;  // jobs planned, ended at the next step
  bool fail_writes = false, fail_reads = false;
  double now = 0.0;

  explicit SpillHarness(double watermark = 0.7) {
    cfg.pressure_watermark = watermark;
    // Recomputing is dear (minutes), so minwaste never prefers discarding a 100 s pause.
    cost.t_fwd_samples = {{1, 1.0}, {64, 300.0}};
    cost.kv_bytes_per_token = 1000.0;
    cost.swap_bytes_per_second = 1e9;
    cost.saturation_tokens = 1;
    auto e = make_duration_estimator("oracle");
    CHECK(e.ok());
    est = std::move(*e);
    policy = make_policy(PolicyKind::minwaste, cost, *est);
    cfg.disk_blocks = 64;
    cfg.long_prefill_tokens = 64;
    sched = std::make_unique<Scheduler>(cfg, device, &host, policy.get(), &cost);
  }
  Sequence* add(int64_t prompt_len) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size();
    s->arrival_time = now;
    s->tokens.assign((size_t)prompt_len, 7);
    s->n_prompt = prompt_len;
    sched->add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }
  StepPlan step() {
    for (const DiskMove& m : in_flight) {
      const bool write = std::any_of(last_spills.begin(), last_spills.end(),
                                     [&](uint64_t c) { return c == m.copy; });
      sched->disk_done({m.copy, write ? !fail_writes : !fail_reads});
    }
    in_flight.clear();
    last_spills.clear();
    StepPlan plan = sched->schedule(now += 0.01);
    sched->commit(plan);
    for (const ScheduledSeq& ss : plan.scheduled)
      if (ss.sample) ss.seq->tokens.push_back(1);
    for (const DiskMove& m : plan.spill_out) {
      in_flight.push_back(m);
      last_spills.push_back(m.copy);
    }
    for (const DiskMove& m : plan.spill_in) in_flight.push_back(m);
    sched->check_invariants();
    // Every tier adds up: free + held == total.
    EXPECT_EQ(device.n_free() + device.n_held() + device.n_idle_cached(), device.n_blocks());
    EXPECT_EQ(host.n_free() + host.n_held() + host.n_idle_cached(), host.n_blocks());
    EXPECT_LE(sched->disk_used_blocks(), cfg.disk_blocks);
    return plan;
  }
  void run_and_pause(Sequence* s, double hint) {
    for (int i = 0; i < 20 && s->n_generated() == 0; ++i) step();
    ASSERT_EQ(s->n_generated(), 1);
    sched->intercept(s, {"search", now, hint, false, 0.0, false});
  }
  std::vector<uint64_t> last_spills;
};

// A is paused and swapped to the host; B pauses too and the host cannot take it: A, whose
// spill wastes least, goes to disk, and B takes its host blocks. When A's tool answers, the
// host is full of B, so B is spilled in turn, A is read back into host blocks, swapped in and
// continues without recomputing a token.
TEST(SchedulerDiskTier, MinwasteSpillsWhenTheHostIsFullAndRestoresOnResume) {
  SpillHarness h;
  Sequence* a = h.add(40);  // 10 blocks, + 1 for its sampled token
  h.run_and_pause(a, 100.0);
  Sequence* b = h.add(40);  // admitted beside A; free blocks fall under the watermark
  h.run_and_pause(b, 100.0);
  // Under pressure the host takes what it can of A and B (12 blocks).
  int spill_steps = 0;
  std::vector<int32_t> a_host;
  for (int i = 0; i < 10 && !a->on_disk(); ++i) {
    if (a->disk == DiskState::none) a_host = a->host_blocks;
    const StepPlan p = h.step();
    for (const DiskMove& m : p.spill_out)
      if (m.copy == a->disk_copy) {
        ++spill_steps;
        EXPECT_EQ(m.host_blocks, a_host);  // its host blocks, in order
        EXPECT_EQ(a->disk, DiskState::writing);
      }
  }
  ASSERT_TRUE(a->on_disk());
  EXPECT_EQ(spill_steps, 1);
  EXPECT_TRUE(a->host_blocks.empty());  // freed once the write ended
  EXPECT_EQ(a->n_computed, 40);
  EXPECT_GT(a->n_spilled, 0);
  // B gets the host blocks A freed.
  for (int i = 0; i < 5; ++i) h.step();
  EXPECT_GT(b->host_blocks.size(), 2u);

  h.sched->resume(a, {5, 5}, h.now);
  bool restored = false;
  for (int i = 0; i < 20 && a->state != SeqState::running; ++i) {
    const StepPlan p = h.step();
    for (const DiskMove& m : p.spill_in) restored = restored || m.copy != 0;
  }
  EXPECT_TRUE(restored);
  ASSERT_EQ(a->state, SeqState::running);
  // The KV is all back: the step that runs it again computes only the sampled token and
  // the returned ones (40 + 3), nothing recomputed.
  EXPECT_EQ(a->n_recomputed, 0);
  EXPECT_EQ(a->n_computed, 43);
  EXPECT_GT(a->n_restored, 0);
  EXPECT_EQ(b->disk, DiskState::on_disk);  // spilled in turn to make room for A's restore
  EXPECT_EQ(h.sched->disk_counters().write_failures, 0);
  EXPECT_EQ(h.sched->disk_counters().read_failures, 0);
  EXPECT_GT(h.sched->disk_counters().spilled_blocks, 0);
  EXPECT_GT(h.sched->disk_counters().restored_blocks, 0);
}

// Prefetch: once A's tool is expected back within twice the read's time and the host has
// room, minwaste reads A's KV back before the tool answers (not earlier), so the resume finds
// it on the host and runs after a swap-in alone.
TEST(SchedulerDiskTier, MinwastePrefetchesKvFromDiskBeforeTheToolIsDue) {
  SpillHarness h;
  h.cost.disk_read_bytes_per_second = 1e5;  // 40 tokens x 1 kB: 0.4 s to read back
  Sequence* a = h.add(40);
  h.run_and_pause(a, 100.0);
  const double a_called = h.now;
  Sequence* b = h.add(40);
  h.run_and_pause(b, 1000.0);
  for (int i = 0; i < 10 && !a->on_disk(); ++i) h.step();
  ASSERT_TRUE(a->on_disk());
  // B lets go of its KV (its client went away): the host pool has room again.
  h.sched->release_paused(b);
  // 50 s before A's tool is due: no read yet, whatever the room.
  h.now = a_called + 50.0;
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(h.step().spill_in.empty());
  EXPECT_TRUE(a->on_disk());
  // 0.6 s before (under 2 x 0.4 s): the read is planned while A is still paused.
  h.now = a_called + 99.4;
  const StepPlan p = h.step();
  ASSERT_EQ(p.spill_in.size(), 1u);
  EXPECT_EQ(p.n_prefetches, 1);
  EXPECT_EQ(a->disk, DiskState::reading);
  EXPECT_TRUE(a->is_paused());
  h.step();  // the read ends
  EXPECT_EQ(a->disk, DiskState::none);
  EXPECT_EQ(a->host_tokens(h.cfg.block_size), 40);
  EXPECT_EQ(kv_place(*a, h.cfg.block_size), KvPlace::host);
  // The tool answers: no disk job any more, straight to the swap-in.
  h.sched->resume(a, {5, 5}, h.now);
  for (int i = 0; i < 5 && a->state != SeqState::running; ++i)
    EXPECT_TRUE(h.step().spill_in.empty());
  ASSERT_EQ(a->state, SeqState::running);
  EXPECT_EQ(a->n_recomputed, 0);
  EXPECT_EQ(a->n_computed, 43);
  EXPECT_GT(a->n_restored, 0);
}

// The same ahead of a resume one tier up: A's KV, swapped to the host while B needed the
// device, comes back into spare device blocks once A's tool is due (not before), so the
// resume finds all of it on the device and runs at once.
TEST(SchedulerPrefetch, SwapsHostKvBackBeforeTheToolIsDue) {
  SpillHarness h(0.3);                 // pressure below 6 of 20 device blocks free
  h.cost.swap_bytes_per_second = 1e5;  // 40 tokens x 1 kB: 0.4 s each way
  Sequence* a = h.add(40);
  h.run_and_pause(a, 100.0);
  const double a_called = h.now;
  Sequence* b = h.add(40);
  h.run_and_pause(b, 1000.0);
  for (int i = 0; i < 20 && !a->blocks.blocks.empty(); ++i) h.step();
  ASSERT_TRUE(a->blocks.blocks.empty()) << "A was not swapped out";
  ASSERT_EQ(a->host_tokens(h.cfg.block_size), 40);
  h.sched->release_paused(b);
  h.now = a_called + 50.0;  // far from due: stays on the host
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(h.step().swap_in.empty());
  EXPECT_EQ(kv_place(*a, h.cfg.block_size), KvPlace::host);
  h.now = a_called + 99.5;  // 0.5 s before (under 2 x 0.4 s): swapped in while paused
  const StepPlan p = h.step();
  EXPECT_EQ(p.swap_in.size(), 10u);
  EXPECT_EQ(p.n_prefetches, 1);
  EXPECT_TRUE(a->is_paused());
  EXPECT_TRUE(a->host_blocks.empty());
  EXPECT_EQ(kv_place(*a, h.cfg.block_size), KvPlace::device);
  h.sched->resume(a, {5, 5}, h.now);
  const StepPlan run = h.step();
  EXPECT_TRUE(run.swap_in.empty());
  EXPECT_EQ(a->state, SeqState::running);
  EXPECT_EQ(a->n_recomputed, 0);
  EXPECT_EQ(a->n_computed, 43);
}

// A write that fails (a full disk, an I/O error) leaves the KV where it was, on the host.
TEST(SchedulerDiskTier, FailedWriteKeepsTheKvOnTheHost) {
  SpillHarness h;
  h.fail_writes = true;
  Sequence* a = h.add(40);
  h.run_and_pause(a, 100.0);
  Sequence* b = h.add(40);
  h.run_and_pause(b, 100.0);
  bool spilled = false;
  for (int i = 0; i < 6; ++i) spilled = !h.step().spill_out.empty() || spilled;
  EXPECT_TRUE(spilled);
  EXPECT_GT(h.sched->disk_counters().write_failures, 0);
  EXPECT_EQ(h.sched->disk_counters().spilled_blocks, 0);
  EXPECT_NE(a->disk, DiskState::on_disk);
  EXPECT_EQ(a->n_computed, 40);
  EXPECT_EQ(a->n_recomputed, 0);
  // Not tried again for the rest of this pause (a full disk stays full for a while).
  EXPECT_EQ(h.sched->disk_counters().write_failures, 1);
}

// A read that fails (an I/O error, a corrupted file) drops the KV: the request recomputes
// it through the waiting queue and runs on.
TEST(SchedulerDiskTier, FailedReadRecomputes) {
  SpillHarness h;
  h.fail_reads = true;
  Sequence* a = h.add(40);
  h.run_and_pause(a, 100.0);
  Sequence* b = h.add(40);
  h.run_and_pause(b, 100.0);
  for (int i = 0; i < 10 && !a->on_disk(); ++i) h.step();
  ASSERT_TRUE(a->on_disk());
  h.sched->resume(a, {5, 5}, h.now);
  for (int i = 0; i < 40 && a->n_recomputed == 0; ++i) h.step();
  EXPECT_EQ(h.sched->disk_counters().read_failures, 1);
  EXPECT_EQ(a->n_recomputed, 40);
  EXPECT_EQ(a->disk, DiskState::none);
  // It runs again: its whole context is prefilled.
  for (int i = 0; i < 40 && a->n_computed < (int64_t)a->tokens.size() - 1; ++i) h.step();
  EXPECT_EQ(a->n_computed, (int64_t)a->tokens.size() - 1);
  EXPECT_EQ(a->state, SeqState::running);
}

// A request let go (expiry) while its write runs: the host blocks the write reads stay held
// until it ends, then go back; the copy is removed.
TEST(SchedulerDiskTier, ReleaseWhileWritingKeepsTheBlocksUntilTheWriteEnds) {
  SpillHarness h;
  Sequence* a = h.add(40);
  h.run_and_pause(a, 100.0);
  Sequence* b = h.add(40);
  h.run_and_pause(b, 100.0);
  for (int i = 0; i < 10 && a->disk != DiskState::writing; ++i) h.step();
  ASSERT_EQ(a->disk, DiskState::writing);
  const std::vector<int32_t> pinned = h.in_flight.front().host_blocks;
  h.sched->release_paused(a);
  for (int32_t blk : pinned) EXPECT_EQ(h.host.refcount(blk), 1);  // still the write's
  h.sched->check_invariants();
  const StepPlan p = h.step();  // the write ends, the blocks go back
  EXPECT_FALSE(p.disk_drops.empty());
  EXPECT_EQ(h.sched->disk_used_blocks(), 0);
  EXPECT_EQ(h.sched->disk_jobs_in_flight(), 0);
  EXPECT_EQ(a->n_computed, 0);
}

// Without a disk tier nothing is ever spilled: the same pressure leaves A on the host.
TEST(SchedulerDiskTier, NoDiskTierNoSpill) {
  SpillHarness h;
  h.cfg.disk_blocks = 0;
  h.sched = std::make_unique<Scheduler>(h.cfg, h.device, &h.host, h.policy.get(), &h.cost);
  Sequence* a = h.add(40);
  h.run_and_pause(a, 100.0);
  Sequence* b = h.add(40);
  h.run_and_pause(b, 100.0);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(h.step().spill_out.empty());
  EXPECT_EQ(a->disk, DiskState::none);
}

}  // namespace
}  // namespace infercept
