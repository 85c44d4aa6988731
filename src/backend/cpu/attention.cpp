#include "backend/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "backend/cpu/attention_rows.h"
#include "backend/cpu/attention_spread.h"
#include "core/check.h"

namespace infercept {
namespace {

using namespace cpu_attention;  // the row arithmetic (attention_rows.h, attention_orders.h)

// Query rows per work item: small enough to spread one long prefill over all threads.
constexpr int64_t kQueryChunk = 32;

// A worker's scratch for paged_attention_cpu.
struct Scratch {
  std::vector<float> k, v, scores, qall, qh;
};

struct WorkItem {
  int32_t seq;
  int32_t kv_head;
  int32_t q_begin;  // relative to the sequence's first query row
  int32_t q_end;
};
}  // namespace

void paged_attention_cpu(ThreadPool& pool, const Tensor& q, const PagedKvView& kv,
                         const AttentionBatch& batch, int64_t n_heads, float scale, Tensor out,
                         AttentionOrder order, const std::atomic<bool>* stop) {
  const KvGeometry& g = kv.g;
  const int64_t hd = g.head_dim;
  CHECK(n_heads % g.n_kv_heads == 0);
  CHECK(q.cols == n_heads * hd && out.cols == q.cols && out.rows == q.rows);
  const int64_t group = n_heads / g.n_kv_heads;

  // The work items: a decode row is one (all its KV heads: streamed whole slots), a prefill
  // row range one per KV head and kQueryChunk rows.
  const bool llama = order == AttentionOrder::llama_cpp;
  std::vector<WorkItem> items;
  int64_t longest_decode = 0;
  for (int32_t s = 0; s < batch.n_seqs; ++s) {
    const int32_t ql = batch.q_len[(size_t)s];
    CHECK(batch.ctx_len[(size_t)s] >= ql && ql >= 0);
    if (ql == 1) {  // decode: one item for all kv heads (kv_head -1), see below
      items.push_back({s, -1, 0, 1});
      longest_decode = std::max<int64_t>(longest_decode, batch.ctx_len[(size_t)s]);
      continue;
    }
    for (int32_t h = 0; h < (int32_t)g.n_kv_heads; ++h)
      for (int32_t b = 0; b < ql; b += (int32_t)kQueryChunk)
        items.push_back({s, h, b, std::min<int32_t>(ql, b + (int32_t)kQueryChunk)});
  }
  // Decode rows on every thread first (decode_rows_phased), where one item a row would leave
  // threads waiting for the longest (the costs are counted only where that can be so).
  if (!llama && pool.size() > 1 && longest_decode >= kPhasedMinPositions) {
    std::vector<ItemCost> costs;
    for (const WorkItem& w : items) {
      const int64_t ctx = batch.ctx_len[(size_t)w.seq];
      if (w.kv_head < 0) {
        costs.push_back({true, (double)(n_heads * ctx)});
        continue;
      }
      const int64_t rows = w.q_end - w.q_begin;
      const double first_visible = (double)(ctx - batch.q_len[(size_t)w.seq] + w.q_begin + 1);
      costs.push_back({false, (double)group * (double)rows * (first_visible + (rows - 1) / 2.0)});
    }
    if (spreading_pays(costs, pool.size())) {
      std::vector<DecodeRow> rows;
      std::vector<WorkItem> rest;
      for (const WorkItem& w : items) {
        if (w.kv_head >= 0) {
          rest.push_back(w);
          continue;
        }
        rows.push_back({batch.q_start[(size_t)w.seq],
                        batch.block_tables.data() + (size_t)w.seq * (size_t)batch.max_blocks,
                        batch.ctx_len[(size_t)w.seq]});
        CHECK((rows.back().n_pos + g.block_size - 1) / g.block_size <= batch.max_blocks);
      }
      decode_rows_phased(pool, q, kv, rows, n_heads, scale, out, stop);
      items = std::move(rest);
    }
  }

  std::atomic<size_t> next{0};
  const bool f16 = g.dtype == DType::f16;
  // llama.cpp's orders when asked: a sequence computing one row in the single order, two or
  // more in the batched order.
  const RowOrder lone = llama ? RowOrder::single : RowOrder::fast;
  const RowOrder chunk = llama ? RowOrder::batched : RowOrder::fast;
  pool.run([&](int, int) {
    // Per-thread scratch kept across calls (each layer's attention is one call): vectors
    // created per call zero-filled ~n_pos x width floats every layer on growing, 2% of a
    // batch-1 step.
    thread_local Scratch buf;
    buf.qh.resize((size_t)(group * hd));
    LinePrefetch pf, pfv;
    for (size_t it = next.fetch_add(1); it < items.size(); it = next.fetch_add(1)) {
      // A given-up step: the rest of the items are skipped (a long chunk's attention over a
      // long context is most of its step: ~3 s at 109 rows and 7k positions on 2 cores).
      if (stop != nullptr && stop->load(std::memory_order_relaxed)) break;
      const WorkItem& w = items[it];
      const int64_t ctx = batch.ctx_len[(size_t)w.seq];
      const int64_t ql = batch.q_len[(size_t)w.seq];
      const int64_t first_pos = ctx - ql;
      const int64_t n_pos = first_pos + w.q_end;  // keys visible to the last row of the chunk
      const int32_t* table = batch.block_tables.data() + (size_t)w.seq * (size_t)batch.max_blocks;
      CHECK((n_pos + g.block_size - 1) / g.block_size <= batch.max_blocks);
      auto round_q = [&](int64_t row, int64_t kv_head) {
        round_q_heads(q, row, kv_head * group, group, hd, f16, buf.qh.data());
      };
      if (w.kv_head < 0) {
        // One query row (decode): whole slots (every kv head) pass through an L1-sized
        // buffer in chunks of positions, so the cache is read as a stream instead of one
        // head's 128-byte slices at a time. In llama.cpp's order the values are gathered
        // whole, in the same pass as the keys (its P*V sums positions 64 apart first:
        // weighted_sums_single_order). In the default order the arithmetic per element is
        // the chunked path's below, so a row's output does not depend on which path served it.
        const int64_t width = g.n_kv_heads * hd;
        const int64_t row = batch.q_start[(size_t)w.seq];
        buf.k.resize((size_t)(kPosChunk * width));
        buf.scores.resize((size_t)(n_heads * n_pos));
        buf.qall.resize((size_t)(n_heads * hd));
        round_q_heads(q, row, 0, n_heads, hd, f16, buf.qall.data());
        if (!llama) {
          // Keys, then values, stream through the L1 buffer; chunk c + 1 (of K, then of V) is
          // prefetched while chunk c is computed, one share after each query head.
          auto plan_after = [&](bool in_v, int64_t p0) {
            if (p0 + kPosChunk < n_pos)
              pf.plan(in_v ? kv.v : kv.k, g, table, p0 + kPosChunk,
                      std::min(kPosChunk, n_pos - p0 - kPosChunk));
            else if (!in_v)
              pf.plan(kv.v, g, table, 0, std::min(kPosChunk, n_pos));
            else
              pf.clear();
          };
          pf.plan(kv.k, g, table, 0, std::min(kPosChunk, n_pos));
          pf.issue(0, 1);
          for (int64_t p0 = 0; p0 < n_pos; p0 += kPosChunk) {
            const int64_t n = std::min(kPosChunk, n_pos - p0);
            gather_slots(kv.k, g, table, p0, n, buf.k.data());
            plan_after(false, p0);
            for (int64_t hq = 0; hq < n_heads; ++hq) {
              head_scores(buf.qall.data() + hq * hd, buf.k.data() + (hq / group) * hd, n, hd, width,
                          scale, buf.scores.data() + hq * n_pos + p0, lone);
              pf.issue(hq, n_heads);
            }
          }
          for (int64_t hq = 0; hq < n_heads; ++hq)
            softmax_weights(buf.scores.data() + hq * n_pos, n_pos, f16);
          for (int64_t p0 = 0; p0 < n_pos; p0 += kPosChunk) {
            const int64_t n = std::min(kPosChunk, n_pos - p0);
            gather_slots(kv.v, g, table, p0, n, buf.k.data());
            plan_after(true, p0);
            for (int64_t kvh = 0; kvh < g.n_kv_heads; ++kvh) {
              weighted_rows_group(buf.scores.data() + kvh * group * n_pos + p0, n_pos, group,
                                  buf.k.data() + kvh * hd, n, hd, width,
                                  out.row<float>(row) + kvh * group * hd, p0 > 0);
              pf.issue(kvh, g.n_kv_heads);
            }
          }
          continue;
        }
        // Keys and values stream together, chunk by chunk: the keys through the L1 buffer
        // for the scores, the values into buf.v (read whole after the softmax); chunk c + 1
        // of both is prefetched while chunk c is computed, a share after each query head.
        buf.v.resize((size_t)(n_pos * width));
        pf.plan(kv.k, g, table, 0, std::min(kPosChunk, n_pos));
        pfv.plan(kv.v, g, table, 0, std::min(kPosChunk, n_pos));
        pf.issue(0, 1);
        pfv.issue(0, 1);
        for (int64_t p0 = 0; p0 < n_pos; p0 += kPosChunk) {
          const int64_t n = std::min(kPosChunk, n_pos - p0);
          gather_slots(kv.k, g, table, p0, n, buf.k.data());
          gather_slots(kv.v, g, table, p0, n, buf.v.data() + p0 * width);
          const int64_t next = std::min(kPosChunk, n_pos - p0 - kPosChunk);
          if (next > 0) {
            pf.plan(kv.k, g, table, p0 + kPosChunk, next);
            pfv.plan(kv.v, g, table, p0 + kPosChunk, next);
          } else {
            pf.clear();
            pfv.clear();
          }
          for (int64_t hq = 0; hq < n_heads; ++hq) {
            head_scores(buf.qall.data() + hq * hd, buf.k.data() + (hq / group) * hd, n, hd, width,
                        scale, buf.scores.data() + hq * n_pos + p0, lone);
            pf.issue(hq, n_heads);
            pfv.issue(hq, n_heads);
          }
        }
        for (int64_t hq = 0; hq < n_heads; ++hq)
          softmax_weights(buf.scores.data() + hq * n_pos, n_pos, f16);
        for (int64_t kvh = 0; kvh < g.n_kv_heads; ++kvh)
          weighted_sums(buf.scores.data() + kvh * group * n_pos, n_pos, group,
                        buf.v.data() + kvh * hd, n_pos, hd, width,
                        out.row<float>(row) + kvh * group * hd, lone);
        continue;
      }
      buf.k.resize((size_t)(n_pos * hd));
      buf.v.resize((size_t)(n_pos * hd));
      buf.scores.resize((size_t)(group * n_pos));
      gather_head(kv.k, g, table, 0, n_pos, w.kv_head, buf.k.data());
      gather_head(kv.v, g, table, 0, n_pos, w.kv_head, buf.v.data());
      for (int64_t r = w.q_begin; r < w.q_end; ++r) {
        const int64_t row = batch.q_start[(size_t)w.seq] + r;
        const int64_t visible = first_pos + r + 1;
        round_q(row, w.kv_head);
        for (int64_t j = 0; j < group; ++j) {
          float* sj = buf.scores.data() + j * n_pos;
          head_scores(buf.qh.data() + j * hd, buf.k.data(), visible, hd, hd, scale, sj, chunk);
          softmax_weights(sj, visible, f16);
        }
        weighted_sums(buf.scores.data(), n_pos, group, buf.v.data(), visible, hd, hd,
                      out.row<float>(row) + w.kv_head * group * hd, chunk);
      }
    }
  });
}

}  // namespace infercept
