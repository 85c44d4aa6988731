// The whole model on CUDA against the CPU backend, and interception on CUDA with swaps and
// discards forced. Runs on a machine with a GPU (`make test-gpu`).
//
// bf16 on the GPU and the CPU's quantized arithmetic round differently, so greedy tokens
// may part where the top two logits are nearly tied; the checks count such partings and
// hold them to a small share instead of demanding equality everywhere.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "engine/random_checkpoint.h"
#include "interception_scripts.h"
#include "model/llama.h"
#include "test_util.h"

namespace infercept {
namespace {

using namespace testing;

// The tiny random checkpoint `make test-gpu` writes (infercept make-model --shape tiny).
std::string tiny_model_path() {
  const char* m = std::getenv("INFERCEPT_GPU_TEST_MODEL");
  return m && *m ? m : "";
}

std::vector<int32_t> greedy(EngineCore& e, const std::vector<int32_t>& prompt, int n) {
  GenerateRequest r;
  r.prompt = prompt;
  r.params.temperature = 0.0f;
  r.params.ignore_eos = true;
  r.params.max_tokens = n;
  auto id = e.add_request(std::move(r));
  EXPECT_TRUE(id.ok());
  std::vector<int32_t> out;
  while (e.has_work())
    for (auto& o : e.step()) out.insert(out.end(), o.new_tokens.begin(), o.new_tokens.end());
  return out;
}

EngineConfig config(const std::string& model, const std::string& device) {
  EngineConfig c;
  c.model_path = model;
  c.device = device;
  c.kv_cache_tokens = 8192;
  c.cost_model = test_cost_model();
  return c;
}

struct GreedyAgreement {
  int full = 0, prompts = 0;
  double mean_prefix = 0;
};

GreedyAgreement compare_greedy(const std::string& model, DType gpu_dtype = DType::bf16) {
  GreedyAgreement g;
  auto cpu = EngineCore::create(config(model, "cpu"));
  EngineConfig gc = config(model, "cuda");
  gc.compute_dtype = gpu_dtype;
  auto gpu = EngineCore::create(gc);
  EXPECT_TRUE(cpu.ok()) << (cpu.ok() ? "" : cpu.error().message);
  EXPECT_TRUE(gpu.ok()) << (gpu.ok() ? "" : gpu.error().message);
  if (!cpu.ok() || !gpu.ok()) return g;
  const std::vector<std::string> prompts = {"The capital of France is",
                                            "def fibonacci(n):",
                                            "Once upon a time, in a small village,",
                                            "The three laws of thermodynamics are",
                                            "To make a cup of tea, first",
                                            "SELECT name FROM users WHERE",
                                            "The quick brown fox",
                                            "In 1969, the first humans",
                                            "A haiku about autumn:",
                                            "Water boils at",
                                            "The largest planet in the solar system",
                                            "import numpy as np",
                                            "Dear hiring manager,",
                                            "The recipe calls for two cups of",
                                            "Photosynthesis is the process by which",
                                            "1, 2, 3, 5, 8, 13,"};
  for (const std::string& p : prompts) {
    auto toks = (*cpu)->tokenizer().encode(p, true, false);
    auto a = greedy(**cpu, toks, 32), b = greedy(**gpu, toks, 32);
    size_t same = 0;
    while (same < a.size() && same < b.size() && a[same] == b[same]) ++same;
    g.full += same == 32;
    g.mean_prefix += (double)same / (double)prompts.size();
    std::printf("%-40s identical for %zu/32 tokens\n", p.c_str(), same);
  }
  g.prompts = (int)prompts.size();
  std::printf("%s: %d/%d prompts identical for 32 greedy tokens, mean common prefix %.1f\n",
              model.c_str(), g.full, g.prompts, g.mean_prefix);
  return g;
}

// The tiny bf16 checkpoint: the CPU computes with the same bf16 weights, so the two backends
// differ only in arithmetic order and activation rounding.
TEST(CudaModel, TinyCheckpointGreedyTokensMatchTheCpuBackendOnMostPrompts) {
  const std::string tiny = tiny_model_path();
  ASSERT_FALSE(tiny.empty()) << "set INFERCEPT_GPU_TEST_MODEL to a make-model --shape tiny "
                                "checkpoint (make test-gpu does)";
  const GreedyAgreement g = compare_greedy(tiny);
  EXPECT_GT(g.full * 2, g.prompts) << "most prompts must agree for 32 tokens";
}

// The same in f16 (weights converted from bf16 at load, activations f16).
TEST(CudaModel, TinyCheckpointInF16TracksTheCpuBackend) {
  const std::string tiny = tiny_model_path();
  ASSERT_FALSE(tiny.empty()) << "set INFERCEPT_GPU_TEST_MODEL (make test-gpu does)";
  const GreedyAgreement g = compare_greedy(tiny, DType::f16);
  EXPECT_GT(g.full * 2, g.prompts) << "most prompts must agree for 32 tokens";
}

// Every architecture besides Llama (Qwen2's q/k/v biases and tied embeddings, Qwen3's q/k head
// norms with head_dim 64, Mistral): its tiny checkpoint, written here (the default model's
// tokenizer where it is, else the byte-level one), on CUDA against the CPU backend, whose
// logits tests/test_arch_reference.cpp holds to transformers'. Prefill takes the composed
// attention, decode the fused kernels (the head norm runs between the product and them).
class CudaArchitecture : public ::testing::TestWithParam<const char*> {};

// Logits of every position of `tokens` on `device`: the first half in one prefill step, then
// one token a step (the decode kernels), a KV cache of `kv_dtype` (f16 unless asked).
// [n, vocab]
std::vector<float> position_logits(const std::string& model, const std::string& device,
                                   const std::vector<int32_t>& tokens,
                                   DType kv_dtype = DType::f16) {
  auto backend = make_backend(config(model, device));
  EXPECT_TRUE(backend.ok()) << (backend.ok() ? "" : backend.error().message);
  auto src = open_model_source(model);
  EXPECT_TRUE(src.ok());
  if (!backend.ok() || !src.ok()) return {};
  const ModelConfig& c = (*src)->config();
  const int64_t n = (int64_t)tokens.size();
  auto m = LlamaModel::create(**src, **backend, n, n);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  if (!m.ok()) return {};
  const int32_t blocks = (int32_t)((n + 15) / 16);
  auto kv = (*backend)->create_kv_storage(
      KvGeometry{c.n_layers, blocks, 16, c.n_kv_heads, c.head_dim, kv_dtype});
  EXPECT_TRUE(kv.ok());
  std::vector<float> out((size_t)n * (size_t)c.vocab_size);
  for (size_t done = 0; done < tokens.size();) {
    const size_t len = done == 0 ? tokens.size() / 2 : 1;
    StepInput in;
    for (size_t i = done; i < done + len; ++i) {
      in.tokens.push_back(tokens[i]);
      in.positions.push_back((int32_t)i);
      in.slots.push_back((int32_t)i);
      in.logit_rows.push_back((int32_t)(i - done));
    }
    in.q_start = {0};
    in.q_len = {(int32_t)len};
    in.ctx_len = {(int32_t)(done + len)};
    in.max_blocks = blocks;
    for (int32_t b = 0; b < blocks; ++b) in.block_tables.push_back(b);
    EXPECT_TRUE((*m)->forward(in, **kv, out.data() + done * (size_t)c.vocab_size));
    done += len;
  }
  return out;
}

TEST_P(CudaArchitecture, TinyCheckpointGreedyTokensMatchTheCpuBackendOnMostPrompts) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       ("infercept_cuda_arch_" + std::to_string(::getpid()) + "_" + GetParam());
  fs::remove_all(dir);
  auto shape = find_llama_shape(GetParam());
  ASSERT_TRUE(shape.ok()) << shape.error().message;
  RandomCheckpointOptions o;
  o.shape = *shape;
  o.out_dir = dir.string();
  if (fs::exists(default_model_path()))
    o.tokenizer_source = default_model_path();
  else
    o.tokenizer = CheckpointTokenizer::byte_level;
  auto w = write_random_checkpoint(o);
  ASSERT_TRUE(w.ok()) << w.error().message;
  // Logits, prefill and decode rows: bf16 on the GPU against f32 on the CPU, the relative
  // RMS error of each row. transformers in bf16 is 0.8-0.9% from its fp32 on these
  // checkpoints; Qwen3's q/k norm left out moves a row by about half its norm.
  {
    auto tok = EngineCore::create(config(dir.string(), "cpu"));
    ASSERT_TRUE(tok.ok());
    const std::vector<int32_t> prompt = (*tok)->tokenizer().encode(
        "The capital of France is Paris, and the capital of Italy is", true, false);
    const auto a = position_logits(dir.string(), "cpu", prompt);
    const auto b = position_logits(dir.string(), "cuda", prompt);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    const size_t vocab = a.size() / prompt.size();
    double worst = 0.0;
    for (size_t r = 0; r < prompt.size(); ++r) {
      double d2 = 0.0, n2 = 0.0;
      for (size_t i = r * vocab; i < (r + 1) * vocab; ++i) {
        d2 += ((double)b[i] - a[i]) * ((double)b[i] - a[i]);
        n2 += (double)a[i] * a[i];
      }
      worst = std::max(worst, std::sqrt(d2 / n2));
    }
    std::printf("%s: worst relative RMS error of a row, CUDA bf16 vs CPU: %.4f\n", GetParam(),
                worst);
    EXPECT_LT(worst, 0.05);
  }
  const GreedyAgreement g = compare_greedy(dir.string());
  std::error_code ec;
  fs::remove_all(dir, ec);
  // The logits above are the check; greedy tokens of a random checkpoint part at near-ties
  // (Mistral-tiny's top-2 gap is under 0.011 on half of HF's own prompts, where HF's bf16 and
  // fp32 runs disagree too: docs/PERF.md, "H200: correctness on the device"), so they must
  // agree for half the tokens on average, not on most prompts throughout.
  EXPECT_GE(g.mean_prefix, 16.0) << "greedy tokens part early on average";
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaArchitecture,
                         ::testing::Values("qwen2-tiny", "qwen3-tiny", "mistral-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// Relative RMS error of a's rows against b's, the worst row ([rows, vocab] logits each).
double worst_row_error(const std::vector<float>& a, const std::vector<float>& b, size_t rows) {
  const size_t vocab = b.size() / rows;
  double worst = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    double d2 = 0.0, n2 = 0.0;
    for (size_t i = r * vocab; i < (r + 1) * vocab; ++i) {
      d2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
      n2 += (double)b[i] * b[i];
    }
    worst = std::max(worst, std::sqrt(d2 / n2));
  }
  return worst;
}

// The fp8 KV cache on CUDA against the CPU backend's (the oracle): the logits of a prompt's
// rows, prefill and decode, with an fp8 cache on both. The GPU quantizes each key after its
// rotation is rounded to bf16 and the CPU from f32, so a code may differ by one step here and
// there on top of the bf16 arithmetic; the error is printed beside that of the f16 cache on
// both and held to 8% in every row (the bf16 architectures' test holds 5%).
TEST(CudaModel, TinyCheckpointFp8CacheLogitsTrackTheCpuBackend) {
  const std::string tiny = tiny_model_path();
  ASSERT_FALSE(tiny.empty()) << "set INFERCEPT_GPU_TEST_MODEL (make test-gpu does)";
  auto tok = EngineCore::create(config(tiny, "cpu"));
  ASSERT_TRUE(tok.ok());
  const std::vector<int32_t> prompt = (*tok)->tokenizer().encode(
      "The capital of France is Paris, and the capital of Italy is", true, false);
  const auto cpu8 = position_logits(tiny, "cpu", prompt, DType::fp8_e4m3);
  const auto gpu8 = position_logits(tiny, "cuda", prompt, DType::fp8_e4m3);
  const auto cpu16 = position_logits(tiny, "cpu", prompt);
  const auto gpu16 = position_logits(tiny, "cuda", prompt);
  ASSERT_FALSE(cpu8.empty());
  ASSERT_EQ(cpu8.size(), gpu8.size());
  ASSERT_EQ(cpu16.size(), gpu16.size());
  const double fp8 = worst_row_error(gpu8, cpu8, prompt.size());
  const double f16 = worst_row_error(gpu16, cpu16, prompt.size());
  std::printf(
      "worst relative RMS error of a row, CUDA vs CPU: fp8 cache %.4f, f16 cache %.4f; CUDA fp8 "
      "vs CUDA f16 %.4f\n",
      fp8, f16, worst_row_error(gpu8, gpu16, prompt.size()));
  EXPECT_LT(fp8, 0.08);
  // The fp8 cache changes the logits (the comparison is not of two f16 runs).
  EXPECT_NE(gpu8, gpu16);
}

// The default Q4_1 model: the CPU multiplies quantized weights by 8-bit quantized
// activations, the GPU dequantized weights in bf16, so partings come sooner; they must still
// be rare in the first tokens.
TEST(CudaModel, DefaultModelGreedyTokensTrackTheCpuBackend) {
  const GreedyAgreement g = compare_greedy(default_model_path());
  EXPECT_GE(g.mean_prefix, 12.0);
  EXPECT_GE(g.full, 3);
}

// The prefix cache on the device: requests sharing a system prompt, one after another, the
// later ones starting from the cached blocks (and, with a small pool, from blocks demoted to
// the host and promoted back), against the same requests with the cache off. On the CPU the
// tokens are identical by construction; here a hit changes the shape of the prefill (fewer
// rows), so bf16 rounding may part the two at a near-tie: the test prints how many agree and
// asks that most do.
TEST(CudaModel, PrefixCacheHitsTrackTheCacheOff) {
  const std::string tiny = tiny_model_path();
  ASSERT_FALSE(tiny.empty()) << "set INFERCEPT_GPU_TEST_MODEL (make test-gpu does)";
  const std::string system =
      "You are a careful assistant. You answer in one short sentence and never make up facts. ";
  const std::vector<std::string> questions = {"What is the capital of France?",
                                              "Name a prime number.",
                                              "What is the capital of France?",
                                              "Say hello.",
                                              "Name a prime number.",
                                              "Count to five.",
                                              "Say hello."};
  int64_t longest = 0;  // prompt tokens (the tokenizer is the checkpoint's: GGUF or byte-level)
  auto run = [&](bool cache, int64_t kv_tokens, EngineStats* stats) {
    EngineConfig c = config(tiny, "cuda");
    c.prefix_cache = cache;
    c.kv_cache_tokens = kv_tokens;
    c.swap_space_tokens = 4096;
    c.check_invariants = true;
    auto e = EngineCore::create(c);
    EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
    std::vector<std::vector<int32_t>> out;
    for (const std::string& q : questions) {
      const std::vector<int32_t> prompt = (*e)->tokenizer().encode(system + q, true, false);
      longest = std::max(longest, (int64_t)prompt.size());
      out.push_back(greedy(**e, prompt, 24));
    }
    *stats = (*e)->stats();
    return out;
  };
  EngineStats off_stats, on_stats, tight_stats;
  const auto off = run(false, 8192, &off_stats);
  const auto on = run(true, 8192, &on_stats);
  // A device pool one request fills: every request evicts the last one's blocks, which go to
  // the host tier, and the repeated questions bring them back.
  const auto tight = run(true, (longest + 24 + 31) / 16 * 16, &tight_stats);
  int same_on = 0, same_tight = 0;
  for (size_t i = 0; i < off.size(); ++i) {
    same_on += on[i] == off[i];
    same_tight += tight[i] == off[i];
  }
  std::printf(
      "prefix cache on CUDA: %d/%zu requests identical to the cache off (hits %lld of %lld "
      "tokens); small pool: %d/%zu (demoted %lld, promoted %lld blocks)\n",
      same_on, off.size(), (long long)on_stats.prefix_hit_tokens,
      (long long)on_stats.prefix_query_tokens, same_tight, off.size(),
      (long long)tight_stats.prefix_demoted_blocks, (long long)tight_stats.prefix_promoted_blocks);
  EXPECT_GT(on_stats.prefix_hit_tokens, 0);
  EXPECT_GT(tight_stats.prefix_promoted_blocks, 0);
  EXPECT_GT(same_on * 2, (int)off.size());
  EXPECT_GT(same_tight * 2, (int)off.size());
}

// Decode steps replayed from CUDA graphs run the very kernels of the eager path: a batch of
// concurrent greedy requests (joining and finishing at different steps, so the batch shape
// changes and repeats) gives the same tokens bit for bit with graphs on and off, and steps
// were really replayed.
TEST(CudaModel, GraphReplayedDecodeStepsMatchEagerOnes) {
  const std::string tiny = tiny_model_path();
  ASSERT_FALSE(tiny.empty()) << "set INFERCEPT_GPU_TEST_MODEL (make test-gpu does)";
  auto run = [&](bool graphs, int64_t* replayed) {
    EngineConfig c = config(tiny, "cuda");
    c.cuda_graphs = graphs;
    auto e = EngineCore::create(c);
    EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
    std::map<uint64_t, std::vector<int32_t>> out;
    if (!e.ok()) return out;
    const char* prompts[] = {"The capital of France is", "def fibonacci(n):", "Water boils at",
                             "Once upon a time", "SELECT name FROM users WHERE"};
    for (int i = 0; i < 5; ++i) {
      GenerateRequest r;
      r.prompt = (*e)->tokenizer().encode(prompts[i], true, false);
      r.params.temperature = 0.0f;
      r.params.ignore_eos = true;
      r.params.max_tokens = 40 + 20 * i;  // finish at different steps
      auto id = (*e)->add_request(std::move(r));
      EXPECT_TRUE(id.ok());
      out[*id];
    }
    while ((*e)->has_work())
      for (auto& o : (*e)->step())
        out[o.id].insert(out[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    *replayed = (*e)->stats().replayed_steps;
    return out;
  };
  int64_t replayed_on = 0, replayed_off = 0;
  const auto eager = run(false, &replayed_off);
  const auto graphed = run(true, &replayed_on);
  EXPECT_EQ(replayed_off, 0);
  EXPECT_GT(replayed_on, 50) << "most of the ~120 decode steps should replay a graph";
  ASSERT_EQ(eager.size(), graphed.size());
  for (const auto& [id, toks] : eager) {
    EXPECT_EQ(toks.size(), graphed.at(id).size());
    EXPECT_EQ(toks, graphed.at(id)) << "request " << id;
  }
  std::printf("graphs: %lld of the steps replayed or recorded\n", (long long)replayed_on);
}

// Seeded top-p requests are sampled on the device (the logits never reach the host) and
// repeat exactly: each row's uniform comes from its request's own seeded generator.
TEST(CudaModel, SeededTopPSamplingOnTheDeviceRepeats) {
  const std::string tiny = tiny_model_path();
  ASSERT_FALSE(tiny.empty()) << "set INFERCEPT_GPU_TEST_MODEL (make test-gpu does)";
  auto run = [&] {
    auto e = EngineCore::create(config(tiny, "cuda"));
    EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
    std::map<uint64_t, std::vector<int32_t>> out;
    if (!e.ok()) return out;
    for (int i = 0; i < 4; ++i) {
      GenerateRequest r;
      r.prompt = (*e)->tokenizer().encode("Once upon a time", true, false);
      r.params.temperature = 0.9f;
      r.params.top_p = 0.9f;
      r.params.top_k = i == 3 ? 40 : 0;
      r.params.seed = 1000 + (uint64_t)i;
      r.params.ignore_eos = true;
      r.params.max_tokens = 48;
      auto id = (*e)->add_request(std::move(r));
      EXPECT_TRUE(id.ok());
    }
    while ((*e)->has_work())
      for (auto& o : (*e)->step())
        out[o.id].insert(out[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    return out;
  };
  const auto a = run(), b = run();
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, b);
  std::set<std::vector<int32_t>> distinct;
  for (const auto& [id, toks] : a) {
    EXPECT_EQ(toks.size(), 48u);
    distinct.insert(toks);
  }
  EXPECT_GE(distinct.size(), 3u) << "different seeds should draw different continuations";
}

// A request with logprobs or penalties takes only its own rows' logits to the host: seeded
// top-p requests beside it are still drawn on the device. The same five requests run twice,
// once with request 3 asking for logprobs and request 4 for a presence penalty, once plain:
// the top-p requests draw the same tokens both times (the steps have the same rows and
// shapes, so the same logits), greedy request 3 too, and only the special rows count as
// host-sampled.
TEST(CudaModel, LogprobsAndPenaltyRowsBesideDeviceSampledOnes) {
  const std::string tiny = tiny_model_path();
  ASSERT_FALSE(tiny.empty()) << "set INFERCEPT_GPU_TEST_MODEL (make test-gpu does)";
  constexpr int kTokens = 24;
  struct Run {
    std::vector<std::vector<int32_t>> tokens;
    size_t logprobs_of_3 = 0;
    int64_t host_rows = 0;
  };
  auto run = [&](bool special) {
    Run out;
    auto e = EngineCore::create(config(tiny, "cuda"));
    EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
    if (!e.ok()) return out;
    std::vector<uint64_t> ids;
    for (int i = 0; i < 5; ++i) {
      GenerateRequest r;
      r.prompt =
          (*e)->tokenizer().encode(i % 2 ? "Once upon a time" : "The weather today", true, false);
      r.params.ignore_eos = true;
      r.params.max_tokens = kTokens;
      if (i < 3) {  // seeded top-p: drawn on the device
        r.params.temperature = 0.9f;
        r.params.top_p = 0.9f;
        r.params.seed = 77 + (uint64_t)i;
      } else {
        r.params.temperature = 0.0f;
        if (special && i == 3) r.logprobs = 1;
        if (special && i == 4) r.params.presence_penalty = 0.8f;
      }
      auto id = (*e)->add_request(std::move(r));
      EXPECT_TRUE(id.ok());
      ids.push_back(id.ok() ? *id : 0);
    }
    std::map<uint64_t, std::vector<int32_t>> toks;
    while ((*e)->has_work())
      for (auto& o : (*e)->step()) {
        toks[o.id].insert(toks[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
        if (o.id == ids[3]) out.logprobs_of_3 += o.logprobs.size();
      }
    for (uint64_t id : ids) out.tokens.push_back(toks[id]);
    out.host_rows = (*e)->stats().host_sampled_rows;
    return out;
  };
  const Run plain = run(false), special = run(true);
  ASSERT_EQ(plain.tokens.size(), 5u);
  ASSERT_EQ(special.tokens.size(), 5u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(plain.tokens[i].size(), (size_t)kTokens);
    EXPECT_EQ(special.tokens[i], plain.tokens[i]) << "request " << i;
  }
  EXPECT_EQ(plain.host_rows, 0);
  EXPECT_EQ(special.host_rows, 2 * kTokens);
  EXPECT_EQ(special.logprobs_of_3, (size_t)kTokens);
  EXPECT_EQ(plain.logprobs_of_3, 0u);
}

class CudaInterception : public ::testing::TestWithParam<std::string> {};

// Every policy on CUDA under memory pressure: every request completes through its pauses,
// the pools drain, the policy's mechanism really ran, and the tokens after each resume are
// those of an uninterrupted CUDA run except for a small number of near-tie partings.
TEST_P(CudaInterception, PausesResumeAndTokensMatchAnUninterruptedRun) {
  static const std::vector<Generated> ref = reference(scripts(), "cuda");
  const std::string policy = GetParam();
  auto e = EngineCore::create(config_for(policy, "oracle", 160, "cuda"));
  ASSERT_TRUE(e.ok()) << e.error().message;
  EngineStats st;
  auto got = run_scripts(**e, scripts(), /*hints=*/true, &st);
  int segments = 0, identical = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    for (size_t k = 0; k < ref[i].size(); ++k) {
      ++segments;
      identical += got[i][k] == ref[i][k];
      if (got[i][k] != ref[i][k])
        std::printf("%s: script %zu segment %zu differs\n", policy.c_str(), i, k);
    }
  std::printf(
      "%s on CUDA: %d/%d segments identical; %lld interceptions, %lld preemptions, "
      "%lld recomputed, %lld swapped out, %lld swapped in\n",
      policy.c_str(), identical, segments, (long long)st.interceptions, (long long)st.preemptions,
      (long long)st.recomputed_tokens, (long long)st.swapped_out_tokens,
      (long long)st.swapped_in_tokens);
  EXPECT_EQ(st.interceptions, 23);
  EXPECT_EQ(st.resumes, st.interceptions);
  EXPECT_GE(identical * 10, segments * 8) << "at most a fifth of segments may part at near-ties";
  if (policy == "swap") {
    EXPECT_GT(st.swapped_in_tokens, 0);
  }
  if (policy == "discard") {
    EXPECT_GT(st.recomputed_tokens, 0);
  }
  EXPECT_EQ((*e)->allocator().n_held(), 0);  // nothing leaked (idle cached blocks are the cache's)
  EXPECT_EQ((*e)->host_allocator().n_held(), 0);
}

INSTANTIATE_TEST_SUITE_P(All, CudaInterception,
                         ::testing::Values("discard", "preserve", "swap", "minwaste"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace infercept

namespace infercept {
namespace {

// Tensor parallelism on CUDA: NCCL's all-reduce queued on the backend's stream. A group of
// one sums nothing (the tensor comes back as it went); with two GPUs or more, a group of two
// generates the greedy tokens of one GPU on the tiny checkpoint (bf16: its reordered sums part
// only at near-ties, as between the backends).
TEST(CudaTensorParallel, NcclGroupOfOneAndOfTwo) {
  auto backend = make_cuda_backend({});
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  Backend* one[] = {backend->get()};
  auto comms = make_nccl_communicators(one);
  ASSERT_TRUE(comms.ok()) << comms.error().message;
  ASSERT_EQ(comms->size(), 1u);
  Tensor t = (*backend)->alloc_activation(3, 64, DType::f32);
  std::vector<float> host(3 * 64), back(3 * 64);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.5f * (float)i - 7.0f;
  ASSERT_EQ(cudaMemcpy(t.data, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  (*comms)[0]->all_reduce_sum(**backend, t);
  (*backend)->to_host_f32(t, back.data());
  EXPECT_EQ(back, host);

  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  const std::string tiny = tiny_model_path();
  if (gpus < 2 || tiny.empty()) GTEST_SKIP() << "a group of two needs two GPUs and the tiny model";
  EngineConfig c = config(tiny, "cuda:0");
  auto single = EngineCore::create(c);
  ASSERT_TRUE(single.ok()) << single.error().message;
  c.tensor_parallel_size = 2;
  auto pair = EngineCore::create(c);
  ASSERT_TRUE(pair.ok()) << pair.error().message;
  size_t same = 0, total = 0;
  for (const char* p : {"The capital of France is", "def fibonacci(n):", "1, 2, 3,"}) {
    const auto prompt = (*single)->tokenizer().encode(p, true, false);
    const auto a = greedy(**single, prompt, 32), b = greedy(**pair, prompt, 32);
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    same += k;
    total += a.size();
  }
  std::printf("2 GPUs against 1: %zu of %zu tokens before the first difference\n", same, total);
  EXPECT_GE(same * 2, total);
}

}  // namespace
}  // namespace infercept
