// The simulator: the engine's step loop (step_loop.h) around the real Scheduler, with the
// forward pass priced by the cost model and the wall clock replaced by a virtual one. See
// simulator.h.
#include "engine/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <sstream>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/check.h"
#include "engine/disk_mover.h"
#include "engine/engine.h"
#include "engine/step_loop.h"
#include "kv/block_allocator.h"
#include "sched/policy.h"
#include "sched/scheduler.h"
#include "sched/sequence.h"
#include "sched/step_trace.h"

namespace infercept {

namespace {

// Built-in H200 profiles (the lent H200, bf16 weights and KV, 16-token blocks).
//
// llama2-7b (the engine of 2026-12-03) and llama2-13b (the engine of 2026-12-01), every
// term measured apart from the
// runs the simulator is validated on (docs/BENCHMARKS.md, "The simulator's cost terms measured
// apart from the runs", "Runs q" and, for the 7B as it is now, "Runs s11"):
//   - D(n), a(n): bench-forward decode steps of n = 1..64 sequences at contexts 256-3,072
//     (bench/step_context_cost.sh; 7B docs/bench/step-context3, 13B step-context2), one
//     straight line in n x context per n (`bench/fit_step_cost.py --per-batch`; every step
//     within 2.1% / 0.8%): the decode-only step the engine replays from a CUDA graph, and its
//     price per context token;
//   - T_fwd(x <= 512): the engine's start-up profile in its step-probe run (7B step-probe9,
//     13B step-probe-13b-3); x >= 1,024: bench-forward of 2026-12-01 (prefill-bound); a step
//     with a chunk lasts kT x T_fwd;
//   - 13B: kT, p(rows), q and the engine's artifacts (a chunk step's first sight of its row
//     count; graph misses; SimProfile) fitted together to the step probes (`bench/step_fit.py
//     --hold-decode --rows 2,9 --fit-artifacts`, step-probe-13b-5, the batch-change rule): kT
//     1.0850, first sight 5.3 ms, 0.94 / 1.40 ms.
//   - 7B: the same terms, D(n) and a(n) scaled (x0.974, x1.607: the batches of a real run
//     hold sequences of mixed contexts, the probes' one) and the copies' interference with the
//     forward pass, fitted to the step traces of five paper runs at seed 11 (`bench/step_fit.py
//     --rows 2,9 --fit-artifacts --graph-cache 64`, docs/bench/h200-paper/s11), which the
//     validation (every run at seed 7) does not use: kT 1.0139, first sight 3.3 ms, a graph
//     key's first sight 0.65 ms and its capture 4.9 ms, 0.240 / 0.338 s of forward pass a
//     second of swap-in / swap-out copy at the fit's 54.06 GB/s, i.e. 0.244 / 0.343 a second at
//     the built-in's 55. (Fitted to the probes instead, the same engine missed the knee by
//     21%.)
// llama3-8b: bench-forward of 2026-12-01 and its decode-step context constant, engines of that
// time (not re-measured since).
struct Shape {
  const char* name;
  std::vector<std::pair<int64_t, double>> t_fwd_ms;  // (tokens, ms)
  double chunk_step_scale;                           // kT (CostModel::chunk_step_scale)
  int layers, kv_heads, head_dim;
  double weights_gb;  // bf16, 1e9 bytes (bench-forward's figure)
  int64_t max_context;
  std::vector<std::pair<int64_t, double>> decode_ms;   // D(n), or empty: T_fwd(n)
  std::vector<std::pair<int64_t, double>> context_us;  // a(n), us per context token
  std::vector<std::pair<int64_t, double>> chunk_us;    // p(rows), us per context token
  double chunk_row_ns;                                 // q, ns per chunk row x context token
  // The engine's artifacts (EngineArtifacts), ms: first sight of a chunk step's row count,
  // then the two graph-miss prices: with graph_cache_entries 0 (the batch-change rule) the
  // two decode-only steps after a change of the sequence count, with N > 0 (the engine's
  // cache of N graphs, cuda::StepGraphCache::kMaxGraphs) a key's first sight and its capture.
  double first_sight_ms, new_batch_ms, second_batch_ms;
  int64_t graph_cache_entries;
  // Seconds of forward pass per second of swap-in / swap-out copy queued with the step
  // (EngineArtifacts::copy_in_interference / copy_out_interference).
  double copy_in_interference, copy_out_interference;
  // Logits to the host per sampled row, (with logits - without) / B from bench-forward decode steps
  // of 2026-12-01 (the engine's greedy and top-p rows sample on the device since: 0 where measured
  // so).
  double sample_us_per_row;
  const char* source;
};

// The batch sizes bench/step_context_cost.sh measured decode steps at (D(n) and a(n) below).
constexpr int64_t kDecodeBatches[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64};

// (n, value) samples of a per-batch series, one value per kDecodeBatches entry.
std::vector<std::pair<int64_t, double>> per_batch(std::initializer_list<double> values) {
  CHECK(values.size() == std::size(kDecodeBatches));
  std::vector<std::pair<int64_t, double>> out;
  size_t i = 0;
  for (double v : values) out.emplace_back(kDecodeBatches[i++], v);
  return out;
}

const std::vector<Shape>& shapes() {
  // One measured series a line:
  // clang-format off
  static const std::vector<Shape> v = {
      {"h200-llama2-7b",
       {{1, 3.982963}, {16, 5.786473}, {64, 5.884444}, {128, 6.423897}, {256, 8.053224},
        {512, 12.526677}, {1024, 25.566471}, {2048, 54.587632}, {4096, 114.082703}}, 1.0139,
       32, 32, 128, 13.476, 4096,
       per_batch({3.883674, 4.205760, 5.232913, 5.234245, 5.303208, 5.430598, 5.292162, 5.430980,
                  5.447069, 5.519628, 5.858144}),
       per_batch({0.3060, 0.2943, 0.2775, 0.2495, 0.2446, 0.2853, 0.2445, 0.2796, 0.2400, 0.2488,
                  0.2456}),
       {{2, 0.565}, {9, 0.141}}, 3.605, 3.329, 0.653, 4.937, 64, 0.244, 0.343, 0.0,
       "built-in: H200 2026-12-03, the engine of that day (D(n) and a(n) measured by "
       "bench-forward at four contexts, docs/bench/step-context3, then scaled, and kT, prefill "
       "chunks, the engine's first-sight, graph-cache and copy-interference costs fitted, to the "
       "step traces of the paper runs at seed 11, docs/bench/h200-paper/s11), copies 55 GB/s "
       "each way"},
      // 8b (GQA, 4x less KV): (10.61 - 7.30) / 32768 = 0.101, (19.74 - 7.60) / 131072 = 0.093
      // rows (128k vocabulary): (12.70 - 10.61) / 32 = 65 us, (29.48 - 19.74) / 128 = 76 us
      {"h200-llama3-8b",
       {{1, 6.778494}, {2, 6.640310}, {4, 6.771061}, {8, 7.020817}, {16, 7.110659},
        {32, 7.295225}, {64, 7.126920}, {128, 7.596248}, {256, 9.456842}, {512, 15.378560},
        {1024, 27.706171}, {2048, 56.430700}, {4096, 118.693318}}, 1.0,
       32, 8, 128, 16.060, 8192, {}, {{1, 0.097}}, {}, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, 71.0,
       "built-in: H200 bench-forward 2026-12-01 (T_fwd and one context term), copies "
       "55 GB/s each way"},
      {"h200-llama2-13b",
       {{1, 8.459634}, {16, 9.153949}, {64, 9.817365}, {128, 10.636260}, {256, 13.788468},
        {512, 23.332885}, {1024, 50.279934}, {2048, 97.890871}, {4096, 209.164817}}, 1.0850,
       40, 40, 128, 26.031, 4096,
       per_batch({8.494187, 9.162340, 8.798803, 8.862432, 9.042783, 8.731306, 8.817307, 8.942797,
                  9.091473, 9.144026, 9.936902}),
       per_batch({0.3527, 0.2547, 0.2283, 0.2426, 0.2812, 0.2496, 0.2808, 0.2446, 0.2487, 0.2530,
                  0.2413}),
       {{2, 0.595}, {9, 0.106}}, 4.587, 5.272, 0.936, 1.403, 0, 0.0, 0.0, 0.0,
       "built-in: H200 2026-12-01, the engine of that day (decode steps D(n) and a(n) from "
       "bench-forward at three contexts, docs/bench/step-context2; kT, prefill chunks and the "
       "engine's first-sight and graph-miss costs fitted to its step probes, "
       "docs/bench/step-probe-13b-5), copies 55 GB/s each way"},
  };
  // clang-format on
  return v;
}

// Memory the device reports (cudaMemGetInfo total, ~140 GiB on an H200) and what each device
// keeps for activations, workspaces and the CUDA context.
constexpr double kH200MemoryGiB = 140.0;
constexpr double kReservedGiBPerDevice = 2.0;
constexpr double kH200CopyBytesPerSecond = 55e9;  // pinned, each way (docs/PERF.md "H200: floors")

SimProfile builtin(const Shape& s) {
  SimProfile p;
  p.name = s.name;
  for (const auto& [x, ms] : s.t_fwd_ms) p.cost.t_fwd_samples.emplace_back(x, ms * 1e-3);
  p.cost.chunk_step_scale = s.chunk_step_scale;
  p.cost.kv_bytes_per_token = 2.0 * s.layers * s.kv_heads * s.head_dim * 2.0;  // K+V, bf16
  p.cost.swap_bytes_per_second = kH200CopyBytesPerSecond;
  p.cost.saturation_tokens = 128;  // measured S for all three shapes (docs/PERF.md "H200: T_fwd(x)
                                   // and the saturation point")
  p.copies_overlap = true;
  p.device_memory_gib = kH200MemoryGiB;
  p.weights_gib = s.weights_gb * 1e9 / (1024.0 * 1024.0 * 1024.0);
  p.max_context = s.max_context;
  for (const auto& [n, ms] : s.decode_ms) p.cost.decode_samples.emplace_back(n, ms * 1e-3);
  for (const auto& [n, us] : s.context_us) p.cost.context_samples.emplace_back(n, us * 1e-6);
  for (const auto& [r, us] : s.chunk_us) p.cost.chunk_context_samples.emplace_back(r, us * 1e-6);
  p.cost.chunk_row_context_seconds = s.chunk_row_ns * 1e-9;
  p.cost.sample_seconds_per_row = s.sample_us_per_row * 1e-6;
  p.artifacts.first_sight_seconds = s.first_sight_ms * 1e-3;
  p.artifacts.new_batch_seconds = s.new_batch_ms * 1e-3;
  p.artifacts.second_batch_seconds = s.second_batch_ms * 1e-3;
  p.artifacts.graph_cache_entries = s.graph_cache_entries;
  p.artifacts.copy_in_interference = s.copy_in_interference;
  p.artifacts.copy_out_interference = s.copy_out_interference;
  p.source = s.source;
  return p;
}

// The CUDA engine's cache of recorded decode steps (cuda::StepGraphCache) as the simulated
// steps meet it: a cached key replays, an unrecorded one runs eagerly at its first sight and is
// captured at its second, and a capture beyond `capacity` graphs drops the least recently used.
class GraphCacheModel {
 public:
  enum class Pass { replay, eager, capture };
  explicit GraphCacheModel(size_t capacity) : capacity_(capacity) {}
  Pass step(int64_t sequences, int32_t width, int64_t now) {
    const std::pair<int64_t, int32_t> key{sequences, width};
    if (auto it = cached_.find(key); it != cached_.end()) {
      it->second = now;
      return Pass::replay;
    }
    if (++seen_[key] < 2) return Pass::eager;
    seen_.erase(key);
    if (cached_.size() >= capacity_) {
      auto lru = std::min_element(cached_.begin(), cached_.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
      cached_.erase(lru);
    }
    cached_[key] = now;
    return Pass::capture;
  }

 private:
  size_t capacity_;
  std::map<std::pair<int64_t, int32_t>, int64_t> cached_;  // key -> last use
  std::map<std::pair<int64_t, int32_t>, int> seen_;        // unrecorded keys' sightings
};

// Samples of one sequence (id = index in the trace) the loop needs besides the scheduler's.
struct SimRequest {
  Sequence seq;
  const TraceRequest* trace = nullptr;
  size_t segment = 0;  // the segment being generated
  int64_t sampled_since_resume = 0;
  int64_t n_sampled = 0;
  int64_t max_tokens = 0;  // all generated tokens of the script
  double paused_at = 0.0;
  double resumed_at = -1.0;              // the tool answered and no token has come since
  KvPlace resumed_kv = KvPlace::device;  // where its KV was then
  bool has_first_token = false;
  RequestRecord record;
};

struct ResumeEvent {
  double at;
  uint64_t order;  // ties in time resolve in the order the pauses happened: deterministic
  size_t index;
  bool operator>(const ResumeEvent& o) const { return at != o.at ? at > o.at : order > o.order; }
};

using ResumeQueue =
    std::priority_queue<ResumeEvent, std::vector<ResumeEvent>, std::greater<ResumeEvent>>;

// The step's cost instead of its forward pass: CostModel::step_seconds for the plan's shape,
// the engine's artifacts (EngineArtifacts) and the copies at the profile's bandwidth. A
// generated token is a placeholder (0).
class SimExecutor : public StepExecutor {
 public:
  SimExecutor(const SimConfig& config, int64_t limit, const SimStats& stats)
      : config_(config),
        limit_(limit),
        stats_(stats),
        seen_counts_(config.artifacts.seen_token_counts.begin(),
                     config.artifacts.seen_token_counts.end()),
        jitter_rng_(config.jitter_seed) {
    if (config.artifacts.graph_cache_entries > 0)
      graph_cache_ =
          std::make_unique<GraphCacheModel>((size_t)config.artifacts.graph_cache_entries);
  }

  StepTiming execute(const StepPlan& plan, const StepShape& shape,
                     std::vector<int32_t>& tokens) override {
    const CostModel& cost = config_.cost;
    const EngineArtifacts& art = config_.artifacts;
    const int64_t bs = config_.block_size;
    // Copies: bytes / bandwidth per direction. On copy streams the two directions run at once
    // (the H200 moved 98.6 GB/s both ways against 55 one way) and under the forward pass; on
    // the CPU they run one after the other on the engine thread.
    const double t_in = cost.t_swap((int64_t)plan.swap_in.size() * bs);
    const double t_out = cost.t_swap((int64_t)plan.swap_out.size() * bs);
    StepTiming timing;
    timing.copy_seconds = config_.copies_overlap ? std::max(t_in, t_out) : t_in + t_out;
    double fwd = plan.scheduled.empty() ? 0.0 : cost.step_seconds(shape);
    if (!plan.scheduled.empty()) {
      if (shape.decode_only())
        fwd += graph_seconds(plan, shape);
      else if (art.first_sight_seconds > 0.0 && seen_counts_.insert(shape.query_tokens).second)
        fwd += art.first_sight_seconds;
    }
    // Copies queued with the step that its layers wait for (EngineArtifacts); a synchronous
    // copy (the `swap` policy, or copies that do not overlap) is done before the step starts.
    if (fwd > 0.0 && config_.copies_overlap && !plan.sync_swap)
      fwd += art.copy_in_interference * t_in + art.copy_out_interference * t_out;
    if (config_.step_jitter > 0.0 && fwd > 0.0) {  // mean 1: E[exp(sN - s^2/2)] = 1
      const double sigma = config_.step_jitter;
      fwd *= std::exp(sigma * jitter_normal_(jitter_rng_) - 0.5 * sigma * sigma);
    }
    timing.forward_seconds = fwd;
    // The `swap` policy's whole-context copy is synchronous by definition (the paper's naive
    // swap): the step waits for all of it.
    const bool hidden = config_.copies_overlap && !plan.sync_swap;
    const double duration = hidden ? std::max(fwd, timing.copy_seconds) : fwd + timing.copy_seconds;
    timing.stall_seconds = duration - fwd;
    for (const ScheduledSeq& ss : plan.scheduled)
      if (ss.sample) tokens.push_back(0);
    return timing;
  }

 private:
  // What a decode-only step pays the engine's graph cache.
  double graph_seconds(const StepPlan& plan, const StepShape& shape) {
    const EngineArtifacts& art = config_.artifacts;
    if (graph_cache_) {
      const int32_t width = block_table_width(longest_blocks(plan),
                                              BlockTable::blocks_for(limit_, config_.block_size));
      switch (graph_cache_->step(shape.sequences, width, stats_.steps)) {
        case GraphCacheModel::Pass::replay:
          return 0.0;
        case GraphCacheModel::Pass::eager:
          return art.new_batch_seconds;
        case GraphCacheModel::Pass::capture:
          return art.second_batch_seconds;
      }
    }
    double extra = 0.0;
    if (shape.sequences != last_decode_sequences_) {
      extra = art.new_batch_seconds;
      steps_since_new_batch_ = 0;
    } else if (++steps_since_new_batch_ == 1) {
      extra = art.second_batch_seconds;
    }
    last_decode_sequences_ = shape.sequences;
    return extra;
  }

  const SimConfig& config_;
  int64_t limit_;
  const SimStats& stats_;  // the step count keys the graph cache's recency
  std::unique_ptr<GraphCacheModel> graph_cache_;
  int64_t last_decode_sequences_ = -1, steps_since_new_batch_ = 0;  // the batch-change rule
  std::unordered_set<int64_t> seen_counts_;                         // first_sight_seconds
  std::mt19937_64 jitter_rng_;
  std::normal_distribution<double> jitter_normal_{0.0, 1.0};
};

int64_t final_context(const TraceRequest& r) {
  int64_t n = r.prompt_tokens;
  for (const Segment& s : r.segments) n += (int64_t)s.generate_tokens + s.return_tokens;
  return n;
}

int64_t generated(const TraceRequest& r) {
  int64_t n = 0;
  for (const Segment& s : r.segments) n += s.generate_tokens;
  return n;
}

}  // namespace

int64_t SimProfile::default_kv_cache_tokens(int gpus, double util) const {
  if (device_memory_gib <= 0.0 || cost.kv_bytes_per_token <= 0.0) return 0;
  const double gib =
      (double)gpus * (device_memory_gib * util - kReservedGiBPerDevice) - weights_gib;
  if (gib <= 0.0) return 0;
  return (int64_t)(gib * 1024.0 * 1024.0 * 1024.0 / cost.kv_bytes_per_token);
}

const std::vector<std::string>& builtin_sim_profile_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Shape& s : shapes()) v.push_back(s.name);
    return v;
  }();
  return names;
}

Result<SimProfile> load_sim_profile(const std::string& name_or_path) {
  for (const Shape& s : shapes())
    if (name_or_path == s.name) return builtin(s);
  std::ifstream in(name_or_path);
  if (!in) {
    std::string names;
    for (const std::string& n : builtin_sim_profile_names())
      names += (names.empty() ? "" : ", ") + n;
    return make_error("--profile '", name_or_path, "' is neither a built-in profile (", names,
                      ") nor a readable cost-model JSON file");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  TRY_ASSIGN(CostModel cost, CostModel::from_json(text, name_or_path));
  SimProfile p;
  p.name = name_or_path;
  p.cost = std::move(cost);
  // `infercept profile` names its cache MODEL.profile-BACKEND-Nt.json; the CPU backend copies
  // on the engine thread, the CUDA one on copy streams under the forward pass.
  p.copies_overlap = name_or_path.find(".profile-cpu-") == std::string::npos;
  // The keys beside the cost model's (from_json ignores them): profile_file.h.
  const ProfileExtras extras = read_profile_extras(text);
  if (extras.copies_overlap) p.copies_overlap = *extras.copies_overlap;
  p.max_context = extras.max_context;
  p.artifacts = extras.artifacts;
  p.source = "cost-model file " + name_or_path;
  return p;
}

double default_tp_efficiency(int gpus) {
  if (gpus <= 1) return 1.0;
  return std::pow(0.9, std::log2((double)gpus));
}

CostModel scale_cost_model(const CostModel& one, int gpus, double efficiency) {
  CostModel c = one;
  if (gpus <= 1) return c;
  const double speedup = (double)gpus * efficiency;
  for (auto& [tokens, seconds] : c.t_fwd_samples) seconds /= speedup;
  for (auto& [sequences, seconds] : c.context_samples) seconds /= speedup;
  for (auto& [sequences, seconds] : c.decode_samples) seconds /= speedup;
  for (auto& [rows, seconds] : c.chunk_context_samples) seconds /= speedup;
  c.sequence_seconds /= speedup;
  c.chunk_row_context_seconds /= speedup;
  c.swap_bytes_per_second *= (double)gpus;  // one host link per device
  return c;
}

namespace {

Status validate(const SimConfig& config, const std::vector<TraceRequest>& trace) {
  TRY(config.cost.validate());
  if (config.block_size <= 0 || config.max_tokens_per_step <= 0 || config.max_seqs <= 0)
    return make_error("block size, tokens per step and sequences per step must be positive");
  if (config.max_partial_prefills < 1 || config.long_prefill_tokens < 0)
    return make_error("partial prefills per step must be >= 1, the long-prefill chunk >= 0");
  if (config.kv_cache_tokens <= 0) return make_error("the KV cache must hold at least one token");
  if (config.disk_tokens < 0) return make_error("the disk tier's size must be >= 0");
  if (!(config.duration_s > 0.0)) return make_error("the arrival window must be positive");
  if (!(config.drain_s >= 0.0)) return make_error("the drain time must be >= 0");
  if (!(config.idle_tick_s > 0.0)) return make_error("the idle tick must be positive");
  for (size_t i = 1; i < trace.size(); ++i)
    if (trace[i].arrival_s < trace[i - 1].arrival_s)
      return make_error("trace request ", std::to_string(trace[i].id),
                        " arrives before the one listed before it");
  return ok_status();
}

// One simulation: the engine's parts (allocators, estimator, policy, scheduler, step loop)
// with the cost-model executor, the trace's requests as the requests' side, and the event
// loop around them (simulator.h says what it mirrors).
class SimRun : public StepRequests {
 public:
  SimRun(const SimConfig& config, const std::vector<TraceRequest>& trace)
      : config_(config),
        trace_(trace),
        device_((int32_t)BlockTable::blocks_for(config.kv_cache_tokens, config.block_size)),
        host_((int32_t)std::max<int64_t>(
            1, BlockTable::blocks_for(config.swap_space_tokens, config.block_size))),
        reqs_(trace.size()) {}

  Status init() {
    TRY_ASSIGN(estimator_, make_duration_estimator(config_.estimator));
    TRY_ASSIGN(PolicyKind kind, parse_policy(config_.policy));
    policy_ = make_policy(kind, config_.cost, *estimator_);
    SchedulerConfig sc;
    sc.block_size = config_.block_size;
    sc.max_tokens_per_step = config_.max_tokens_per_step;
    sc.max_seqs_per_step = config_.max_seqs;
    sc.max_partial_prefills = config_.max_partial_prefills;
    sc.long_prefill_tokens = config_.long_prefill_tokens;
    sc.prefix_cache = config_.prefix_cache;
    sc.disk_blocks = config_.disk_tokens > 0
                         ? BlockTable::blocks_for(config_.disk_tokens, config_.block_size)
                         : 0;
    sched_ = std::make_unique<Scheduler>(sc, device_, &host_, policy_.get(), &config_.cost);
    if (sc.disk_blocks > 0)
      disk_ = std::make_unique<ClockDiskMover>(
          config_.cost.kv_bytes_per_token * (double)config_.block_size,
          config_.cost.disk_write_bytes_per_second, config_.cost.disk_read_bytes_per_second);
    if (!config_.step_trace_path.empty()) {
      TRY_ASSIGN(step_trace_, StepTraceWriter::open(config_.step_trace_path));
    }
    const int64_t capacity = sched_->capacity_tokens();
    limit_ = config_.max_context > 0 ? std::min(config_.max_context, capacity) : capacity;
    loop_ = std::make_unique<StepLoop>(
        *sched_, device_, host_, *estimator_, res_.stats, config_.cost.kv_bytes_per_token,
        config_.interception_timeout_s, step_trace_.get(), config_.check_invariants);
    loop_->set_disk_mover(disk_.get());
    executor_ = std::make_unique<SimExecutor>(config_, limit_, res_.stats);
    res_.kv_cache_tokens = (int64_t)device_.n_blocks() * config_.block_size;
    res_.swap_space_tokens = (int64_t)host_.n_blocks() * config_.block_size;
    return ok_status();
  }

  // The event loop: arrivals and tool answers between steps, steps back to back while there
  // is work, idle ticks while only paused requests exist, until every request is done or
  // the hard stop.
  Status run() {
    const double hard_stop = config_.duration_s + config_.drain_s;
    SimStats& st = res_.stats;
    while (true) {
      admit_arrivals();
      deliver_tool_answers();
      if (t_ > hard_stop || (next_ >= trace_.size() && live_ == 0)) break;
      const bool busy = sched_->has_work();
      if (busy) {
        const int64_t before = st.steps + st.copy_only_steps;
        step();
        if (st.steps + st.copy_only_steps > before) continue;
        // Work is queued but nothing could run or move (a resumed request waits for device
        // blocks that only a tool answer will free): the real engine spins until something
        // changes; here time moves on as when idle.
      }
      // Idle until the next arrival or tool answer; with paused requests around the engine
      // wakes every idle_tick_s (expiry, time-driven policy decisions), as bench does.
      double wake = hard_stop;
      if (next_ < trace_.size()) wake = std::min(wake, trace_[next_].arrival_s);
      if (!resumes_.empty()) wake = std::min(wake, resumes_.top().at);
      if (disk_ != nullptr) wake = std::min(wake, disk_->next_done());  // a disk job ends
      if (!(wake > t_)) break;  // the hard stop, with nothing left to do before it
      if (busy && std::isinf(wake))
        return make_error("simulation stalled at t = ", std::to_string(t_),
                          " s: work is queued, nothing can run and no event is pending (a bug)");
      if (sched_->n_paused() == 0 && !busy) {
        t_ = wake;
        continue;
      }
      t_ = std::min(wake, t_ + config_.idle_tick_s);
      if (busy) continue;  // the next loop's step() is the engine's next try
      st.idle_ticks++;
      step();
    }
    return ok_status();
  }

  SimResult finish() {
    res_.end_time_s = t_;
    for (auto& r : reqs_)
      if (r && !r->record.completed) res_.records.push_back(r->record);  // unfinished
    res_.tools = estimator_->stats();
    res_.device_blocks_in_use = device_.n_held();  // idle cached blocks are the cache's
    res_.host_blocks_in_use = host_.n_held();
    return std::move(res_);
  }

  // StepRequests: a scripted request's segment count reached pauses it for the segment's
  // tool; its last token finishes it.
  TokenOutcome on_token(Sequence& s, int32_t, size_t, double end) override {
    SimRequest& r = *reqs_[(size_t)s.id];
    r.sampled_since_resume++;
    r.n_sampled++;
    if (!r.has_first_token) {
      r.has_first_token = true;
      r.record.first_token_s = end;
    }
    if (r.resumed_at >= 0.0) {
      res_.resume_ttft.add(r.resumed_kv, end - r.resumed_at);
      r.resumed_at = -1.0;
    }
    r.record.output_tokens++;
    if (r.n_sampled >= r.max_tokens || (int64_t)s.tokens.size() >= limit_)
      return TokenOutcome::finish();
    const Segment& sg = r.trace->segments[r.segment];
    if (sg.is_last() || r.sampled_since_resume < sg.generate_tokens) return TokenOutcome::go_on();
    InterceptionInfo info;
    info.tool = sg.tool;
    if (config_.hints) info.hint = sg.tool_seconds;
    return TokenOutcome::pause_for(std::move(info));
  }
  void on_paused(Sequence& s, double end) override {
    SimRequest& r = *reqs_[(size_t)s.id];
    const Segment& sg = r.trace->segments[r.segment];
    r.sampled_since_resume = 0;
    r.segment++;
    r.paused_at = end;
    resumes_.push({end + sg.tool_seconds, resume_order_++, (size_t)s.id});
  }
  void on_finished(Sequence& s, double end) override {
    SimRequest& r = *reqs_[(size_t)s.id];
    r.record.end_s = end;
    r.record.completed = true;
    res_.records.push_back(r.record);
    r.seq.tokens = {};  // an hour of traffic: only live requests keep their token vectors
    --live_;
  }

 private:
  void step() {
    t_ += loop_->step(t_, *executor_, *this).duration();
    if (config_.progress && ++steps_ % 1000 == 0)
      config_.progress(t_, (int64_t)res_.records.size());
  }

  bool with_content() const { return config_.prefix_cache || config_.shared_prefix_tokens > 0; }
  // Token content: `owner` 0 is the shared prefix, i + 1 request i's own tokens.
  static int32_t content_token(uint64_t owner, int64_t pos) {
    uint64_t h = owner * 0x9e3779b97f4a7c15ull + (uint64_t)pos * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    return 1 + (int32_t)(h % 30000);
  }

  // Arrivals whose time has come. As bench: a request that cannot fit the engine at all is
  // skipped, and so is one the engine would reject (a prompt as long as the limit, an empty
  // script).
  void admit_arrivals() {
    while (next_ < trace_.size() && trace_[next_].arrival_s <= t_) {
      const size_t i = next_++;
      const TraceRequest& tr = trace_[i];
      const int64_t prefix = config_.shared_prefix_tokens;
      if (final_context(tr) + prefix > limit_ - 1 || tr.prompt_tokens <= 0 || tr.segments.empty()) {
        ++res_.skipped;
        continue;
      }
      auto r = std::make_unique<SimRequest>();
      r->trace = &tr;
      r->max_tokens = generated(tr);
      r->seq.id = i;
      r->seq.arrival_time = t_;
      r->seq.n_prompt = tr.prompt_tokens + prefix;
      r->seq.tokens.reserve((size_t)(final_context(tr) + prefix));
      r->seq.tokens.assign((size_t)(tr.prompt_tokens + prefix), 0);
      if (with_content()) {
        for (int64_t k = 0; k < prefix; ++k) r->seq.tokens[(size_t)k] = content_token(0, k);
        for (int64_t k = prefix; k < tr.prompt_tokens + prefix; ++k)
          r->seq.tokens[(size_t)k] = content_token(i + 1, k);
      }
      r->record.id = tr.id;
      r->record.augmentation = tr.augmentation;
      r->record.arrival_s = tr.arrival_s;
      sched_->add(&r->seq);
      reqs_[i] = std::move(r);
      ++live_;
      ++res_.submitted;
    }
  }

  // Tools that have answered: their tokens are appended and the request queues again.
  void deliver_tool_answers() {
    while (!resumes_.empty() && resumes_.top().at <= t_) {
      const ResumeEvent ev = resumes_.top();
      resumes_.pop();
      SimRequest& r = *reqs_[ev.index];
      const Segment& sg = r.trace->segments[r.segment - 1];
      loop_->note_resume(r.seq, t_);
      r.resumed_kv = kv_place(r.seq, config_.block_size);
      std::vector<int32_t> returned((size_t)sg.return_tokens, 0);
      if (with_content())
        for (size_t k = 0; k < returned.size(); ++k)
          returned[k] = content_token(ev.index + 1, (int64_t)(r.seq.tokens.size() + k));
      sched_->resume(&r.seq, returned, t_);
      r.record.interception_s += t_ - r.paused_at;
      r.record.output_tokens += sg.return_tokens;
      r.resumed_at = t_;
    }
  }

  const SimConfig& config_;
  const std::vector<TraceRequest>& trace_;
  BlockAllocator device_, host_;
  std::unique_ptr<DurationEstimator> estimator_;
  std::unique_ptr<Policy> policy_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<StepTraceWriter> step_trace_;
  std::unique_ptr<ClockDiskMover> disk_;  // null without a disk tier
  std::unique_ptr<StepLoop> loop_;
  std::unique_ptr<SimExecutor> executor_;
  SimResult res_;
  int64_t limit_ = 0;
  // One slot per trace request; unique_ptr keeps each Sequence where the scheduler saw it.
  std::vector<std::unique_ptr<SimRequest>> reqs_;
  ResumeQueue resumes_;
  uint64_t resume_order_ = 0;  // ties in time resolve in the order the pauses happened
  size_t next_ = 0;            // the next trace request to arrive
  int64_t live_ = 0;           // admitted and not finished
  double t_ = 0.0;             // virtual time
  int64_t steps_ = 0;          // step() calls (the progress callback's pace)
};

}  // namespace

Result<SimResult> simulate(const SimConfig& config, const std::vector<TraceRequest>& trace) {
  const auto wall_start = std::chrono::steady_clock::now();
  TRY(validate(config, trace));
  SimRun run(config, trace);
  TRY(run.init());
  TRY(run.run());
  SimResult res = run.finish();
  res.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return res;
}

}  // namespace infercept
