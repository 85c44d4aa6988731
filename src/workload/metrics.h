// What `infercept bench` reports, computed from one record per request (the paper's metrics):
//  - normalized latency = (end - arrival - total interception time) / output tokens, in seconds
//    per token, where output tokens = generated + tool-returned tokens. Subtracting the pauses
//    charges the server only for time it controls; dividing by tokens makes long and short
//    requests comparable.
//  - TTFT = first token - arrival.
//  - throughput = completed requests / run duration.
// Latency percentiles cover completed requests only: a request still running when the run
// stops has no end time. Percentiles interpolate linearly between order statistics (rank
// p * (n - 1), numpy's default), so p50 of {1, 2, 3, 4} is 2.5.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace infercept {

struct RequestRecord {
  uint64_t id = 0;
  std::string augmentation;
  double arrival_s = 0.0;
  double first_token_s = 0.0;   // meaningful when completed (every request emits a token)
  double end_s = 0.0;           // meaningful when completed
  double interception_s = 0.0;  // total time paused in tool calls
  int64_t output_tokens = 0;    // generated + returned tool tokens
  bool completed = false;
};

struct Percentiles {
  double mean = 0.0;
  double p50 = 0.0;
  double p90 = 0.0;
  double p99 = 0.0;
};

struct Summary {
  int64_t submitted = 0;
  int64_t completed = 0;
  double duration_s = 0.0;
  double throughput_rps = 0.0;     // completed / duration_s
  Percentiles normalized_latency;  // s/token, completed requests; all 0 when none completed
  Percentiles ttft;                // s, completed requests; all 0 when none completed
};

// Linear-interpolation percentile of `values` (need not be sorted); q in [0, 1]. Empty -> 0.
double percentile(std::vector<double> values, double q);
Percentiles percentiles(const std::vector<double>& values);

// (end - arrival - interception) / output_tokens of a completed record.
double normalized_latency(const RequestRecord& r);

// `duration_s` is the length of the measured run (> 0). Records must be consistent (end after
// arrival, pauses inside the request's lifetime, completed ones with output): they come from
// the engine, so a violation is a bug and CHECK-fails.
Summary summarize(const std::vector<RequestRecord>& records, double duration_s);

// One summary per augmentation name, for mixed runs.
std::map<std::string, Summary> summarize_by_augmentation(const std::vector<RequestRecord>& records,
                                                         double duration_s);

// A fixed-width table: one row for the whole run ("all") and one per augmentation if given.
// Latencies print in ms/token and TTFT in ms for readability; JSON keeps seconds.
std::string format_summary_table(const Summary& total,
                                 const std::map<std::string, Summary>& by_augmentation = {});

nlohmann::json to_json(const Percentiles& p);
nlohmann::json to_json(const Summary& s);
nlohmann::json to_json(const RequestRecord& r);

}  // namespace infercept
