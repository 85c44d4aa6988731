// Observability: what the engine thread reports (a snapshot taken between steps) and what
// the HTTP side measures (latencies, tokens, interception durations per tool), rendered as
// Prometheus text (GET /metrics) and as JSON for the dashboard.
//
// Names follow vLLM's where one exists, under the "infercept:" prefix
// (infercept:num_requests_running, infercept:time_to_first_token_seconds, ...); the
// interception-specific ones are ours (docs/SERVER.md lists them all).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace infercept::server {

// A paused request as the engine sees it.
struct PausedSeqInfo {
  uint64_t id = 0;
  std::string tool;
  int64_t device_tokens = 0;
  int64_t host_tokens = 0;
  int64_t tokens = 0;
  double waited_s = 0.0;
  bool expired = false;      // the engine released its KV (interception timeout)
  bool resuming = false;     // answered, KV coming back from the host
  bool on_disk = false;      // its host part is in the disk tier (or on its way there)
  const char* tier() const;  // "device", "host", "disk" or "released"
};

struct EngineSnapshot {
  EngineStats stats;
  int64_t running = 0, waiting = 0, paused = 0, resuming = 0;
  int64_t paused_device = 0, paused_host = 0, paused_disk = 0, paused_released = 0;
  // The disk tier: blocks its copies hold and what its budget holds (0: no disk tier).
  int64_t disk_blocks_used = 0, disk_blocks_total = 0;
  int64_t device_blocks_used = 0, device_blocks_total = 0;
  int64_t host_blocks_used = 0, host_blocks_total = 0;
  // Blocks the prefix cache indexes per tier (Scheduler::cached_device_blocks/_host_blocks).
  int64_t device_blocks_cached = 0, host_blocks_cached = 0;  // indexed (held or idle)
  // Idle cached blocks: only the prefix cache holds them (free + idle + used == total).
  int64_t device_blocks_idle = 0, host_blocks_idle = 0;
  int64_t block_size = 0;
  double kv_bytes_per_token = 0.0;
  std::string policy, estimator;
  std::vector<PausedSeqInfo> paused_seqs;
};

// On the engine thread.
EngineSnapshot take_snapshot(const EngineCore& core);
// From any thread: posts take_snapshot and waits for it (nullopt when the engine does not
// answer within `timeout`).
std::optional<EngineSnapshot> snapshot(Engine& engine, std::chrono::milliseconds timeout);

// Who looks at a shared view: per-tool series and paused requests are the caller's own unless
// `all` (an admin key, or a server without keys).
struct Viewer {
  std::string owner;
  bool all = false;
};

// A metric value as /metrics prints it: integers as integers ("20", not "2e+01"), others in
// plain decimals with the digits that read back as the same double; "+Inf", "-Inf", "NaN".
std::string format_metric_value(double v);

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  void merge(const Histogram& o);  // same bounds
  // Prometheus lines for `name` with `labels` ("" or `a="b"`).
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  nlohmann::json to_json() const;
  // The q-quantile estimated from the buckets: interpolated linearly within the bucket it
  // falls in (the first bucket starts at 0), as Prometheus' histogram_quantile does; in the
  // +Inf bucket, the last finite bound. 0 when empty.
  double quantile(double q) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative), last = +Inf
  double sum_ = 0.0;
  int64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void observe_ttft(double s);
  // The first token of a request that continued a paused one, by where the paused request's
  // KV was when its follow-up arrived (KvPlace).
  void observe_resume_ttft(KvPlace place, double s);
  void observe_itl(double s);
  void observe_e2e(double s);
  // How long `owner`'s request stayed paused for `tool` (a declared tool's name, or "other").
  // At most kMaxToolLabels distinct names become label values; the rest count as "other".
  void observe_interception(const std::string& owner, const std::string& tool, double s);
  static constexpr size_t kMaxToolLabels = 64;
  void add_request(const std::string& endpoint, const std::string& finish_reason,
                   int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);
  void add_http_status(int status);
  void add_pause();
  void add_resume(bool matched_by_prefix);
  void add_expired(int64_t n);
  // Paused requests released without a resume: to make room under --max-paused (evicted),
  // or passed over by a follow-up for a newer one of the same conversation (superseded).
  void add_evicted(int64_t n);
  void add_superseded(int64_t n);
  void add_rejected(const std::string& reason);

  std::string prometheus(const EngineSnapshot& s, int64_t registry_paused,
                         const Viewer& viewer) const;
  // `visible`: the engine ids of the paused requests the viewer may see.
  nlohmann::json dashboard_json(const EngineSnapshot& s, int64_t visible_paused,
                                const Viewer& viewer, const std::set<uint64_t>& visible) const;

 private:
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_;
  std::vector<Histogram> resume_ttft_;  // by KvPlace
  // The per-tool durations the viewer may see, merged by tool name.
  std::map<std::string, Histogram> tools_for(const Viewer& viewer) const;

  std::map<std::pair<std::string, std::string>, Histogram> interception_by_tool_;  // (owner, tool)
  std::set<std::string> tool_labels_;
  std::map<std::pair<std::string, std::string>, int64_t> requests_;  // (endpoint, finish)
  std::map<int, int64_t> http_status_;
  std::map<std::string, int64_t> rejected_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0, cached_tokens_ = 0;
  int64_t pauses_ = 0, resumes_prefix_ = 0, resumes_explicit_ = 0, expired_ = 0;
  int64_t evicted_ = 0, superseded_ = 0;
};

}  // namespace infercept::server
