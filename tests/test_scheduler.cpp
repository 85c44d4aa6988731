// The scheduler as pure logic: no model, no backend. Sequences are driven through steps by
// a fake executor that appends a token whenever the plan says "sample".
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "kv/block_allocator.h"
#include "sched/duration_estimator.h"
#include "sched/policy.h"
#include "sched/scheduler.h"

namespace infercept {
namespace {

TEST(BlockAllocator, AllocateReleaseRefcount) {
  BlockAllocator a(4);
  EXPECT_EQ(a.n_free(), 4);
  auto b0 = a.allocate();
  auto b1 = a.allocate();
  ASSERT_TRUE(b0 && b1);
  EXPECT_NE(*b0, *b1);
  a.retain(*b0);
  EXPECT_EQ(a.refcount(*b0), 2);
  a.release(*b0);
  EXPECT_EQ(a.n_free(), 2);
  a.release(*b0);
  EXPECT_EQ(a.n_free(), 3);
  a.check_invariants();
  EXPECT_TRUE(a.allocate());
  EXPECT_TRUE(a.allocate());
  EXPECT_TRUE(a.allocate());
  EXPECT_FALSE(a.allocate().has_value());  // exhausted is a value, not a crash
  a.check_invariants();
}

TEST(BlockAllocatorDeath, DoubleReleaseIsCaught) {
  BlockAllocator a(2);
  auto b = a.allocate();
  a.release(*b);
  EXPECT_DEATH(a.release(*b), "CHECK failed");
}

struct Harness {
  SchedulerConfig cfg;
  BlockAllocator alloc;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<int64_t> max_new;
  double now = 0.0;
  explicit Harness(int32_t blocks, int64_t budget = 64, int64_t block_size = 4)
      : cfg{block_size, budget, 16, 0.05}, alloc(blocks), sched(cfg, alloc) {}
  Harness(int32_t blocks, const SchedulerConfig& c) : cfg(c), alloc(blocks), sched(cfg, alloc) {}

  Sequence* add(int64_t prompt_len, int64_t new_tokens, double arrival) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size();
    s->arrival_time = arrival;
    s->tokens.assign((size_t)prompt_len, 7);
    s->n_prompt = prompt_len;
    sched.add(s.get());
    seqs.push_back(std::move(s));
    max_new.push_back(new_tokens);
    return seqs.back().get();
  }

  // One step of the fake executor. Returns the plan for inspection.
  StepPlan step() {
    StepPlan plan = sched.schedule(now += 0.01);
    EXPECT_LE(plan.n_tokens, cfg.max_tokens_per_step);
    sched.commit(plan);
    for (const ScheduledSeq& ss : plan.scheduled) {
      if (!ss.sample) continue;
      Sequence* s = ss.seq;
      s->tokens.push_back(1);
      if (s->n_generated() >= max_new[s->id]) sched.finish(s);
    }
    sched.check_invariants();
    return plan;
  }
};

TEST(Scheduler, ChunkedPrefillRespectsTokenBudget) {
  Harness h(64, /*budget=*/8);
  Sequence* s = h.add(20, 3, 0.0);
  auto p1 = h.step();
  ASSERT_EQ(p1.scheduled.size(), 1u);
  EXPECT_EQ(p1.scheduled[0].n_tokens, 8);
  EXPECT_FALSE(p1.scheduled[0].sample);
  auto p2 = h.step();
  EXPECT_EQ(p2.scheduled[0].n_tokens, 8);
  auto p3 = h.step();
  EXPECT_EQ(p3.scheduled[0].n_tokens, 4);
  EXPECT_TRUE(p3.scheduled[0].sample);
  EXPECT_EQ(s->n_generated(), 1);
  auto p4 = h.step();  // decode
  EXPECT_EQ(p4.scheduled[0].n_tokens, 1);
}

TEST(Scheduler, DecodesAndPrefillsShareAStep) {
  Harness h(64, /*budget=*/10);
  h.add(4, 10, 0.0);
  h.step();  // prefill of the first, samples
  h.add(30, 2, 1.0);
  auto p = h.step();
  ASSERT_EQ(p.scheduled.size(), 2u);
  EXPECT_EQ(p.scheduled[0].n_tokens, 1);  // decode first
  EXPECT_EQ(p.scheduled[1].n_tokens, 9);  // prefill chunk fills the rest of the budget
}

TEST(Scheduler, PreemptsNewestWhenCacheIsFullAndEveryoneFinishes) {
  // 6 blocks of 4 tokens = 24 tokens; three sequences that need 13 tokens each cannot all
  // fit, so the newest are preempted (recomputed later) but all of them finish.
  Harness h(6, 64, 4);
  for (int i = 0; i < 3; ++i) h.add(5, 8, (double)i);
  int64_t preemptions = 0;
  for (int it = 0; it < 500 && h.sched.has_work(); ++it)
    preemptions += (int64_t)h.step().preempted.size();
  EXPECT_FALSE(h.sched.has_work());
  EXPECT_GT(preemptions, 0);
  for (auto& s : h.seqs) {
    EXPECT_EQ(s->n_generated(), 8);
    EXPECT_EQ(s->state, SeqState::finished);
  }
  EXPECT_EQ(h.alloc.n_free(), 6);  // nothing leaked
}

TEST(Scheduler, OldestRunningSequenceIsNeverPreemptedForAYoungerOne) {
  Harness h(4, 64, 4);
  Sequence* old = h.add(8, 7, 0.0);
  Sequence* young = h.add(4, 7, 1.0);
  for (int it = 0; it < 200 && h.sched.has_work(); ++it) {
    auto p = h.step();
    for (Sequence* s : p.preempted) EXPECT_NE(s, old);
  }
  EXPECT_EQ(old->n_preemptions, 0);
  EXPECT_EQ(young->n_generated(), 7);
}

TEST(Scheduler, WaitingQueueKeepsArrivalOrder) {
  Harness h(2, 8, 4);  // room for one sequence at a time
  Sequence* c = h.add(4, 1, 3.0);
  Sequence* a = h.add(4, 1, 1.0);
  Sequence* b = h.add(4, 1, 2.0);
  std::vector<Sequence*> order;
  for (int it = 0; it < 50 && h.sched.has_work(); ++it) {
    auto p = h.step();
    for (auto& ss : p.scheduled)
      if (ss.seq->n_computed == ss.n_tokens && ss.n_tokens > 0 && ss.seq->n_generated() <= 1 &&
          (order.empty() || order.back() != ss.seq))
        order.push_back(ss.seq);
  }
  ASSERT_GE(order.size(), 3u);
  EXPECT_EQ(order[0], a);
  EXPECT_EQ(order[1], b);
  EXPECT_EQ(order[2], c);
}

TEST(Scheduler, RandomWorkloadKeepsInvariants) {
  std::mt19937 rng(42);
  Harness h(20, 16, 4);
  double t = 0;
  for (int it = 0; it < 2000; ++it) {
    if (rng() % 4 == 0 && h.seqs.size() < 60) h.add(1 + rng() % 30, 1 + rng() % 20, t += 1.0);
    h.step();
  }
  for (int it = 0; it < 5000 && h.sched.has_work(); ++it) h.step();
  EXPECT_FALSE(h.sched.has_work());
  for (size_t i = 0; i < h.seqs.size(); ++i) EXPECT_EQ(h.seqs[i]->n_generated(), h.max_new[i]);
  EXPECT_EQ(h.alloc.n_free(), 20);
}

// Fair prefill: decode rows first, then prefills sharing the budget (max_partial_prefills).
SchedulerConfig fair_config(int64_t budget, int64_t partial, int64_t long_chunk) {
  SchedulerConfig c{4, budget, 16, 0.05};
  c.max_partial_prefills = partial;
  c.long_prefill_tokens = long_chunk;
  return c;
}

const ScheduledSeq* find_in(const StepPlan& p, const Sequence* s) {
  for (const ScheduledSeq& ss : p.scheduled)
    if (ss.seq == s) return &ss;
  return nullptr;
}

TEST(SchedulerFairPrefill, DecodeRowsRunWhileAnOlderLongPrefillIsInProgress) {
  Harness h(1024, fair_config(64, 4, 16));
  Sequence* lng = h.add(1000, 1, 0.0);
  Sequence* chat = h.add(6, 20, 1.0);
  auto p1 = h.step();
  ASSERT_NE(find_in(p1, chat), nullptr);
  EXPECT_EQ(find_in(p1, chat)->n_tokens, 6);  // all of it, in a step of its own
  EXPECT_TRUE(find_in(p1, chat)->sample);
  EXPECT_EQ(find_in(p1, lng), nullptr);  // the long one gives up this step
  for (int i = 0; i < 10; ++i) {
    ASSERT_GT(lng->n_uncomputed(), 1);  // still prefilling
    auto p = h.step();
    ASSERT_EQ(p.scheduled.size(), 2u);
    EXPECT_EQ(p.scheduled[0].seq, chat);  // the younger decode row comes first
    EXPECT_EQ(p.scheduled[0].n_tokens, 1);
    EXPECT_EQ(p.scheduled[1].seq, lng);  // alone as a prefill: still its chunk, no more
    EXPECT_EQ(p.scheduled[1].n_tokens, 16);
    EXPECT_EQ(p.n_tokens, 17);
  }
  EXPECT_EQ(chat->n_generated(), 11);
}

TEST(SchedulerFairPrefill, FcfsWhenOnePartialPrefill) {
  // max_partial_prefills = 1 is the FCFS planner: the old long prefill takes every step's
  // whole budget; the younger request waits for it, even its decode rows.
  Harness h(1024, fair_config(64, 1, 16));
  Sequence* lng = h.add(1000, 1, 0.0);
  Sequence* chat = h.add(6, 20, 1.0);
  int steps = 0;
  while (lng->n_generated() == 0) {
    auto p = h.step();
    ++steps;
    EXPECT_EQ(p.scheduled[0].seq, lng);
    if (lng->n_generated() == 0) {
      EXPECT_EQ(p.scheduled.size(), 1u);
      EXPECT_EQ(p.scheduled[0].n_tokens, 64);
    }
  }
  EXPECT_EQ(steps, 16);               // ceil(1000 / 64)
  EXPECT_EQ(chat->n_generated(), 1);  // its prefill filled the last step's 24 spare tokens
  // A younger decode row behind an older prefill (a request with an earlier arrival time,
  // e.g. one resumed after a tool call): once both run, FCFS gives the old one every token.
  Harness g(1024, fair_config(8, 1, 4));
  Sequence* young = g.add(2, 20, 1.0);
  g.step();  // young samples its first token
  Sequence* old = g.add(40, 1, 0.0);
  g.step();  // running first (young's decode row), then old is admitted with the rest
  auto p = g.step();
  EXPECT_EQ(find_in(p, old)->n_tokens, 8);
  EXPECT_EQ(find_in(p, young), nullptr);  // its decode row waits
  // The same with fair prefill: the decode row first, then the old prefill's chunk.
  Harness f(1024, fair_config(8, 4, 4));
  Sequence* young2 = f.add(2, 20, 1.0);
  f.step();
  Sequence* old2 = f.add(40, 1, 0.0);
  f.step();
  auto q = f.step();
  ASSERT_EQ(q.scheduled.size(), 2u);
  EXPECT_EQ(q.scheduled[0].seq, young2);
  EXPECT_EQ(q.scheduled[1].seq, old2);
  EXPECT_EQ(q.scheduled[1].n_tokens, 4);
}

TEST(SchedulerFairPrefill, ShortPromptDuringALongPrefillGetsAStepWithoutIt) {
  // The automatic chunk without a cost model: a quarter of the budget (above the floor).
  SchedulerConfig c = fair_config(256, 4, 0);
  c.min_long_prefill_chunk = 16;
  Harness h(4096, c);
  Sequence* lng = h.add(4000, 1, 0.0);
  auto p1 = h.step();
  EXPECT_EQ(h.sched.long_prefill_chunk(), 64);
  EXPECT_EQ(p1.scheduled[0].n_tokens, 64);  // alone: its chunk (what a newcomer waits for)
  Sequence* chat = h.add(40, 3, 1.0);
  auto p2 = h.step();
  ASSERT_EQ(p2.scheduled.size(), 1u);
  EXPECT_EQ(find_in(p2, lng), nullptr);        // the long one gives up the step
  EXPECT_EQ(find_in(p2, chat)->n_tokens, 40);  // all its tokens: first token after one step
  EXPECT_TRUE(find_in(p2, chat)->sample);
  EXPECT_EQ(p2.n_tokens, 40);
  auto p3 = h.step();  // the chat decodes; the long one its chunk again, beside the decode row
  EXPECT_EQ(find_in(p3, chat)->n_tokens, 1);
  EXPECT_EQ(find_in(p3, lng)->n_tokens, 64);
}

// A step-time curve flat up to S = 64, then 0.1 ms a token; T_fwd(1) = 5.01 ms.
CostModel sloped_cost() {
  CostModel cost;
  cost.t_fwd_samples = {{1, 0.00501}, {64, 0.02}, {512, 0.02 + 448 * 1e-4}};
  cost.saturation_tokens = 64;
  return cost;
}

TEST(SchedulerFairPrefill, AutomaticChunkComesFromTheStepTimeCurve) {
  const CostModel cost = sloped_cost();
  // ceil(8 x 5.01 ms / 0.1 ms per token) = 401: the step's fixed cost is an eighth of it.
  EXPECT_EQ(automatic_long_prefill_chunk(&cost, 512, 16), 401);
  // The budget past the last sample: the slope is extrapolated from the last stretch.
  EXPECT_EQ(automatic_long_prefill_chunk(&cost, 1024, 16), 401);
  EXPECT_EQ(automatic_long_prefill_chunk(&cost, 256, 16), 256);  // clamped to the budget
  // S at the last sample (the budget not above it): the last stretch gives the slope.
  CostModel late = cost;
  late.saturation_tokens = 512;
  EXPECT_EQ(automatic_long_prefill_chunk(&late, 512, 16), 401);
  // A steep curve: the floor.
  CostModel steep = cost;
  steep.t_fwd_samples = {{1, 0.001}, {64, 0.002}, {512, 0.002 + 448 * 1e-2}};
  EXPECT_EQ(automatic_long_prefill_chunk(&steep, 512, 16), 16);
  // Flat (or falling, from noise) above S: a chunk costs nothing extra, the whole budget.
  CostModel flat = cost;
  flat.t_fwd_samples = {{1, 0.01}, {64, 0.02}, {512, 0.019}};
  EXPECT_EQ(automatic_long_prefill_chunk(&flat, 512, 16), 512);
  // Without a cost model: a quarter of the budget, not below the floor.
  EXPECT_EQ(automatic_long_prefill_chunk(nullptr, 512, 16), 128);
  EXPECT_EQ(automatic_long_prefill_chunk(nullptr, 32, 16), 16);
}

TEST(SchedulerFairPrefill, LongPrefillTakesTheAutomaticChunkAloneOrBesideOthers) {
  const CostModel cost = sloped_cost();
  SchedulerConfig c = fair_config(512, 4, 0);
  BlockAllocator alloc(4096);
  Scheduler sched(c, alloc, nullptr, nullptr, &cost);
  EXPECT_EQ(sched.long_prefill_chunk(), 401);
  SchedulerConfig given = c;
  given.long_prefill_tokens = 100;  // --long-prefill-tokens overrides
  BlockAllocator alloc2(16);
  EXPECT_EQ(Scheduler(given, alloc2, nullptr, nullptr, &cost).long_prefill_chunk(), 100);

  std::vector<std::unique_ptr<Sequence>> seqs;
  auto add = [&](int64_t prompt, double arrival) {
    auto q = std::make_unique<Sequence>();
    q->id = seqs.size();
    q->arrival_time = arrival;
    q->tokens.assign((size_t)prompt, 7);
    q->n_prompt = prompt;
    sched.add(q.get());
    seqs.push_back(std::move(q));
    return seqs.back().get();
  };
  auto step = [&](double now) {
    StepPlan p = sched.schedule(now);
    sched.commit(p);
    for (const ScheduledSeq& ss : p.scheduled)
      if (ss.sample) ss.seq->tokens.push_back(1);
    sched.check_invariants();
    return p;
  };
  Sequence* dec = add(3, 0.0);
  step(0.1);  // dec decodes from now on
  Sequence* lng = add(8000, 1.0);
  StepPlan p1 = step(0.2);
  ASSERT_EQ(p1.scheduled.size(), 2u);
  EXPECT_EQ(p1.scheduled[0].seq, dec);
  EXPECT_EQ(find_in(p1, lng)->n_tokens, 401);  // alone as a prefill: its chunk, not 511
  EXPECT_EQ(p1.n_tokens, 402);
  Sequence* chat = add(20, 2.0);
  StepPlan p2 = step(0.3);
  ASSERT_EQ(p2.scheduled.size(), 2u);
  EXPECT_EQ(find_in(p2, lng), nullptr);        // gives up the step to the short prompt
  EXPECT_EQ(find_in(p2, chat)->n_tokens, 20);  // all of it: its first token after one step
  EXPECT_TRUE(find_in(p2, chat)->sample);
  EXPECT_EQ(p2.n_tokens, 21);
  StepPlan p3 = step(0.4);  // then its chunk again, beside both decode rows
  EXPECT_EQ(find_in(p3, lng)->n_tokens, 401);
  EXPECT_EQ(p3.n_tokens, 403);
}

TEST(SchedulerFairPrefill, PartialPrefillsAreLimitedButShortOnesStillJoin) {
  Harness h(4096, fair_config(64, 2, 8));
  Sequence* a = h.add(500, 1, 0.0);
  Sequence* b = h.add(500, 1, 1.0);
  Sequence* c = h.add(500, 1, 2.0);  // a third unfinished prefill: waits
  Sequence* d = h.add(5, 1, 3.0);    // short: a step of its own first
  auto p0 = h.step();
  ASSERT_EQ(p0.scheduled.size(), 1u);
  EXPECT_EQ(find_in(p0, d)->n_tokens, 5);
  auto p = h.step();
  EXPECT_EQ(find_in(p, a)->n_tokens, 8);
  EXPECT_EQ(find_in(p, b)->n_tokens, 8);
  EXPECT_EQ(find_in(p, c), nullptr);
  EXPECT_EQ(c->state, SeqState::waiting);
  EXPECT_EQ(p.n_tokens, 16);
  // A short one that finishes in its step is not limited by the two partial prefills: with
  // the long ones in the step (they gave up the last one), it joins them.
  Sequence* e = h.add(6, 1, 4.0);
  h.step();  // e alone (the long ones give up a step again)
  Sequence* f = h.add(5, 1, 5.0);
  (void)e;
  auto q = h.step();  // f arrives right after: the long ones do not give up two in a row
  EXPECT_EQ(find_in(q, a)->n_tokens, 8);
  EXPECT_EQ(find_in(q, b)->n_tokens, 8);
  EXPECT_EQ(find_in(q, f)->n_tokens, 5);
}

TEST(SchedulerFairPrefill, AStreamOfShortPromptsDoesNotStarveTheOldestPrefill) {
  Harness h(4096, fair_config(32, 4, 8));
  Sequence* lng = h.add(400, 1, 0.0);
  for (int i = 0; i < 20; ++i) {
    const int64_t before = lng->n_computed;
    h.add(8, 1, 1.0 + i);  // each a full chunk's worth, with three others queued
    h.add(8, 1, 1.5 + i);
    h.add(8, 1, 1.7 + i);
    h.add(8, 1, 1.8 + i);
    h.step();  // short prompts waiting: the long one may give up a step, not two in a row
    h.step();
    EXPECT_GE(lng->n_computed - before, 8);
  }
}

TEST(SchedulerFairPrefill, RandomWorkloadWithPreemptionKeepsInvariants) {
  // A small cache, long and short prompts mixed: preemption with partial prefills and decode
  // rows planned first; check_invariants after every step (in Harness::step).
  for (int64_t partial : {2, 4}) {
    std::mt19937 rng(7 + (unsigned)partial);
    Harness h(24, fair_config(16, partial, 6));
    double t = 0;
    int64_t preemptions = 0;
    for (int it = 0; it < 3000; ++it) {
      if (rng() % 4 == 0 && h.seqs.size() < 80) {
        const int64_t prompt = rng() % 5 == 0 ? 30 + rng() % 40 : 1 + rng() % 10;
        h.add(prompt, 1 + rng() % 15, t += 1.0);
      }
      preemptions += (int64_t)h.step().preempted.size();
    }
    for (int it = 0; it < 10000 && h.sched.has_work(); ++it)
      preemptions += (int64_t)h.step().preempted.size();
    EXPECT_FALSE(h.sched.has_work());
    EXPECT_GT(preemptions, 0);
    for (size_t i = 0; i < h.seqs.size(); ++i) EXPECT_EQ(h.seqs[i]->n_generated(), h.max_new[i]);
    EXPECT_EQ(h.alloc.n_free(), 24);
  }
}

// A scripted policy: decides what the test says, so the scheduler's mechanics (moves,
// budgets, queues) are tested apart from the waste model.
class ScriptedPolicy : public Policy {
 public:
  KvAction action = KvAction::preserve;
  int64_t tokens = 0;  // swap_out_tokens per request and step
  PolicyKind k = PolicyKind::minwaste;
  PolicyKind kind() const override { return k; }
  bool keeps_arrival_on_resume() const override { return true; }
  std::vector<PausedDecision> decide(const PolicyInput& in) override {
    std::vector<PausedDecision> out;
    for (const auto& p : in.paused)
      out.push_back(
          {p.id, action, action == KvAction::swap_out ? std::min(tokens, p.device_tokens) : 0});
    return out;
  }
};

struct TieredHarness {
  // A prompt of up to the budget runs in one step: these tests are about the tiers, not about
  // long prompts sharing steps.
  SchedulerConfig cfg = [] {
    SchedulerConfig c{4, 64, 16, 0.05};
    c.long_prefill_tokens = 64;
    return c;
  }();
  BlockAllocator device{16};
  BlockAllocator host{16};
  ScriptedPolicy policy;
  Scheduler sched{cfg, device, &host, &policy, nullptr};
  std::vector<std::unique_ptr<Sequence>> seqs;
  double now = 0.0;

  Sequence* add(int64_t prompt_len, double arrival) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size();
    s->arrival_time = arrival;
    s->tokens.assign((size_t)prompt_len, 7);
    s->n_prompt = prompt_len;
    sched.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }
  StepPlan step() {
    StepPlan plan = sched.schedule(now += 0.01);
    sched.commit(plan);
    for (const ScheduledSeq& ss : plan.scheduled)
      if (ss.sample) ss.seq->tokens.push_back(1);
    sched.check_invariants();
    return plan;
  }
};

TEST(SchedulerInterception, PreservedRequestResumesWithoutRecomputation) {
  TieredHarness h;
  Sequence* s = h.add(10, 0.0);
  h.step();  // prefill 10, sample 1 -> 11 tokens, 10 computed
  h.sched.intercept(s, {"calc", h.now, std::nullopt, false, 0.0, false});
  EXPECT_EQ(h.sched.n_paused(), 1u);
  h.step();
  h.step();
  EXPECT_EQ(s->n_computed, 10);  // kept on the device
  h.sched.resume(s, {5, 5, 5}, h.now);
  auto p = h.step();
  ASSERT_EQ(p.scheduled.size(), 1u);
  EXPECT_EQ(p.scheduled[0].n_tokens, 4);  // the sampled token + 3 returned ones
  EXPECT_EQ(s->n_recomputed, 0);
  EXPECT_GT(s->preserved_token_seconds, 0.0);
}

TEST(SchedulerInterception, SwapOutFromTheBackAndInFromTheFront) {
  TieredHarness h;
  Sequence* s = h.add(15, 0.0);  // 4 blocks of 4
  h.step();
  ASSERT_EQ(s->blocks.blocks.size(), 4u);
  const std::vector<int32_t> dev = s->blocks.blocks;
  h.sched.intercept(s, {"search", h.now, std::nullopt, false, 0.0, false});
  h.policy.action = KvAction::swap_out;
  h.policy.tokens = 8;  // two blocks per step
  auto p1 = h.step();
  ASSERT_EQ(p1.swap_out.size(), 2u);
  EXPECT_EQ(p1.swap_out[0].from, dev[3]);  // the back first
  EXPECT_EQ(p1.swap_out[1].from, dev[2]);
  EXPECT_EQ(s->blocks.blocks.size(), 2u);
  EXPECT_EQ(s->host_blocks.size(), 2u);
  EXPECT_EQ(s->host_blocks[0], p1.swap_out[1].to);  // host suffix stays in position order
  auto p2 = h.step();
  EXPECT_EQ(p2.swap_out.size(), 2u);
  EXPECT_TRUE(s->blocks.blocks.empty());
  EXPECT_EQ(s->n_computed, 15);  // all of it still exists, on the host
  h.policy.action = KvAction::preserve;
  const int32_t first_host = s->host_blocks.front();
  h.sched.resume(s, {9}, h.now);
  EXPECT_EQ(h.sched.n_resuming(), 1u);
  auto p3 = h.step();
  ASSERT_FALSE(p3.swap_in.empty());
  EXPECT_EQ(p3.swap_in[0].from, first_host);  // the front first
  EXPECT_EQ(h.sched.n_resuming(), 0u);        // no cost model: unbounded budget, all back at once
  // Runs again in the same step: the sampled token + the returned one.
  ASSERT_EQ(p3.scheduled.size(), 1u);
  EXPECT_EQ(p3.scheduled[0].n_tokens, 2);
  EXPECT_EQ(s->n_recomputed, 0);
  EXPECT_EQ(h.host.n_free(), 16);
}

TEST(SchedulerInterception, DiscardedRequestRecomputesThroughTheWaitingQueue) {
  TieredHarness h;
  Sequence* s = h.add(12, 0.0);
  h.step();
  h.sched.intercept(s, {"human", h.now, std::nullopt, false, 0.0, false});
  h.policy.action = KvAction::discard;
  auto p = h.step();
  EXPECT_EQ(p.n_discards, 1);
  EXPECT_EQ(s->n_computed, 0);
  EXPECT_EQ(h.device.n_free(), 16);
  h.sched.resume(s, {3, 3}, h.now);
  EXPECT_EQ(h.sched.n_waiting(), 1u);
  auto p2 = h.step();
  ASSERT_EQ(p2.scheduled.size(), 1u);
  EXPECT_EQ(p2.scheduled[0].n_tokens, 15);  // everything: 12 + sampled + 2 returned
  EXPECT_EQ(s->n_recomputed, 12);
  EXPECT_EQ(s->arrival_time, 0.0);  // kept (this scripted policy keeps arrival)
}

// Under minwaste, a running sequence preempted for lack of blocks keeps its KV in the host
// tier when copying it out and back costs less than recomputing it; it waits in the resuming
// queue and continues without recomputation once blocks free up.
TEST(SchedulerInterception, MinwastePreemptsBySwappingWhenACopyIsCheaper) {
  CostModel cost;
  cost.t_fwd_samples = {{1, 0.01}, {64, 0.2}};  // recomputing 16 tokens: ~60 ms
  cost.kv_bytes_per_token = 1000.0;
  cost.swap_bytes_per_second = 1e9;  // copying them out and back: 32 us
  cost.saturation_tokens = 1;
  auto est = make_duration_estimator("elapsed");
  ASSERT_TRUE(est.ok());
  auto policy = make_policy(PolicyKind::minwaste, cost, **est);
  SchedulerConfig cfg{4, 64, 16, 0.05};
  BlockAllocator device(8), host(16);
  Scheduler sched(cfg, device, &host, policy.get(), &cost);
  std::vector<std::unique_ptr<Sequence>> seqs;
  auto add = [&](int64_t prompt, double arrival) {
    auto q = std::make_unique<Sequence>();
    q->id = seqs.size();
    q->arrival_time = arrival;
    q->tokens.assign((size_t)prompt, 7);
    q->n_prompt = prompt;
    sched.add(q.get());
    seqs.push_back(std::move(q));
    return seqs.back().get();
  };
  Sequence* a = add(12, 0.0);  // 3 blocks, then grows
  Sequence* b = add(16, 1.0);  // 4 blocks: 7 of 8 in use
  double now = 0.0;
  int64_t swapped_out = 0, swapped_in = 0, swap_preemptions = 0;
  for (int step = 0;
       step < 200 && (a->state != SeqState::finished || b->state != SeqState::finished); ++step) {
    StepPlan plan = sched.schedule(now += 0.01);
    sched.commit(plan);
    swapped_out += (int64_t)plan.swap_out.size();
    swapped_in += (int64_t)plan.swap_in.size();
    swap_preemptions += plan.n_swap_preemptions;
    EXPECT_EQ(plan.dropped_tokens, 0) << "step " << step;  // nothing recomputed
    for (const ScheduledSeq& ss : plan.scheduled) {
      if (!ss.sample) continue;
      ss.seq->tokens.push_back(1);
      if (ss.seq->n_generated() >= 12) sched.finish(ss.seq);
    }
    sched.check_invariants();
  }
  EXPECT_EQ(a->state, SeqState::finished);
  EXPECT_EQ(b->state, SeqState::finished);
  EXPECT_GE(swap_preemptions, 1);
  EXPECT_GT(swapped_out, 0);
  EXPECT_EQ(swapped_in, swapped_out);  // everything that left came back
  EXPECT_EQ(a->n_recomputed + b->n_recomputed, 0);
  EXPECT_EQ(device.n_free(), 8);
  EXPECT_EQ(host.n_free(), 16);
}

// Memory pressure as the policies see it: only when the request next in line cannot get its
// blocks. A real minwaste (or ttl) policy, with costs under which a long pause on the device
// is worth swapping out, and a copy is cheap, so pressure shows up as a swap.
struct PressureHarness {
  CostModel cost;
  std::unique_ptr<DurationEstimator> est;
  std::unique_ptr<Policy> policy;
  SchedulerConfig cfg{4, 64, 16, 0.05};
  BlockAllocator device, host{64};
  std::unique_ptr<Scheduler> sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  double now = 0.0;

  explicit PressureHarness(int32_t device_blocks, PolicyKind kind = PolicyKind::minwaste,
                           int64_t budget = 64)
      : device(device_blocks) {
    cost.t_fwd_samples = {{1, 0.01}, {64, 0.2}};  // recomputing 40 tokens: ~0.13 s
    cost.kv_bytes_per_token = 1000.0;
    cost.swap_bytes_per_second = 1e9;  // a copy budget of ~10,000 tokens per step
    cost.saturation_tokens = 1;
    auto e = make_duration_estimator("oracle");  // the hint: a 100 s pause
    CHECK(e.ok());
    est = std::move(*e);
    policy = make_policy(kind, cost, *est);
    cfg.max_tokens_per_step = budget;
    cfg.min_recompute_chunk = 8;
    sched = std::make_unique<Scheduler>(cfg, device, &host, policy.get(), &cost);
  }
  Sequence* add(int64_t prompt_len, double arrival) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size();
    s->arrival_time = arrival;
    s->tokens.assign((size_t)prompt_len, 7);
    s->n_prompt = prompt_len;
    sched->add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }
  StepPlan step(double dt = 0.01) {
    StepPlan plan = sched->schedule(now += dt);
    sched->commit(plan);
    for (const ScheduledSeq& ss : plan.scheduled)
      if (ss.sample) ss.seq->tokens.push_back(1);
    sched->check_invariants();
    return plan;
  }
  // Runs `s` alone until it has sampled a token, then pauses it for a long tool call.
  void run_and_pause(Sequence* s, double hint = 100.0) {
    for (int i = 0; i < 20 && s->n_generated() == 0; ++i) step();
    ASSERT_EQ(s->n_generated(), 1);
    sched->intercept(s, {"search", now, hint, false, 0.0, false});
  }
  bool scheduled(const StepPlan& p, const Sequence* s) const {
    for (const ScheduledSeq& ss : p.scheduled)
      if (ss.seq == s) return true;
    return false;
  }
};

// A new request whose prefill fits in the free blocks waits one step (chunked prefill admits
// it in the next schedule()), but that is no reason to move a paused request's KV: it is
// preserved, and the newcomer runs beside it.
TEST(SchedulerPressure, WaitingRequestThatFitsLeavesPausedKvAlone) {
  PressureHarness h(32);              // 128 tokens
  Sequence* paused = h.add(40, 0.0);  // 10 blocks
  h.run_and_pause(paused);
  const std::vector<int32_t> blocks = paused->blocks.blocks;
  Sequence* fresh = h.add(8, 1.0);  // 2 blocks of 22 free
  for (int i = 0; i < 5; ++i) {
    const StepPlan p = h.step();
    EXPECT_TRUE(p.swap_out.empty()) << "step " << i;
    EXPECT_EQ(p.n_discards, 0) << "step " << i;
    if (i == 0) {
      EXPECT_TRUE(h.scheduled(p, fresh));
    }
  }
  EXPECT_EQ(paused->blocks.blocks, blocks);
  EXPECT_EQ(paused->n_computed, 40);
  EXPECT_TRUE(paused->host_blocks.empty());
}

// One whose prefill chunk does not fit is memory pressure: minwaste moves the long pause to
// the host (a swap, not the discard that taking its blocks at admission would be), and the
// newcomer runs in the same step.
TEST(SchedulerPressure, WaitingRequestThatDoesNotFitMakesMinwasteSwap) {
  PressureHarness h(16);              // 64 tokens
  Sequence* paused = h.add(40, 0.0);  // 10 blocks, 6 free
  h.run_and_pause(paused);
  Sequence* fresh = h.add(40, 1.0);  // needs 10
  const StepPlan p = h.step();
  EXPECT_EQ(p.swap_out.size(), 10u);
  EXPECT_EQ(p.n_discards, 0);
  EXPECT_TRUE(h.scheduled(p, fresh));
  EXPECT_TRUE(paused->blocks.blocks.empty());
  EXPECT_EQ(paused->n_computed, 40);  // all of it on the host, nothing to recompute
  EXPECT_EQ(paused->n_recomputed, 0);
}

// A request whose KV was dropped needs its whole context back before it can sample again,
// recomputed a few tokens per step: that is what counts, not its first chunk. Here the first
// chunk (and even a full step's budget) fits in the free blocks but the whole context does
// not, so the paused request is swapped out now, while it is cheap, rather than dropped
// block by block later as the recomputation grows.
TEST(SchedulerPressure, RecomputingRequestCountsItsWholeContext) {
  PressureHarness h(20, PolicyKind::minwaste, /*budget=*/16);
  Sequence* paused = h.add(23, 0.0);  // 6 blocks
  h.run_and_pause(paused);
  Sequence* dropped = h.add(47, 1.0);  // 12 blocks
  h.run_and_pause(dropped);
  ASSERT_EQ(h.device.n_free(), 2);
  h.sched->release_paused(dropped);                             // expired: KV gone, tokens kept
  h.sched->resume(dropped, std::vector<int32_t>(9, 5), h.now);  // back to recompute 57 tokens
  ASSERT_EQ(h.sched->n_waiting(), 1u);
  const int64_t free = h.device.n_free();
  ASSERT_EQ(free, 14);
  ASSERT_GT(BlockTable::blocks_for((int64_t)dropped->tokens.size(), 4), free);  // 15 blocks
  ASSERT_LE(BlockTable::blocks_for(h.cfg.max_tokens_per_step, 4), free);
  const StepPlan p = h.step();
  EXPECT_FALSE(p.swap_out.empty());
  EXPECT_EQ(p.n_discards, 0);
  EXPECT_EQ(paused->n_computed, 23);
  EXPECT_EQ(paused->n_recomputed, 0);
  // And the recomputation then runs to the end without taking anyone's KV.
  for (int i = 0; i < 20 && dropped->n_computed < (int64_t)dropped->tokens.size() - 1; ++i) {
    const StepPlan q = h.step();
    EXPECT_EQ(q.n_discards, 0) << "step " << i;
  }
  EXPECT_EQ(paused->n_recomputed, 0);
}

// ttl reads the same signal: a pause past its TTL keeps its KV while nobody needs the blocks,
// and gives it up as soon as the request next in line does.
TEST(SchedulerPressure, TtlReleasesOnlyWhenTheBlocksAreNeeded) {
  PressureHarness h(16, PolicyKind::ttl);  // ttl default: 1 s without observations
  Sequence* paused = h.add(40, 0.0);       // 10 blocks, 6 free
  h.run_and_pause(paused);
  h.step(5.0);                      // 5 s into the pause, no one waiting
  Sequence* small = h.add(8, 1.0);  // 2 blocks: fits
  StepPlan p = h.step();
  EXPECT_EQ(p.n_discards, 0);
  EXPECT_TRUE(h.scheduled(p, small));
  EXPECT_EQ(paused->n_computed, 40);
  Sequence* big = h.add(20, 2.0);  // 5 blocks of the 3 or 4 left: does not fit
  p = h.step();
  EXPECT_EQ(p.n_discards, 1);
  EXPECT_TRUE(h.scheduled(p, big));
  EXPECT_EQ(paused->n_computed, 0);
}

TEST(SchedulerInterception, RunningRequestTakesBlocksFromPausedOnesFirst) {
  TieredHarness h;                    // 16 device blocks of 4 tokens
  Sequence* paused = h.add(40, 0.0);  // 10 blocks
  h.step();
  h.sched.intercept(paused, {"t", h.now, std::nullopt, false, 0.0, false});
  Sequence* runner = h.add(30, 1.0);  // needs 8 blocks, only 6 free
  auto p = h.step();
  ASSERT_EQ(p.scheduled.size(), 1u);
  EXPECT_EQ(p.scheduled[0].seq, runner);
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_EQ(paused->n_computed, 0);  // its KV made room
}

TEST(SchedulerInterception, ReleasedPausedRequestStillResumesByRecomputation) {
  TieredHarness h;
  Sequence* s = h.add(8, 0.0);
  h.step();
  h.sched.intercept(s, {"t", h.now, std::nullopt, false, 0.0, false});
  h.sched.release_paused(s);
  EXPECT_EQ(h.device.n_free(), 16);
  EXPECT_EQ(s->tokens.size(), 9u);  // history kept
  h.sched.resume(s, {4}, h.now);
  auto p = h.step();
  ASSERT_EQ(p.scheduled.size(), 1u);
  EXPECT_EQ(p.scheduled[0].n_tokens, 10);
}

}  // namespace
}  // namespace infercept
