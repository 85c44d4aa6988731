// Estimates how much longer a paused request's tool call will take: the T_int of the waste
// model, re-estimated every step as the elapsed time grows.
//   oracle:  the duration hint given with the interception (falls back to elapsed without one)
//   elapsed: the paper's estimator: remaining = elapsed so far
//   learned: per tool, an online distribution of observed durations gives
//            E[D - e | D > e] for elapsed e; before enough samples it behaves as `elapsed`.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace infercept {

struct ToolStats {
  std::string tool;
  int64_t count = 0;
  double mean = 0, p50 = 0, p95 = 0, p99 = 0;  // seconds
};

class DurationEstimator {
 public:
  virtual ~DurationEstimator() = default;
  virtual std::string name() const = 0;
  // Expected remaining seconds of a call to `tool` that has lasted `elapsed` seconds.
  virtual double expected_remaining(const std::string& tool, double elapsed,
                                    std::optional<double> hint) const = 0;
  // A finished call: learn from it.
  virtual void observe(const std::string& tool, double duration) = 0;
  // The duration quantile q (0..1) of a tool, if known (ttl uses it).
  virtual std::optional<double> quantile(const std::string& tool, double q) const = 0;
  virtual std::vector<ToolStats> stats() const = 0;
};

// "oracle" | "elapsed" | "learned"
Result<std::unique_ptr<DurationEstimator>> make_duration_estimator(const std::string& name);

}  // namespace infercept
