// `infercept bench-forward`: the model's forward pass and the KV swap path timed on their
// own (no scheduler, no sampling), beside the hardware floors they are bound by:
//   - decode steps at several batch sizes over a fixed context, against the bytes floor
//     (weights + the batch's KV read once at the measured read bandwidth);
//   - a long prefill against the FLOP floor (at the measured GEMM rate);
//   - T_fwd(x) for one sequence of x query tokens, and the saturation point S;
//   - a chunk of x rows (--chunks) at the end of a sequence holding --context tokens: what a
//     resumed request's tool output or a recomputation's last piece costs;
//   - swap throughput (device <-> host pool) each way and both at once, and decode step time
//     while swapping at the engine's per-step budget and at both directions' full rate.
// Floors come from bench/cuda/floors (--floors FILE, JSON) measured in the same device call.
// --prefill-only times the prefill alone (no decode contexts, nothing after it): a run short
// enough to profile kernel by kernel (bench/gpu_run.sh ncup-SHAPE).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "cli/common.h"
#include "engine/model_group.h"
#include "kv/block_allocator.h"

namespace infercept::cli {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// "1,32,128" -> {1, 32, 128}; `name` is the flag's, for the error.
Result<std::vector<int64_t>> int_list(const std::string& s, const std::string& name) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string tok = s.substr(i, j - i);
    if (tok.empty() || tok.find_first_not_of("0123456789") != std::string::npos)
      return make_error(name, " wants comma-separated positive integers, got '", s, "'");
    out.push_back(std::stoll(tok));
    i = j + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Elements of one layer's weight matrices.
double layer_elems(const ModelConfig& c) {
  const double d = (double)c.d_model, q = (double)(c.n_heads * c.head_dim),
               kv = (double)(c.n_kv_heads * c.head_dim), f = (double)c.d_ff;
  return d * q + 2 * d * kv + q * d + 3 * d * f;
}
// Elements of the weight matrices, as the backend holds them (2 bytes per element on a GPU).
double weight_elems(const ModelConfig& c) {
  return (double)c.vocab_size * (double)c.d_model * (c.tied_embeddings ? 1.0 : 2.0) +
         layer_elems(c) * (double)c.n_layers;
}
// Elements a step of `rows` token rows must read: every layer's weights, the output
// projection (the whole of it even for one logit row) and the rows' embeddings; not the rest
// of an untied embedding table, which a step never touches (the bytes floors up to PERF 4.5p
// counted all of it: 0.06 ms of the 7B's 3.1, 0.23 of the 8B's 3.6).
double step_weight_elems(const ModelConfig& c, int64_t rows) {
  const double d = (double)c.d_model;
  return layer_elems(c) * (double)c.n_layers + (double)c.vocab_size * d +
         (c.tied_embeddings ? 0.0 : (double)rows * d);
}
// Matmul FLOPs per token (the embedding lookup is not a matmul).
double matmul_flops_per_token(const ModelConfig& c) {
  const double d = (double)c.d_model;
  return 2.0 * (weight_elems(c) - (double)c.vocab_size * d * (c.tied_embeddings ? 0.0 : 1.0));
}

struct Floors {
  // copy_gbps: cudaMemcpy device to device, bytes read + written a second (the "copy
  // bandwidth" issue 4 states its bytes floor in); read_gbps, a read-only kernel's rate, is
  // the stricter floor the tables use first.
  double read_gbps = 0, copy_gbps = 0, gemm_tflops = 0, h2d_gbps = 0, d2h_gbps = 0, both_gbps = 0;
  bool present = false;
};

Floors load_floors(const std::string& path) {
  Floors f;
  std::ifstream in(path);
  if (!in) return f;
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return f;
  for (auto& r : j.value("d2d", nlohmann::json::array())) {
    const std::string name = r.value("name", "");
    if (name.find("read-only") != std::string::npos) f.read_gbps = r.value("gbps_payload", 0.0);
    if (name.find("cudaMemcpyAsync D2D") != std::string::npos) f.copy_gbps = r.value("gbps", 0.0);
  }
  for (auto& r : j.value("gemm", nlohmann::json::array()))
    f.gemm_tflops = std::max(f.gemm_tflops, r.value("tflops_best", 0.0));
  for (auto& r : j.value("host", nlohmann::json::array())) {
    const std::string n = r.value("name", "");
    if (n == "H2D 256 MiB") f.h2d_gbps = r.value("gbps", 0.0);
    if (n == "D2H 256 MiB") f.d2h_gbps = r.value("gbps", 0.0);
    if (n.find("at once") != std::string::npos) f.both_gbps = r.value("gbps", 0.0);
  }
  f.present = f.read_gbps > 0 && f.gemm_tflops > 0;
  return f;
}

struct BenchForwardFlags {
  EngineFlags engine;
  std::string batches = "1,32,128", tfwd = "1,2,4,8,16,32,64,128,256,512,1024,2048,4096",
              chunks = "2,8,32,128,512", mixed, floors, json_out;
  int64_t context = 1024, prefill = 4096, repeats = 10, swap_blocks = 256, swap_batch = 64;
  bool prefill_only = false;
};

void add_bench_forward_flags(CLI::App& app, BenchForwardFlags& f) {
  app.add_option("--batches", f.batches, "decode batch sizes (comma-separated)");
  app.add_option("--context", f.context, "cached tokens each decode row reads");
  app.add_option("--mixed", f.mixed,
                 "batch sizes of decode steps with one long row and the rest short (none)");
  app.add_option("--prefill", f.prefill, "tokens of the timed prefill");
  app.add_option("--tfwd", f.tfwd, "x of T_fwd(x) (comma-separated)");
  app.add_option("--chunks", f.chunks, "rows of chunks over --context cached tokens");
  app.add_option("--repeats", f.repeats, "timed runs of each case (the median is reported)");
  app.add_option("--swap-blocks", f.swap_blocks, "KV blocks per direction in the swap tests");
  app.add_option("--swap-batch", f.swap_batch, "decode batch of the swap-while-decoding test");
  app.add_option("--floors", f.floors, "hardware floors, JSON from bench/cuda/floors");
  app.add_option("--json-out", f.json_out, "also write the results as JSON to this file");
  app.add_flag("--prefill-only", f.prefill_only, "time the prefill alone");
  add_engine_flags(app, f.engine);
}

// The measured sizes, checked.
struct Plan {
  std::vector<int64_t> batches, tfwd, chunks, mixed;
  int64_t context = 0, prefill = 0, repeats = 0, swap_blocks = 0, swap_batch = 0;
  bool prefill_only = false;
};

Result<Plan> plan_from(const BenchForwardFlags& f) {
  Plan p;
  TRY_ASSIGN(p.batches, int_list(f.batches, "--batches"));
  TRY_ASSIGN(p.tfwd, int_list(f.tfwd, "--tfwd"));
  TRY_ASSIGN(p.chunks, int_list(f.chunks, "--chunks"));
  TRY_ASSIGN(p.mixed, int_list(f.mixed, "--mixed"));
  p.context = f.context;
  p.prefill = f.prefill;
  p.repeats = f.repeats;
  p.swap_blocks = f.swap_blocks;
  p.swap_batch = f.swap_batch;
  p.prefill_only = f.prefill_only;
  if (p.batches.empty() || p.tfwd.empty() || p.context < 1 || p.prefill < 1 || p.repeats < 1 ||
      p.swap_blocks < 1)
    return make_error(
        "--batches, --tfwd, --context, --prefill, --repeats and --swap-blocks must be positive");
  return p;
}

// The forward pass and the swap path timed on their own: the model, its KV (the decode
// contexts, then --swap-blocks blocks to copy) and a host pool, and one method per table.
// Each table is printed as Markdown and added to the JSON record.
class ForwardBench {
 public:
  static Result<std::unique_ptr<ForwardBench>> create(const EngineConfig& cfg, const Plan& plan,
                                                      const Floors& floors) {
    auto b = std::unique_ptr<ForwardBench>(new ForwardBench(cfg, plan, floors));
    TRY(b->load());
    return b;
  }

  void fill_decode_contexts();
  void decode_table();
  void mixed_decode_table();
  void prefill_table();
  void tfwd_table();
  void chunk_table();
  void swap_tables();
  Status write_json(const std::string& path) const;

 private:
  ForwardBench(const EngineConfig& cfg, const Plan& plan, const Floors& floors)
      : cfg_(cfg), plan_(plan), floors_(floors), bs_(cfg.block_size) {}

  Status load();
  void sync_all();
  // The device blocks `dev` out to the host pool's `host` and/or back, on every rank (each its
  // share of the KV heads, on its own copy engines), queued as the engine queues a swap.
  void copy_on_every_rank(const std::vector<int32_t>& dev, const std::vector<int32_t>& host,
                          bool out_dir, bool in_dir);
  StepInput one_sequence(int64_t x);
  StepInput decode_input(int64_t batch, int64_t short_context = 0);
  void run_step(StepInput& in, bool device_argmax, bool device_topp);
  double time_forward(StepInput& in, bool with_logits, bool device_argmax = false,
                      bool device_topp = false);
  double time_copy(bool out_dir, bool in_dir);
  void swap_during_decode(double t_out, double t_in, double t_both);
  struct StepWhileCopying {
    double step_s, queue_s;  // medians: the whole step, and the host's share queueing copies
  };
  StepWhileCopying time_step_while_copying(StepInput& in, bool device_argmax, int64_t blocks,
                                           bool out_dir, bool in_dir);
  // Reading `bytes` once at the measured read rate, in ms (0 without floors).
  double bytes_floor_ms(double bytes) const {
    return floors_.read_gbps > 0 ? bytes / (floors_.read_gbps * 1e9) * 1e3 : 0.0;
  }

  const EngineConfig cfg_;
  const Plan plan_;
  const Floors floors_;
  const int64_t bs_;
  std::unique_ptr<ModelSource> src_;
  // One rank's share of the model (== the model's config without tensor parallelism): what
  // one backend reads and computes a step, so the floors are a rank's.
  ModelConfig mc_;
  ModelGroup group_;
  Backend* backend_ = nullptr;  // rank 0's: sampling, and what the tables name
  StepModel* model_ = nullptr;
  // Each rank's device KV and host pool; kv_ and host_ are rank 0's.
  std::vector<RankKv> rank_kv_;
  KvStorage* kv_ = nullptr;
  KvStorage* host_ = nullptr;
  KvGeometry g_;
  int64_t max_batch_ = 0, max_rows_ = 0, ctx_blocks_ = 0;
  double kv_per_token_ = 0.0;
  bool can_argmax_ = false;
  std::mt19937 rng_{7};
  std::uniform_int_distribution<int32_t> tok_;
  std::vector<float> logits_;
  std::vector<int32_t> sampled_;
  // Rows drawn on the device with temperature 0.8 and top_p 0.9.
  std::vector<DeviceSampleRow> topp_rows_;
  std::vector<int32_t> swap_dev_ids_, swap_host_ids_;
  nlohmann::json out_;
};

Status ForwardBench::load() {
  TRY_ASSIGN(src_, open_model_source(cfg_.model_path));
  max_batch_ =
      std::max(*std::max_element(plan_.batches.begin(), plan_.batches.end()), plan_.swap_batch);
  for (int64_t b : plan_.mixed) max_batch_ = std::max(max_batch_, b);
  max_rows_ = std::max(
      {plan_.prefill, *std::max_element(plan_.tfwd.begin(), plan_.tfwd.end()), max_batch_});
  std::fprintf(stderr, "loading %s on %s x %d ...\n", cfg_.model_path.c_str(), cfg_.device.c_str(),
               cfg_.tensor_parallel_size);
  auto t_load = clock_type::now();
  TRY_ASSIGN(group_, create_model_group(cfg_, *src_, max_rows_, max_batch_));
  model_ = group_.model.get();
  backend_ = group_.backends[0].get();
  Backend& be = *backend_;
  mc_ = model_->shard_config();
  std::fprintf(stderr, "loaded in %.1f s\n", since(t_load));

  // Sequence s of a decode batch owns blocks [s * ctx_blocks, (s + 1) * ctx_blocks); the
  // last swap_blocks blocks are what the swap tests copy.
  ctx_blocks_ = BlockTable::blocks_for(plan_.context + 1, bs_);
  g_ = rank_kv_geometry(*model_, bs_, cfg_.kv_dtype,
                        std::max(max_batch_ * ctx_blocks_, BlockTable::blocks_for(max_rows_, bs_)) +
                            plan_.swap_blocks);
  TRY_ASSIGN(rank_kv_, create_rank_kv(group_.ranks(), group_.group, g_, plan_.swap_blocks));
  kv_ = rank_kv_[0].kv.get();
  host_ = rank_kv_[0].host.get();
  kv_per_token_ = (double)g_.bytes_per_block_per_layer() * 2.0 * (double)g_.n_layers / (double)bs_;
  const int64_t nb = plan_.swap_blocks;
  swap_dev_ids_.resize((size_t)nb);
  swap_host_ids_.resize((size_t)nb);
  std::iota(swap_dev_ids_.begin(), swap_dev_ids_.end(), (int32_t)(g_.n_blocks - nb));
  std::iota(swap_host_ids_.begin(), swap_host_ids_.end(), 0);

  can_argmax_ = be.greedy_on_device();
  tok_ = std::uniform_int_distribution<int32_t>(0, (int32_t)mc_.vocab_size - 1);
  logits_.resize((size_t)(max_batch_ * mc_.vocab_size));
  sampled_.resize((size_t)max_batch_);
  topp_rows_.assign((size_t)max_batch_, DeviceSampleRow{0, 1.0f / 0.8f, 0, 0.9f, 0.0f, 0.5f});
  out_["model"] = cfg_.model_path;
  out_["device"] = be.name();
  out_["tensor_parallel_size"] = group_.world();
  out_["layers"] = mc_.n_layers;
  out_["weights_gb"] = weight_elems(mc_) * 2 / 1e9;  // a rank's
  out_["kv_bytes_per_token"] = kv_per_token_;
  out_["floors"] = {{"read_gbps", floors_.read_gbps},     {"copy_gbps", floors_.copy_gbps},
                    {"gemm_tflops", floors_.gemm_tflops}, {"h2d_gbps", floors_.h2d_gbps},
                    {"d2h_gbps", floors_.d2h_gbps},       {"both_gbps", floors_.both_gbps}};
  return ok_status();
}

// A GPU rank's ops from this thread go to its device once it is bound (Backend::bind_thread);
// rank 0 is bound again afterwards, as the model's forward expects.
void ForwardBench::sync_all() {
  for (size_t r = group_.backends.size(); r-- > 0;) {
    group_.backends[r]->bind_thread();
    group_.backends[r]->sync();
  }
}

void ForwardBench::copy_on_every_rank(const std::vector<int32_t>& dev,
                                      const std::vector<int32_t>& host, bool out_dir, bool in_dir) {
  for (size_t r = group_.backends.size(); r-- > 0;) {
    Backend& be = *group_.backends[r];
    be.bind_thread();
    if (out_dir) be.copy_blocks_between(*rank_kv_[r].kv, *rank_kv_[r].host, dev, host);
    if (in_dir) be.copy_blocks_between(*rank_kv_[r].host, *rank_kv_[r].kv, host, dev);
  }
}

// Fills the decode contexts: --context random tokens for the first of the largest batch's
// sequences, in prefill steps of at most max_rows tokens, and copies of its blocks for the
// others. A decode step reads the same bytes whatever they hold, and prefilling each row
// would cost minutes at 128k contexts (attention grows with the square of the context).
void ForwardBench::fill_decode_contexts() {
  std::fprintf(stderr, "prefilling 1 x %lld tokens of context, copied to %lld more rows\n",
               (long long)plan_.context, (long long)(max_batch_ - 1));
  StepInput in;
  for (int64_t p0 = 0; p0 < plan_.context; p0 += max_rows_) {
    const int64_t n = std::min(max_rows_, plan_.context - p0);
    in.clear();
    in.q_start.push_back(0);
    in.q_len.push_back((int32_t)n);
    in.ctx_len.push_back((int32_t)(p0 + n));
    for (int64_t p = p0; p < p0 + n; ++p) {
      in.tokens.push_back(tok_(rng_));
      in.positions.push_back((int32_t)p);
      in.slots.push_back((int32_t)p);
    }
    in.max_blocks = (int32_t)ctx_blocks_;
    for (int64_t b = 0; b < ctx_blocks_; ++b) in.block_tables.push_back((int32_t)b);
    model_->forward(in, *kv_, logits_.data());
  }
  std::vector<int32_t> src, dst;
  for (int64_t s = 1; s < max_batch_; ++s)
    for (int64_t b = 0; b < ctx_blocks_; ++b) {
      src.push_back((int32_t)b);
      dst.push_back((int32_t)(s * ctx_blocks_ + b));
    }
  for (size_t r = group_.backends.size(); r-- > 0;) {
    group_.backends[r]->bind_thread();
    group_.backends[r]->copy_blocks(*rank_kv_[r].kv, src, dst);
  }
  sync_all();
}

// One sequence of x fresh query tokens from position 0, its last row's logits wanted.
StepInput ForwardBench::one_sequence(int64_t x) {
  StepInput in;
  in.q_start = {0};
  in.q_len = {(int32_t)x};
  in.ctx_len = {(int32_t)x};
  in.max_blocks = (int32_t)BlockTable::blocks_for(x, bs_);
  for (int64_t p = 0; p < x; ++p) {
    in.tokens.push_back(tok_(rng_));
    in.positions.push_back((int32_t)p);
    in.slots.push_back((int32_t)p);
  }
  for (int32_t b = 0; b < in.max_blocks; ++b) in.block_tables.push_back(b);
  in.logit_rows = {(int32_t)x - 1};
  return in;
}

// A decode step of `batch` rows over the filled contexts. `short_context` > 0: every sequence
// but the first reads only that many cached tokens (the first reads them all), as decode
// batches of agents at different depths do.
StepInput ForwardBench::decode_input(int64_t batch, int64_t short_context) {
  StepInput in;
  in.max_blocks = (int32_t)ctx_blocks_;
  for (int64_t s = 0; s < batch; ++s) {
    const int64_t p = s > 0 && short_context > 0 ? short_context : plan_.context;
    in.q_start.push_back((int32_t)s);
    in.q_len.push_back(1);
    in.ctx_len.push_back((int32_t)(p + 1));
    in.tokens.push_back(tok_(rng_));
    in.positions.push_back((int32_t)p);
    in.slots.push_back((int32_t)((s * ctx_blocks_ + p / bs_) * bs_ + p % bs_));
    for (int64_t b = 0; b < ctx_blocks_; ++b)
      in.block_tables.push_back((int32_t)(s * ctx_blocks_ + b));
    in.logit_rows.push_back((int32_t)s);
  }
  return in;
}

// One step: the forward pass, its tokens drawn as asked, then a wait for the device.
// device_argmax: the logits stay on the device and only the greedy token ids come back (what
// the engine does for plain greedy batches); device_topp: the tokens drawn on the device with
// temperature 0.8 and top_p 0.9; neither: the logits go to the host.
void ForwardBench::run_step(StepInput& in, bool device_argmax, bool device_topp) {
  Backend& be = *backend_;
  const bool on_device = device_argmax || device_topp;
  model_->forward(in, *kv_, on_device ? nullptr : logits_.data());
  const int64_t nl = (int64_t)in.logit_rows.size();
  if (device_argmax) CHECK(be.argmax_rows(model_->last_logits(nl), sampled_.data()));
  if (device_topp)
    CHECK(be.sample_rows(model_->last_logits(nl), std::span(topp_rows_).first((size_t)nl),
                         sampled_.data()));
  sync_all();
}

// The median of --repeats steps after three warm-up steps.
double ForwardBench::time_forward(StepInput& in, bool with_logits, bool device_argmax,
                                  bool device_topp) {
  if (!with_logits && !device_argmax && !device_topp) in.logit_rows.clear();
  for (int w = 0; w < 3; ++w) run_step(in, device_argmax, device_topp);
  std::vector<double> ts;
  for (int64_t r = 0; r < plan_.repeats; ++r) {
    const auto t = clock_type::now();
    run_step(in, device_argmax, device_topp);
    ts.push_back(since(t));
  }
  return median(ts);
}

void ForwardBench::decode_table() {
  const std::string ranks =
      group_.world() > 1 ? " x " + std::to_string(group_.world()) + " ranks, floors per rank" : "";
  std::printf("\n### Decode step, context %lld (%s, %s%s)\n\n", (long long)plan_.context,
              cfg_.model_path.c_str(), backend_->name().c_str(), ranks.c_str());
  std::printf(
      "| batch | step ms (no logits) | step ms (with logits to host) | with greedy on device | "
      "with top-p on device | bytes floor ms | x floor (whole step) | x floor at copy bandwidth "
      "| tokens/s |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t b : plan_.batches) {
    StepInput in = decode_input(b);
    const double t_nolog = time_forward(in, false);
    in = decode_input(b);
    const double t_log = time_forward(in, true);
    in = decode_input(b);
    const double t_dev = can_argmax_ ? time_forward(in, false, true) : 0.0;
    in = decode_input(b);
    const double t_topp =
        backend_->samples_on_device() ? time_forward(in, false, false, true) : 0.0;
    const double bytes =
        step_weight_elems(mc_, b) * 2.0 + (double)b * (double)(plan_.context + 1) * kv_per_token_;
    const double floor_ms = bytes_floor_ms(bytes);
    // The whole step (the next token picked, on the device where it can be) against the floor:
    // the "no logits" column skips the output projection, which the floor counts.
    const double t_best = can_argmax_ ? t_dev : t_log;
    const double copy_floor_ms =
        floors_.copy_gbps > 0 ? bytes / (floors_.copy_gbps * 1e9) * 1e3 : 0;
    std::printf("| %lld | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.3f | %.0f |\n", (long long)b,
                t_nolog * 1e3, t_log * 1e3, t_dev * 1e3, t_topp * 1e3, floor_ms,
                floor_ms > 0 ? t_best * 1e3 / floor_ms : 0.0,
                copy_floor_ms > 0 ? t_best * 1e3 / copy_floor_ms : 0.0, (double)b / t_best);
    out_["decode"].push_back(
        {{"batch", b},
         {"context", plan_.context},
         {"ms", t_nolog * 1e3},
         {"ms_with_logits", t_log * 1e3},
         {"ms_greedy_on_device", t_dev * 1e3},
         {"ms_top_p_on_device", t_topp * 1e3},
         {"floor_ms", floor_ms},
         {"x_floor_whole_step", floor_ms > 0 ? t_best * 1e3 / floor_ms : 0.0},
         {"copy_floor_ms", copy_floor_ms},
         {"x_copy_floor_whole_step", copy_floor_ms > 0 ? t_best * 1e3 / copy_floor_ms : 0.0},
         {"bytes", bytes}});
  }
}

// One sequence over --context tokens beside batch - 1 over an eighth of it: a long decode row
// beside short ones in the attention planner's split (docs/DESIGN.md, "The CUDA backend").
void ForwardBench::mixed_decode_table() {
  if (plan_.mixed.empty()) return;
  const int64_t short_context = std::max<int64_t>(1, plan_.context / 8);
  std::printf(
      "\n### Decode step, one sequence over %lld tokens and the rest over %lld\n\n| batch | "
      "step ms (greedy on device) | bytes floor ms | x floor |\n|---:|---:|---:|---:|\n",
      (long long)plan_.context, (long long)short_context);
  for (int64_t b : plan_.mixed) {
    StepInput in = decode_input(b, short_context);
    const double t = time_forward(in, !can_argmax_, can_argmax_);
    const double tokens =
        (double)(plan_.context + 1) + (double)(b - 1) * (double)(short_context + 1);
    const double bytes = step_weight_elems(mc_, b) * 2.0 + tokens * kv_per_token_;
    const double floor_ms = bytes_floor_ms(bytes);
    std::printf("| %lld | %.3f | %.3f | %.2f |\n", (long long)b, t * 1e3, floor_ms,
                floor_ms > 0 ? t * 1e3 / floor_ms : 0.0);
    out_["decode_mixed"].push_back({{"batch", b},
                                    {"context", plan_.context},
                                    {"short_context", short_context},
                                    {"ms", t * 1e3},
                                    {"floor_ms", floor_ms}});
  }
}

// A long prefill against the FLOP floor (at the measured GEMM rate).
void ForwardBench::prefill_table() {
  const int64_t n = plan_.prefill;
  StepInput in = one_sequence(n);
  const double t = time_forward(in, true);
  const double attn_flops = 4.0 * (double)mc_.n_heads * (double)mc_.head_dim * (double)n *
                            (double)(n + 1) / 2.0 * (double)mc_.n_layers;
  const double flops = matmul_flops_per_token(mc_) * (double)n + attn_flops;
  const double floor_ms =
      floors_.gemm_tflops > 0 ? flops / (floors_.gemm_tflops * 1e12) * 1e3 : 0.0;
  std::printf(
      "\n### Prefill of %lld tokens\n\n| ms | TFLOP/s | FLOP floor ms (at %.0f TFLOP/s) | share "
      "of GEMM rate |\n|---:|---:|---:|---:|\n",
      (long long)n, floors_.gemm_tflops);
  std::printf("| %.2f | %.1f | %.2f | %.0f%% |\n", t * 1e3, flops / t / 1e12, floor_ms,
              floor_ms > 0 ? 100.0 * floor_ms / (t * 1e3) : 0.0);
  out_["prefill"] = {{"tokens", n},
                     {"ms", t * 1e3},
                     {"tflops", flops / t / 1e12},
                     {"floor_ms", floor_ms},
                     {"flops", flops}};
}

// T_fwd(x) for one sequence of x query tokens, and the saturation point S.
void ForwardBench::tfwd_table() {
  CostModel cost;
  std::printf(
      "\n### T_fwd(x): one sequence of x query tokens\n\n| x | ms | us per token "
      "|\n|---:|---:|---:|\n");
  for (int64_t x : plan_.tfwd) {
    if (x > max_rows_) continue;
    StepInput in = one_sequence(x);
    const double t = time_forward(in, true);
    cost.t_fwd_samples.emplace_back(x, t);
    std::printf("| %lld | %.3f | %.1f |\n", (long long)x, t * 1e3, t * 1e6 / (double)x);
    out_["t_fwd"].push_back({{"x", x}, {"ms", t * 1e3}});
  }
  const int64_t S = cost.derive_saturation();
  std::printf(
      "\nsaturation point S = %lld tokens (T_fwd flat: at most +20%% per doubling of x, +44%% in "
      "all)\n",
      (long long)S);
  out_["saturation_tokens"] = S;
}

// x query rows at the end of a sequence holding `context` tokens (sequence 0's filled
// context, recomputed in place): what a resumed request's tool output or the last piece of
// a recomputation costs (the decode table's batch-1 row is one row over the same context).
void ForwardBench::chunk_table() {
  const int64_t context = plan_.context;
  std::printf(
      "\n### A chunk of x rows over a context of %lld tokens (one sequence)\n\n| x | ms | bytes "
      "floor ms | x floor | FLOP floor ms (at %.0f TFLOP/s) | share of GEMM rate "
      "|\n|---:|---:|---:|---:|---:|---:|\n",
      (long long)context, floors_.gemm_tflops);
  for (int64_t x : plan_.chunks) {
    if (x > context || x > max_rows_) continue;
    StepInput in;
    in.q_start = {0};
    in.q_len = {(int32_t)x};
    in.ctx_len = {(int32_t)context};
    in.max_blocks = (int32_t)ctx_blocks_;
    for (int64_t p = context - x; p < context; ++p) {
      in.tokens.push_back(tok_(rng_));
      in.positions.push_back((int32_t)p);
      in.slots.push_back((int32_t)((p / bs_) * bs_ + p % bs_));
    }
    for (int64_t b = 0; b < ctx_blocks_; ++b) in.block_tables.push_back((int32_t)b);
    in.logit_rows = {(int32_t)x - 1};
    const double t = time_forward(in, true);
    const double bytes = step_weight_elems(mc_, x) * 2.0 + (double)context * kv_per_token_;
    const double floor_ms = bytes_floor_ms(bytes);
    // Row p of the chunk (0-based position) attends to p + 1 keys: QK^T and PV, 2 FLOPs a
    // multiply-add each, over every query head; the rows' positions run context - x .. context - 1.
    const double keys = (double)x * (double)(2 * context - x + 1) / 2.0;
    const double flops = matmul_flops_per_token(mc_) * (double)x + 4.0 * (double)mc_.n_heads *
                                                                       (double)mc_.head_dim * keys *
                                                                       (double)mc_.n_layers;
    const double flop_floor_ms =
        floors_.gemm_tflops > 0 ? flops / (floors_.gemm_tflops * 1e12) * 1e3 : 0.0;
    std::printf("| %lld | %.3f | %.3f | %.2f | %.3f | %.0f%% |\n", (long long)x, t * 1e3, floor_ms,
                floor_ms > 0 ? t * 1e3 / floor_ms : 0.0, flop_floor_ms,
                100.0 * flop_floor_ms / (t * 1e3));
    out_["chunks"].push_back({{"x", x},
                              {"context", context},
                              {"ms", t * 1e3},
                              {"floor_ms", floor_ms},
                              {"flop_floor_ms", flop_floor_ms},
                              {"flops", flops}});
  }
}

// The median time to copy the swap blocks out, in, or both at once.
double ForwardBench::time_copy(bool out_dir, bool in_dir) {
  std::vector<double> ts;
  for (int64_t r = 0; r < plan_.repeats + 2; ++r) {
    sync_all();
    const auto t = clock_type::now();
    copy_on_every_rank(swap_dev_ids_, swap_host_ids_, out_dir, in_dir);
    sync_all();
    if (r >= 2) ts.push_back(since(t));
  }
  return median(ts);
}

// Swap throughput (device <-> host pool) each way and both at once, then decode while
// swapping.
void ForwardBench::swap_tables() {
  const int64_t nb = plan_.swap_blocks;
  const double swap_bytes = (double)nb * (double)bs_ * kv_per_token_;
  const double t_out = time_copy(true, false), t_in = time_copy(false, true),
               t_both = time_copy(true, true);
  std::printf(
      "\n### Swap, %lld blocks (%.1f MB) per direction\n\n| direction | ms | GB/s | floor GB/s | "
      "share |\n|---|---:|---:|---:|---:|\n",
      (long long)nb, swap_bytes / 1e6);
  auto row = [&](const char* name, double t, double bytes, double fl) {
    std::printf("| %s | %.3f | %.1f | %.1f | %.0f%% |\n", name, t * 1e3, bytes / t / 1e9, fl,
                fl > 0 ? 100.0 * bytes / t / 1e9 / fl : 0.0);
    out_["swap"].push_back(
        {{"direction", name}, {"ms", t * 1e3}, {"gbps", bytes / t / 1e9}, {"floor_gbps", fl}});
  };
  row("out (device to host)", t_out, swap_bytes, floors_.d2h_gbps);
  row("in (host to device)", t_in, swap_bytes, floors_.h2d_gbps);
  row("both at once", t_both, 2 * swap_bytes, floors_.both_gbps);
  swap_during_decode(t_out, t_in, t_both);
}

// A step with `blocks` of the swap blocks copied out and/or in, issued before it the way the
// engine does; three warm-up steps, then the median of --repeats.
ForwardBench::StepWhileCopying ForwardBench::time_step_while_copying(StepInput& in,
                                                                     bool device_argmax,
                                                                     int64_t blocks, bool out_dir,
                                                                     bool in_dir) {
  std::vector<int32_t> d(swap_dev_ids_.begin(), swap_dev_ids_.begin() + blocks),
      h(swap_host_ids_.begin(), swap_host_ids_.begin() + blocks);
  std::vector<double> ts, enqueue;
  for (int64_t r = 0; r < plan_.repeats + 3; ++r) {
    const auto t = clock_type::now();
    copy_on_every_rank(d, h, out_dir, in_dir);
    // Host time to queue the copies: it delays the step's launch one for one.
    const double queued = since(t);
    run_step(in, device_argmax, false);
    if (r >= 3) {
      ts.push_back(since(t));
      enqueue.push_back(queued);
    }
  }
  return {median(ts), median(enqueue)};
}

// Decode at --swap-batch while swapping, issued before each step the way the engine does
// (blocks outside the decode contexts), at two rates:
//  - the engine's budget: the scheduler lets a step move at most T_step x the one-way copy
//    bandwidth of KV in all, out and in together (Scheduler::apply_policy, the profiler's
//    swap_bytes_per_second); here half of it each way;
//  - both directions at full rate: nb blocks each way take t_both, so the step's share
//    each way is what the copy engines can move under it at most (twice the budget).
// For two kinds of step: the logits to the host (what a request for log-probabilities
// needs; its device-to-host copy shares the link with the swap-outs), and the greedy
// tokens drawn on the device (what the engine runs for greedy and top-p batches), each
// with the budget its own step time gives.
void ForwardBench::swap_during_decode(double t_out, double t_in, double t_both) {
  const int64_t b = plan_.swap_batch, nb = plan_.swap_blocks;
  std::printf(
      "\n### Decode at batch %lld while swapping\n\n"
      "| step | step alone ms | copies per step | blocks each way | MB each way | step ms "
      "swapping | growth | host ms queueing copies |\n"
      "|---|---:|---|---:|---:|---:|---:|---:|\n",
      (long long)b);
  out_["swap_during_decode"] = nlohmann::json::array();
  struct Step {
    const char* name;
    bool device_argmax;  // else the logits go to the host
  };
  std::vector<Step> steps{{"logits to host", false}};
  if (can_argmax_) steps.push_back({"greedy on device", true});
  const double t_one_way = std::max(t_out, t_in);
  for (const Step& step : steps) {
    StepInput in = decode_input(b);
    const double base = time_forward(in, !step.device_argmax, step.device_argmax);
    const int64_t engine_each =
        std::clamp<int64_t>((int64_t)((double)nb * base / t_one_way / 2.0), 1, nb);
    const int64_t full_each = std::clamp<int64_t>((int64_t)((double)nb * base / t_both), 1, nb);
    struct Row {
      const char* name;
      int64_t blocks;
      bool out_dir, in_dir;
    };
    for (const Row& row :
         {Row{"engine budget, half each way", engine_each, true, true},
          Row{"the same, out only", engine_each, true, false},
          Row{"the same, in only", engine_each, false, true},
          Row{"half the engine budget", std::max<int64_t>(1, engine_each / 2), true, true},
          Row{"both ways at full rate", full_each, true, true}}) {
      const int64_t budget = row.blocks;
      const auto [with, queued] =
          time_step_while_copying(in, step.device_argmax, budget, row.out_dir, row.in_dir);
      std::printf("| %s | %.3f | %s | %lld | %.1f | %.3f | %+.1f%% | %.3f |\n", step.name,
                  base * 1e3, row.name, (long long)budget,
                  (double)budget * bs_ * kv_per_token_ / 1e6, with * 1e3,
                  100.0 * (with / base - 1.0), queued * 1e3);
      out_["swap_during_decode"].push_back({{"step", step.name},
                                            {"copies", row.name},
                                            {"batch", b},
                                            {"blocks_each_way", budget},
                                            {"ms_alone", base * 1e3},
                                            {"ms_swapping", with * 1e3},
                                            {"ms_queueing_copies", queued * 1e3}});
    }
  }
}

Status ForwardBench::write_json(const std::string& path) const {
  if (path.empty()) return ok_status();
  std::ofstream f(path);
  f << out_.dump(2) << "\n";
  if (!f) return make_error("cannot write '", path, "'");
  return ok_status();
}

}  // namespace

int run_bench_forward(int argc, char** argv) {
  CLI::App app{
      "Times the model's forward pass and the KV swap path on their own (no scheduler, "
      "no sampling) beside the hardware floors they are bound by.",
      "infercept bench-forward"};
  set_up_app(app, "infercept bench-forward --device cuda --model DIR --floors floors.json");
  BenchForwardFlags f;
  add_bench_forward_flags(app, f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto cfg = engine_config_from(f.engine);
  if (!cfg.ok()) return fail(cfg.error());
  auto plan = plan_from(f);
  if (!plan.ok()) return fail(plan.error());
  auto bench = ForwardBench::create(*cfg, *plan, load_floors(f.floors));
  if (!bench.ok()) return fail(bench.error());
  ForwardBench& b = **bench;
  if (!plan->prefill_only) {
    b.fill_decode_contexts();
    b.decode_table();
    b.mixed_decode_table();
  }
  b.prefill_table();
  if (!plan->prefill_only) {
    b.tfwd_table();
    b.chunk_table();
    b.swap_tables();
  }
  if (Status st = b.write_json(f.json_out); !st.ok()) return fail(st.error());
  return 0;
}

}  // namespace infercept::cli
