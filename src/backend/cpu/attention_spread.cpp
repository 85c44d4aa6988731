#include "backend/cpu/attention_spread.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "backend/cpu/attention_rows.h"

namespace infercept::cpu_attention {
namespace {

// The longest thread's load when the items go, in order, each to the least loaded thread (the
// pool's next-item counter hands them out that way); the decode rows' items only `with_decode`.
double greedy_makespan(const std::vector<ItemCost>& items, int n_threads, bool with_decode) {
  std::vector<double> load((size_t)n_threads, 0.0);
  for (const ItemCost& c : items)
    if (with_decode || !c.decode) *std::min_element(load.begin(), load.end()) += c.cost;
  return *std::max_element(load.begin(), load.end());
}

// [begin, end) of items whose weights' running sum starts in thread t's even share: contiguous
// ranges of about equal weight, the same on every call with the same weights.
std::pair<size_t, size_t> weighted_share(const std::vector<int64_t>& prefix, int t, int nt) {
  // prefix[i]: the weight of the items before item i; prefix.back(): the total.
  const int64_t total = prefix.back();
  auto first_at = [&](int k) {
    return (size_t)(std::partition_point(prefix.begin(), prefix.end() - 1,
                                         [&](int64_t p) { return p * nt < total * k; }) -
                    prefix.begin());
  };
  return {first_at(t), t + 1 == nt ? prefix.size() - 1 : first_at(t + 1)};
}

}  // namespace

bool spreading_pays(const std::vector<ItemCost>& items, int n_threads) {
  double decode_cost = 0;
  for (const ItemCost& c : items) decode_cost += c.decode ? c.cost : 0.0;
  const double spread = decode_cost / n_threads + greedy_makespan(items, n_threads, false);
  return greedy_makespan(items, n_threads, true) > kPhasedMinGain * spread;
}

void decode_rows_phased(ThreadPool& pool, const Tensor& q, const PagedKvView& kv,
                        std::span<const DecodeRow> rows, int64_t n_heads, float scale, Tensor out,
                        const std::atomic<bool>* stop) {
  const KvGeometry& g = kv.g;
  const int64_t hd = g.head_dim, width = g.n_kv_heads * hd, group = n_heads / g.n_kv_heads;
  const bool f16 = g.dtype == DType::f16;
  const size_t n_rows = rows.size();
  // The calling thread's buffers, shared with the pool through pointers (a thread_local named
  // inside the lambdas would be each worker's own).
  thread_local std::vector<float> scores_buf, q_buf;
  // Row i's [n_heads, n_pos] scores start at scores_at[i] in the shared buffer.
  std::vector<int64_t> scores_at{0};
  for (const DecodeRow& r : rows) scores_at.push_back(scores_at.back() + n_heads * r.n_pos);
  scores_buf.resize((size_t)scores_at.back());
  q_buf.resize(n_rows * (size_t)(n_heads * hd));
  float* const scores = scores_buf.data();
  float* const qall = q_buf.data();
  for (size_t i = 0; i < n_rows; ++i)
    round_q_heads(q, rows[i].row, 0, n_heads, hd, f16, qall + i * (size_t)(n_heads * hd));
  auto scores_of = [&](const DecodeRow& r) {
    return scores + scores_at[(size_t)(&r - rows.data())];
  };
  auto stopped = [&] { return stop != nullptr && stop->load(std::memory_order_relaxed); };

  // Scores: the rows' chunks in one list, weighted by their positions.
  std::vector<int64_t> chunk_prefix{0};
  std::vector<std::pair<int32_t, int64_t>> chunks;  // (row index, first position)
  for (size_t i = 0; i < n_rows; ++i)
    for (int64_t p0 = 0; p0 < rows[i].n_pos; p0 += kPosChunk) {
      chunks.push_back({(int32_t)i, p0});
      chunk_prefix.push_back(chunk_prefix.back() + std::min(kPosChunk, rows[i].n_pos - p0));
    }
  // A chunk's keys are prefetched while the chunk before it is computed (LinePrefetch).
  auto chunk_at = [&](size_t c) {
    const DecodeRow& r = rows[(size_t)chunks[c].first];
    return std::tuple<const DecodeRow&, int64_t, int64_t>(
        r, chunks[c].second, std::min(kPosChunk, r.n_pos - chunks[c].second));
  };
  pool.run([&](int t, int nt) {
    thread_local std::vector<float> k;
    k.resize((size_t)(kPosChunk * width));
    LinePrefetch pf;
    const auto [c0, c1] = weighted_share(chunk_prefix, t, nt);
    if (c0 < c1) {
      const auto [r, p0, n] = chunk_at(c0);
      pf.plan(kv.k, g, r.table, p0, n);
      pf.issue(0, 1);
    }
    for (size_t c = c0; c < c1 && !stopped(); ++c) {
      const auto [r, p0, n] = chunk_at(c);
      const float* qr = qall + (size_t)chunks[c].first * (size_t)(n_heads * hd);
      gather_slots(kv.k, g, r.table, p0, n, k.data());
      if (c + 1 < c1) {
        const auto [rn, pn, nn] = chunk_at(c + 1);
        pf.plan(kv.k, g, rn.table, pn, nn);
      } else {
        pf.clear();
      }
      for (int64_t hq = 0; hq < n_heads; ++hq) {
        head_scores(qr + hq * hd, k.data() + (hq / group) * hd, n, hd, width, scale,
                    scores_of(r) + hq * r.n_pos + p0, RowOrder::fast);
        pf.issue(hq, n_heads);
      }
    }
  });
  if (stopped()) return;
  // Softmax and P*V: the (row, query head) pairs in one list, weighted by the row's positions.
  std::vector<int64_t> head_prefix{0};
  for (size_t i = 0; i < n_rows; ++i)
    for (int64_t h = 0; h < n_heads; ++h) head_prefix.push_back(head_prefix.back() + rows[i].n_pos);
  auto pair_at = [&](size_t j) {
    return std::pair<const DecodeRow&, int64_t>(rows[j / (size_t)n_heads],
                                                (int64_t)(j % (size_t)n_heads));
  };
  pool.run([&](int t, int nt) {
    const auto [j0, j1] = weighted_share(head_prefix, t, nt);
    for (size_t j = j0; j < j1; ++j) {
      const auto [r, hq] = pair_at(j);
      softmax_weights(scores_of(r) + hq * r.n_pos, r.n_pos, f16);
    }
  });
  // P*V: a thread's pairs of one row. A whole row streams its values' whole slots through an
  // L1-sized buffer, the next chunk prefetched, as the one-item path does; a run of a row's
  // heads within one KV head's group gathers that head's values (weighted_rows_group: one FMA
  // chain per element whichever heads share a pass).
  pool.run([&](int t, int nt) {
    thread_local std::vector<float> v;
    v.resize((size_t)(kPosChunk * width));
    LinePrefetch pf;
    const auto [j0, j1] = weighted_share(head_prefix, t, nt);
    for (size_t j = j0; j < j1 && !stopped();) {
      const auto [r, h0] = pair_at(j);
      const size_t row_end = (j / (size_t)n_heads + 1) * (size_t)n_heads;
      if (h0 == 0 && row_end <= j1) {
        float* dst = out.row<float>(r.row);
        pf.plan(kv.v, g, r.table, 0, std::min(kPosChunk, r.n_pos));
        pf.issue(0, 1);
        for (int64_t p0 = 0; p0 < r.n_pos; p0 += kPosChunk) {
          const int64_t n = std::min(kPosChunk, r.n_pos - p0);
          gather_slots(kv.v, g, r.table, p0, n, v.data());
          if (p0 + kPosChunk < r.n_pos)
            pf.plan(kv.v, g, r.table, p0 + kPosChunk,
                    std::min(kPosChunk, r.n_pos - p0 - kPosChunk));
          else
            pf.clear();
          for (int64_t kvh = 0; kvh < g.n_kv_heads; ++kvh) {
            weighted_rows_group(scores_of(r) + kvh * group * r.n_pos + p0, r.n_pos, group,
                                v.data() + kvh * hd, n, hd, width, dst + kvh * group * hd, p0 > 0);
            pf.issue(kvh, g.n_kv_heads);
          }
        }
        j = row_end;
        continue;
      }
      const int64_t kvh = h0 / group;
      const size_t group_end = j + (size_t)((kvh + 1) * group - h0);
      const int64_t n_run = (int64_t)(std::min({j1, row_end, group_end}) - j);
      float* dst = out.row<float>(r.row) + h0 * hd;
      for (int64_t p0 = 0; p0 < r.n_pos; p0 += kPosChunk) {
        const int64_t n = std::min(kPosChunk, r.n_pos - p0);
        gather_head(kv.v, g, r.table, p0, n, kvh, v.data());
        weighted_rows_group(scores_of(r) + h0 * r.n_pos + p0, r.n_pos, n_run, v.data(), n, hd, hd,
                            dst, p0 > 0);
      }
      j += (size_t)n_run;
    }
  });
}

}  // namespace infercept::cpu_attention
