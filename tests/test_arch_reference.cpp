// Every architecture's logits against Hugging Face transformers: the tiny make-model
// checkpoints of Llama, Qwen2 (q/k/v biases, tied embeddings), Qwen3 (per-head q/k RMSNorm,
// head_dim 64 != 256 / 8, tied embeddings) and Mistral (a sliding window longer than any
// prompt here), written here with the seed scripts/make_arch_reference.py used, run on the CPU
// backend from safetensors and from a GGUF made of the same tensors (Q/K rows permuted as
// llama.cpp's converter does for llama and Mistral, as is for Qwen), one prefill step and
// prefill-then-decode, against tests/fixtures/reference_arch_tiny.json (transformers, fp32,
// eager attention).
//
// Tolerance: both sides compute in fp32 from the same bf16 weights (our CPU backend widens
// bf16 to f32 and dots it with f32 activations; the KV cache is f32 here), so they differ only
// in summation order and libm: at most 1.1e-6 over every position measured (logits of std
// 0.32). kTol = 1e-4 leaves room for other SIMD widths and thread splits and is still ~100x
// below the smallest effect of an architectural feature measured on these checkpoints with
// transformers (the k bias alone of Qwen2: 1.1e-2; rope theta 1e4 vs 1e6: 4.0e-2; Qwen3's
// q-norm weights reversed: 0.14; all q/k/v biases: 1.2).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "engine/random_checkpoint.h"
#include "gguf_writer.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/llama.h"
#include "test_util.h"

namespace infercept {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kTol = 1e-4;

struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("infercept_arch_ref_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const json& fixture() {
  static const json j =
      json::parse(testing::read_file(testing::fixture_path("reference_arch_tiny.json")));
  return j;
}

// The shape's checkpoint as the fixture script wrote it (same seed, the default model's
// tokenizer).
void write_checkpoint(const std::string& shape, const std::string& dir) {
  auto s = find_llama_shape(shape);
  ASSERT_TRUE(s.ok()) << s.error().message;
  RandomCheckpointOptions o;
  o.shape = *s;
  o.out_dir = dir;
  o.seed = fixture()["seed"].get<uint64_t>();
  o.tokenizer_source = testing::default_model_path();
  o.n_threads = 2;
  auto r = write_random_checkpoint(o);
  ASSERT_TRUE(r.ok()) << r.error().message;
}

// llama.cpp's converter reorders each head's Q/K rows so that RoPE's pairs are adjacent:
// row (h, 2i + j) of the result is row (h, j * head_dim/2 + i) of the Hugging Face matrix.
std::string permute_rows(const TensorInfo& t, int64_t n_heads) {
  const int64_t rows = t.shape[0], hd = rows / n_heads, half = hd / 2;
  const size_t rb = t.n_bytes / (size_t)rows;
  const auto* src = reinterpret_cast<const char*>(t.data);
  std::string out(t.n_bytes, '\0');
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(&out[(size_t)(h * hd + 2 * i + j) * rb],
                    src + (size_t)(h * hd + j * half + i) * rb, rb);
  return out;
}

// A GGUF of the checkpoint's tensors as llama.cpp's convert_hf_to_gguf.py lays them out:
// llama and Mistral as architecture "llama" with permuted Q/K rows, Qwen2/3 under their own
// names with Hugging Face's rows; vectors (norms, biases) as f32, matrices as they are.
std::string gguf_of(const HfCheckpoint& ck) {
  const ModelConfig& c = ck.config();
  const bool permuted = c.arch == "llama" || c.arch == "mistral";
  const std::string arch = permuted ? "llama" : c.arch;
  testing::GgufWriter w;
  const std::string a = arch + ".";
  w.add_string("general.architecture", arch);
  w.add_string("general.name", c.name);
  w.add_u32(a + "block_count", (uint32_t)c.n_layers);
  w.add_u32(a + "context_length", (uint32_t)c.max_context);
  w.add_u32(a + "embedding_length", (uint32_t)c.d_model);
  w.add_u32(a + "feed_forward_length", (uint32_t)c.d_ff);
  w.add_u32(a + "attention.head_count", (uint32_t)c.n_heads);
  w.add_u32(a + "attention.head_count_kv", (uint32_t)c.n_kv_heads);
  w.add_f32(a + "rope.freq_base", c.rope_theta);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
  if (c.head_dim != c.d_model / c.n_heads) {
    w.add_u32(a + "attention.key_length", (uint32_t)c.head_dim);
    w.add_u32(a + "attention.value_length", (uint32_t)c.head_dim);
  }
  w.add_u32(a + "vocab_size", (uint32_t)c.vocab_size);
  if (c.sliding_window > 0) w.add_u32(a + "attention.sliding_window", (uint32_t)c.sliding_window);
  for (const auto& [name, t] : ck.tensors()) {
    std::vector<uint64_t> ne(t.shape.rbegin(), t.shape.rend());
    if (t.shape.size() == 1) {
      std::string f((size_t)t.n_elements() * 4, '\0');
      dequantize_to_f32(t.dtype, t.data, reinterpret_cast<float*>(f.data()), t.n_elements());
      w.add_tensor(name, testing::kGgmlF32, ne, std::move(f));
      continue;
    }
    EXPECT_EQ(t.dtype, DType::bf16) << name;
    std::string bytes(reinterpret_cast<const char*>(t.data), t.n_bytes);
    const bool is_q = name.find(".attn_q.weight") != std::string::npos;
    const bool is_k = name.find(".attn_k.weight") != std::string::npos;
    if (permuted && (is_q || is_k)) bytes = permute_rows(t, is_q ? c.n_heads : c.n_kv_heads);
    w.add_tensor(name, testing::kGgmlBF16, ne, std::move(bytes));
  }
  return w.build();
}

// Logits of every position of `tokens` [n, vocab]: positions [0, prefill) in one step, then
// one token a step (decode rows over the cache so far). prefill == n: all in one step.
std::vector<float> run_positions(const ModelSource& src, const std::vector<int32_t>& tokens,
                                 size_t prefill) {
  const ModelConfig& c = src.config();
  auto backend = make_cpu_backend(2);
  const int64_t n = (int64_t)tokens.size();
  auto m = LlamaModel::create(src, *backend, n, n);
  EXPECT_TRUE(m.ok()) << m.error().message;
  if (!m.ok()) return {};
  constexpr int32_t kBlock = 16;
  const int32_t n_blocks = (int32_t)((n + kBlock - 1) / kBlock);
  auto kv = backend->create_kv_storage(
      KvGeometry{c.n_layers, n_blocks, kBlock, c.n_kv_heads, c.head_dim, DType::f32});
  EXPECT_TRUE(kv.ok());
  std::vector<float> out((size_t)n * (size_t)c.vocab_size);
  size_t done = 0;
  while (done < tokens.size()) {
    const size_t len = done == 0 ? prefill : 1;
    StepInput in;
    for (size_t i = done; i < done + len; ++i) {
      in.tokens.push_back(tokens[i]);
      in.positions.push_back((int32_t)i);
      in.slots.push_back((int32_t)i);  // blocks 0, 1, ... in order
      in.logit_rows.push_back((int32_t)(i - done));
    }
    in.q_start = {0};
    in.q_len = {(int32_t)len};
    in.ctx_len = {(int32_t)(done + len)};
    in.max_blocks = n_blocks;
    for (int32_t b = 0; b < n_blocks; ++b) in.block_tables.push_back(b);
    EXPECT_TRUE((*m)->forward(in, **kv, out.data() + done * (size_t)c.vocab_size));
    done += len;
  }
  return out;
}

double logsumexp(const float* row, int64_t n) {
  double mx = -INFINITY, s = 0.0;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, (double)row[i]);
  for (int64_t i = 0; i < n; ++i) s += std::exp((double)row[i] - mx);
  return mx + std::log(s);
}

// Our logits of every prompt of `entry` against transformers', by both step patterns.
void expect_matches_reference(const ModelSource& src, const json& entry, const std::string& what) {
  const int64_t vocab = entry["vocab_size"].get<int64_t>();
  ASSERT_EQ(src.config().vocab_size, vocab);
  const std::vector<int64_t> ids = entry["ids"].get<std::vector<int64_t>>();
  double worst = 0.0;
  for (const json& p : entry["prompts"]) {
    const std::vector<int32_t> tokens = p["tokens"].get<std::vector<int32_t>>();
    ASSERT_GE(tokens.size(), 4u);
    for (size_t prefill : {tokens.size(), tokens.size() / 2}) {
      SCOPED_TRACE(what + ", prompt of " + std::to_string(tokens.size()) + " tokens, prefill " +
                   std::to_string(prefill));
      const std::vector<float> logits = run_positions(src, tokens, prefill);
      ASSERT_EQ(logits.size(), tokens.size() * (size_t)vocab);
      for (size_t pos = 0; pos < tokens.size(); ++pos) {
        const float* row = logits.data() + pos * (size_t)vocab;
        const auto& want = p["logits"][pos];
        for (size_t k = 0; k < ids.size(); ++k) {
          const double d = std::fabs((double)row[ids[k]] - want[k].get<double>());
          worst = std::max(worst, d);
          ASSERT_LE(d, kTol) << "position " << pos << ", id " << ids[k];
        }
        // The whole row, through its logsumexp.
        EXPECT_NEAR(logsumexp(row, vocab), p["logsumexp"][pos].get<double>(), kTol)
            << "position " << pos;
        const int64_t argmax = std::max_element(row, row + vocab) - row;
        if (p["top2_gap"][pos].get<double>() > 2 * kTol) {
          EXPECT_EQ(argmax, p["argmax"][pos].get<int64_t>()) << "position " << pos;
        }
      }
    }
  }
  std::printf("[ %s ] largest |ours - transformers| over the fixture's ids: %.2e\n", what.c_str(),
              worst);
}

class ArchReference : public ::testing::TestWithParam<const char*> {};

TEST_P(ArchReference, SafetensorsAndGgufMatchTransformers) {
  const std::string shape = GetParam();
  const json& entry = fixture()["models"][shape];
  ASSERT_TRUE(entry.is_object()) << shape;
  TempDir dir;
  write_checkpoint(shape, dir.path.string());
  auto ck = HfCheckpoint::open(dir.path.string());
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  const ModelConfig& c = (*ck)->config();
  EXPECT_EQ(c.arch, entry["model_type"].get<std::string>());
  // The architecture's distinguishing features, as the readers see them.
  EXPECT_EQ(c.qkv_bias, c.arch == "qwen2");
  EXPECT_EQ(c.qk_norm, c.arch == "qwen3");
  EXPECT_EQ(c.tied_embeddings, c.arch == "qwen2" || c.arch == "qwen3");
  EXPECT_EQ(c.head_dim, c.arch == "qwen3" ? 64 : 32);
  if (c.arch == "mistral") {
    EXPECT_EQ(c.sliding_window, 4096);
    EXPECT_EQ(c.max_context, 4096);  // capped to the window: exact within it
    EXPECT_FALSE(c.max_context_note.empty());
  } else {
    EXPECT_EQ(c.sliding_window, 0);
    EXPECT_EQ(c.max_context, 8192);
  }
  expect_matches_reference(**ck, entry, shape + " safetensors");

  const std::string bytes = gguf_of(**ck);
  auto g = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                           shape + ".gguf");
  ASSERT_TRUE(g.ok()) << g.error().message;
  const ModelConfig& gc = (*g)->config();
  EXPECT_EQ(gc.qkv_bias, c.qkv_bias);
  EXPECT_EQ(gc.qk_norm, c.qk_norm);
  EXPECT_EQ(gc.tied_embeddings, c.tied_embeddings);
  EXPECT_EQ(gc.head_dim, c.head_dim);
  EXPECT_EQ(gc.sliding_window, c.sliding_window);
  EXPECT_EQ(gc.max_context, c.max_context);
  EXPECT_EQ(gc.rope_style,
            c.arch == "llama" || c.arch == "mistral" ? RopeStyle::interleaved : RopeStyle::neox);
  expect_matches_reference(**g, entry, shape + " gguf");
}

INSTANTIATE_TEST_SUITE_P(Tiny, ArchReference,
                         ::testing::Values("tiny", "qwen2-tiny", "qwen3-tiny", "mistral-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace infercept
