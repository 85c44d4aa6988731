// Host cost of the prefix cache in the scheduler: one step (schedule + commit) of 256
// decoding requests over a device pool whose idle part, 64k blocks, is all cached, with a new
// request arriving every step whose 2,048-token prompt shares a 1,024-token system
// prompt with the others (a cache hit of 64 blocks, the rest computed and indexed as it
// goes). The same traffic with the cache off is measured beside it: the difference is what
// the cache costs per step (target: at most 0.1 ms; the scheduler's whole budget is 0.2 ms).
//
//   build/bench_prefix_cache --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "kv/block_allocator.h"
#include "kv/prefix_cache.h"
#include "sched/scheduler.h"

namespace infercept {
namespace {

constexpr int64_t kBlock = 16;
constexpr int kRunning = 256;
constexpr int32_t kCachedBlocks = 65536;
constexpr int64_t kSystem = 1024, kPrompt = 2048, kDecode = 256;

// One scheduler step 10 ms after the last (schedule + commit), a random token drawn for every
// row that samples.
void run_step(Scheduler& sched, double& now, std::mt19937& rng) {
  StepPlan plan = sched.schedule(now += 0.01);
  sched.commit(plan);
  for (const ScheduledSeq& ss : plan.scheduled)
    if (ss.sample) ss.seq->tokens.push_back((int32_t)(rng() % 32000));
}

struct Traffic {
  SchedulerConfig cfg;
  std::unique_ptr<BlockAllocator> device;
  std::unique_ptr<Scheduler> sched;
  std::deque<std::unique_ptr<Sequence>> seqs;
  std::mt19937 rng{7};
  std::vector<int32_t> system;
  double now = 0.0;
  uint64_t next_id = 0;
  int64_t steps = 0;

  explicit Traffic(bool cache) {
    cfg.block_size = kBlock;
    cfg.max_tokens_per_step = 4096;  // the decode rows and a whole new prompt: no queue builds up
    cfg.max_seqs_per_step = 512;
    cfg.long_prefill_tokens = 2048;
    cfg.prefix_cache = cache;
    // Room for the running requests' contexts plus the cached blocks.
    const int64_t per_request = (kPrompt + kDecode) / kBlock + 1;
    device =
        std::make_unique<BlockAllocator>(kCachedBlocks + (int32_t)(per_request * (kRunning + 8)));
    sched = std::make_unique<Scheduler>(cfg, *device);
    system.resize((size_t)kSystem);
    for (auto& t : system) t = (int32_t)(rng() % 32000);
    // Fill the cache: prompts of distinct content, prefilled and finished, until 64k blocks
    // are indexed (with the cache off, the same work leaves the pool free).
    const int64_t fill_blocks = kPrompt / kBlock;
    for (int64_t filled = 0; filled < kCachedBlocks; filled += fill_blocks) {
      Sequence* s = add(random_prompt(kPrompt), 0);
      while (s->n_computed < s->n_prompt) step_once();
      sched->finish(s);
    }
    // 256 requests decoding, at different points of their answers.
    for (int i = 0; i < kRunning; ++i) add(shared_prompt(), (int64_t)(rng() % kDecode));
    while (sched->n_waiting() > 0) step_once();
  }

  std::vector<int32_t> random_prompt(int64_t n) {
    std::vector<int32_t> t((size_t)n);
    for (auto& x : t) x = (int32_t)(rng() % 32000);
    return t;
  }
  std::vector<int32_t> shared_prompt() {
    std::vector<int32_t> t = system;
    const auto own = random_prompt(kPrompt - kSystem);
    t.insert(t.end(), own.begin(), own.end());
    return t;
  }
  Sequence* add(std::vector<int32_t> tokens, int64_t decoded_before) {
    auto s = std::make_unique<Sequence>();
    s->id = next_id++;
    s->arrival_time = now;
    s->n_prompt = (int64_t)tokens.size() - decoded_before;
    s->tokens = std::move(tokens);
    s->cache_ns = 1;
    sched->add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }
  void step_once() { run_step(*sched, now, rng); }
  // A step of steady traffic: finished requests leave, and a new one arrives (a request
  // decodes kDecode tokens, so about one finishes per step).
  void step() {
    ++steps;
    add(shared_prompt(), 0);
    step_once();
    for (auto& s : seqs)
      if (s->state == SeqState::running && s->n_generated() >= kDecode) sched->finish(s.get());
    while (!seqs.empty() && seqs.front()->state == SeqState::finished) seqs.pop_front();
  }
};

void BM_SchedulerStep(benchmark::State& state) {
  Traffic t(state.range(0) != 0);
  for (auto _ : state) t.step();
  state.counters["running"] = (double)t.sched->n_running();
  state.counters["cached_blocks"] = (double)t.sched->cached_device_blocks();
  const auto& pc = t.sched->prefix_counters();
  state.counters["hit_rate"] =
      pc.query_tokens > 0 ? (double)pc.hit_tokens / (double)pc.query_tokens : 0.0;
}
BENCHMARK(BM_SchedulerStep)->ArgName("cache")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// Paused long agent contexts: a step (schedule + commit) of one decoding request while
// `paused` requests of 65,536 tokens each (4,096 blocks, the first 128 a shared system prompt)
// wait for their tools, the cache on. Every step weighs what each pause holds alone
// (Scheduler::exclusive_device_tokens, for the preserve waste) block by block.
void BM_StepWithPausedLongContexts(benchmark::State& state) {
  const int paused = (int)state.range(0);
  constexpr int64_t kContext = 65536;
  SchedulerConfig cfg;
  cfg.block_size = kBlock;
  cfg.max_tokens_per_step = 8192;
  cfg.max_seqs_per_step = 512;
  cfg.prefix_cache = true;
  BlockAllocator device((int32_t)((paused + 2) * (kContext / kBlock + 2)));
  Scheduler sched(cfg, device);
  std::mt19937 rng(13);
  std::vector<int32_t> system(2048);
  for (auto& t : system) t = (int32_t)(rng() % 32000);
  std::vector<std::unique_ptr<Sequence>> seqs;
  double now = 0.0;
  auto step_once = [&] { run_step(sched, now, rng); };
  for (int i = 0; i <= paused; ++i) {
    auto s = std::make_unique<Sequence>();
    s->id = (uint64_t)i;
    s->arrival_time = now;
    s->tokens = system;
    while ((int64_t)s->tokens.size() < kContext) s->tokens.push_back((int32_t)(rng() % 32000));
    s->n_prompt = kContext;
    s->cache_ns = 1;
    sched.add(s.get());
    while (s->n_computed < s->n_prompt) step_once();
    if (i < paused) sched.intercept(s.get(), InterceptionInfo{"tool", now, {}, false, 0.0, false});
    seqs.push_back(std::move(s));
  }
  for (auto _ : state) step_once();
  state.counters["paused"] = (double)sched.n_paused();
  state.counters["running"] = (double)sched.n_running();
}
// A fixed number of steps: the decoding request grows a token a step and must stay within the
// pool's room for it (a block per 16 steps).
BENCHMARK(BM_StepWithPausedLongContexts)
    ->ArgName("paused")
    ->Arg(16)
    ->Arg(64)
    ->Iterations(2000)
    ->Unit(benchmark::kMicrosecond);

// A long agent context's lookup: peek() over a 131,072-token prompt whose every block is
// cached (8,192 blocks), what the scheduler asks each step of the request at the head of the
// queue (memory_deficit_blocks, the prefill candidates) and once more at its admission
// (match): from the start each time, or (memo 1) going on from the last peek, as the
// scheduler does while nothing is evicted.
void BM_PeekLongPrompt(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  BlockAllocator device((int32_t)(tokens / kBlock) + 1);
  PrefixCache cache(device, kBlock);
  std::mt19937 rng(11);
  std::vector<int32_t> prompt((size_t)tokens);
  for (auto& x : prompt) x = (int32_t)(rng() % 128000);
  std::vector<int32_t> blocks;
  for (int64_t b = 0; b < tokens / kBlock; ++b) blocks.push_back(*device.allocate());
  cache.insert(1, prompt, blocks);
  for (int32_t b : blocks) device.release(b);  // cached and idle, as after the request ended
  // Arg 1: the scheduler's form, going on from the last peek's memo (nothing erased between).
  const bool memo = state.range(1) != 0;
  PrefixCache::PeekMemo m;
  int64_t found = 0;
  for (auto _ : state) {
    found = memo ? cache.peek(1, prompt, INT64_MAX, m) : cache.peek(1, prompt);
    benchmark::DoNotOptimize(found);
  }
  if (found != tokens / kBlock) state.SkipWithError("the prompt's blocks were not all found");
  state.counters["blocks"] = (double)found;
}
BENCHMARK(BM_PeekLongPrompt)
    ->ArgNames({"tokens", "memo"})
    ->Args({8192, 0})
    ->Args({131072, 0})
    ->Args({131072, 1})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace infercept

BENCHMARK_MAIN();
