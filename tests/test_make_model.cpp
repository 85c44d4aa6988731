// `infercept make-model` as a library (src/engine/random_checkpoint.h, io/safetensors_writer.h,
// tokenizer/hf_export.h): the tiny random checkpoint loads through our Hugging Face reader with
// the right config and tensor shapes, sharding writes a correct index, the bytes depend on
// the seed alone (not on threads or shard size), the engine runs it on the CPU with finite
// logits, and both tokenizers it writes (the default model's and the byte-level fallback)
// read back into the same tokenization. Real shapes are checked by their config and tensor
// list only (writing 13-26 GB does not belong in a unit test).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/half.h"
#include "engine/engine.h"
#include "engine/random_checkpoint.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/llama.h"
#include "test_util.h"
#include "tokenizer/hf_export.h"

namespace infercept {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it at scope end.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("infercept_make_model_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str(const std::string& sub = "") const {
    return sub.empty() ? path.string() : (path / sub).string();
  }
};

LlamaShape tiny() {
  auto s = find_llama_shape("tiny");
  EXPECT_TRUE(s.ok());
  return *s;
}

RandomCheckpointOptions tiny_options(const std::string& dir) {
  RandomCheckpointOptions o;
  o.shape = tiny();
  o.out_dir = dir;
  o.tokenizer_source = testing::default_model_path();
  o.n_threads = 2;
  return o;
}

RandomCheckpointInfo write_ok(const RandomCheckpointOptions& o) {
  auto r = write_random_checkpoint(o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : RandomCheckpointInfo{};
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& dir) {
  const std::string tj = testing::read_file(dir + "/tokenizer.json");
  const std::string tc = testing::read_file(dir + "/tokenizer_config.json");
  EXPECT_FALSE(tj.empty());
  auto spec = tokenizer_spec_from_hf_json(tj, tc, dir + "/tokenizer.json");
  EXPECT_TRUE(spec.ok()) << (spec.ok() ? "" : spec.error().message);
  if (!spec.ok()) return nullptr;
  auto tok = Tokenizer::create(std::move(*spec));
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.error().message);
  return tok.ok() ? std::move(*tok) : nullptr;
}

std::unique_ptr<Tokenizer> gguf_tokenizer() {
  auto g = GgufFile::open(testing::default_model_path(), GgufLoad::container_only);
  EXPECT_TRUE(g.ok());
  auto spec = tokenizer_spec_from_gguf(**g);
  EXPECT_TRUE(spec.ok());
  auto tok = Tokenizer::create(std::move(*spec));
  EXPECT_TRUE(tok.ok());
  return std::move(*tok);
}

std::vector<std::string> fixture_texts() {
  const auto j =
      nlohmann::json::parse(testing::read_file(testing::fixture_path("tokenizer_smollm2.json")));
  std::vector<std::string> out;
  for (const auto& c : j["cases"]) out.push_back(c["text"].get<std::string>());
  return out;
}

// Every file of a directory, name -> bytes.
std::map<std::string, std::string> dir_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out[e.path().filename().string()] = testing::read_file(e.path().string());
  return out;
}

// Tensor bytes by canonical name.
std::map<std::string, std::string> tensor_bytes(const HfCheckpoint& ck) {
  std::map<std::string, std::string> out;
  for (const auto& [name, t] : ck.tensors())
    out[name] = std::string(reinterpret_cast<const char*>(t.data), t.n_bytes);
  return out;
}

// Mean and standard deviation of a bf16/f16 tensor.
std::pair<double, double> stats(const TensorInfo& t) {
  std::vector<float> v((size_t)t.n_elements());
  dequantize_to_f32(t.dtype, t.data, v.data(), t.n_elements());
  double s = 0, s2 = 0;
  for (float x : v) {
    s += x;
    s2 += (double)x * x;
  }
  const double n = (double)v.size(), mean = s / n;
  return {mean, std::sqrt(std::max(0.0, s2 / n - mean * mean))};
}

TEST(MakeModel, TinyLoadsWithOurReaderWithTheRightConfigAndShapes) {
  TempDir dir;
  const RandomCheckpointInfo info = write_ok(tiny_options(dir.str()));
  EXPECT_TRUE(info.default_tokenizer);
  EXPECT_EQ(info.tokenizer_vocab, 49152);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json",
                        "tokenizer_config.json", "model.safetensors"})
    EXPECT_TRUE(fs::exists(dir.str(f))) << f;
  EXPECT_FALSE(fs::exists(dir.str("model.safetensors.index.json")));

  auto ck = HfCheckpoint::open(dir.str());
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  const ModelConfig& c = (*ck)->config();
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.d_model, 256);
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.d_ff, 768);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_context, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_EQ(c.rope_style, RopeStyle::neox);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.rope_scaling.type, "none");

  // Shapes and dtypes; HfCheckpoint::open already validated them against the config.
  const auto& ts = (*ck)->tensors();
  EXPECT_EQ(ts.size(), 2u + 1u + 9u * 4u);
  int64_t params = 0;
  for (const auto& [name, t] : ts) {
    EXPECT_EQ(t.dtype, DType::bf16) << name;
    params += t.n_elements();
  }
  EXPECT_EQ(params, info.n_params);
  EXPECT_EQ((*ck)->find("token_embd.weight")->shape, (std::vector<int64_t>{49152, 256}));
  EXPECT_EQ((*ck)->find("output.weight")->shape, (std::vector<int64_t>{49152, 256}));
  EXPECT_EQ((*ck)->find("blk.3.attn_k.weight")->shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ((*ck)->find("blk.0.ffn_down.weight")->shape, (std::vector<int64_t>{256, 768}));

  // Values: the documented generator, rounded to bf16.
  const TensorInfo* q = (*ck)->find("blk.2.attn_q.weight");
  const auto* q16 = reinterpret_cast<const uint16_t*>(q->data);
  for (int64_t i : {0, 1, 777, 65535})
    EXPECT_EQ(q16[i], fp32_to_bf16(random_weight_value(
                          0, tiny(), "model.layers.2.self_attn.q_proj.weight", i)));
  // Scales: 0.02 for matrices, 0.02/sqrt(2*layers) for the residual projections, 1 for norms.
  auto [qm, qs] = stats(*q);
  EXPECT_NEAR(qm, 0.0, 0.001);
  EXPECT_NEAR(qs, 0.02, 0.001);
  auto [om, os] = stats(*(*ck)->find("blk.1.attn_output.weight"));
  EXPECT_NEAR(os, 0.02 / std::sqrt(8.0), 0.0005);
  auto [dm, ds] = stats(*(*ck)->find("blk.1.ffn_down.weight"));
  EXPECT_NEAR(ds, 0.02 / std::sqrt(8.0), 0.0005);
  auto [nm, ns] = stats(*(*ck)->find("blk.0.attn_norm.weight"));
  EXPECT_NEAR(nm, 1.0, 0.005);
  EXPECT_LT(ns, 0.02);

  // Both JSON side files name the same special tokens.
  const auto cfg = nlohmann::json::parse(testing::read_file(dir.str("config.json")));
  EXPECT_EQ(cfg["torch_dtype"], "bfloat16");
  EXPECT_EQ(cfg["model_type"], "llama");
  EXPECT_EQ(cfg["bos_token_id"], 1);
  EXPECT_EQ(cfg["eos_token_id"], 2);
}

TEST(MakeModel, ShardedCheckpointHasACorrectIndexAndTheSameTensors) {
  TempDir one, many;
  write_ok(tiny_options(one.str()));
  RandomCheckpointOptions o = tiny_options(many.str());
  o.max_shard_bytes = 4'000'000;  // the embedding (25 MB) alone, then ~4 MB shards
  o.n_threads = 3;
  write_ok(o);

  const auto idx =
      nlohmann::json::parse(testing::read_file(many.str("model.safetensors.index.json")));
  const auto& wm = idx["weight_map"];
  const std::vector<SafetensorsTensor> tensors = random_checkpoint_tensors(tiny(), DType::bf16);
  ASSERT_EQ(wm.size(), tensors.size());
  uint64_t total = 0;
  std::map<std::string, uint64_t> shard_bytes;
  std::map<std::string, int> shard_tensors;
  for (const SafetensorsTensor& t : tensors) {
    ASSERT_TRUE(wm.contains(t.name)) << t.name;
    shard_bytes[wm[t.name].get<std::string>()] += t.n_bytes();
    shard_tensors[wm[t.name].get<std::string>()]++;
    total += t.n_bytes();
  }
  EXPECT_EQ(idx["metadata"]["total_size"].get<uint64_t>(), total);
  ASSERT_GE(shard_bytes.size(), 4u);
  const size_t n = shard_bytes.size();
  size_t k = 0;
  for (const auto& [file, bytes] : shard_bytes) {
    char expect[64];
    std::snprintf(expect, sizeof expect, "model-%05zu-of-%05zu.safetensors", ++k, n);
    EXPECT_EQ(file, expect);
    EXPECT_TRUE(fs::exists(many.str(file)));
    if (shard_tensors[file] > 1) {
      EXPECT_LE(bytes, 4'000'000u) << file;  // only a tensor over the limit stands alone
    }
  }
  EXPECT_FALSE(fs::exists(many.str("model.safetensors")));

  auto a = HfCheckpoint::open(one.str());
  auto b = HfCheckpoint::open(many.str());
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(tensor_bytes(**a), tensor_bytes(**b));

  // Rewriting as one file removes the shards and the index.
  o.max_shard_bytes = 1'000'000'000;
  write_ok(o);
  EXPECT_FALSE(fs::exists(many.str("model.safetensors.index.json")));
  for (const auto& e : fs::directory_iterator(many.path))
    EXPECT_NE(e.path().filename().string().rfind("model-", 0), 0u) << e.path();
  EXPECT_EQ(dir_bytes(one.str()), dir_bytes(many.str()));
}

TEST(MakeModel, SameSeedSameBytesWhateverTheThreadsOtherSeedOtherWeights) {
  TempDir a, b, c;
  RandomCheckpointOptions o = tiny_options(a.str());
  o.seed = 7;
  o.n_threads = 1;
  write_ok(o);
  o.out_dir = b.str();
  o.n_threads = 4;
  write_ok(o);
  o.out_dir = c.str();
  o.seed = 8;
  write_ok(o);
  const auto fa = dir_bytes(a.str()), fb = dir_bytes(b.str()), fc = dir_bytes(c.str());
  EXPECT_EQ(fa, fb);
  ASSERT_EQ(fa.size(), fc.size());
  EXPECT_EQ(fa.at("config.json"), fc.at("config.json"));
  EXPECT_EQ(fa.at("tokenizer.json"), fc.at("tokenizer.json"));
  EXPECT_NE(fa.at("model.safetensors"), fc.at("model.safetensors"));
  // Only the header's seed entry and the data differ: same size.
  EXPECT_EQ(fa.at("model.safetensors").size(), fc.at("model.safetensors").size());
}

// Greedy decoding for 16 tokens through the engine, and finite logits from the model itself.
void expect_runs_on_cpu(const std::string& dir) {
  EngineConfig ec;
  ec.model_path = dir;
  ec.n_threads = 2;
  ec.kv_cache_mb = 16;
  ec.check_invariants = true;
  auto e = EngineCore::create(ec);
  ASSERT_TRUE(e.ok()) << e.error().message;
  GenerateRequest r;
  r.prompt = (*e)->tokenizer().encode("The capital of France is", true, false);
  ASSERT_FALSE(r.prompt.empty());
  r.params.temperature = 0.0f;
  r.params.max_tokens = 16;
  r.params.ignore_eos = true;
  auto id = (*e)->add_request(r);
  ASSERT_TRUE(id.ok()) << id.error().message;
  std::vector<int32_t> out;
  for (int guard = 0; (*e)->has_work() && guard < 1000; ++guard)
    for (const RequestOutput& o : (*e)->step())
      out.insert(out.end(), o.new_tokens.begin(), o.new_tokens.end());
  ASSERT_EQ(out.size(), 16u);
  for (int32_t t : out) EXPECT_TRUE(t >= 0 && t < 49152);

  auto src = open_model_source(dir);
  ASSERT_TRUE(src.ok());
  auto backend = make_cpu_backend(2);
  auto m = LlamaModel::create(**src, *backend, 64, 64);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const ModelConfig& c = (*src)->config();
  auto kv = backend->create_kv_storage(
      KvGeometry{c.n_layers, 4, 16, c.n_kv_heads, c.head_dim, DType::f16});
  ASSERT_TRUE(kv.ok());
  StepInput in;
  for (int32_t p = 0; p < (int32_t)r.prompt.size(); ++p) {
    in.tokens.push_back(r.prompt[(size_t)p]);
    in.positions.push_back(p);
    in.slots.push_back(p);
    in.logit_rows.push_back(p);
  }
  in.q_start = {0};
  in.q_len = {(int32_t)r.prompt.size()};
  in.ctx_len = {(int32_t)r.prompt.size()};
  in.max_blocks = 4;
  in.block_tables = {0, 1, 2, 3};
  std::vector<float> logits(in.logit_rows.size() * (size_t)c.vocab_size);
  (*m)->forward(in, **kv, logits.data());
  double sum2 = 0;
  for (float x : logits) {
    ASSERT_TRUE(std::isfinite(x));
    sum2 += (double)x * x;
  }
  const double rms = std::sqrt(sum2 / (double)logits.size());
  EXPECT_GT(rms, 0.05);  // not all zero
  EXPECT_LT(rms, 20.0);  // activations stayed in range
}

TEST(MakeModel, EngineGeneratesFromTheTinyBf16Checkpoint) {
  TempDir dir;
  write_ok(tiny_options(dir.str()));
  expect_runs_on_cpu(dir.str());
}

TEST(MakeModel, F16CheckpointLoadsAndRuns) {
  TempDir dir;
  RandomCheckpointOptions o = tiny_options(dir.str());
  o.dtype = DType::f16;
  write_ok(o);
  auto ck = HfCheckpoint::open(dir.str());
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  const TensorInfo* t = (*ck)->find("blk.0.ffn_up.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::f16);
  EXPECT_EQ(reinterpret_cast<const uint16_t*>(t->data)[5],
            fp32_to_fp16(random_weight_value(0, tiny(), "model.layers.0.mlp.up_proj.weight", 5)));
  EXPECT_EQ(nlohmann::json::parse(testing::read_file(dir.str("config.json")))["torch_dtype"],
            "float16");
  expect_runs_on_cpu(dir.str());
}

TEST(MakeModel, DefaultTokenizerReadsBackAsTheGgufTokenizer) {
  TempDir dir;
  write_ok(tiny_options(dir.str()));
  auto hf = load_hf_tokenizer(dir.str());
  auto gg = gguf_tokenizer();
  ASSERT_TRUE(hf && gg);
  const TokenizerSpec& a = hf->spec();
  const TokenizerSpec& b = gg->spec();
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.merges, b.merges);
  EXPECT_EQ(a.types, b.types);
  EXPECT_EQ(a.pre, b.pre);
  EXPECT_EQ(a.bos_id, b.bos_id);
  EXPECT_EQ(a.eos_id, b.eos_id);
  EXPECT_EQ(a.unk_id, b.unk_id);
  EXPECT_EQ(a.pad_id, b.pad_id);
  EXPECT_EQ(a.eot_ids, b.eot_ids);
  EXPECT_EQ(a.add_bos, b.add_bos);
  EXPECT_EQ(a.chat_template, b.chat_template);
  // Same ids as the GGUF tokenizer (hence llama.cpp's, tests/fixtures), and a round trip.
  const auto texts = fixture_texts();
  ASSERT_GT(texts.size(), 100u);
  for (const std::string& s : texts) {
    const auto ids = hf->encode(s, false, false);
    EXPECT_EQ(ids, gg->encode(s, false, false)) << s;
    EXPECT_EQ(hf->decode(ids), s) << s;
  }
  const auto chat = hf->encode("<|im_start|>user\nHi<|im_end|>", false, true);
  EXPECT_EQ(chat.front(), 1);
  EXPECT_EQ(chat.back(), 2);
}

// The cut-down byte-level tokenizer as it is written for a llama2 shape (32000 ids), and the
// bytes-only variant without a source model: both read back, stay inside the vocabulary and
// round-trip every fixture text.
TEST(MakeModel, ByteLevelFallbackTokenizerRoundTrips) {
  auto gg = gguf_tokenizer();
  ASSERT_TRUE(gg);
  struct Case {
    const TokenizerSpec* base;
    int64_t max_vocab;
    int64_t max_merges;
  };
  for (const Case& k :
       {Case{&gg->spec(), 32000, -1}, Case{&gg->spec(), 49152, 100}, Case{nullptr, 32000, -1}}) {
    auto spec = byte_level_tokenizer_spec(k.base, k.max_vocab, k.max_merges);
    ASSERT_TRUE(spec.ok()) << spec.error().message;
    EXPECT_LE((int64_t)spec->tokens.size(), k.max_vocab);
    if (k.base == nullptr) {
      EXPECT_EQ(spec->tokens.size(), 3u + 256u);
      EXPECT_TRUE(spec->merges.empty());
    } else if (k.max_merges >= 0) {
      EXPECT_EQ((int64_t)spec->merges.size(), k.max_merges);
    } else {
      EXPECT_EQ((int64_t)spec->tokens.size(), k.max_vocab);  // filled up with merges
    }
    auto json = hf_tokenizer_json(*spec);
    auto cfg = hf_tokenizer_config_json(*spec, 4096);
    ASSERT_TRUE(json.ok() && cfg.ok());
    auto back = tokenizer_spec_from_hf_json(*json, *cfg, "fallback/tokenizer.json");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->tokens, spec->tokens);
    EXPECT_EQ(back->merges, spec->merges);
    EXPECT_EQ(back->bos_id, spec->bos_id);
    EXPECT_EQ(back->eos_id, spec->eos_id);
    auto tok = Tokenizer::create(std::move(*back));
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    EXPECT_EQ((*tok)->token_to_bytes((*tok)->eos_id(), true), "<|im_end|>");
    for (const std::string& s : fixture_texts()) {
      const auto ids = (*tok)->encode(s, false, false);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < k.max_vocab);
      EXPECT_EQ((*tok)->decode(ids), s) << s;
      if (k.base == nullptr) {
        EXPECT_EQ(ids.size(), s.size()) << s;  // bytes only: one token per byte
      } else {
        // Fewer merges, more tokens: never shorter than the full tokenizer's encoding.
        EXPECT_GE(ids.size(), gg->encode(s, false, false).size()) << s;
      }
    }
  }

  // Written through the library for the tiny shape, and loaded by the engine's path.
  TempDir dir;
  RandomCheckpointOptions o = tiny_options(dir.str());
  o.tokenizer = CheckpointTokenizer::byte_level;
  o.max_byte_level_merges = 1000;
  const RandomCheckpointInfo info = write_ok(o);
  EXPECT_FALSE(info.default_tokenizer);
  EXPECT_EQ(info.tokenizer_merges, 1000);
  auto hf = load_hf_tokenizer(dir.str());
  ASSERT_TRUE(hf);
  EXPECT_EQ(hf->vocab_size(), info.tokenizer_vocab);
  for (const std::string& s : fixture_texts())
    EXPECT_EQ(hf->decode(hf->encode(s, false, false)), s);
  const auto cfg = nlohmann::json::parse(testing::read_file(dir.str("config.json")));
  EXPECT_EQ(cfg["bos_token_id"].get<int>(), hf->bos_id());
  EXPECT_EQ(cfg["eos_token_id"].get<int>(), hf->eos_id());
  expect_runs_on_cpu(dir.str());
}

// The real shapes: config.json parses back into the right ModelConfig, the automatic
// tokenizer choice is right, and the tensor list has the published parameter counts.
TEST(MakeModel, RealShapesConfigAndParameterCounts) {
  auto gg = gguf_tokenizer();
  ASSERT_TRUE(gg);
  struct Expect {
    const char* name;
    int64_t d, layers, heads, kv, ff, vocab, ctx, params;
    float theta;
    bool default_tokenizer;
  };
  const Expect cases[] = {
      {"llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 6738415616, 10000.0f, false},
      {"llama2-13b", 5120, 40, 40, 40, 13824, 32000, 4096, 13015864320, 10000.0f, false},
      {"llama3-8b", 4096, 32, 32, 8, 14336, 128256, 131072, 8030261248, 500000.0f, true},
      // The published parameter counts (safetensors total_size / 2) of
      // Qwen/Qwen2.5-7B-Instruct, Qwen/Qwen3-8B and mistralai/Mistral-7B-Instruct-v0.3.
      {"qwen2.5-7b", 3584, 28, 28, 4, 18944, 152064, 32768, 7615616512, 1e6f, true},
      {"qwen3-8b", 4096, 36, 32, 8, 12288, 151936, 40960, 8190735360, 1e6f, true},
      {"mistral-7b", 4096, 32, 32, 8, 14336, 32768, 32768, 7248023552, 1e6f, false},
  };
  for (const Expect& e : cases) {
    SCOPED_TRACE(e.name);
    auto shape = find_llama_shape(e.name);
    ASSERT_TRUE(shape.ok());
    RandomCheckpointOptions o;
    o.shape = *shape;
    o.tokenizer_source = testing::default_model_path();
    auto tok = random_checkpoint_tokenizer(o);
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    EXPECT_EQ(tok->merges.size() == gg->spec().merges.size(), e.default_tokenizer);
    EXPECT_LE((int64_t)tok->tokens.size(), e.vocab);
    auto c = parse_hf_config(hf_config_json(*shape, DType::bf16, *tok), "config.json");
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->d_model, e.d);
    EXPECT_EQ(c->n_layers, e.layers);
    EXPECT_EQ(c->n_heads, e.heads);
    EXPECT_EQ(c->n_kv_heads, e.kv);
    EXPECT_EQ(c->head_dim, 128);
    EXPECT_EQ(c->d_ff, e.ff);
    EXPECT_EQ(c->vocab_size, e.vocab);
    EXPECT_EQ(c->max_context, e.ctx);
    EXPECT_FLOAT_EQ(c->rope_theta, e.theta);
    EXPECT_FALSE(c->tied_embeddings);
    EXPECT_EQ(c->arch, shape->arch);
    EXPECT_EQ(c->qkv_bias, shape->arch == "qwen2");
    EXPECT_EQ(c->qk_norm, shape->arch == "qwen3");
    EXPECT_EQ(c->sliding_window, 0);
    EXPECT_FLOAT_EQ(c->rms_eps, shape->arch.rfind("qwen", 0) == 0 ? 1e-6f : 1e-5f);
    int64_t params = 0;
    for (const SafetensorsTensor& t : random_checkpoint_tensors(*shape, DType::bf16))
      params += t.n_elements();
    EXPECT_EQ(params, e.params);
    // Shards of at most 5 GB, as Hugging Face writes them.
    const auto plan =
        plan_safetensors_shards(random_checkpoint_tensors(*shape, DType::bf16), 5'000'000'000ull);
    EXPECT_GE(plan.size(), (size_t)((params * 2 + 4'999'999'999) / 5'000'000'000));
    EXPECT_LE(plan.size(), (size_t)((params * 2 + 4'999'999'999) / 5'000'000'000) + 1);
    for (const auto& p : plan) EXPECT_LE(p.data_bytes, 5'000'000'000u);
    if (std::string(e.name) == "llama3-8b") {
      EXPECT_EQ(c->rope_scaling.type, "llama3");
      EXPECT_FLOAT_EQ(c->rope_scaling.factor, 8.0f);
      EXPECT_FLOAT_EQ(c->rope_scaling.low_freq_factor, 1.0f);
      EXPECT_FLOAT_EQ(c->rope_scaling.high_freq_factor, 4.0f);
      EXPECT_EQ(c->rope_scaling.original_max_position, 8192);
    } else {
      EXPECT_EQ(c->rope_scaling.type, "none");
    }
  }
}

TEST(MakeModel, ProblemsAreErrorsNotCrashes) {
  EXPECT_FALSE(find_llama_shape("llama2-70b").ok());
  TempDir dir;
  // The default tokenizer does not fit 32000 ids.
  auto shape = find_llama_shape("llama2-7b");
  ASSERT_TRUE(shape.ok());
  RandomCheckpointOptions o;
  o.shape = *shape;
  o.out_dir = dir.str("x");
  o.tokenizer = CheckpointTokenizer::default_model;
  o.tokenizer_source = testing::default_model_path();
  auto r = write_random_checkpoint(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("32000"), std::string::npos) << r.error().message;
  EXPECT_FALSE(fs::exists(dir.str("x/model.safetensors")));
  // A missing tokenizer source.
  o = tiny_options(dir.str("y"));
  o.tokenizer_source = dir.str("no-such-model.gguf");
  EXPECT_FALSE(write_random_checkpoint(o).ok());
  // Unsupported dtype.
  o = tiny_options(dir.str("y"));
  o.dtype = DType::q4_0;
  EXPECT_FALSE(write_random_checkpoint(o).ok());
  // The output path is a file.
  { std::ofstream(dir.str("file")) << "x"; }
  o = tiny_options(dir.str("file"));
  r = write_random_checkpoint(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("file"), std::string::npos) << r.error().message;
}

// A write that the system refuses (here: a file size limit, as a full disk would) is an
// Error naming the file, and leaves no partial weight files behind.
TEST(MakeModel, RefusedWriteIsAnErrorAndLeavesNoPartialFiles) {
  TempDir dir;
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  struct sigaction ign {
  }, prev{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ign, &prev);
  struct rlimit lim = old;
  lim.rlim_cur = 8u << 20;  // the tokenizer files fit, the weights (63 MB) do not
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  auto r = write_random_checkpoint(tiny_options(dir.str()));
  setrlimit(RLIMIT_FSIZE, &old);
  sigaction(SIGXFSZ, &prev, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("model.safetensors"), std::string::npos) << r.error().message;
  EXPECT_FALSE(fs::exists(dir.str("model.safetensors")));
}

}  // namespace
}  // namespace infercept
