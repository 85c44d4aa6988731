#include "workload/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace infercept {

double percentile(std::vector<double> values, double q) {
  CHECK(q >= 0.0 && q <= 1.0);
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Percentiles percentiles(const std::vector<double>& values) {
  Percentiles p;
  if (values.empty()) return p;
  double sum = 0.0;
  for (double v : values) sum += v;
  p.mean = sum / static_cast<double>(values.size());
  // One sort would do for all three, but the sizes here (requests of one run) make it moot.
  p.p50 = percentile(values, 0.50);
  p.p90 = percentile(values, 0.90);
  p.p99 = percentile(values, 0.99);
  return p;
}

namespace {

// Clock readings of one request come from one clock, but sums of pause lengths can drift by a
// rounding error past the request's lifetime; beyond this it is a real bookkeeping bug.
constexpr double kClockSlack = 1e-6;

void check_record(const RequestRecord& r) {
  CHECK(std::isfinite(r.arrival_s));
  CHECK_GE(r.interception_s, 0.0);
  CHECK_GE(r.output_tokens, 0);
  if (!r.completed) return;
  CHECK_GT(r.output_tokens, 0);
  CHECK_GE(r.first_token_s, r.arrival_s);
  CHECK_GE(r.end_s, r.first_token_s);
  CHECK_LE(r.interception_s, r.end_s - r.arrival_s + kClockSlack);
}

}  // namespace

double normalized_latency(const RequestRecord& r) {
  check_record(r);
  CHECK(r.completed);
  const double served = std::max(0.0, r.end_s - r.arrival_s - r.interception_s);
  return served / static_cast<double>(r.output_tokens);
}

Summary summarize(const std::vector<RequestRecord>& records, double duration_s) {
  CHECK(std::isfinite(duration_s) && duration_s > 0.0);
  Summary s;
  s.duration_s = duration_s;
  std::vector<double> latency;
  std::vector<double> ttft;
  for (const RequestRecord& r : records) {
    check_record(r);
    ++s.submitted;
    if (!r.completed) continue;
    ++s.completed;
    latency.push_back(normalized_latency(r));
    ttft.push_back(r.first_token_s - r.arrival_s);
  }
  s.throughput_rps = static_cast<double>(s.completed) / duration_s;
  s.normalized_latency = percentiles(latency);
  s.ttft = percentiles(ttft);
  return s;
}

std::map<std::string, Summary> summarize_by_augmentation(const std::vector<RequestRecord>& records,
                                                         double duration_s) {
  std::map<std::string, std::vector<RequestRecord>> groups;
  for (const RequestRecord& r : records) groups[r.augmentation].push_back(r);
  std::map<std::string, Summary> out;
  for (const auto& [name, group] : groups) out[name] = summarize(group, duration_s);
  return out;
}

std::string format_summary_table(const Summary& total,
                                 const std::map<std::string, Summary>& by_augmentation) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-10s %9s %9s %8s | %-35s | %-35s\n", "", "", "", "",
                "normalized latency (ms/token)", "TTFT (ms)");
  out += line;
  std::snprintf(line, sizeof(line), "%-10s %9s %9s %8s | %8s %8s %8s %8s | %8s %8s %8s %8s\n",
                "workload", "submitted", "completed", "req/s", "mean", "p50", "p90", "p99", "mean",
                "p50", "p90", "p99");
  out += line;
  const auto row = [&](const std::string& name, const Summary& s) {
    const Percentiles& l = s.normalized_latency;
    const Percentiles& t = s.ttft;
    std::snprintf(line, sizeof(line),
                  "%-10s %9lld %9lld %8.3f | %8.2f %8.2f %8.2f %8.2f | %8.1f %8.1f %8.1f %8.1f\n",
                  name.c_str(), static_cast<long long>(s.submitted),
                  static_cast<long long>(s.completed), s.throughput_rps, l.mean * 1e3, l.p50 * 1e3,
                  l.p90 * 1e3, l.p99 * 1e3, t.mean * 1e3, t.p50 * 1e3, t.p90 * 1e3, t.p99 * 1e3);
    out += line;
  };
  row("all", total);
  for (const auto& [name, s] : by_augmentation) row(name, s);
  std::snprintf(line, sizeof(line), "duration %.1f s\n", total.duration_s);
  out += line;
  return out;
}

nlohmann::json to_json(const Percentiles& p) {
  return {{"mean", p.mean}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}};
}

nlohmann::json to_json(const Summary& s) {
  return {{"submitted", s.submitted},
          {"completed", s.completed},
          {"duration_s", s.duration_s},
          {"throughput_rps", s.throughput_rps},
          {"normalized_latency_s_per_token", to_json(s.normalized_latency)},
          {"ttft_s", to_json(s.ttft)}};
}

nlohmann::json to_json(const RequestRecord& r) {
  return {{"id", r.id},
          {"augmentation", r.augmentation},
          {"arrival_s", r.arrival_s},
          {"first_token_s", r.first_token_s},
          {"end_s", r.end_s},
          {"interception_s", r.interception_s},
          {"output_tokens", r.output_tokens},
          {"completed", r.completed}};
}

}  // namespace infercept
