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
#include "kv/block_allocator.h"

namespace infercept::cli {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

Result<std::vector<int64_t>> int_list(const Args& a, const std::string& name,
                                      const std::string& fallback) {
  std::vector<int64_t> out;
  const std::string s = a.get(name, fallback);
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string tok = s.substr(i, j - i);
    if (tok.empty() || tok.find_first_not_of("0123456789") != std::string::npos)
      return make_error("--", name, " wants comma-separated positive integers, got '", s, "'");
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

}  // namespace

int run_bench_forward(int argc, char** argv) {
  auto args = Args::parse(argc, argv,
                          merge({kEngineFlags,
                                 {"batches", "context", "prefill", "tfwd", "repeats", "swap-blocks",
                                  "floors", "json-out", "swap-batch", "chunks", "mixed"}}),
                          {"prefill-only"});
  if (!args.ok()) return fail(args.error());
  const bool prefill_only = args->flag("prefill-only");
  auto cfg = engine_config_from(*args);
  if (!cfg.ok()) return fail(cfg.error());
  auto batches = int_list(*args, "batches", "1,32,128");
  auto tfwd = int_list(*args, "tfwd", "1,2,4,8,16,32,64,128,256,512,1024,2048,4096");
  auto chunks = int_list(*args, "chunks", "2,8,32,128,512");
  auto mixed = int_list(*args, "mixed", "");
  auto context = args->get_int("context", 1024);
  auto prefill = args->get_int("prefill", 4096);
  auto repeats = args->get_int("repeats", 10);
  auto swap_blocks = args->get_int("swap-blocks", 256);
  auto swap_batch = args->get_int("swap-batch", 64);
  for (auto* r : {&batches, &tfwd, &chunks, &mixed})
    if (!r->ok()) return fail(r->error());
  for (auto* r : {&context, &prefill, &repeats, &swap_blocks, &swap_batch})
    if (!r->ok()) return fail(r->error());
  if (batches->empty() || *context < 1 || *prefill < 1 || *repeats < 1 || *swap_blocks < 1)
    return fail(
        Error{"--batches, --context, --prefill, --repeats and --swap-blocks must be positive"});
  const Floors floors = load_floors(args->get("floors", ""));
  // Reading `bytes` once at the measured read rate, in ms (0 without floors).
  auto bytes_floor_ms = [&](double bytes) {
    return floors.read_gbps > 0 ? bytes / (floors.read_gbps * 1e9) * 1e3 : 0.0;
  };

  auto src = open_model_source(cfg->model_path);
  if (!src.ok()) return fail(src.error());
  const ModelConfig& mc = (*src)->config();
  auto backend = make_backend(*cfg);
  if (!backend.ok()) return fail(backend.error());
  Backend& be = **backend;
  int64_t max_batch = std::max(*std::max_element(batches->begin(), batches->end()), *swap_batch);
  for (int64_t b : *mixed) max_batch = std::max(max_batch, b);
  const int64_t max_rows =
      std::max({*prefill, *std::max_element(tfwd->begin(), tfwd->end()), max_batch});
  std::fprintf(stderr, "loading %s on %s ...\n", cfg->model_path.c_str(), be.name().c_str());
  auto t_load = clock_type::now();
  auto model = LlamaModel::create(**src, be, max_rows, max_batch);
  if (!model.ok()) return fail(model.error());
  std::fprintf(stderr, "loaded in %.1f s\n", since(t_load));
  LlamaModel& m = **model;

  const int64_t bs = cfg->block_size;
  const int64_t ctx_blocks = BlockTable::blocks_for(*context + 1, bs);
  const int64_t decode_blocks = max_batch * ctx_blocks;
  KvGeometry g;
  g.n_layers = mc.n_layers;
  g.block_size = bs;
  g.n_kv_heads = mc.n_kv_heads;
  g.head_dim = mc.head_dim;
  g.dtype = cfg->kv_dtype;
  g.n_blocks = std::max(decode_blocks, BlockTable::blocks_for(max_rows, bs)) + *swap_blocks;
  auto kv = be.create_kv_storage(g);
  if (!kv.ok()) return fail(kv.error());
  KvGeometry hg = g;
  hg.n_blocks = *swap_blocks;
  auto host = be.create_host_kv_storage(hg);
  if (!host.ok()) return fail(host.error());
  const double kv_per_token =
      (double)g.bytes_per_block_per_layer() * 2.0 * (double)g.n_layers / (double)bs;

  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, (int32_t)mc.vocab_size - 1);
  std::vector<float> logits((size_t)(max_batch * mc.vocab_size));
  nlohmann::json out;
  out["model"] = cfg->model_path;
  out["device"] = be.name();
  out["layers"] = mc.n_layers;
  out["weights_gb"] = weight_elems(mc) * 2 / 1e9;
  out["kv_bytes_per_token"] = kv_per_token;
  out["floors"] = {{"read_gbps", floors.read_gbps},     {"copy_gbps", floors.copy_gbps},
                   {"gemm_tflops", floors.gemm_tflops}, {"h2d_gbps", floors.h2d_gbps},
                   {"d2h_gbps", floors.d2h_gbps},       {"both_gbps", floors.both_gbps}};

  // Fill the decode contexts: sequence s owns blocks [s * ctx_blocks, (s + 1) * ctx_blocks).
  if (!prefill_only) {
    std::fprintf(stderr, "prefilling %lld x %lld tokens of context\n", (long long)max_batch,
                 (long long)*context);
    StepInput in;
    auto flush = [&] {
      if (in.tokens.empty()) return;
      in.logit_rows.clear();
      m.forward(in, **kv, logits.data());
      in.clear();
    };
    for (int64_t s = 0; s < max_batch; ++s) {
      for (int64_t p0 = 0; p0 < *context; p0 += max_rows) {
        const int64_t n = std::min(max_rows, *context - p0);
        if ((int64_t)in.tokens.size() + n > max_rows) flush();
        in.q_start.push_back((int32_t)in.tokens.size());
        in.q_len.push_back((int32_t)n);
        in.ctx_len.push_back((int32_t)(p0 + n));
        for (int64_t p = p0; p < p0 + n; ++p) {
          in.tokens.push_back(tok(rng));
          in.positions.push_back((int32_t)p);
          in.slots.push_back((int32_t)((s * ctx_blocks + p / bs) * bs + p % bs));
        }
        in.max_blocks = (int32_t)ctx_blocks;  // every table row has the same width
        for (int64_t b = 0; b < ctx_blocks; ++b)
          in.block_tables.push_back((int32_t)(s * ctx_blocks + b));
      }
    }
    flush();
    be.sync();
  }

  // `short_context` > 0: every sequence but the first reads only that many cached tokens
  // (the first reads them all), as decode batches of agents at different depths do.
  auto decode_input = [&](int64_t batch, int64_t short_context = 0) {
    StepInput in;
    in.max_blocks = (int32_t)ctx_blocks;
    for (int64_t s = 0; s < batch; ++s) {
      const int64_t p = s > 0 && short_context > 0 ? short_context : *context;
      in.q_start.push_back((int32_t)s);
      in.q_len.push_back(1);
      in.ctx_len.push_back((int32_t)(p + 1));
      in.tokens.push_back(tok(rng));
      in.positions.push_back((int32_t)p);
      in.slots.push_back((int32_t)((s * ctx_blocks + p / bs) * bs + p % bs));
      for (int64_t b = 0; b < ctx_blocks; ++b)
        in.block_tables.push_back((int32_t)(s * ctx_blocks + b));
      in.logit_rows.push_back((int32_t)s);
    }
    return in;
  };
  std::vector<int32_t> sampled((size_t)max_batch);
  // with_logits: the logits go to the host; device_argmax: they stay and only the greedy
  // token ids come back (what the engine does for plain greedy batches).
  // device_topp: the tokens drawn on the device with temperature 0.8 and top_p 0.9.
  std::vector<DeviceSampleRow> topp_rows((size_t)max_batch,
                                         DeviceSampleRow{0, 1.0f / 0.8f, 0, 0.9f, 0.0f, 0.5f});
  // One step: the forward pass, its tokens drawn as asked, then a wait for the device.
  auto run_step = [&](StepInput& in, bool device_argmax, bool device_topp) {
    const bool on_device = device_argmax || device_topp;
    m.forward(in, **kv, on_device ? nullptr : logits.data());
    const int64_t nl = (int64_t)in.logit_rows.size();
    if (device_argmax) CHECK(be.argmax_rows(m.last_logits(nl), sampled.data()));
    if (device_topp)
      CHECK(be.sample_rows(m.last_logits(nl), std::span(topp_rows).first((size_t)nl),
                           sampled.data()));
    be.sync();
  };
  auto time_forward = [&](StepInput& in, bool with_logits, bool device_argmax = false,
                          bool device_topp = false) {
    if (!with_logits && !device_argmax && !device_topp) in.logit_rows.clear();
    auto once = [&] { run_step(in, device_argmax, device_topp); };
    for (int w = 0; w < 3; ++w) once();
    std::vector<double> ts;
    for (int r = 0; r < *repeats; ++r) {
      const auto t = clock_type::now();
      once();
      ts.push_back(since(t));
    }
    return median(ts);
  };
  const bool can_argmax = be.greedy_on_device();

  if (!prefill_only) {
    // ---- decode ----
    std::printf("\n### Decode step, context %lld (%s, %s)\n\n", (long long)*context,
                cfg->model_path.c_str(), be.name().c_str());
    std::printf(
        "| batch | step ms (no logits) | step ms (with logits to host) | with greedy on device | "
        "with top-p on device | bytes floor ms | x floor (whole step) | x floor at copy bandwidth "
        "| tokens/s |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int64_t b : *batches) {
      StepInput in = decode_input(b);
      const double t_nolog = time_forward(in, false);
      in = decode_input(b);
      const double t_log = time_forward(in, true);
      in = decode_input(b);
      const double t_dev = can_argmax ? time_forward(in, false, true) : 0.0;
      in = decode_input(b);
      const double t_topp = be.samples_on_device() ? time_forward(in, false, false, true) : 0.0;
      const double bytes =
          step_weight_elems(mc, b) * 2.0 + (double)b * (double)(*context + 1) * kv_per_token;
      const double floor_ms = bytes_floor_ms(bytes);
      // The whole step (the next token picked, on the device where it can be) against the floor:
      // the "no logits" column skips the output projection, which the floor counts.
      const double t_best = can_argmax ? t_dev : t_log;
      const double copy_floor_ms =
          floors.copy_gbps > 0 ? bytes / (floors.copy_gbps * 1e9) * 1e3 : 0;
      std::printf("| %lld | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.3f | %.0f |\n",
                  (long long)b, t_nolog * 1e3, t_log * 1e3, t_dev * 1e3, t_topp * 1e3, floor_ms,
                  floor_ms > 0 ? t_best * 1e3 / floor_ms : 0.0,
                  copy_floor_ms > 0 ? t_best * 1e3 / copy_floor_ms : 0.0, (double)b / t_best);
      out["decode"].push_back(
          {{"batch", b},
           {"context", *context},
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

    // ---- decode of mixed lengths ----
    // One sequence over --context tokens beside batch - 1 over an eighth of it: the attention
    // planner's balance (PERF 4.5h; INFERCEPT_ATTN_BALANCE=0 for the old split).
    if (!mixed->empty()) {
      const int64_t short_context = std::max<int64_t>(1, *context / 8);
      std::printf(
          "\n### Decode step, one sequence over %lld tokens and the rest over %lld\n\n| batch | "
          "step ms (greedy on device) | bytes floor ms | x floor |\n|---:|---:|---:|---:|\n",
          (long long)*context, (long long)short_context);
      for (int64_t b : *mixed) {
        StepInput in = decode_input(b, short_context);
        const double t = time_forward(in, !can_argmax, can_argmax);
        const double tokens =
            (double)(*context + 1) + (double)(b - 1) * (double)(short_context + 1);
        const double bytes = step_weight_elems(mc, b) * 2.0 + tokens * kv_per_token;
        const double floor_ms = bytes_floor_ms(bytes);
        std::printf("| %lld | %.3f | %.3f | %.2f |\n", (long long)b, t * 1e3, floor_ms,
                    floor_ms > 0 ? t * 1e3 / floor_ms : 0.0);
        out["decode_mixed"].push_back({{"batch", b},
                                       {"context", *context},
                                       {"short_context", short_context},
                                       {"ms", t * 1e3},
                                       {"floor_ms", floor_ms}});
      }
    }
  }

  // ---- prefill ----
  {
    StepInput in;
    const int64_t n = *prefill;
    in.q_start = {0};
    in.q_len = {(int32_t)n};
    in.ctx_len = {(int32_t)n};
    in.max_blocks = (int32_t)BlockTable::blocks_for(n, bs);
    for (int64_t p = 0; p < n; ++p) {
      in.tokens.push_back(tok(rng));
      in.positions.push_back((int32_t)p);
      in.slots.push_back((int32_t)p);
    }
    for (int32_t b = 0; b < in.max_blocks; ++b) in.block_tables.push_back(b);
    in.logit_rows = {(int32_t)n - 1};
    const double t = time_forward(in, true);
    const double attn_flops = 4.0 * (double)mc.n_heads * (double)mc.head_dim * (double)n *
                              (double)(n + 1) / 2.0 * (double)mc.n_layers;
    const double flops = matmul_flops_per_token(mc) * (double)n + attn_flops;
    const double floor_ms =
        floors.gemm_tflops > 0 ? flops / (floors.gemm_tflops * 1e12) * 1e3 : 0.0;
    std::printf(
        "\n### Prefill of %lld tokens\n\n| ms | TFLOP/s | FLOP floor ms (at %.0f TFLOP/s) | share "
        "of GEMM rate |\n|---:|---:|---:|---:|\n",
        (long long)n, floors.gemm_tflops);
    std::printf("| %.2f | %.1f | %.2f | %.0f%% |\n", t * 1e3, flops / t / 1e12, floor_ms,
                floor_ms > 0 ? 100.0 * floor_ms / (t * 1e3) : 0.0);
    out["prefill"] = {{"tokens", n},
                      {"ms", t * 1e3},
                      {"tflops", flops / t / 1e12},
                      {"floor_ms", floor_ms},
                      {"flops", flops}};
  }

  auto write_json = [&] {
    const std::string jpath = args->get("json-out", "");
    if (jpath.empty()) return;
    std::ofstream f(jpath);
    f << out.dump(2) << "\n";
  };
  if (prefill_only) {
    write_json();
    return 0;
  }

  // ---- T_fwd(x) ----
  CostModel cost;
  std::printf(
      "\n### T_fwd(x): one sequence of x query tokens\n\n| x | ms | us per token "
      "|\n|---:|---:|---:|\n");
  for (int64_t x : *tfwd) {
    if (x > max_rows) continue;
    StepInput in;
    in.q_start = {0};
    in.q_len = {(int32_t)x};
    in.ctx_len = {(int32_t)x};
    in.max_blocks = (int32_t)BlockTable::blocks_for(x, bs);
    for (int64_t p = 0; p < x; ++p) {
      in.tokens.push_back(tok(rng));
      in.positions.push_back((int32_t)p);
      in.slots.push_back((int32_t)p);
    }
    for (int32_t b = 0; b < in.max_blocks; ++b) in.block_tables.push_back(b);
    in.logit_rows = {(int32_t)x - 1};
    const double t = time_forward(in, true);
    cost.t_fwd_samples.emplace_back(x, t);
    std::printf("| %lld | %.3f | %.1f |\n", (long long)x, t * 1e3, t * 1e6 / (double)x);
    out["t_fwd"].push_back({{"x", x}, {"ms", t * 1e3}});
  }
  const int64_t S = cost.derive_saturation();
  std::printf(
      "\nsaturation point S = %lld tokens (T_fwd flat: at most +20%% per doubling of x, +44%% in "
      "all)\n",
      (long long)S);
  out["saturation_tokens"] = S;

  // ---- chunks over cached context ----
  // x query rows at the end of a sequence holding `context` tokens (sequence 0's filled
  // context, recomputed in place): what a resumed request's tool output or the last piece of
  // a recomputation costs (the decode table's batch-1 row is one row over the same context).
  {
    std::printf(
        "\n### A chunk of x rows over a context of %lld tokens (one sequence)\n\n| x | ms | bytes "
        "floor ms | x floor |\n|---:|---:|---:|---:|\n",
        (long long)*context);
    for (int64_t x : *chunks) {
      if (x > *context || x > max_rows) continue;
      StepInput in;
      in.q_start = {0};
      in.q_len = {(int32_t)x};
      in.ctx_len = {(int32_t)*context};
      in.max_blocks = (int32_t)ctx_blocks;
      for (int64_t p = *context - x; p < *context; ++p) {
        in.tokens.push_back(tok(rng));
        in.positions.push_back((int32_t)p);
        in.slots.push_back((int32_t)((p / bs) * bs + p % bs));
      }
      for (int64_t b = 0; b < ctx_blocks; ++b) in.block_tables.push_back((int32_t)b);
      in.logit_rows = {(int32_t)x - 1};
      const double t = time_forward(in, true);
      const double bytes = step_weight_elems(mc, x) * 2.0 + (double)*context * kv_per_token;
      const double floor_ms = bytes_floor_ms(bytes);
      std::printf("| %lld | %.3f | %.3f | %.2f |\n", (long long)x, t * 1e3, floor_ms,
                  floor_ms > 0 ? t * 1e3 / floor_ms : 0.0);
      out["chunks"].push_back(
          {{"x", x}, {"context", *context}, {"ms", t * 1e3}, {"floor_ms", floor_ms}});
    }
  }

  // ---- swap ----
  const int64_t nb = *swap_blocks;
  std::vector<int32_t> dev_ids((size_t)nb), host_ids((size_t)nb);
  std::iota(dev_ids.begin(), dev_ids.end(), (int32_t)(g.n_blocks - nb));
  std::iota(host_ids.begin(), host_ids.end(), 0);
  const double swap_bytes = (double)nb * (double)bs * kv_per_token;
  auto time_copy = [&](bool out_dir, bool in_dir) {
    std::vector<double> ts;
    for (int r = 0; r < *repeats + 2; ++r) {
      be.sync();
      const auto t = clock_type::now();
      if (out_dir) be.copy_blocks_between(**kv, **host, dev_ids, host_ids);
      if (in_dir) be.copy_blocks_between(**host, **kv, host_ids, dev_ids);
      be.sync();
      if (r >= 2) ts.push_back(since(t));
    }
    return median(ts);
  };
  const double t_out = time_copy(true, false), t_in = time_copy(false, true),
               t_both = time_copy(true, true);
  std::printf(
      "\n### Swap, %lld blocks (%.1f MB) per direction\n\n| direction | ms | GB/s | floor GB/s | "
      "share |\n|---|---:|---:|---:|---:|\n",
      (long long)nb, swap_bytes / 1e6);
  auto row = [&](const char* name, double t, double bytes, double fl) {
    std::printf("| %s | %.3f | %.1f | %.1f | %.0f%% |\n", name, t * 1e3, bytes / t / 1e9, fl,
                fl > 0 ? 100.0 * bytes / t / 1e9 / fl : 0.0);
    out["swap"].push_back(
        {{"direction", name}, {"ms", t * 1e3}, {"gbps", bytes / t / 1e9}, {"floor_gbps", fl}});
  };
  row("out (device to host)", t_out, swap_bytes, floors.d2h_gbps);
  row("in (host to device)", t_in, swap_bytes, floors.h2d_gbps);
  row("both at once", t_both, 2 * swap_bytes, floors.both_gbps);

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
  {
    const int64_t b = *swap_batch;
    std::printf(
        "\n### Decode at batch %lld while swapping\n\n"
        "| step | step alone ms | copies per step | blocks each way | MB each way | step ms "
        "swapping | growth | host ms queueing copies |\n"
        "|---|---:|---|---:|---:|---:|---:|---:|\n",
        (long long)b);
    out["swap_during_decode"] = nlohmann::json::array();
    struct Step {
      const char* name;
      bool device_argmax;  // else the logits go to the host
    };
    std::vector<Step> steps{{"logits to host", false}};
    if (can_argmax) steps.push_back({"greedy on device", true});
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
        std::vector<int32_t> d(dev_ids.begin(), dev_ids.begin() + budget),
            h(host_ids.begin(), host_ids.begin() + budget);
        std::vector<double> ts, enqueue;
        for (int r = 0; r < *repeats + 3; ++r) {
          const auto t = clock_type::now();
          if (row.out_dir) be.copy_blocks_between(**kv, **host, d, h);
          if (row.in_dir) be.copy_blocks_between(**host, **kv, h, d);
          // Host time to queue the copies: it delays the step's launch one for one.
          const double queued = since(t);
          run_step(in, step.device_argmax, false);
          if (r >= 3) {
            ts.push_back(since(t));
            enqueue.push_back(queued);
          }
        }
        const double with = median(ts);
        std::printf("| %s | %.3f | %s | %lld | %.1f | %.3f | %+.1f%% | %.3f |\n", step.name,
                    base * 1e3, row.name, (long long)budget,
                    (double)budget * bs * kv_per_token / 1e6, with * 1e3,
                    100.0 * (with / base - 1.0), median(enqueue) * 1e3);
        out["swap_during_decode"].push_back({{"step", step.name},
                                             {"copies", row.name},
                                             {"batch", b},
                                             {"blocks_each_way", budget},
                                             {"ms_alone", base * 1e3},
                                             {"ms_swapping", with * 1e3},
                                             {"ms_queueing_copies", median(enqueue) * 1e3}});
      }
    }
  }
  write_json();
  return 0;
}

}  // namespace infercept::cli
