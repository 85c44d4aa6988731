// The scheduler with the prefix cache on (sched/prefix_reuse.cpp): a request admitted with
// nothing computed starts from the longest cached prefix of its tokens, never writes into a
// block someone else holds, idle cached blocks are evicted before anyone waits, namespaces
// never share, and a paused request is charged only for what nobody else holds. The engine
// part: greedy outputs with the cache on are the outputs with it off.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <random>

#include "engine/engine.h"
#include "kv/block_allocator.h"
#include "sched/scheduler.h"
#include "test_util.h"

namespace infercept {
namespace {

constexpr int64_t B = 4;

SchedulerConfig cache_config(int64_t budget = 64) {
  SchedulerConfig c;
  c.block_size = B;
  c.max_tokens_per_step = budget;
  c.max_seqs_per_step = 16;
  c.long_prefill_tokens = budget;
  c.prefix_cache = true;
  return c;
}

// Keeps, swaps out part of or drops each paused request's KV at random.
class RandomPolicy : public Policy {
 public:
  explicit RandomPolicy(uint32_t seed) : rng_(seed) {}
  PolicyKind kind() const override { return PolicyKind::minwaste; }
  bool keeps_arrival_on_resume() const override { return true; }
  bool preempts_by_swapping() const override { return true; }
  std::vector<PausedDecision> decide(const PolicyInput& in) override {
    std::vector<PausedDecision> out;
    for (const auto& p : in.paused) {
      const auto action = (KvAction)(rng_() % 3);
      out.push_back({p.id, action, action == KvAction::swap_out ? (int64_t)(1 + rng_() % 8) : 0});
    }
    return out;
  }

 private:
  std::mt19937 rng_;
};

struct Harness {
  SchedulerConfig cfg;
  BlockAllocator device;
  BlockAllocator host{32};
  std::unique_ptr<Policy> policy;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  double now = 0.0;
  explicit Harness(int32_t blocks, SchedulerConfig c = cache_config(),
                   std::unique_ptr<Policy> p = nullptr)
      : cfg(c), device(blocks), policy(std::move(p)), sched(cfg, device, &host, policy.get()) {}

  Sequence* add(std::vector<int32_t> tokens, uint64_t ns = 1) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size();
    s->arrival_time = now;
    s->n_prompt = (int64_t)tokens.size();
    s->tokens = std::move(tokens);
    s->cache_ns = ns;
    sched.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }
  // A step of a fake executor: a sampled row appends token 100 + id.
  StepPlan step() {
    StepPlan plan = sched.schedule(now += 0.01);
    sched.commit(plan);
    for (const ScheduledSeq& ss : plan.scheduled)
      if (ss.sample) ss.seq->tokens.push_back(100 + (int32_t)ss.seq->id);
    sched.check_invariants();
    return plan;
  }
  void run_until_computed(Sequence* s) {
    for (int i = 0; i < 100 && s->n_uncomputed() > 0 && s->state != SeqState::finished; ++i) step();
  }
};

std::vector<int32_t> range(int32_t from, int32_t n) {
  std::vector<int32_t> t((size_t)n);
  for (int32_t i = 0; i < n; ++i) t[(size_t)i] = from + i;
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrefixReuse, ASecondRequestStartsFromTheSharedPrefixAndWritesOnlyItsOwnBlocks) {
  Harness h(64);
  const std::vector<int32_t> system = range(1, 13);  // 3 full blocks + 1 token
  Sequence* a = h.add(concat(system, range(50, 6)));
  h.step();                                      // a's prompt (19 tokens) in one step
  EXPECT_EQ(h.sched.cached_device_blocks(), 4);  // its 4 full blocks are indexed
  Sequence* b = h.add(concat(system, range(70, 5)));
  const StepPlan p = h.step();
  // b takes the 3 blocks the system prompt fills, and computes the rest (13 + 5 - 12 = 6).
  ASSERT_EQ(p.scheduled.size(), 2u);
  EXPECT_EQ(p.scheduled[1].seq, b);
  EXPECT_EQ(p.scheduled[1].n_tokens, 6);
  EXPECT_EQ(b->n_cache_hit, 12);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b->blocks.blocks[(size_t)i], a->blocks.blocks[(size_t)i]);
  EXPECT_NE(b->blocks.blocks[3], a->blocks.blocks[3]);  // they part in block 3
  EXPECT_EQ(h.sched.prefix_counters().query_tokens, 19 + 18);
  EXPECT_EQ(h.sched.prefix_counters().hit_tokens, 12);
  h.sched.finish(a);
  h.sched.finish(b);
  h.sched.check_invariants();
  EXPECT_EQ(h.device.n_held(), 0);
  EXPECT_EQ(h.device.n_idle_cached(), h.sched.cached_device_blocks());
}

// The fair planner with a pool the cache fills: two waiting requests whose prefixes are all
// the idle cached blocks there are. The older one must be able to evict the younger one's
// prefix; had every candidate taken its prefix while the step was planned, nothing would be
// evictable, the older one would never fit and neither would run.
TEST(PrefixReuse, WaitingRequestsDoNotHoldTheirPrefixesAgainstEachOther) {
  SchedulerConfig cfg = cache_config(64);
  cfg.max_partial_prefills = 4;
  Harness h(8, cfg);
  Sequence* a = h.add(range(1, 17));  // 4 full blocks + 1 token
  h.run_until_computed(a);
  h.sched.finish(a);
  Sequence* b = h.add(range(500, 17));
  h.run_until_computed(b);
  h.sched.finish(b);
  ASSERT_EQ(h.device.n_held(), 0);
  ASSERT_EQ(h.device.n_idle_cached(), 8);  // a's and b's 4 blocks each: the whole pool
  // c extends a's prefix by 3 blocks (7 blocks in all), d extends b's.
  Sequence* c = h.add(concat(range(1, 16), range(900, 12)));
  Sequence* d = h.add(concat(range(500, 16), range(950, 12)));
  // Each finishes once it has sampled its first token (the fake executor appends it).
  for (int i = 0; i < 20; ++i) {
    h.step();
    for (Sequence* s : {c, d})
      if (s->state == SeqState::running && s->tokens.size() > 28) h.sched.finish(s);
  }
  EXPECT_EQ(c->state, SeqState::finished);
  EXPECT_EQ(d->state, SeqState::finished);
  EXPECT_EQ(c->n_cache_hit, 16);  // each took its own prefix when its turn came
  EXPECT_EQ(h.device.n_held(), 0);
}

TEST(PrefixReuse, TheLastTokenAlwaysRunsAndTheSameBlockIsIndexedOnce) {
  Harness h(64);
  const std::vector<int32_t> prompt = range(1, 16);  // exactly 4 blocks
  Sequence* a = h.add(prompt);
  h.step();
  h.sched.finish(a);
  Sequence* b = h.add(prompt);  // the same prompt again: 3 blocks, the 4th recomputed
  const StepPlan p = h.step();
  ASSERT_EQ(p.scheduled.size(), 1u);
  EXPECT_EQ(p.scheduled[0].n_tokens, 4);
  EXPECT_TRUE(p.scheduled[0].sample);
  // b computed block 3 again; the copy was replaced by the indexed block.
  EXPECT_EQ(h.sched.cached_device_blocks(), 4);
  EXPECT_EQ(h.device.refcount(b->blocks.blocks[3]), 2);
}

TEST(PrefixReuse, NamespacesNeverShare) {
  Harness h(64);
  const std::vector<int32_t> prompt = range(1, 20);
  Sequence* a = h.add(prompt, /*ns=*/1);
  h.step();
  Sequence* b = h.add(prompt, /*ns=*/2);
  h.step();
  EXPECT_EQ(b->n_cache_hit, 0);
  for (int32_t x : b->blocks.blocks)
    for (int32_t y : a->blocks.blocks) EXPECT_NE(x, y);
  Sequence* c = h.add(prompt, /*ns=*/2);
  h.step();
  EXPECT_EQ(c->n_cache_hit, 16);
}

TEST(PrefixReuse, IdleCachedBlocksAreEvictedBeforeAnyoneWaits) {
  Harness h(10);                      // 10 blocks of 4
  Sequence* a = h.add(range(1, 24));  // 6 blocks
  h.step();
  h.sched.finish(a);
  EXPECT_EQ(h.device.n_idle_cached(), 6);
  EXPECT_EQ(h.device.n_free(), 4);
  Sequence* b = h.add(range(200, 28));  // 7 blocks: the 4 free ones and 3 evicted
  const StepPlan p = h.step();
  ASSERT_EQ(p.scheduled.size(), 1u);
  EXPECT_EQ(p.scheduled[0].n_tokens, 28);
  EXPECT_EQ(h.sched.prefix_counters().evicted_blocks, 3);
  EXPECT_TRUE(p.preempted.empty());
  // Least recently used leaves first: a's last blocks went, its first two are left. b's next
  // block takes a's third; c finds a's first and takes its second for its own.
  Sequence* c = h.add(range(1, 8));
  h.step();
  EXPECT_EQ(c->n_cache_hit, 4);
  EXPECT_EQ(h.sched.prefix_counters().evicted_blocks, 5);
  EXPECT_EQ(b->state, SeqState::running);
}

TEST(PrefixReuse, EvictedBlocksAreDemotedToTheHostAndPromotedBackOnAHit) {
  Harness h(8);                       // 8 device blocks of 4; a host pool of 32
  Sequence* a = h.add(range(1, 24));  // 6 blocks
  h.step();
  h.sched.finish(a);
  Sequence* b = h.add(range(200, 28));  // 7 blocks: 2 free, 5 of a's evicted ...
  StepPlan p = h.step();
  EXPECT_EQ(p.swap_out.size(), 5u);  // ... and copied to the host tier
  EXPECT_EQ(h.sched.prefix_counters().demoted_blocks, 5);
  EXPECT_EQ(h.sched.cached_host_blocks(), 5);
  EXPECT_EQ(h.host.n_idle_cached(), 5);  // only the host tier's index holds them
  h.sched.finish(b);
  // a's prompt again: its first block from the device tier, the next 4 promoted from the
  // host tier (the 6th block holds the last token, which runs).
  Sequence* c = h.add(range(1, 24));
  p = h.step();
  EXPECT_EQ(c->n_cache_hit, 20);
  EXPECT_EQ(p.swap_in.size(), 4u);
  EXPECT_EQ(h.sched.prefix_counters().promoted_blocks, 4);
  ASSERT_EQ(p.scheduled.size(), 1u);
  EXPECT_EQ(p.scheduled[0].n_tokens, 4);
  // The promoted blocks are indexed on the device again; the host keeps its copies, and one
  // of b's blocks joined them (c's own last block took its place).
  EXPECT_EQ(h.sched.cached_host_blocks(), 6);
  EXPECT_EQ(h.host.n_held(), 4);  // the promotions' sources, until the copies are queued
  h.sched.finish(c);
  h.step();
  EXPECT_EQ(h.device.n_held(), 0);
  EXPECT_EQ(h.host.n_held(), 0);
}

TEST(PrefixReuse, APausedRequestPaysOnlyForWhatNobodyElseHolds) {
  Harness h(64);
  const std::vector<int32_t> system = range(1, 16);
  Sequence* a = h.add(concat(system, range(40, 6)));  // 5 full blocks + 2
  h.step();
  Sequence* b = h.add(concat(system, range(60, 3)));
  h.step();  // b holds the 4 blocks of the system prompt, a decodes a token
  h.sched.intercept(a, {"tool", h.now, std::nullopt, false, 0.0, false});
  // a holds 6 blocks (23 computed tokens): the 4 shared with b cost nothing.
  EXPECT_EQ(a->n_computed, 23);
  EXPECT_EQ(a->device_tokens(B), a->n_computed);
  EXPECT_EQ(h.sched.exclusive_device_tokens(*a), a->n_computed - 16);
  h.sched.finish(b);
  EXPECT_EQ(h.sched.exclusive_device_tokens(*a), a->n_computed);
}

TEST(PrefixReuse, ACutInsideASharedBlockGivesTheBlockUp) {
  Harness h(64);
  Sequence* a = h.add(range(1, 14));  // 3 full blocks + 2
  h.step();
  h.step();  // a decodes one more token (15 computed)
  h.sched.intercept(a, {"tool", h.now, std::nullopt, false, 0.0, false});
  ASSERT_EQ(a->n_computed, 15);
  // Cut at 10: inside block 2, which the cache holds: kept up to 8.
  h.sched.truncate_paused(a, 10);
  EXPECT_EQ(a->n_computed, 8);
  EXPECT_EQ(a->blocks.blocks.size(), 2u);
  h.sched.check_invariants();
  // Cut at 14 on a fresh one: inside block 3, which is a's own (not full): kept as is.
  Sequence* c = h.add(range(300, 14));
  h.step();
  h.step();
  h.sched.intercept(c, {"tool", h.now, std::nullopt, false, 0.0, false});
  h.sched.truncate_paused(c, 14);
  EXPECT_EQ(c->n_computed, 14);
  h.sched.check_invariants();
}

// Random requests drawn from a few shared prefixes, paused (their KV kept, swapped out in
// part or dropped at random), resumed, continued with a cut, released, finished, under a
// small device pool: the invariants (refcounts = holders + the
// index, keys name the blocks held, no block in two entries) hold after every step, and the
// KV a request reads was written for exactly its tokens: each block's content is tracked
// through a model of what was written where.
TEST(PrefixReuse, RandomAgentTrafficKeepsEveryBlockRight) {
  for (uint32_t seed = 1; seed <= 32; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    SchedulerConfig cfg = cache_config(24);
    cfg.max_partial_prefills = seed % 4 == 1 ? 1 : 4;  // the FCFS planner, or the fair one
    Harness h(40, cfg, seed % 4 == 3 ? nullptr : std::make_unique<RandomPolicy>(seed));
    // What each device block holds: the token written at each of its slots (-1: nothing).
    std::map<int32_t, std::vector<int32_t>> written;
    auto check_reads = [&](const Sequence& s) {
      for (int64_t pos = 0; pos < s.device_tokens(B); ++pos) {
        const int32_t blk = s.blocks.blocks[(size_t)(pos / B)];
        ASSERT_EQ(written[blk][(size_t)(pos % B)], s.tokens[(size_t)pos])
            << "sequence " << s.id << " position " << pos;
      }
    };
    const std::vector<std::vector<int32_t>> prefixes = {range(1, 9), range(1, 14), range(500, 7)};
    for (int it = 0; it < 600; ++it) {
      const int op = (int)(rng() % 10);
      if (op < 3 && h.sched.n_waiting() + h.sched.n_running() < 6) {
        auto t = concat(prefixes[rng() % prefixes.size()],
                        range((int32_t)(rng() % 3) * 1000, 1 + (int32_t)(rng() % 9)));
        h.add(t, rng() % 2);
      } else if (op < 5) {  // a running request pauses or finishes
        for (auto& s : h.seqs)
          if (s->state == SeqState::running && s->n_uncomputed() <= 1) {
            if (rng() % 2) {
              h.sched.intercept(s.get(), {"tool", h.now, std::nullopt, false, 0.0, false});
            } else {
              h.sched.finish(s.get());
            }
            break;
          }
      } else if (op < 7) {  // a paused request resumes, is continued with a cut, or let go
        for (auto& s : h.seqs)
          if (s->state == SeqState::intercepted && s->interception && !s->interception->resumed &&
              std::find(h.sched.paused().begin(), h.sched.paused().end(), s.get()) !=
                  h.sched.paused().end()) {
            const int what = (int)(rng() % 3);
            if (what == 0) {
              h.sched.resume(s.get(), {7, 8}, h.now);
            } else if (what == 1) {
              const int64_t cut = (int64_t)(rng() % (s->tokens.size() + 1));
              h.sched.truncate_paused(s.get(), cut);
              s->tokens.resize((size_t)cut);
              s->tokens.push_back(9);
              s->tokens.push_back(9);
              h.sched.resume(s.get(), {}, h.now);
            } else {
              h.sched.release_paused(s.get());
              h.sched.finish(s.get());
            }
            break;
          }
      }
      const StepPlan plan = h.sched.schedule(h.now += 0.01);
      // Copies between tiers carry content with them, swap-ins first (as the engine runs
      // them), then the forward pass writes.
      for (const BlockMove& m : plan.swap_in) written[m.to] = written[10000 + m.from];
      for (const BlockMove& m : plan.swap_out) written[10000 + m.to] = written[m.from];
      for (const ScheduledSeq& ss : plan.scheduled) {
        for (int64_t pos = ss.seq->n_computed; pos < ss.seq->n_computed + ss.n_tokens; ++pos) {
          const int32_t blk = ss.seq->blocks.blocks[(size_t)(pos / B)];
          auto& w = written[blk];
          if (pos % B == 0) w.assign(B, -1);
          w.resize(B, -1);
          w[(size_t)(pos % B)] = ss.seq->tokens[(size_t)pos];
        }
      }
      h.sched.commit(plan);
      for (const ScheduledSeq& ss : plan.scheduled) {
        check_reads(*ss.seq);
        if (ss.sample) ss.seq->tokens.push_back(100 + (int32_t)(rng() % 3));
      }
      h.sched.check_invariants();
    }
    EXPECT_GT(h.sched.prefix_counters().hit_tokens, 100);
    EXPECT_GT(h.sched.prefix_counters().evicted_blocks, 10);
    EXPECT_GT(h.sched.prefix_counters().demoted_blocks, 10);   // to the host tier ...
    EXPECT_GT(h.sched.prefix_counters().promoted_blocks, 10);  // ... and back on a hit
    std::printf("seed %u: hit %lld of %lld tokens, evicted %lld, demoted %lld, promoted %lld\n",
                seed, (long long)h.sched.prefix_counters().hit_tokens,
                (long long)h.sched.prefix_counters().query_tokens,
                (long long)h.sched.prefix_counters().evicted_blocks,
                (long long)h.sched.prefix_counters().demoted_blocks,
                (long long)h.sched.prefix_counters().promoted_blocks);
  }
}

// The engine: the same conversations with the cache on and off give the same greedy tokens
// (the CPU backend's order does not depend on the batch or on which step computed a row),
// and the cache-on run computes fewer prompt rows.
TEST(PrefixCacheEngine, GreedyTokensAreThoseOfTheCacheOff) {
  auto run = [](bool cache, EngineStats* stats, int64_t kv_tokens = 1024) {
    EngineConfig c;
    c.model_path = testing::default_model_path();
    c.check_invariants = true;
    c.kv_cache_tokens = kv_tokens;
    c.swap_space_tokens = 1024;
    c.max_tokens_per_step = 64;
    c.prefix_cache = cache;
    c.policy = "preserve";
    auto made = EngineCore::create(c);
    EXPECT_TRUE(made.ok());
    EngineCore& e = **made;
    const std::string system =
        "You are a careful assistant. You answer in one short sentence and you never make up "
        "facts. When you do not know, you say so. ";
    std::map<uint64_t, std::vector<int32_t>> out;
    std::vector<uint64_t> order;
    for (const std::string q :
         {"What is the capital of France?", "Name a prime number.",
          "What is the capital of France?", "Say hello.", "Name a prime number."}) {
      GenerateRequest r;
      r.prompt = e.tokenizer().encode(system + q, true, false);
      r.params.temperature = 0.0f;
      r.params.max_tokens = 12;
      r.params.ignore_eos = true;
      const uint64_t id = *e.add_request(r);
      order.push_back(id);
      for (int i = 0; i < 200 && e.has_work(); ++i)
        for (const RequestOutput& o : e.step()) {
          out[o.id].insert(out[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
          if (o.finished() && cache && o.id != order.front()) {
            EXPECT_GE(o.cached_tokens, 16) << "request " << o.id << " found the system prompt";
          }
        }
    }
    *stats = e.stats();
    std::vector<std::vector<int32_t>> tokens;
    for (uint64_t id : order) tokens.push_back(out[id]);
    return tokens;
  };
  EngineStats on, off;
  const auto with = run(true, &on), without = run(false, &off);
  EXPECT_EQ(with, without);
  EXPECT_GT(on.prefix_hit_tokens, 3 * 16);
  EXPECT_LT(on.prompt_tokens_computed, off.prompt_tokens_computed);
  EXPECT_EQ(off.prefix_query_tokens, 0);
  // A device pool of 4 blocks: every request evicts the last one's blocks, which go to the
  // host tier, and the repeated questions bring them back.
  EngineStats tight;
  EXPECT_EQ(run(true, &tight, 64), without);
  EXPECT_GT(tight.prefix_evicted_blocks, 0);
  EXPECT_GT(tight.prefix_demoted_blocks, 0);
  EXPECT_GT(tight.prefix_promoted_blocks, 0);
  EXPECT_GT(tight.prefix_hit_tokens, 3 * 16);
}

}  // namespace
}  // namespace infercept
