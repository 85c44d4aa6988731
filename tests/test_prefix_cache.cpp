// The prefix cache's index (kv/prefix_cache.h): longest full-block prefix per namespace,
// references held on what it indexes, idle blocks evicted least recently used leaves first,
// and against a model of what each block holds under random use: a match never hands out a
// block whose tokens differ from the prefix asked for.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "kv/prefix_cache.h"

namespace infercept {
namespace {

constexpr int64_t B = 4;

std::vector<int32_t> seq(std::initializer_list<int32_t> t) {
  return t;
}

// Blocks for `tokens` from the allocator, as a running sequence would hold them.
std::vector<int32_t> take(BlockAllocator& a, size_t n) {
  std::vector<int32_t> b;
  for (size_t i = 0; i < n; ++i) b.push_back(*a.allocate());
  return b;
}

TEST(PrefixCache, LongestFullBlockPrefixPerNamespace) {
  BlockAllocator alloc(64);
  PrefixCache cache(alloc, B);
  const auto tokens = seq({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14});  // 3 full + 2
  auto blocks = take(alloc, 4);
  EXPECT_EQ(cache.insert(7, tokens, blocks).size(), 3u);
  EXPECT_EQ(cache.n_entries(), 3);  // the partial block is not indexed
  for (int i = 0; i < 3; ++i) EXPECT_EQ(alloc.refcount(blocks[(size_t)i]), 2);
  EXPECT_EQ(alloc.refcount(blocks[3]), 1);

  // The same prefix: all three, retained for the caller.
  auto m = cache.match(7, tokens).blocks;
  EXPECT_EQ(m, std::vector<int32_t>(blocks.begin(), blocks.begin() + 3));
  EXPECT_EQ(alloc.refcount(blocks[0]), 3);
  EXPECT_EQ(cache.peek(7, tokens), 3);
  EXPECT_EQ(cache.match(7, tokens, 2).blocks.size(), 2u);  // at most max_blocks
  alloc.release(blocks[1]);
  alloc.release(blocks[0]);
  for (int32_t b : m) alloc.release(b);
  // A prefix that parts in the second block: the first only; one shorter than a block: none.
  auto part = seq({1, 2, 3, 4, 5, 6, 0, 8, 9, 10, 11, 12});
  m = cache.match(7, part).blocks;
  EXPECT_EQ(m, std::vector<int32_t>{blocks[0]});
  for (int32_t b : m) alloc.release(b);
  EXPECT_TRUE(cache.match(7, seq({1, 2, 3})).blocks.empty());
  // Another namespace never shares.
  EXPECT_TRUE(cache.match(8, tokens).blocks.empty());
  EXPECT_EQ(cache.peek(8, tokens), 0);
  // Same tokens at another position (a different parent) are another prefix.
  EXPECT_TRUE(cache.match(7, seq({5, 6, 7, 8})).blocks.empty());
  cache.check_invariants();
}

TEST(PrefixCache, ACopyOfAnIndexedBlockIsReplacedByTheIndexedOne) {
  BlockAllocator alloc(64);
  PrefixCache cache(alloc, B);
  const auto tokens = seq({1, 2, 3, 4, 5, 6, 7, 8});
  auto a = take(alloc, 2), b = take(alloc, 2);
  const auto b_own = b;
  cache.insert(1, tokens, a);
  cache.insert(1, tokens, b);  // computed again by another request: not indexed twice
  EXPECT_EQ(cache.n_entries(), 2);
  EXPECT_EQ(b, a);                         // the second request now holds the indexed blocks ...
  EXPECT_EQ(alloc.refcount(b_own[0]), 0);  // ... and its copies are free again
  EXPECT_EQ(alloc.refcount(a[0]), 3);
  EXPECT_EQ(cache.match(1, tokens).blocks, a);
  cache.check_invariants();
  alloc.check_invariants();
}

TEST(PrefixCache, EvictsOnlyWhatNobodyHoldsLeastRecentlyUsedLeavesFirst) {
  BlockAllocator alloc(64);
  PrefixCache cache(alloc, B);
  const auto x = seq({1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  const auto y = seq({1, 1, 1, 1, 9, 9, 9, 9});  // shares x's first block
  auto xb = take(alloc, 3);
  cache.insert(1, x, xb);
  auto yb = cache.match(1, y).blocks;  // the shared first block
  ASSERT_EQ(yb.size(), 1u);
  yb.push_back(*alloc.allocate());
  cache.insert(1, y, yb);
  EXPECT_EQ(cache.n_entries(), 4);
  EXPECT_EQ(cache.n_evictable(), 0);  // both requests still hold their blocks
  // x finishes, releasing from the back: its blocks stay cached.
  for (auto it = xb.rbegin(); it != xb.rend(); ++it) alloc.release(*it);
  EXPECT_EQ(cache.n_evictable(), 2);  // x's 2nd and 3rd (its 1st is y's too)
  const int32_t free_before = alloc.n_free();
  // x's leaf goes first, then its parent (now a leaf); never y's blocks.
  EXPECT_EQ(cache.evict(5), (std::vector<int32_t>{xb[2], xb[1]}));
  EXPECT_EQ(alloc.n_free(), free_before + 2);
  for (auto it = yb.rbegin(); it != yb.rend(); ++it) alloc.release(*it);  // y finishes
  // All of y's chain goes, leaf first.
  EXPECT_EQ(cache.evict(5), (std::vector<int32_t>{yb[1], yb[0]}));
  EXPECT_EQ(cache.n_entries(), 0);
  EXPECT_EQ(alloc.n_free(), alloc.n_blocks());
  cache.check_invariants();
}

// Random inserts, matches, releases and evictions against a model of each block's content:
// every matched block holds exactly the tokens it was matched for, and the allocator and
// index stay consistent.
TEST(PrefixCache, RandomUseAgainstAModel) {
  std::mt19937 rng(5);
  BlockAllocator alloc(256);
  std::map<int32_t, std::vector<int32_t>> content;  // block -> the tokens its KV holds
  {
    PrefixCache cache(alloc, B);
    std::vector<std::vector<int32_t>> held;  // blocks each live request holds
    int64_t matched = 0, evicted = 0;
    for (int it = 0; it < 3000; ++it) {
      const int op = (int)(rng() % 10);
      if (op < 5) {  // a request: a prompt from a small alphabet, so prefixes repeat
        std::vector<int32_t> prompt((size_t)(1 + rng() % 20));
        for (auto& t : prompt) t = (int32_t)(rng() % 2);
        const uint64_t ns = rng() % 2;
        std::vector<int32_t> blocks = cache.match(ns, prompt).blocks;
        matched += (int64_t)blocks.size();
        for (size_t i = 0; i < blocks.size(); ++i)
          ASSERT_EQ(content.at(blocks[i]),
                    std::vector<int32_t>(prompt.begin() + (ptrdiff_t)(i * B),
                                         prompt.begin() + (ptrdiff_t)((i + 1) * B)));
        const size_t need = (prompt.size() + B - 1) / B;
        bool ok = true;
        while (blocks.size() < need) {
          if (alloc.n_free() == 0) evicted += (int64_t)cache.evict(1).size();
          auto b = alloc.allocate();
          if (!b) {
            ok = false;
            break;
          }
          const size_t i = blocks.size();
          content[*b] = std::vector<int32_t>(
              prompt.begin() + (ptrdiff_t)(i * B),
              prompt.begin() + (ptrdiff_t)std::min(prompt.size(), (i + 1) * B));
          blocks.push_back(*b);
        }
        if (ok) {
          // A copy of an indexed block is swapped for the indexed one: same content.
          cache.insert(ns, prompt, blocks);
          for (size_t i = 0; i < prompt.size() / B; ++i)
            ASSERT_EQ(content.at(blocks[i]),
                      std::vector<int32_t>(prompt.begin() + (ptrdiff_t)(i * B),
                                           prompt.begin() + (ptrdiff_t)((i + 1) * B)));
        }
        held.push_back(blocks);
      } else if (op < 9 && !held.empty()) {  // a request ends
        const size_t i = rng() % held.size();
        for (auto b = held[i].rbegin(); b != held[i].rend(); ++b) alloc.release(*b);
        held.erase(held.begin() + (ptrdiff_t)i);
      } else {
        for (int32_t b : cache.evict(1 + rng() % 4)) {
          ASSERT_EQ(alloc.refcount(b), 0);
          ++evicted;
        }
      }
      cache.check_invariants();
      alloc.check_invariants();
    }
    for (auto& h : held)
      for (auto b = h.rbegin(); b != h.rend(); ++b) alloc.release(*b);
    EXPECT_EQ(cache.n_evictable(), cache.n_entries());
    EXPECT_GT(matched, 1000);  // prefixes were found again ...
    EXPECT_GT(evicted, 100);   // ... and evicted under pressure
  }
  EXPECT_EQ(alloc.n_free(), alloc.n_blocks());  // the cache let its references go
}

// A peek that goes on from a memo (the queue's head, looked at every step it waits) finds
// what a peek from the start finds, through inserts that extend its prefix, evictions that cut
// it, contexts that grow and a namespace that differs, and it is free when nothing changed.
TEST(PrefixCache, PeekFromAMemoFindsWhatAPeekFromTheStartFinds) {
  std::mt19937 rng(9);
  BlockAllocator alloc(96);
  PrefixCache cache(alloc, B);
  // Three waiting contexts over a two-token alphabet, so other requests' inserts extend them.
  std::vector<std::vector<int32_t>> ctx(3);
  std::vector<PrefixCache::PeekMemo> memo(3);
  for (auto& c : ctx)
    for (int i = 0; i < 24; ++i) c.push_back((int32_t)(rng() % 2));
  std::vector<std::vector<int32_t>> held;
  int64_t resumed = 0, cut = 0;
  for (int it = 0; it < 4000; ++it) {
    const int op = (int)(rng() % 10);
    if (op < 4) {  // another request computes a prompt sharing a context's start
      const auto& base = ctx[rng() % ctx.size()];
      std::vector<int32_t> prompt(base.begin(), base.begin() + (ptrdiff_t)(rng() % base.size()));
      if (rng() % 3 == 0 && !prompt.empty()) prompt.back() ^= 1;
      std::vector<int32_t> blocks = cache.match(0, prompt).blocks;
      while (blocks.size() < prompt.size() / B) {
        if (alloc.n_free() == 0 && cache.evict(1).empty()) break;
        blocks.push_back(*alloc.allocate());
      }
      if (blocks.size() >= prompt.size() / B) cache.insert(0, prompt, blocks);
      held.push_back(blocks);
    } else if (op < 6 && !held.empty()) {
      const size_t i = rng() % held.size();
      for (auto b = held[i].rbegin(); b != held[i].rend(); ++b) alloc.release(*b);
      held.erase(held.begin() + (ptrdiff_t)i);
    } else if (op < 7) {
      cut += (int64_t)cache.evict(1 + rng() % 3).size();
    } else if (op < 8) {  // a context grows (a tool's answer appended while it waits)
      ctx[rng() % ctx.size()].push_back((int32_t)(rng() % 2));
    }
    for (size_t c = 0; c < ctx.size(); ++c) {
      const int64_t most = ((int64_t)ctx[c].size() - 1) / B;
      const uint64_t before = memo[c].erasures;
      ASSERT_EQ(cache.peek(0, ctx[c], most, memo[c]), cache.peek(0, ctx[c], most))
          << "step " << it << ", context " << c;
      resumed += before == cache.erasures() ? 1 : 0;
    }
  }
  EXPECT_GT(resumed, 3000);  // most peeks went on from their memo ...
  EXPECT_GT(cut, 20);        // ... and evictions invalidated others
  // Another namespace does not reuse the memo's blocks.
  EXPECT_EQ(cache.peek(1, ctx[0], INT64_MAX, memo[0]), cache.peek(1, ctx[0]));
  for (auto& h : held)
    for (auto b = h.rbegin(); b != h.rend(); ++b) alloc.release(*b);
}

}  // namespace
}  // namespace infercept
