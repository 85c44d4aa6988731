#include "server/metrics.h"

#include "core/check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>

namespace infercept::server {

namespace {

std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
}
std::vector<double> interception_buckets() {
  return {0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0};
}

}  // namespace

// Integers as integers ("20", "1536"); other values in plain decimal notation with the
// fewest digits that read back as the same double ("0.25", "0.0123"); exponent notation
// only where plain notation would be unreadable (below 1e-6 or from 1e15 on).
std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == 0.0) return "0";
  char buf[64];
  const double a = std::fabs(v);
  if (a < 1e15 && v == std::trunc(v)) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  if (a >= 1e-6 && a < 1e15) {
    for (int decimals = 1; decimals <= 24; ++decimals) {
      std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
      if (std::strtod(buf, nullptr) == v) return buf;
    }
  }
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

namespace {

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += " " + format_metric_value(v) + "\n";
}

}  // namespace

const char* PausedSeqInfo::tier() const {
  if (device_tokens + host_tokens == 0) return "released";
  if (on_disk) return "disk";
  return host_tokens > 0 ? "host" : "device";
}

EngineSnapshot take_snapshot(const EngineCore& core) {
  EngineSnapshot s;
  s.stats = core.stats();
  const Scheduler& sch = core.scheduler();
  s.running = (int64_t)sch.n_running();
  s.waiting = (int64_t)sch.n_waiting();
  s.paused = (int64_t)sch.n_paused();
  s.resuming = (int64_t)sch.n_resuming();
  s.block_size = core.config().block_size;
  s.device_blocks_total = core.allocator().n_blocks();
  s.device_blocks_used = core.allocator().n_held();  // idle cached blocks are not in use
  s.host_blocks_total = core.host_allocator().n_blocks();
  s.host_blocks_used = core.host_allocator().n_held();
  s.device_blocks_cached = sch.cached_device_blocks();
  s.host_blocks_cached = sch.cached_host_blocks();
  s.device_blocks_idle = core.allocator().n_idle_cached();
  s.host_blocks_idle = core.host_allocator().n_idle_cached();
  s.disk_blocks_used = sch.disk_used_blocks();
  s.disk_blocks_total = sch.config().disk_blocks;
  s.kv_bytes_per_token = core.cost_model().kv_bytes_per_token;
  s.policy = core.config().policy;
  s.estimator = core.config().estimator;
  const double now = core.now();
  for (const Sequence* seq : sch.paused()) {
    PausedSeqInfo p;
    p.id = seq->id;
    p.device_tokens = seq->device_tokens(s.block_size);
    p.host_tokens = seq->host_tokens(s.block_size);
    p.on_disk = seq->disk != DiskState::none;
    p.tokens = (int64_t)seq->tokens.size();
    if (seq->interception) {
      p.tool = seq->interception->tool;
      p.waited_s = now - seq->interception->call_time;
      p.expired = seq->interception->expired;
    }
    const std::string tier = p.tier();
    if (tier == "device")
      s.paused_device++;
    else if (tier == "host")
      s.paused_host++;
    else if (tier == "disk")
      s.paused_disk++;
    else
      s.paused_released++;
    s.paused_seqs.push_back(std::move(p));
  }
  return s;
}

std::optional<EngineSnapshot> snapshot(Engine& engine, std::chrono::milliseconds timeout) {
  auto promise = std::make_shared<std::promise<EngineSnapshot>>();
  auto future = promise->get_future();
  engine.post([promise](EngineCore& core) { promise->set_value(take_snapshot(core)); });
  if (future.wait_for(timeout) != std::future_status::ready) return std::nullopt;
  try {
    return future.get();
  } catch (const std::future_error&) {
    return std::nullopt;
  }
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i]++;
  sum_ += v;
  count_++;
}

void Histogram::merge(const Histogram& o) {
  CHECK(o.bounds_ == bounds_);
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
  sum_ += o.sum_;
  count_ += o.count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  int64_t cum = 0;
  const std::string sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? format_metric_value(bounds_[i]) : "+Inf";
    sample(out, name + "_bucket", labels + sep + "le=\"" + le + "\"", (double)cum);
  }
  sample(out, name + "_sum", labels, sum_);
  sample(out, name + "_count", labels, (double)count_);
}

nlohmann::json Histogram::to_json() const {
  nlohmann::json b = nlohmann::json::array();
  for (size_t i = 0; i <= bounds_.size(); ++i)
    b.push_back({{"le", i < bounds_.size() ? nlohmann::json(bounds_[i]) : nlohmann::json("+Inf")},
                 {"count", counts_[i]}});
  return {{"count", count_},
          {"sum", sum_},
          {"p50", quantile(0.5)},
          {"p95", quantile(0.95)},
          {"buckets", b}};
}

double Histogram::quantile(double q) const {
  if (count_ == 0) return 0.0;
  const double rank = std::clamp(q, 0.0, 1.0) * (double)count_;
  int64_t below = 0;  // observations in the buckets before i
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (counts_[i] > 0 && (double)(below + counts_[i]) >= rank) {
      // Spread evenly within the bucket, as Prometheus' histogram_quantile assumes; the
      // first bucket starts at 0 (durations).
      const double lo = i == 0 ? std::min(0.0, bounds_[0]) : bounds_[i - 1];
      const double hi = bounds_[i];
      const double within = std::max(0.0, rank - (double)below) / (double)counts_[i];
      return lo + (hi - lo) * within;
    }
    below += counts_[i];
  }
  // In the +Inf bucket: nothing known past the last bound.
  return bounds_.empty() ? 0.0 : bounds_.back();
}

Metrics::Metrics()
    : ttft_(latency_buckets()),
      itl_(latency_buckets()),
      e2e_(latency_buckets()),
      resume_ttft_(kKvPlaces, Histogram(latency_buckets())) {}

void Metrics::observe_resume_ttft(KvPlace place, double s) {
  std::lock_guard<std::mutex> lock(mu_);
  resume_ttft_[(size_t)place].observe(s);
}

void Metrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(s);
}
void Metrics::observe_itl(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.observe(s);
}
void Metrics::observe_e2e(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  e2e_.observe(s);
}
void Metrics::observe_interception(const std::string& owner, const std::string& tool, double s) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string label = tool;
  if (tool_labels_.count(label) == 0) {
    if (tool_labels_.size() < kMaxToolLabels)
      tool_labels_.insert(label);
    else
      label = "other";
  }
  auto it = interception_by_tool_.find({owner, label});
  if (it == interception_by_tool_.end())
    it = interception_by_tool_
             .emplace(std::make_pair(owner, label), Histogram(interception_buckets()))
             .first;
  it->second.observe(s);
}

std::map<std::string, Histogram> Metrics::tools_for(const Viewer& viewer) const {
  std::map<std::string, Histogram> out;
  for (const auto& [key, h] : interception_by_tool_) {
    if (!viewer.all && key.first != viewer.owner) continue;
    auto it = out.find(key.second);
    if (it == out.end())
      out.emplace(key.second, h);
    else
      it->second.merge(h);
  }
  return out;
}
void Metrics::add_request(const std::string& endpoint, const std::string& finish_reason,
                          int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  requests_[{endpoint, finish_reason}]++;
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += completion_tokens;
  cached_tokens_ += cached_tokens;
}
void Metrics::add_http_status(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  http_status_[status]++;
}
void Metrics::add_pause() {
  std::lock_guard<std::mutex> lock(mu_);
  pauses_++;
}
void Metrics::add_resume(bool matched_by_prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  (matched_by_prefix ? resumes_prefix_ : resumes_explicit_)++;
}
void Metrics::add_expired(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  expired_ += n;
}
void Metrics::add_evicted(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  evicted_ += n;
}
void Metrics::add_superseded(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  superseded_ += n;
}
void Metrics::add_rejected(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  rejected_[reason]++;
}

std::string Metrics::prometheus(const EngineSnapshot& s, int64_t registry_paused,
                                const Viewer& viewer) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string o;
  const std::string p = "infercept:";
  const EngineStats& st = s.stats;
  header(o, p + "num_requests_running", "gauge", "Requests in the running batch.");
  sample(o, p + "num_requests_running", "", (double)s.running);
  header(o, p + "num_requests_waiting", "gauge", "Requests waiting to be admitted.");
  sample(o, p + "num_requests_waiting", "", (double)s.waiting);
  header(o, p + "num_requests_intercepted", "gauge",
         "Requests paused for a tool, by where their KV cache is (device, host, disk, released).");
  sample(o, p + "num_requests_intercepted", "tier=\"device\"", (double)s.paused_device);
  sample(o, p + "num_requests_intercepted", "tier=\"host\"", (double)s.paused_host);
  sample(o, p + "num_requests_intercepted", "tier=\"disk\"", (double)s.paused_disk);
  sample(o, p + "num_requests_intercepted", "tier=\"released\"", (double)s.paused_released);
  header(o, p + "num_requests_resuming", "gauge",
         "Resumed requests whose KV is coming back from the host.");
  sample(o, p + "num_requests_resuming", "", (double)s.resuming);
  header(o, p + "num_interceptions_open", "gauge",
         "Paused requests the server keeps for their clients.");
  sample(o, p + "num_interceptions_open", "", (double)registry_paused);
  header(o, p + "kv_cache_usage_perc", "gauge",
         "Fraction of KV cache blocks in use, by tier (1 = full).");
  sample(o, p + "kv_cache_usage_perc", "tier=\"device\"",
         s.device_blocks_total > 0 ? (double)s.device_blocks_used / (double)s.device_blocks_total
                                   : 0.0);
  sample(o, p + "kv_cache_usage_perc", "tier=\"host\"",
         s.host_blocks_total > 0 ? (double)s.host_blocks_used / (double)s.host_blocks_total : 0.0);
  header(o, p + "kv_cache_blocks", "gauge",
         "KV cache blocks by tier and state: used (held by requests), cached (idle, only the "
         "prefix cache holds them: evictable), total.");
  sample(o, p + "kv_cache_blocks", "tier=\"device\",state=\"used\"", (double)s.device_blocks_used);
  sample(o, p + "kv_cache_blocks", "tier=\"device\",state=\"cached\"",
         (double)s.device_blocks_idle);
  sample(o, p + "kv_cache_blocks", "tier=\"device\",state=\"total\"",
         (double)s.device_blocks_total);
  sample(o, p + "kv_cache_blocks", "tier=\"host\",state=\"used\"", (double)s.host_blocks_used);
  sample(o, p + "kv_cache_blocks", "tier=\"host\",state=\"cached\"", (double)s.host_blocks_idle);
  sample(o, p + "kv_cache_blocks", "tier=\"host\",state=\"total\"", (double)s.host_blocks_total);
  if (s.disk_blocks_total > 0) {
    sample(o, p + "kv_cache_blocks", "tier=\"disk\",state=\"used\"", (double)s.disk_blocks_used);
    sample(o, p + "kv_cache_blocks", "tier=\"disk\",state=\"total\"", (double)s.disk_blocks_total);
  }
  header(o, p + "kv_cached_blocks", "gauge",
         "KV blocks the prefix cache indexes, by tier (held by requests, or idle and "
         "evictable).");
  sample(o, p + "kv_cached_blocks", "tier=\"device\"", (double)s.device_blocks_cached);
  sample(o, p + "kv_cached_blocks", "tier=\"host\"", (double)s.host_blocks_cached);
  header(o, p + "prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache when requests were admitted (vLLM: "
         "vllm:prefix_cache_queries).");
  sample(o, p + "prefix_cache_queries_total", "", (double)st.prefix_query_tokens);
  header(o, p + "prefix_cache_hits_total", "counter",
         "Prompt tokens of those lookups found cached (vLLM: vllm:prefix_cache_hits); "
         "hits / queries is the hit rate.");
  sample(o, p + "prefix_cache_hits_total", "", (double)st.prefix_hit_tokens);
  header(o, p + "prefix_cache_evicted_blocks_total", "counter",
         "Idle cached blocks evicted from the device tier for room.");
  sample(o, p + "prefix_cache_evicted_blocks_total", "", (double)st.prefix_evicted_blocks);
  header(o, p + "prefix_cache_demoted_blocks_total", "counter",
         "Of the evicted device blocks, those copied to the host tier and kept cached there.");
  sample(o, p + "prefix_cache_demoted_blocks_total", "", (double)st.prefix_demoted_blocks);
  header(o, p + "prefix_cache_promoted_blocks_total", "counter",
         "Cached host blocks copied back to the device tier on a hit.");
  sample(o, p + "prefix_cache_promoted_blocks_total", "", (double)st.prefix_promoted_blocks);

  header(o, p + "prompt_tokens_total", "counter", "Prompt tokens of finished responses.");
  sample(o, p + "prompt_tokens_total", "", (double)prompt_tokens_);
  header(o, p + "generation_tokens_total", "counter", "Generated tokens of finished responses.");
  sample(o, p + "generation_tokens_total", "", (double)generation_tokens_);
  header(o, p + "prompt_tokens_cached_total", "counter",
         "Prompt tokens of finished responses whose KV was found in place (a continued paused "
         "request's, or prefix-cache hits).");
  sample(o, p + "prompt_tokens_cached_total", "", (double)cached_tokens_);
  header(o, p + "request_success_total", "counter", "Responses by endpoint and finish reason.");
  for (const auto& [k, n] : requests_)
    sample(o, p + "request_success_total",
           "endpoint=\"" + k.first + "\",finished_reason=\"" + k.second + "\"", (double)n);
  header(o, p + "http_responses_total", "counter", "HTTP responses by status code.");
  for (const auto& [code, n] : http_status_)
    sample(o, p + "http_responses_total", "code=\"" + std::to_string(code) + "\"", (double)n);
  header(o, p + "requests_rejected_total", "counter", "Requests refused, by reason.");
  for (const auto& [r, n] : rejected_)
    sample(o, p + "requests_rejected_total", "reason=\"" + escape_label(r) + "\"", (double)n);

  header(o, p + "time_to_first_token_seconds", "histogram", "Time to first token.");
  ttft_.render(o, p + "time_to_first_token_seconds", "");
  header(o, p + "resumed_time_to_first_token_seconds", "histogram",
         "Time to first token of a request that continued a paused one, by where its KV was.");
  for (int i = 0; i < kKvPlaces; ++i)
    resume_ttft_[(size_t)i].render(o, p + "resumed_time_to_first_token_seconds",
                                   std::string("kv=\"") + kv_place_name((KvPlace)i) + "\"");
  header(o, p + "inter_token_latency_seconds", "histogram",
         "Time between two generated tokens of a response.");
  itl_.render(o, p + "inter_token_latency_seconds", "");
  header(o, p + "e2e_request_latency_seconds", "histogram",
         "Time from receipt to the last token of a response.");
  e2e_.render(o, p + "e2e_request_latency_seconds", "");

  header(o, p + "interceptions_total", "counter",
         "Responses that left their request paused for a tool.");
  sample(o, p + "interceptions_total", "", (double)pauses_);
  header(o, p + "interception_resumes_total", "counter",
         "Paused requests resumed, by how they were found.");
  sample(o, p + "interception_resumes_total", "how=\"prefix\"", (double)resumes_prefix_);
  sample(o, p + "interception_resumes_total", "how=\"explicit\"", (double)resumes_explicit_);
  header(o, p + "interception_expired_total", "counter",
         "Paused requests dropped at their expiry.");
  sample(o, p + "interception_expired_total", "", (double)expired_);
  header(o, p + "interceptions_evicted_total", "counter",
         "Paused requests released to make room for a newer one of their key (--max-paused).");
  sample(o, p + "interceptions_evicted_total", "", (double)evicted_);
  header(o, p + "interceptions_superseded_total", "counter",
         "Paused requests released because a follow-up continued a newer one of the same "
         "conversation.");
  sample(o, p + "interceptions_superseded_total", "", (double)superseded_);
  header(o, p + "interception_duration_seconds", "histogram",
         "How long a request stayed paused, by tool.");
  for (const auto& [tool, h] : tools_for(viewer))
    h.render(o, p + "interception_duration_seconds", "tool=\"" + escape_label(tool) + "\"");

  header(o, p + "engine_interceptions_total", "counter", "Pauses in the engine (every trigger).");
  sample(o, p + "engine_interceptions_total", "", (double)st.interceptions);
  header(o, p + "engine_kv_expirations_total", "counter",
         "Paused requests whose KV the engine released at the interception timeout.");
  sample(o, p + "engine_kv_expirations_total", "", (double)st.expirations);
  header(o, p + "recomputed_tokens_total", "counter",
         "Tokens whose KV was dropped and computed again.");
  sample(o, p + "recomputed_tokens_total", "", (double)st.recomputed_tokens);
  header(o, p + "swapped_tokens_total", "counter",
         "Tokens copied between the KV tiers (whole blocks).");
  sample(o, p + "swapped_tokens_total", "direction=\"out\"", (double)st.swapped_out_tokens);
  sample(o, p + "swapped_tokens_total", "direction=\"in\"", (double)st.swapped_in_tokens);
  header(o, p + "swapped_bytes_total", "counter", "Bytes copied between the KV tiers.");
  sample(o, p + "swapped_bytes_total", "direction=\"out\"",
         (double)st.swapped_out_tokens * s.kv_bytes_per_token);
  sample(o, p + "swapped_bytes_total", "direction=\"in\"",
         (double)st.swapped_in_tokens * s.kv_bytes_per_token);
  header(o, p + "disk_tier_blocks_total", "counter",
         "KV blocks moved by the disk tier's jobs that ended well (spill: host to disk; "
         "restore: disk to host).");
  sample(o, p + "disk_tier_blocks_total", "direction=\"spill\"",
         (double)(st.spilled_tokens / std::max<int64_t>(1, s.block_size)));
  sample(o, p + "disk_tier_blocks_total", "direction=\"restore\"",
         (double)(st.restored_tokens / std::max<int64_t>(1, s.block_size)));
  header(o, p + "disk_tier_bytes_total", "counter", "Bytes of KV the disk tier wrote and read.");
  sample(o, p + "disk_tier_bytes_total", "direction=\"spill\"", st.spilled_bytes);
  sample(o, p + "disk_tier_bytes_total", "direction=\"restore\"", st.restored_bytes);
  header(o, p + "disk_tier_failures_total", "counter",
         "Disk-tier jobs that failed (a write: the KV stayed on the host; a read: it was "
         "recomputed).");
  sample(o, p + "disk_tier_failures_total", "op=\"write\"", (double)st.disk_write_failures);
  sample(o, p + "disk_tier_failures_total", "op=\"read\"", (double)st.disk_read_failures);
  header(o, p + "swap_seconds_total", "counter", "Time spent copying between the KV tiers.");
  sample(o, p + "swap_seconds_total", "", st.swap_seconds);
  header(o, p + "waste_byte_seconds_total", "counter",
         "Memory waste in byte-seconds of KV, by cause (docs/DESIGN.md).");
  sample(o, p + "waste_byte_seconds_total", "cause=\"recompute\"", st.waste_recompute);
  sample(o, p + "waste_byte_seconds_total", "cause=\"preserve\"", st.waste_preserve);
  sample(o, p + "waste_byte_seconds_total", "cause=\"swap_stall\"", st.waste_swap_stall);
  header(o, p + "policy_decisions_total", "counter",
         "Per-step decisions on paused requests' KV, by strategy.");
  sample(o, p + "policy_decisions_total", "strategy=\"preserve\"", (double)st.preserve_decisions);
  sample(o, p + "policy_decisions_total", "strategy=\"swap\"", (double)st.swap_decisions);
  sample(o, p + "policy_decisions_total", "strategy=\"discard\"", (double)st.discard_decisions);
  sample(o, p + "policy_decisions_total", "strategy=\"spill\"", (double)st.spill_decisions);
  sample(o, p + "policy_decisions_total", "strategy=\"prefetch\"", (double)st.prefetches);
  header(o, p + "num_preemptions_total", "counter",
         "Running requests preempted for lack of KV blocks.");
  sample(o, p + "num_preemptions_total", "", (double)st.preemptions);
  header(o, p + "engine_steps_total", "counter", "Engine steps run.");
  sample(o, p + "engine_steps_total", "", (double)st.steps);
  header(o, p + "engine_forward_seconds_total", "counter", "Time in the model's forward pass.");
  sample(o, p + "engine_forward_seconds_total", "", st.forward_seconds);
  header(o, p + "engine_interrupted_steps_total", "counter",
         "Prefill-only steps given up part-way for a short newcomer (CPU; not in steps_total).");
  sample(o, p + "engine_interrupted_steps_total", "", (double)st.interrupted_steps);
  header(o, p + "engine_interrupted_seconds_total", "counter",
         "Forward time those steps had run before they were given up (lost work).");
  sample(o, p + "engine_interrupted_seconds_total", "", st.interrupted_seconds);
  header(o, p + "engine_replayed_steps_total", "counter",
         "Steps run from a recorded CUDA graph (decode steps whose shape repeated).");
  sample(o, p + "engine_replayed_steps_total", "", (double)st.replayed_steps);
  header(o, p + "engine_host_sampled_rows_total", "counter",
         "Sampled rows whose logits went to the host (logprobs, penalties); the rest were "
         "drawn where the logits are.");
  sample(o, p + "engine_host_sampled_rows_total", "", (double)st.host_sampled_rows);
  header(o, p + "engine_prompt_tokens_computed_total", "counter",
         "Prefill rows run, recomputation included.");
  sample(o, p + "engine_prompt_tokens_computed_total", "", (double)st.prompt_tokens_computed);
  header(o, p + "engine_info", "gauge", "The engine's policy and estimator.");
  sample(
      o, p + "engine_info",
      "policy=\"" + escape_label(s.policy) + "\",estimator=\"" + escape_label(s.estimator) + "\"",
      1.0);
  return o;
}

nlohmann::json Metrics::dashboard_json(const EngineSnapshot& s, int64_t visible_paused,
                                       const Viewer& viewer,
                                       const std::set<uint64_t>& visible) const {
  std::lock_guard<std::mutex> lock(mu_);
  using nlohmann::json;
  const EngineStats& st = s.stats;
  json tools = json::object();
  for (const auto& [tool, h] : tools_for(viewer)) tools[tool] = h.to_json();
  json paused = json::array();
  for (const PausedSeqInfo& p : s.paused_seqs) {
    if (visible.count(p.id) == 0) continue;
    paused.push_back({{"tool", p.tool},
                      {"tier", p.tier()},
                      {"device_tokens", p.device_tokens},
                      {"host_tokens", p.host_tokens},
                      {"tokens", p.tokens},
                      {"waited_s", p.waited_s}});
  }
  int64_t finished = 0;
  for (const auto& [k, n] : requests_) finished += n;
  return {
      {"requests",
       {{"running", s.running},
        {"waiting", s.waiting},
        {"resuming", s.resuming},
        {"intercepted",
         {{"device", s.paused_device},
          {"host", s.paused_host},
          {"disk", s.paused_disk},
          {"released", s.paused_released}}},
        {"open_interceptions", visible_paused},
        {"finished", finished}}},
      {"kv",
       {{"device", {{"used", s.device_blocks_used}, {"total", s.device_blocks_total}}},
        {"host", {{"used", s.host_blocks_used}, {"total", s.host_blocks_total}}},
        {"block_size", s.block_size}}},
      {"prefix_cache",
       {{"queries", st.prefix_query_tokens},
        {"hits", st.prefix_hit_tokens},
        {"hit_rate", st.prefix_query_tokens > 0
                         ? (double)st.prefix_hit_tokens / (double)st.prefix_query_tokens
                         : 0.0},
        {"cached_blocks", {{"device", s.device_blocks_cached}, {"host", s.host_blocks_cached}}},
        {"evicted_blocks", st.prefix_evicted_blocks},
        {"demoted_blocks", st.prefix_demoted_blocks},
        {"promoted_blocks", st.prefix_promoted_blocks}}},
      {"decisions",
       {{"preserve", st.preserve_decisions},
        {"swap", st.swap_decisions},
        {"discard", st.discard_decisions},
        {"spill", st.spill_decisions},
        {"prefetch", st.prefetches}}},
      {"waste",
       {{"recompute", st.waste_recompute},
        {"preserve", st.waste_preserve},
        {"swap_stall", st.waste_swap_stall}}},
      {"tokens",
       {{"prompt", prompt_tokens_},
        {"generation", generation_tokens_},
        {"cached", cached_tokens_},
        {"recomputed", st.recomputed_tokens},
        {"swapped_out", st.swapped_out_tokens},
        {"swapped_in", st.swapped_in_tokens},
        {"spilled", st.spilled_tokens},
        {"restored", st.restored_tokens}}},
      {"latency", {{"ttft", ttft_.to_json()}, {"itl", itl_.to_json()}, {"e2e", e2e_.to_json()}}},
      {"interceptions",
       {{"paused", pauses_},
        {"resumed_prefix", resumes_prefix_},
        {"resumed_explicit", resumes_explicit_},
        {"expired", expired_},
        {"evicted", evicted_},
        {"superseded", superseded_}}},
      {"tools", tools},
      {"paused", paused},
      {"policy", s.policy},
      {"estimator", s.estimator}};
}

}  // namespace infercept::server
