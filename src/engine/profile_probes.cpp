// The step-term probes of `infercept profile` (profile_probes.h says what each runs).
#include "engine/profile_probes.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <set>

#include "core/check.h"
#include "kv/block_allocator.h"

namespace infercept {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// One sequence of a probe step: `q` rows after `held` tokens of context, in `table`.
struct ProbeSeq {
  std::vector<int32_t> table;
  int64_t held = 0;
  int64_t q = 1;
  bool sample = true;
};

// `count` consecutive blocks from `first`.
std::vector<int32_t> blocks(int64_t first, int64_t count) {
  std::vector<int32_t> b((size_t)count);
  std::iota(b.begin(), b.end(), (int32_t)first);
  return b;
}

// The most blocks a copy-interference probe copies each way.
constexpr int64_t kMaxCopyBlocks = 256;

class Prober {
 public:
  Prober(StepModel& model, Backend& backend, KvStorage& device, KvStorage& host, int64_t bs,
         int64_t max_seqs, const ProbeOptions& o, CostModel& cost)
      : model_(model),
        backend_(backend),
        kv_(device),
        host_(host),
        bs_(bs),
        max_seqs_(std::min(max_seqs, model.max_logit_rows())),
        n_blocks_(device.geometry().n_blocks),
        o_(o),
        cost_(cost),
        tokens_out_((size_t)model.max_logit_rows()),
        logits_((size_t)(model.max_logit_rows() * model.config().vocab_size)) {
    for (const auto& [x, t] : cost.t_fwd_samples) run_counts_.insert(x);
  }

  Result<ProbeResult> run() {
    const double t0 = now();
    fill_kv();
    probe_decode();
    probe_chunks();
    probe_mixed();
    ProbeResult r;
    probe_graphs(r.artifacts);
    probe_first_sight(r.artifacts);
    probe_copies(r);
    r.seconds = now() - t0;
    return r;
  }

 private:
  StepInput step(const std::vector<ProbeSeq>& seqs) const {
    StepInput in;
    const int32_t vocab = (int32_t)model_.config().vocab_size;
    for (const ProbeSeq& s : seqs) in.max_blocks = std::max(in.max_blocks, (int32_t)s.table.size());
    int32_t row = 0;
    for (const ProbeSeq& s : seqs) {
      CHECK(BlockTable::blocks_for(s.held + s.q, bs_) <= (int64_t)s.table.size());
      in.q_start.push_back(row);
      in.q_len.push_back((int32_t)s.q);
      in.ctx_len.push_back((int32_t)(s.held + s.q));
      for (int64_t p = s.held; p < s.held + s.q; ++p) {
        in.tokens.push_back((int32_t)((p * 7919 + row * 31 + 13) % vocab));
        in.positions.push_back((int32_t)p);
        in.slots.push_back(s.table[(size_t)(p / bs_)] * (int32_t)bs_ + (int32_t)(p % bs_));
      }
      row += (int32_t)s.q;
      if (s.sample) in.logit_rows.push_back(row - 1);
      for (int32_t b = 0; b < in.max_blocks; ++b)
        in.block_tables.push_back(b < (int32_t)s.table.size() ? s.table[(size_t)b]
                                                              : s.table.back());
    }
    return in;
  }

  // One step as the engine runs it (EngineCore::Executor): the forward pass with the logits
  // left on the backend and the sampled rows drawn there (argmax), or copied to the host
  // where the backend does not sample. With `wait_copies` false, copies queued before it are
  // not waited for (the engine does not wait for them either).
  double timed(const StepInput& in, bool wait_copies = true) {
    run_counts_.insert((int64_t)in.tokens.size());
    const int64_t rows = (int64_t)in.logit_rows.size();
    const double t = now();
    model_.forward(in, kv_, nullptr);
    const Tensor logits = model_.last_logits(rows);
    if (!backend_.greedy_on_device() || !backend_.argmax_rows(logits, tokens_out_.data()))
      backend_.to_host_f32(logits, logits_.data());
    if (wait_copies) backend_.sync();
    return now() - t;
  }

  // Two untimed runs (on CUDA: the probe-and-eager pass, then the capture of a decode-only
  // step), then the median of the repeats: what the engine's steps take as they come, where
  // T_fwd's best-of-N is the floor (the simulator's clock adds up the steps of a run).
  double typical(const StepInput& in) {
    timed(in);
    timed(in);
    return repeated(in);
  }
  // The median of the repeats of `in`, with no warm-up.
  double repeated(const StepInput& in) {
    std::vector<double> t;
    for (int r = 0; r < std::max(1, o_.repeats); ++r) t.push_back(timed(in));
    return median(t);
  }

  bool fits_step(int64_t rows, int64_t seqs) const {
    return rows <= model_.max_rows() && seqs <= max_seqs_ && seqs >= 1;
  }

  // Real KV in every block a probe reads (no NaNs or denormals to slow the CPU): one prefill
  // of valid positions into the first blocks, then block copies of those over the rest.
  // Only the blocks the probes use (a card's pool may be tens of GB): the decode rows', the
  // longest chunk's, the copies'.
  void fill_kv() {
    const int64_t x = std::min<int64_t>({model_.max_rows(), 512, n_blocks_ * bs_});
    const int64_t filled = BlockTable::blocks_for(x, bs_);
    timed(step({{blocks(0, filled), 0, x, true}}));
    int64_t used =
        row_blocks() * *std::max_element(o_.decode_batches.begin(), o_.decode_batches.end());
    for (int64_t rows : o_.chunk_rows)
      used = std::max(used, BlockTable::blocks_for(o_.chunk_context + rows, bs_));
    used = std::min(n_blocks_, std::max(used, 4 * kMaxCopyBlocks + o_.copy_rows));
    std::vector<int32_t> src, dst;
    for (int64_t b = filled; b < used; ++b) {
      src.push_back((int32_t)(b % filled));
      dst.push_back((int32_t)b);
      if (dst.size() == 65536 || b + 1 == used) {  // the backend's index upload is bounded
        backend_.copy_blocks(kv_, src, dst);
        src.clear(), dst.clear();
      }
    }
    backend_.sync();
  }

  // Blocks a decode row needs at the longest probed context (and its own token).
  int64_t row_blocks() const { return BlockTable::blocks_for(o_.decode_context + 1, bs_); }

  // n decode rows, each holding `held` tokens in `per_row` blocks of its own.
  std::vector<ProbeSeq> decode_rows(int64_t n, int64_t held, int64_t per_row) const {
    std::vector<ProbeSeq> seqs;
    for (int64_t i = 0; i < n; ++i)
      seqs.push_back({blocks(i * per_row, BlockTable::blocks_for(held + 1, bs_)), held, 1, true});
    return seqs;
  }

  // D(n) and a(n).
  void probe_decode() {
    std::vector<std::pair<int64_t, double>> d, a;
    for (int64_t n : o_.decode_batches) {
      if (!fits_step(n, n) || n > n_blocks_) continue;
      const int64_t per_row = std::min(n_blocks_ / n, row_blocks());
      // The longest context whose blocks (with the row's own token) fit `per_row`.
      const int64_t c = std::min(o_.decode_context, per_row * bs_ - 1);
      const double t0 = typical(step(decode_rows(n, 0, per_row)));
      d.emplace_back(n, t0);
      if (c < 2 * bs_) continue;
      // Least squares of t against the context read, n x held, over held = 0, c/2, c.
      double sx = 0, sy = 0, sxx = 0, sxy = 0;
      for (int64_t held : {int64_t{0}, c / 2, c}) {
        const double t = held == 0 ? t0 : typical(step(decode_rows(n, held, per_row)));
        const double x = (double)(n * held);
        sx += x, sy += t, sxx += x * x, sxy += x * t;
      }
      const double slope = (3 * sxy - sx * sy) / (3 * sxx - sx * sx);
      a.emplace_back(n, std::max(0.0, slope));
    }
    if (!d.empty()) cost_.decode_samples = d;
    if (!a.empty()) cost_.context_samples = a;
    // D(n) holds what each sequence and each sampled row of a decode step costs.
    if (!d.empty()) cost_.sequence_seconds = cost_.sample_seconds_per_row = 0.0;
  }

  // p(rows) and q.
  void probe_chunks() {
    std::vector<std::pair<int64_t, double>> per_token;  // (rows, s(rows))
    for (int64_t rows : o_.chunk_rows) {
      if (rows < 2 || !fits_step(rows, 1)) continue;
      const int64_t h = std::min(o_.chunk_context, n_blocks_ * bs_ - rows);
      if (h < 2 * bs_) continue;
      const auto table = blocks(0, BlockTable::blocks_for(h + rows, bs_));
      const double t0 = typical(step({{table, 0, rows, true}}));
      const double th = typical(step({{table, h, rows, true}}));
      per_token.emplace_back(rows, (th - t0) / (double)h);
    }
    if (per_token.empty()) return;
    double q = 0.0;
    if (per_token.size() >= 2) {
      const auto& [r1, s1] = per_token[per_token.size() - 2];
      const auto& [r2, s2] = per_token.back();
      q = std::max(0.0, (s2 - s1) / (double)(r2 - r1));
    }
    cost_.chunk_row_context_seconds = q;
    cost_.chunk_context_samples.clear();
    for (const auto& [rows, s] : per_token)
      cost_.chunk_context_samples.emplace_back(rows, std::max(0.0, s - q * (double)rows));
  }

  // kT.
  void probe_mixed() {
    std::vector<double> ratios;
    const int64_t d = std::min(o_.mixed_decode_rows, max_seqs_ - 1);
    for (int64_t c : o_.mixed_chunk_rows) {
      const int64_t x = c + d;
      if (d < 1 || !fits_step(x, d + 1) || BlockTable::blocks_for(c, bs_) + d > n_blocks_) continue;
      const int64_t cb = BlockTable::blocks_for(c, bs_);
      std::vector<ProbeSeq> seqs = {{blocks(0, cb), 0, c, false}};
      for (int64_t i = 0; i < d; ++i) seqs.push_back({blocks(cb + i, 1), 0, 1, true});
      const double t = typical(step(seqs));
      const double base = cost_.t_fwd(x);
      if (base > 0.0) ratios.push_back(t / base);
    }
    if (ratios.empty()) return;
    const double k = std::accumulate(ratios.begin(), ratios.end(), 0.0) / (double)ratios.size();
    cost_.chunk_step_scale = std::clamp(k, 0.01, 100.0);  // CostModel::validate's range
  }

  // Counts no probe has run yet, from `candidates`, at most `want`, each passing `ok`.
  template <class Ok>
  std::vector<int64_t> fresh(std::initializer_list<int64_t> candidates,
                             const std::set<int64_t>& used, Ok ok) const {
    std::vector<int64_t> out;
    for (int64_t c : candidates)
      if ((int)out.size() < o_.fresh_counts && !used.count(c) && ok(c)) out.push_back(c);
    return out;
  }

  void probe_graphs(EngineArtifacts& art) {
    art.graph_cache_entries = backend_.step_graph_capacity();
    if (art.graph_cache_entries <= 0) return;  // no recorded steps: no graph cache to miss
    std::set<int64_t> used(o_.decode_batches.begin(), o_.decode_batches.end());
    used.insert(std::max<int64_t>(1, std::min(o_.mixed_decode_rows, max_seqs_ - 1)) + 1);
    used.insert(o_.copy_rows);
    const auto counts = fresh({3, 5, 7, 11, 13, 17, 19, 23}, used,
                              [&](int64_t n) { return fits_step(n, n) && n <= n_blocks_; });
    std::vector<double> first, second;
    for (int64_t n : counts) {
      const StepInput in = step(decode_rows(n, 0, 1));
      const double t1 = timed(in), t2 = timed(in);
      const double replay = repeated(in);
      first.push_back(std::max(0.0, t1 - replay));
      second.push_back(std::max(0.0, t2 - replay));
    }
    art.new_batch_seconds = median(first);
    art.second_batch_seconds = median(second);
  }

  void probe_first_sight(EngineArtifacts& art) {
    const auto counts = fresh({97, 193, 389, 769, 1031, 1543, 53, 29}, run_counts_, [&](int64_t x) {
      return fits_step(x, 1) && BlockTable::blocks_for(x, bs_) <= n_blocks_;
    });
    // The first run of a count over its best later one, less the same for a count already
    // run (the nearest T_fwd sample): what a new count costs beyond a change of shape.
    // A difference within the later runs' own spread is the machine's noise, not a cost (a
    // loaded CPU scatters steps by tens of percent; a card by 1-3%).
    double spread = 0.0;
    auto first_over_later = [&](int64_t x) {
      const StepInput in = step({{blocks(0, BlockTable::blocks_for(x, bs_)), 0, x, true}});
      const double t1 = timed(in);
      std::vector<double> t;
      for (int r = 0; r < std::max(2, o_.repeats); ++r) t.push_back(timed(in));
      spread = std::max(
          spread, *std::max_element(t.begin(), t.end()) - *std::min_element(t.begin(), t.end()));
      return t1 - median(t);
    };
    std::vector<double> extra;
    for (int64_t x : counts) {
      int64_t seen = cost_.t_fwd_samples.front().first;
      for (const auto& [s, t] : cost_.t_fwd_samples)
        if (std::llabs(s - x) < std::llabs(seen - x) && fits_step(s, 1) &&
            BlockTable::blocks_for(s, bs_) <= n_blocks_)
          seen = s;
      spread = 0.0;
      const double fresh_extra = first_over_later(x);
      const double d = fresh_extra - first_over_later(seen);
      extra.push_back(d > spread ? d : 0.0);
    }
    art.first_sight_seconds = median(extra);
  }

  // The forward pass of `in` with `k` blocks copied from `from` to `to` queued before it, as
  // EngineCore::execute_swaps queues a step's copies; the median of the repeats. A backend
  // whose copies are not async has done them before the forward starts (the engine's stall).
  double with_copy(const StepInput& in, const KvStorage& from, KvStorage& to,
                   const std::vector<int32_t>& src, const std::vector<int32_t>& dst) {
    std::vector<double> t;
    for (int r = 0; r < std::max(2, o_.repeats); ++r) {
      backend_.copy_blocks_between(from, to, src, dst);
      if (!backend_.copies_are_async()) backend_.sync();
      t.push_back(timed(in, /*wait_copies=*/false));
      backend_.sync();  // the copies end outside the timed forward
    }
    return median(t);
  }

  void probe_copies(ProbeResult& r) {
    const int64_t n = std::min(o_.copy_rows, max_seqs_);
    const int64_t host_blocks = host_.geometry().n_blocks;
    if (n < 2 || !fits_step(n, n) || !(cost_.swap_bytes_per_second > 0.0)) return;
    // The base step without row 0's context, to size K: copies of about half a step.
    const double block_seconds = cost_.t_swap(bs_);
    const double step_guess = cost_.t_decode(n);
    int64_t k = (int64_t)(0.5 * step_guess / block_seconds);
    k = std::min({std::max<int64_t>(k, 1), kMaxCopyBlocks, host_blocks / 2, (n_blocks_ - n) / 4});
    if (k < 1) return;
    // Device blocks: [0, k) swapped in and read by row 0; [k, 2k) swapped out, row 1 storing
    // into the first; [2k, 3k) and [3k, 4k) the untouched copies'; then rows 2.. one each.
    std::vector<ProbeSeq> seqs = {{blocks(0, k), k * bs_ - 1, 1, true}, {blocks(k, 1), 0, 1, true}};
    for (int64_t i = 2; i < n; ++i) seqs.push_back({blocks(4 * k + i, 1), 0, 1, true});
    const StepInput in = step(seqs);
    // The host blocks get real KV first, so that what the swap-ins bring is no slower to read.
    backend_.copy_blocks_between(kv_, host_, blocks(0, 2 * k), blocks(0, 2 * k));
    backend_.sync();
    const double base = typical(in);
    const double tc = cost_.t_swap(k * bs_);
    const auto host_lo = blocks(0, k), host_hi = blocks(k, k);
    auto ratio = [&](double t) { return std::max(0.0, (t - base) / tc); };
    EngineArtifacts& art = r.artifacts;
    art.copy_in_interference = ratio(with_copy(in, host_, kv_, host_lo, blocks(0, k)));
    art.copy_out_interference = ratio(with_copy(in, kv_, host_, blocks(k, k), host_hi));
    const double in_free = ratio(with_copy(in, host_, kv_, host_lo, blocks(2 * k, k)));
    const double out_free = ratio(with_copy(in, kv_, host_, blocks(3 * k, k), host_hi));
    r.copy_interference_untouched = std::pair{in_free, out_free};
  }

  StepModel& model_;
  Backend& backend_;
  KvStorage& kv_;
  KvStorage& host_;
  const int64_t bs_, max_seqs_, n_blocks_;
  const ProbeOptions& o_;
  CostModel& cost_;
  std::vector<int32_t> tokens_out_;
  std::vector<float> logits_;
  std::set<int64_t> run_counts_;  // query-token counts run so far (first sight's "new")
};

}  // namespace

Result<ProbeResult> probe_step_terms(StepModel& model, Backend& backend, KvStorage& device,
                                     KvStorage& host, int64_t block_size, int64_t max_seqs,
                                     const ProbeOptions& options, CostModel& cost) {
  if (cost.t_fwd_samples.empty() || !(cost.swap_bytes_per_second > 0.0))
    return make_error("step probes: T_fwd and the copy bandwidth must be measured first");
  if (device.geometry().n_blocks < 2)
    return make_error("step probes: the KV pool needs at least two blocks");
  Prober p(model, backend, device, host, block_size, max_seqs, options, cost);
  TRY_ASSIGN(ProbeResult r, p.run());
  TRY(cost.validate());
  return r;
}

}  // namespace infercept
