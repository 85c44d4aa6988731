// Duration estimators. All three record every finished call per tool, so p50/p95/p99 are
// visible to the user (and ttl has its p95) whichever estimator decides; they differ only in
// expected_remaining().
//
// The per-tool store keeps the last kWindow durations in a ring (old behaviour fades as a
// tool's latency drifts) plus the same values sorted with suffix sums, rebuilt on observe().
// observe() runs once per finished call (O(window)); expected_remaining() runs for every
// paused request every step, so it is one binary search: O(log window).
#include "sched/duration_estimator.h"

#include <algorithm>
#include <cmath>
#include <mutex>

namespace infercept {

namespace {

constexpr size_t kWindow = 1024;
// Before this many observations a tool's distribution says too little; behave as elapsed.
constexpr size_t kMinSamples = 5;
// Tool names come from clients; cap the map so a stream of made-up names cannot grow it
// without bound. Calls to tools beyond the cap are not learned (they fall back to elapsed).
constexpr size_t kMaxTools = 1024;

// The paper's estimator: a call that has lasted e seconds is expected to last e more.
double elapsed_estimate(double elapsed) {
  return elapsed > 0.0 ? elapsed : 0.0;
}

class ToolHistory {
 public:
  void add(double d) {
    if (ring_.size() < kWindow) {
      ring_.push_back(d);
    } else {
      const double old = ring_[next_];
      ring_[next_] = d;
      next_ = (next_ + 1) % kWindow;
      sorted_.erase(std::lower_bound(sorted_.begin(), sorted_.end(), old));
    }
    sorted_.insert(std::upper_bound(sorted_.begin(), sorted_.end(), d), d);
    ++total_;
    // suffix_[i] = sum of sorted_[i..]; one extra 0 at the end so an empty tail needs no test.
    suffix_.assign(sorted_.size() + 1, 0.0);
    for (size_t i = sorted_.size(); i-- > 0;) suffix_[i] = suffix_[i + 1] + sorted_[i];
  }

  size_t size() const { return sorted_.size(); }
  int64_t total() const { return total_; }
  double mean() const { return sorted_.empty() ? 0.0 : suffix_[0] / (double)sorted_.size(); }

  // Linear interpolation between order statistics (the usual "type 7" definition), so the
  // quantiles move smoothly as samples arrive.
  double quantile(double q) const {
    if (sorted_.empty()) return 0.0;
    q = std::clamp(q, 0.0, 1.0);
    const double h = q * (double)(sorted_.size() - 1);
    const size_t lo = (size_t)std::floor(h);
    const size_t hi = std::min(lo + 1, sorted_.size() - 1);
    return sorted_[lo] + (h - (double)lo) * (sorted_[hi] - sorted_[lo]);
  }

  // E[D - e | D > e] over the window, blended with one pseudo-observation whose remaining
  // time is e (the elapsed estimator). The pseudo-observation matters only when few samples
  // lie above e: past the longest call ever seen the estimate becomes e instead of nothing,
  // and it moves there smoothly instead of jumping when e crosses the last sample.
  double expected_remaining(double e) const {
    const auto it = std::upper_bound(sorted_.begin(), sorted_.end(), e);
    const size_t idx = (size_t)(it - sorted_.begin());
    const double k = (double)(sorted_.size() - idx);
    const double tail_excess = std::max(0.0, suffix_[idx] - k * e);
    return (tail_excess + e) / (k + 1.0);
  }

 private:
  std::vector<double> ring_;  // [<= kWindow] in arrival order, next_ is the oldest once full
  size_t next_ = 0;
  std::vector<double> sorted_;  // [ring_.size()] ascending
  std::vector<double> suffix_;  // [sorted_.size() + 1]
  int64_t total_ = 0;           // calls observed since start, including evicted ones
};

// Observation and statistics shared by all estimators. A mutex because stats() is read by
// whoever serves /metrics while the engine thread observes and estimates; uncontended it
// costs tens of nanoseconds, far below a step.
class RecordingEstimator : public DurationEstimator {
 public:
  void observe(const std::string& tool, double duration) override {
    // Durations come from the engine clock; a negative or non-finite one is a clock glitch
    // and would poison the suffix sums, so it is dropped rather than learned.
    if (!std::isfinite(duration) || duration < 0.0) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tools_.find(tool);
    if (it == tools_.end()) {
      if (tools_.size() >= kMaxTools) return;
      it = tools_.emplace(tool, ToolHistory{}).first;
    }
    it->second.add(duration);
  }

  std::optional<double> quantile(const std::string& tool, double q) const override {
    std::lock_guard<std::mutex> lock(mu_);
    const ToolHistory* h = find(tool);
    if (h == nullptr || h->size() < kMinSamples) return std::nullopt;
    return h->quantile(q);
  }

  std::vector<ToolStats> stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<ToolStats> out;
    out.reserve(tools_.size());
    for (const auto& [name, h] : tools_) {
      ToolStats s;
      s.tool = name;
      s.count = h.total();
      s.mean = h.mean();
      s.p50 = h.quantile(0.50);
      s.p95 = h.quantile(0.95);
      s.p99 = h.quantile(0.99);
      out.push_back(std::move(s));
    }
    return out;  // std::map order: sorted by tool name, stable for display
  }

 protected:
  // Callers hold mu_.
  const ToolHistory* find(const std::string& tool) const {
    auto it = tools_.find(tool);
    return it == tools_.end() ? nullptr : &it->second;
  }
  mutable std::mutex mu_;

 private:
  std::map<std::string, ToolHistory> tools_;
};

class ElapsedEstimator final : public RecordingEstimator {
 public:
  std::string name() const override { return "elapsed"; }
  double expected_remaining(const std::string&, double elapsed,
                            std::optional<double>) const override {
    return elapsed_estimate(elapsed);
  }
};

class OracleEstimator final : public RecordingEstimator {
 public:
  std::string name() const override { return "oracle"; }
  double expected_remaining(const std::string&, double elapsed,
                            std::optional<double> hint) const override {
    // A call that outlives its hint shows the hint was wrong; from then on nothing better
    // than the elapsed estimate is known. Returning 0 instead would keep the KV preserved
    // forever on a call that may never end.
    if (hint && std::isfinite(*hint) && *hint > elapsed) return *hint - std::max(0.0, elapsed);
    return elapsed_estimate(elapsed);
  }
};

class LearnedEstimator final : public RecordingEstimator {
 public:
  std::string name() const override { return "learned"; }
  // The hint is ignored on purpose: learned and oracle stay distinct estimators so a run can
  // compare them on the same trace.
  double expected_remaining(const std::string& tool, double elapsed,
                            std::optional<double>) const override {
    const double e = elapsed_estimate(elapsed);
    std::lock_guard<std::mutex> lock(mu_);
    const ToolHistory* h = find(tool);
    if (h == nullptr || h->size() < kMinSamples) return e;
    return h->expected_remaining(e);
  }
};

}  // namespace

Result<std::unique_ptr<DurationEstimator>> make_duration_estimator(const std::string& name) {
  std::unique_ptr<DurationEstimator> e;
  if (name == "learned") {
    e = std::make_unique<LearnedEstimator>();
  } else if (name == "elapsed") {
    e = std::make_unique<ElapsedEstimator>();
  } else if (name == "oracle") {
    e = std::make_unique<OracleEstimator>();
  } else {
    return make_error("unknown duration estimator '", name,
                      "' (expected one of: learned, elapsed, oracle)");
  }
  return e;
}

}  // namespace infercept
