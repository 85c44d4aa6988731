// Interception policies as pure logic: crafted snapshots where the right choice is known,
// the ttl switch, re-decision as a pause grows, and randomized snapshots checking that no
// decision ever exceeds the swap budget or the free host blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>

#include "sched/policy.h"

namespace infercept {
namespace {

// A 7B model on the lent H200: 512 KiB of KV per token, 55 GB/s copies, a step that stays
// near 20 ms up to 384 tokens (S = 384), then grows with the prefill.
CostModel h200_7b() {
  CostModel m;
  m.t_fwd_samples = {{1, 0.020}, {384, 0.021}, {1024, 0.035}, {2048, 0.060}, {4096, 0.120}};
  m.kv_bytes_per_token = 512.0 * 1024;
  m.swap_bytes_per_second = 55e9;
  return m;
}

std::unique_ptr<DurationEstimator> estimator(const std::string& name) {
  return std::move(make_duration_estimator(name)).value();
}

PausedView paused(uint64_t id, const std::string& tool, int64_t context, double elapsed) {
  PausedView p;
  p.id = id;
  p.tool = tool;
  p.context_tokens = context;
  p.device_tokens = context;
  p.elapsed = elapsed;
  return p;
}

// A busy step: 8000 tokens of other requests' context, 32 decoding, blocks of 16.
PolicyInput pressured(std::vector<PausedView> v, int64_t budget, int64_t free_host_blocks) {
  PolicyInput in;
  in.paused = std::move(v);
  in.running_context_tokens = 8000;
  in.decode_tokens = 32;
  in.block_size = 16;
  in.free_device_blocks = 0;
  in.free_host_blocks = free_host_blocks;
  in.swap_budget_tokens = budget;
  in.memory_pressure = true;
  in.deficit_blocks = 1 << 20;  // more than any test's paused requests hold
  return in;
}

struct Fixture {
  CostModel cost = h200_7b();
  std::unique_ptr<DurationEstimator> est;
  std::unique_ptr<Policy> policy;
  explicit Fixture(PolicyKind kind, const std::string& estimator_name = "elapsed",
                   PolicyOptions opts = {})
      : est(estimator(estimator_name)), policy(make_policy(kind, cost, *est, opts)) {}
};

TEST(Policy, NamesRoundTrip) {
  for (PolicyKind k : {PolicyKind::discard, PolicyKind::improved_discard, PolicyKind::preserve,
                       PolicyKind::swap, PolicyKind::ttl, PolicyKind::minwaste}) {
    auto parsed = parse_policy(policy_name(k));
    ASSERT_TRUE(parsed.ok()) << policy_name(k);
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_EQ(*parse_policy("improved_discard"), PolicyKind::improved_discard);
  auto bad = parse_policy("yolo");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("minwaste"), std::string::npos);
}

TEST(Policy, KeepsArrivalOnlyDiscardForgetsIt) {
  const CostModel cost = h200_7b();
  auto est = estimator("learned");
  for (PolicyKind k : {PolicyKind::discard, PolicyKind::improved_discard, PolicyKind::preserve,
                       PolicyKind::swap, PolicyKind::ttl, PolicyKind::minwaste}) {
    auto p = make_policy(k, cost, *est);
    EXPECT_EQ(p->kind(), k);
    EXPECT_EQ(p->keeps_arrival_on_resume(), k != PolicyKind::discard) << policy_name(k);
  }
}

TEST(Policy, FixedPolicies) {
  for (bool pressure : {false, true}) {
    PolicyInput in =
        pressured({paused(1, "calc", 500, 0.0), paused(2, "chat", 3000, 40.0)}, 1000, 1000);
    in.memory_pressure = pressure;
    for (PolicyKind k : {PolicyKind::discard, PolicyKind::improved_discard}) {
      const auto d = Fixture(k).policy->decide(in);
      ASSERT_EQ(d.size(), 2u);
      for (const auto& x : d) EXPECT_EQ(x.action, KvAction::discard);
      EXPECT_EQ(d[0].id, 1u);
      EXPECT_EQ(d[1].id, 2u);
    }
    const auto d = Fixture(PolicyKind::preserve).policy->decide(in);
    for (const auto& x : d) EXPECT_EQ(x.action, KvAction::preserve);
  }
}

TEST(Policy, SwapMovesEverythingOrDiscards) {
  Fixture f(PolicyKind::swap);
  PausedView on_host = paused(3, "img", 100, 1.0);
  on_host.device_tokens = 0;
  on_host.host_tokens = 100;
  // Budget 0 is ignored (synchronous swap); host room: 2000 tokens = 125 blocks.
  PolicyInput in =
      pressured({paused(1, "chat", 1000, 0.0), paused(2, "chat", 1001, 0.0), on_host}, 0, 125);
  auto d = f.policy->decide(in);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].action, KvAction::swap_out);
  EXPECT_EQ(d[0].swap_out_tokens, 1000);  // 63 blocks
  // 1001 tokens need 63 blocks; only 62 are left: the host cannot take it whole.
  EXPECT_EQ(d[1].action, KvAction::discard);
  EXPECT_EQ(d[2].action, KvAction::preserve);  // nothing left on the device to move
}

TEST(MinWaste, LongPauseLongContextUnderPressureSwapsWithBudget) {
  Fixture f(PolicyKind::minwaste);
  // A chatbot pause 10 s old (elapsed estimator: 10 s more), 2048 tokens of context.
  auto d = f.policy->decide(pressured({paused(7, "chat", 2048, 10.0)}, 1000, 10000));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].id, 7u);
  EXPECT_EQ(d[0].action, KvAction::swap_out);
  EXPECT_EQ(d[0].swap_out_tokens, 992);  // whole blocks within the 1000-token budget
}

TEST(MinWaste, LongPauseWithoutBudgetDiscards) {
  Fixture f(PolicyKind::minwaste);
  auto d = f.policy->decide(pressured({paused(7, "chat", 2048, 10.0)}, 0, 10000));
  EXPECT_EQ(d[0].action, KvAction::discard);
  EXPECT_EQ(d[0].swap_out_tokens, 0);
}

TEST(MinWaste, FullHostPoolDiscards) {
  Fixture f(PolicyKind::minwaste);
  auto d = f.policy->decide(pressured({paused(7, "chat", 2048, 10.0)}, 1000, 0));
  EXPECT_EQ(d[0].action, KvAction::discard);
}

TEST(MinWaste, CalculatorPausePreserves) {
  // Learned estimator, calculator calls of ~0.1 ms (Table 1): preserving for 0.1 ms is far
  // cheaper than recomputing 1422 tokens, and a swap round trip (~27 ms) is far longer than
  // the pause, so the budget is not spent on it either.
  Fixture f(PolicyKind::minwaste, "learned");
  for (int i = 0; i < 100; ++i) f.est->observe("calc", 9e-5 + 1e-6 * (i % 10));
  auto d = f.policy->decide(pressured({paused(1, "calc", 1422, 2e-5)}, 1000, 10000));
  EXPECT_EQ(d[0].action, KvAction::preserve);
  EXPECT_EQ(d[0].swap_out_tokens, 0);
  // Same with the elapsed estimator on a call just made.
  Fixture g(PolicyKind::minwaste, "elapsed");
  d = g.policy->decide(pressured({paused(1, "calc", 1422, 1e-4)}, 1000, 10000));
  EXPECT_EQ(d[0].action, KvAction::preserve);
}

TEST(MinWaste, NoPressurePreservesEverything) {
  Fixture f(PolicyKind::minwaste);
  PolicyInput in =
      pressured({paused(1, "chat", 4000, 100.0), paused(2, "calc", 10, 0.0)}, 1000, 10000);
  in.memory_pressure = false;
  for (const auto& d : f.policy->decide(in)) {
    EXPECT_EQ(d.action, KvAction::preserve);
    EXPECT_EQ(d.swap_out_tokens, 0);
  }
}

// Without pressure, host KV whose tool is due (within twice its swap-in: 4,000 tokens x 512
// KiB at 55 GB/s = 38 ms) comes back ahead of the resume into spare device blocks; not when
// the tool is far off, the spare blocks are too few, there is no budget, or under pressure.
TEST(MinWaste, SwapsHostKvBackAheadOfADueTool) {
  Fixture f(PolicyKind::minwaste, "oracle");
  auto on_host = [](double hint) {
    PausedView p = paused(1, "search", 4000, 0.0);
    p.device_tokens = 0;
    p.host_tokens = 4000;
    p.hint = hint;
    return p;
  };
  auto input = [&](double hint) {
    PolicyInput in = pressured({on_host(hint)}, 1000, 0);
    in.memory_pressure = false;
    in.deficit_blocks = 0;
    in.free_device_blocks = 1000;
    in.spare_device_blocks = 900;
    return in;
  };
  EXPECT_EQ(f.policy->decide(input(0.05))[0].action, KvAction::prefetch);
  EXPECT_EQ(f.policy->decide(input(10.0))[0].action, KvAction::preserve);
  PolicyInput few = input(0.05);
  few.spare_device_blocks = 249;  // 250 blocks of 16 needed
  EXPECT_EQ(f.policy->decide(few)[0].action, KvAction::preserve);
  PolicyInput no_budget = input(0.05);
  no_budget.swap_budget_tokens = 0;
  EXPECT_EQ(f.policy->decide(no_budget)[0].action, KvAction::preserve);
  PolicyInput pressure = input(0.05);
  pressure.memory_pressure = true;
  pressure.deficit_blocks = 10;
  EXPECT_NE(f.policy->decide(pressure)[0].action, KvAction::prefetch);
}

TEST(MinWaste, MostWastefulGetsTheBudgetFirst) {
  Fixture f(PolicyKind::minwaste);
  // Two long pauses, both cheaper to recompute than to keep (min = W_cd): the larger
  // context wastes more if not swapped, so it is served first. Budget for 32 blocks only.
  auto d = f.policy->decide(
      pressured({paused(1, "chat", 1024, 20.0), paused(2, "chat", 3072, 20.0)}, 512, 10000));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].id, 1u);  // output in input order
  EXPECT_EQ(d[1].id, 2u);
  EXPECT_EQ(d[1].action, KvAction::swap_out);
  EXPECT_EQ(d[1].swap_out_tokens, 512);
  EXPECT_EQ(d[0].action, KvAction::discard);  // no budget left; W_cd < W_p

  // Host room for 10 blocks only: the most wasteful takes them; budget is left over but
  // the host is full.
  d = f.policy->decide(
      pressured({paused(1, "chat", 1024, 20.0), paused(2, "chat", 3072, 20.0)}, 5000, 10));
  EXPECT_EQ(d[1].action, KvAction::swap_out);
  EXPECT_EQ(d[1].swap_out_tokens, 160);
  EXPECT_EQ(d[0].action, KvAction::discard);

  // Equal waste: the earlier request in the input (FCFS) goes first, deterministically.
  d = f.policy->decide(
      pressured({paused(1, "chat", 2048, 5.0), paused(2, "chat", 2048, 20.0)}, 512, 10000));
  EXPECT_EQ(d[0].action, KvAction::swap_out);
  EXPECT_EQ(d[1].action, KvAction::discard);
}

TEST(MinWaste, PartialSwapsContinueAndPartialBlocksGoFirst) {
  Fixture f(PolicyKind::minwaste);
  // Context of 1000 tokens: 62 whole blocks and a last block of 8 tokens. Budget 100 covers
  // 6 block copies: the partial block (8 tokens) and 5 whole blocks (80).
  auto d = f.policy->decide(pressured({paused(1, "chat", 1000, 10.0)}, 100, 10000));
  EXPECT_EQ(d[0].action, KvAction::swap_out);
  EXPECT_EQ(d[0].swap_out_tokens, 88);

  // Next step: 912 tokens left on the device (57 whole blocks), 88 on the host. The
  // request keeps receiving budget, in whole blocks now.
  PausedView p = paused(1, "chat", 1000, 10.02);
  p.device_tokens = 912;
  p.host_tokens = 88;
  d = f.policy->decide(pressured({p}, 100, 10000));
  EXPECT_EQ(d[0].action, KvAction::swap_out);
  EXPECT_EQ(d[0].swap_out_tokens, 96);

  // The last step moves what remains even when it is less than the budget.
  p.device_tokens = 32;
  p.host_tokens = 968;
  d = f.policy->decide(pressured({p}, 1000, 10000));
  EXPECT_EQ(d[0].swap_out_tokens, 32);

  // Entirely on the host: holds no device memory, nothing to decide but to leave it there.
  p.device_tokens = 0;
  p.host_tokens = 1000;
  d = f.policy->decide(pressured({p}, 1000, 10000));
  EXPECT_EQ(d[0].action, KvAction::preserve);
  EXPECT_EQ(d[0].swap_out_tokens, 0);

  // A budget smaller than one block copy moves nothing, even for the 8-token last block.
  d = f.policy->decide(pressured({paused(1, "chat", 1000, 10.0)}, 15, 10000));
  EXPECT_EQ(d[0].action, KvAction::discard);
}

TEST(MinWaste, ReDecisionFlipsPreserveToDiscardAsThePauseGrows) {
  // Elapsed estimator, no budget: at the start of the pause the estimate is ~0 and
  // preserving is cheapest; as the call drags on its expected remainder grows with it and
  // W_p overtakes the chunked recompute.
  Fixture f(PolicyKind::minwaste);
  std::vector<KvAction> seen;
  for (double e : {0.0, 0.001, 0.01, 0.1, 1.0, 10.0}) {
    auto d = f.policy->decide(pressured({paused(1, "qa", 2048, e)}, 0, 10000));
    seen.push_back(d[0].action);
  }
  EXPECT_EQ(seen.front(), KvAction::preserve);
  EXPECT_EQ(seen.back(), KvAction::discard);
  // Monotone: once discard, it stays discard.
  auto first_discard = std::find(seen.begin(), seen.end(), KvAction::discard);
  for (auto it = first_discard; it != seen.end(); ++it) EXPECT_EQ(*it, KvAction::discard);
}

TEST(MinWaste, LearnedEstimateChangesTheDecision) {
  // The same 0.3 s-old call: for a tool whose calls last 0.32 s it is nearly done
  // (preserve); for a tool whose long calls last 60 s it has likely just begun (discard).
  Fixture f(PolicyKind::minwaste, "learned");
  for (int i = 0; i < 200; ++i) {
    f.est->observe("fast", 0.32);
    f.est->observe("slow", i % 2 ? 0.1 : 60.0);
  }
  auto d = f.policy->decide(
      pressured({paused(1, "fast", 2048, 0.3), paused(2, "slow", 2048, 0.3)}, 0, 10000));
  EXPECT_EQ(d[0].action, KvAction::preserve);
  EXPECT_EQ(d[1].action, KvAction::discard);
}

// Under pressure, discards stop once the blocks they free cover what the request next in
// line lacks; the most wasteful pauses go first and the rest are preserved.
TEST(MinWaste, DiscardsOnlyWhatTheNextRequestLacks) {
  PolicyOptions to_deficit;
  to_deficit.minwaste_discard_to_deficit = true;
  Fixture f(PolicyKind::minwaste, "elapsed", to_deficit);
  // Three long chat pauses, no swap budget: each is cheaper discarded than preserved.
  // 2048 tokens = 128 blocks, 1024 = 64, 4096 = 256; the 4096-token one wastes most.
  PolicyInput in = pressured(
      {paused(1, "chat", 2048, 10.0), paused(2, "chat", 1024, 10.0), paused(3, "chat", 4096, 10.0)},
      0, 10000);
  in.deficit_blocks = 100;
  auto d = f.policy->decide(in);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[2].action, KvAction::discard);   // 256 blocks cover the 100 missing
  EXPECT_EQ(d[0].action, KvAction::preserve);  // not needed by anyone now
  EXPECT_EQ(d[1].action, KvAction::preserve);
  // A deficit larger than the first release takes the next most wasteful too.
  in.deficit_blocks = 300;
  d = f.policy->decide(in);
  EXPECT_EQ(d[2].action, KvAction::discard);
  EXPECT_EQ(d[0].action, KvAction::discard);
  EXPECT_EQ(d[1].action, KvAction::preserve);
  // The paper's rule (minwaste_discard_to_deficit off) discards all three whatever the deficit.
  PolicyOptions paper_rule;
  paper_rule.minwaste_discard_to_deficit = false;
  Fixture g(PolicyKind::minwaste, "elapsed", paper_rule);
  in.deficit_blocks = 1;
  for (const auto& x : g.policy->decide(in)) EXPECT_EQ(x.action, KvAction::discard);
}

// Swaps are not bounded by the deficit: the budget is bandwidth hidden under the step, and a
// swapped pause's blocks are free for the next deficit without a recomputation.
TEST(MinWaste, SwapsSpendTheBudgetWhateverTheDeficit) {
  PolicyOptions to_deficit;
  to_deficit.minwaste_discard_to_deficit = true;
  Fixture f(PolicyKind::minwaste, "elapsed", to_deficit);
  PolicyInput in =
      pressured({paused(1, "chat", 2048, 10.0), paused(2, "chat", 2048, 10.0)}, 4096, 10000);
  in.deficit_blocks = 1;
  auto d = f.policy->decide(in);
  EXPECT_EQ(d[0].action, KvAction::swap_out);
  EXPECT_EQ(d[1].action, KvAction::swap_out);
}

TEST(Ttl, PreservesUntilTheToolsP95ThenDiscards) {
  Fixture f(PolicyKind::ttl, "learned");
  // 100 calls uniformly 0.50 .. 0.99 s: p95 = 0.50 + 0.95 * 0.49 ~= 0.9655 s.
  for (int i = 0; i < 100; ++i) f.est->observe("qa", 0.50 + 0.0049 * i);
  const double ttl = *f.est->quantile("qa", 0.95);
  auto at = [&](double e, bool pressure) {
    PolicyInput in = pressured({paused(1, "qa", 2048, e)}, 1000, 10000);
    in.memory_pressure = pressure;
    return f.policy->decide(in)[0].action;
  };
  EXPECT_EQ(at(0.0, true), KvAction::preserve);
  EXPECT_EQ(at(ttl - 0.01, true), KvAction::preserve);
  EXPECT_EQ(at(ttl + 0.01, true), KvAction::discard);
  EXPECT_EQ(at(ttl + 100, false), KvAction::preserve);  // nobody needs the blocks
}

TEST(Ttl, UnknownToolUsesTheDefault) {
  PolicyOptions opts;
  opts.ttl_default_seconds = 2.0;
  Fixture f(PolicyKind::ttl, "learned", opts);
  auto at = [&](double e) {
    return f.policy->decide(pressured({paused(1, "new-tool", 512, e)}, 0, 0))[0].action;
  };
  EXPECT_EQ(at(1.5), KvAction::preserve);
  EXPECT_EQ(at(2.5), KvAction::discard);
  Fixture g(PolicyKind::ttl, "learned");  // the 1 s default
  EXPECT_EQ(g.policy->decide(pressured({paused(1, "x", 512, 0.9)}, 0, 0))[0].action,
            KvAction::preserve);
  EXPECT_EQ(g.policy->decide(pressured({paused(1, "x", 512, 1.1)}, 0, 0))[0].action,
            KvAction::discard);
}

// Random snapshots, including inconsistent-looking but legal corners: zero budgets, empty
// host pools, requests half on the host, tiny and huge contexts, block sizes 1..32.
PolicyInput random_input(std::mt19937& rng, std::vector<std::string>& tools) {
  std::uniform_int_distribution<int> n_paused(0, 12), bs_pick(0, 3), pick_tool(0, 3);
  std::uniform_int_distribution<int64_t> ctx(0, 6000), budget(0, 3000), host(0, 400);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const int64_t sizes[] = {1, 8, 16, 32};
  PolicyInput in;
  in.block_size = sizes[bs_pick(rng)];
  in.running_context_tokens = ctx(rng) * 4;
  in.decode_tokens = std::uniform_int_distribution<int64_t>(0, 600)(rng);
  in.free_host_blocks = u(rng) < 0.2 ? 0 : host(rng);
  in.swap_budget_tokens = u(rng) < 0.2 ? 0 : budget(rng);
  in.memory_pressure = u(rng) < 0.8;
  in.deficit_blocks = in.memory_pressure ? std::uniform_int_distribution<int64_t>(1, 400)(rng) : 0;
  const int n = n_paused(rng);
  for (int i = 0; i < n; ++i) {
    PausedView p;
    p.id = (uint64_t)i + 100;
    p.tool = tools[(size_t)pick_tool(rng)];
    p.context_tokens = ctx(rng);
    const int64_t blocks = (p.context_tokens + in.block_size - 1) / in.block_size;
    // Part already on the host: whole device blocks stay, from the front.
    const int64_t on_host_blocks =
        u(rng) < 0.5 ? 0 : std::uniform_int_distribution<int64_t>(0, blocks)(rng);
    p.device_tokens =
        on_host_blocks == 0 ? p.context_tokens : (blocks - on_host_blocks) * in.block_size;
    p.host_tokens = p.context_tokens - p.device_tokens;
    p.elapsed = std::exp(std::uniform_real_distribution<double>(-10, 4)(rng));
    if (u(rng) < 0.3) p.hint = std::exp(std::uniform_real_distribution<double>(-10, 4)(rng));
    in.paused.push_back(std::move(p));
  }
  return in;
}

TEST(Policy, RandomizedBudgetsAreNeverExceeded) {
  std::mt19937 rng(2024);
  std::vector<std::string> tools = {"calc", "qa", "chat", "img"};
  const CostModel cost = h200_7b();
  for (const char* est_name : {"learned", "elapsed", "oracle"}) {
    auto est = estimator(est_name);
    std::exponential_distribution<double> dur(1.0);
    for (int i = 0; i < 200; ++i) est->observe(tools[(size_t)i % 4], dur(rng) * (i % 4 + 1));
    PolicyOptions to_deficit, paper_rule;
    to_deficit.minwaste_discard_to_deficit = true;
    paper_rule.minwaste_discard_to_deficit = false;
    for (const auto& [kind, opts] :
         {std::pair{PolicyKind::minwaste, paper_rule}, std::pair{PolicyKind::minwaste, to_deficit},
          std::pair{PolicyKind::swap, PolicyOptions{}},
          std::pair{PolicyKind::ttl, PolicyOptions{}}}) {
      auto policy = make_policy(kind, cost, *est, opts);
      int swaps = 0;
      for (int iter = 0; iter < 1000; ++iter) {
        const PolicyInput in = random_input(rng, tools);
        const auto out = policy->decide(in);
        ASSERT_EQ(out.size(), in.paused.size());
        int64_t total = 0, host_blocks = 0;
        for (size_t i = 0; i < out.size(); ++i) {
          const PausedView& p = in.paused[i];
          const PausedDecision& d = out[i];
          ASSERT_EQ(d.id, p.id);
          if (d.action != KvAction::swap_out) {
            ASSERT_EQ(d.swap_out_tokens, 0);
            continue;
          }
          ++swaps;
          ASSERT_GT(d.swap_out_tokens, 0);
          ASSERT_LE(d.swap_out_tokens, p.device_tokens);
          // What stays on the device is a whole number of blocks: the move is whole blocks,
          // plus the request's last partial block when it has one.
          ASSERT_EQ((p.device_tokens - d.swap_out_tokens) % in.block_size, 0);
          if (kind == PolicyKind::swap) {
            ASSERT_EQ(d.swap_out_tokens, p.device_tokens);
          }
          total += d.swap_out_tokens;
          host_blocks += (d.swap_out_tokens + in.block_size - 1) / in.block_size;
        }
        ASSERT_LE(host_blocks, in.free_host_blocks);
        ASSERT_LE(total, in.free_host_blocks * in.block_size);
        if (kind == PolicyKind::minwaste) {
          ASSERT_LE(total, in.swap_budget_tokens);
          // Whole blocks are copied, so whole blocks are what the budget must cover.
          ASSERT_LE(host_blocks * in.block_size, in.swap_budget_tokens);
          if (!in.memory_pressure) {
            for (const auto& d : out) ASSERT_EQ(d.action, KvAction::preserve);
          }
          // Discards stop once they cover the deficit: before the last one (in the policy's
          // order, so at most the largest) they were short of it.
          int64_t discarded = 0, largest = 0;
          for (size_t i = 0; i < out.size(); ++i)
            if (out[i].action == KvAction::discard) {
              const int64_t b = (in.paused[i].device_tokens + in.block_size - 1) / in.block_size;
              discarded += b;
              largest = std::max(largest, b);
            }
          if (opts.minwaste_discard_to_deficit) {
            ASSERT_LT(discarded - largest, std::max<int64_t>(1, in.deficit_blocks));
          }
        }
        if (kind == PolicyKind::ttl) {
          ASSERT_EQ(total, 0);
        }
      }
      if (kind != PolicyKind::ttl) {
        EXPECT_GT(swaps, 50) << policy_name(kind);  // both swapping policies were exercised
      }
    }
  }
}

// The minwaste discard rule defaults to the deficit rule; the policy says what it owns: the
// synchronous whole-context swap is the `swap` policy's, swapping on preemption minwaste's.
TEST(PolicyOptions, DefaultsAndWhatEachPolicyOwns) {
  EXPECT_TRUE(PolicyOptions{}.minwaste_discard_to_deficit);
  CostModel cost;
  cost.t_fwd_samples = {{1, 0.01}, {512, 0.05}};
  cost.kv_bytes_per_token = 1000;
  cost.swap_bytes_per_second = 1e9;
  auto est = make_duration_estimator("learned");
  ASSERT_TRUE(est.ok());
  for (PolicyKind k : {PolicyKind::discard, PolicyKind::improved_discard, PolicyKind::preserve,
                       PolicyKind::swap, PolicyKind::ttl, PolicyKind::minwaste}) {
    auto p = make_policy(k, cost, **est);
    EXPECT_EQ(p->swaps_synchronously(), k == PolicyKind::swap) << policy_name(k);
    EXPECT_EQ(p->preempts_by_swapping(), k == PolicyKind::minwaste) << policy_name(k);
  }
}

}  // namespace
}  // namespace infercept
