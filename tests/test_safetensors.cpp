// safetensors / Hugging Face checkpoint tests: tiny checkpoints (single file and sharded)
// written here, loaded through HfCheckpoint and open_model_source; bad offsets, dtypes,
// shapes, missing tensors and bad configs give Errors naming the file and tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "core/half.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace infercept {
namespace {

using json = nlohmann::json;

struct StTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string data;
};

// Builds a .safetensors file; `patch` may edit the header JSON before it is written.
std::string build_safetensors(const std::vector<StTensor>& ts,
                              const std::function<void(json&)>& patch = nullptr) {
  json h = json::object();
  h["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", t.dtype},
                 {"shape", t.shape},
                 {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data += t.data;
  }
  if (patch) patch(h);
  std::string hs = h.dump();
  while (hs.size() % 8 != 0) hs += ' ';
  std::string out(8, '\0');
  const uint64_t n = hs.size();
  std::memcpy(&out[0], &n, 8);
  return out + hs + data;
}

std::string f32_data(int64_t n, float seed) {
  std::string b((size_t)n * 4, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float v = seed + 0.01f * (float)i;
    std::memcpy(&b[(size_t)i * 4], &v, 4);
  }
  return b;
}

std::string bf16_data(int64_t n, float seed) {
  std::string b((size_t)n * 2, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t v = fp32_to_bf16(seed + (float)i);
    std::memcpy(&b[(size_t)i * 2], &v, 2);
  }
  return b;
}

struct TinyHf {
  int64_t layers = 2, d = 16, heads = 4, kv = 2, ff = 32, vocab = 24;
  std::string arch = "LlamaForCausalLM";
  bool lm_head = false;
  bool bias = false;
  int64_t hd() const { return d / heads; }

  json config() const {
    json c = {{"architectures", {arch}},
              {"hidden_size", d},
              {"intermediate_size", ff},
              {"num_hidden_layers", layers},
              {"num_attention_heads", heads},
              {"num_key_value_heads", kv},
              {"rms_norm_eps", 1e-5},
              {"rope_theta", 500000.0},
              {"max_position_embeddings", 128},
              {"vocab_size", vocab},
              {"tie_word_embeddings", !lm_head},
              {"torch_dtype", "bfloat16"}};
    return c;
  }
  std::vector<StTensor> tensors() const {
    std::vector<StTensor> ts;
    float seed = 0;
    auto add = [&](const std::string& n, std::vector<int64_t> shape, bool bf16 = true) {
      int64_t e = 1;
      for (int64_t x : shape) e *= x;
      seed += 1;
      ts.push_back(
          {n, bf16 ? "BF16" : "F32", shape, bf16 ? bf16_data(e, seed) : f32_data(e, seed)});
    };
    add("model.embed_tokens.weight", {vocab, d});
    add("model.norm.weight", {d}, false);
    if (lm_head) add("lm_head.weight", {vocab, d});
    for (int64_t i = 0; i < layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      add(p + "input_layernorm.weight", {d}, false);
      add(p + "post_attention_layernorm.weight", {d}, false);
      add(p + "self_attn.q_proj.weight", {heads * hd(), d});
      add(p + "self_attn.k_proj.weight", {kv * hd(), d});
      add(p + "self_attn.v_proj.weight", {kv * hd(), d});
      add(p + "self_attn.o_proj.weight", {d, heads * hd()});
      if (bias) {
        add(p + "self_attn.q_proj.bias", {heads * hd()});
        add(p + "self_attn.k_proj.bias", {kv * hd()});
        add(p + "self_attn.v_proj.bias", {kv * hd()});
      }
      add(p + "mlp.gate_proj.weight", {ff, d});
      add(p + "mlp.up_proj.weight", {ff, d});
      add(p + "mlp.down_proj.weight", {d, ff});
      add(p + "self_attn.rotary_emb.inv_freq", {hd() / 2}, false);
    }
    return ts;
  }
};

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("infercept_test_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary).write(bytes.data(), (std::streamsize)bytes.size());
    return p;
  }
  void write_checkpoint(const TinyHf& m, const std::function<void(json&)>& patch = nullptr) {
    write("config.json", m.config().dump(2));
    write("model.safetensors", build_safetensors(m.tensors(), patch));
  }
  Error open_error() {
    auto r = HfCheckpoint::open(dir_.string());
    EXPECT_FALSE(r.ok());
    if (r.ok()) return Error{"<no error>"};
    return r.error();
  }
  static void expect_has(const Error& e, const std::string& needle) {
    EXPECT_NE(e.message.find(needle), std::string::npos) << e.message;
  }

  std::filesystem::path dir_;
};

TEST(HfNames, Canonical) {
  EXPECT_EQ(hf_to_canonical_name("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(hf_to_canonical_name("model.norm.weight"), "output_norm.weight");
  EXPECT_EQ(hf_to_canonical_name("lm_head.weight"), "output.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.0.input_layernorm.weight"),
            "blk.0.attn_norm.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.17.post_attention_layernorm.weight"),
            "blk.17.ffn_norm.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.3.self_attn.q_proj.weight"), "blk.3.attn_q.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.3.self_attn.k_proj.bias"), "blk.3.attn_k.bias");
  EXPECT_EQ(hf_to_canonical_name("model.layers.3.self_attn.v_proj.weight"), "blk.3.attn_v.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.3.self_attn.o_proj.weight"),
            "blk.3.attn_output.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.3.mlp.gate_proj.weight"), "blk.3.ffn_gate.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.3.mlp.up_proj.weight"), "blk.3.ffn_up.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.3.mlp.down_proj.weight"), "blk.3.ffn_down.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.3.self_attn.rotary_emb.inv_freq"), "");
  EXPECT_EQ(hf_to_canonical_name("model.layers.x.mlp.up_proj.weight"), "");
  EXPECT_EQ(hf_to_canonical_name("model.layers.3"), "");
  EXPECT_EQ(hf_to_canonical_name(""), "");
}

TEST(SafetensorsParse, RoundTripAndOffsets) {
  const std::string bytes = build_safetensors({{"a", "F32", {2, 3}, f32_data(6, 1.0f)},
                                               {"b", "F16", {4}, std::string(8, '\x01')},
                                               {"c", "BF16", {}, bf16_data(1, 7.0f)},
                                               {"empty", "F32", {0, 5}, ""}});
  auto r = parse_safetensors((const uint8_t*)bytes.data(), bytes.size(), "m.safetensors");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& ts = *r;
  ASSERT_EQ(ts.size(), 4u);
  const TensorInfo& a = ts.at("a");
  EXPECT_EQ(a.dtype, DType::f32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.n_bytes, 24u);
  EXPECT_EQ(a.file, "m.safetensors");
  float v;
  std::memcpy(&v, a.data + 4, 4);
  EXPECT_FLOAT_EQ(v, 1.01f);
  EXPECT_EQ(ts.at("b").dtype, DType::f16);
  EXPECT_EQ(ts.at("c").dtype, DType::bf16);
  EXPECT_EQ(ts.at("c").n_elements(), 1);
  EXPECT_EQ(ts.at("empty").n_bytes, 0u);
  float out[6];
  dequantize_to_f32(DType::f32, a.data, out, 6);
  EXPECT_FLOAT_EQ(out[5], 1.05f);
  dequantize_to_f32(DType::bf16, ts.at("c").data, out, 1);
  EXPECT_FLOAT_EQ(out[0], 7.0f);
}

void expect_parse_error(const std::string& bytes, const std::string& needle) {
  auto r = parse_safetensors((const uint8_t*)bytes.data(), bytes.size(), "bad.safetensors");
  ASSERT_FALSE(r.ok()) << "expected error with " << needle;
  EXPECT_NE(r.error().message.find("bad.safetensors"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
}

TEST(SafetensorsParse, Errors) {
  const std::vector<StTensor> one = {{"w", "F32", {2, 2}, f32_data(4, 0)}};
  expect_parse_error("", "truncated");
  expect_parse_error(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "header length");
  std::string bad_json(8, '\0');
  bad_json[0] = 3;
  expect_parse_error(bad_json + "{x}", "not valid JSON");
  std::string arr(8, '\0');
  arr[0] = 2;
  expect_parse_error(arr + "[]", "not a JSON object");
  expect_parse_error(build_safetensors(one, [](json& h) { h["w"]["dtype"] = "I64"; }),
                     "tensor 'w' has unsupported dtype 'I64'");
  expect_parse_error(build_safetensors(one, [](json& h) { h["w"]["dtype"] = 5; }), "'w'");
  expect_parse_error(build_safetensors(one,
                                       [](json& h) {
                                         h["w"]["shape"] = {3, 2};
                                       }),
                     "tensor 'w' has 16 bytes of data but shape [3, 2]");
  expect_parse_error(build_safetensors(one, [](json& h) { h["w"]["shape"] = {-1, 2}; }), "'w'");
  expect_parse_error(build_safetensors(one, [](json& h) { h["w"]["shape"] = {2.5, 2}; }), "'w'");
  expect_parse_error(build_safetensors(one, [](json& h) { h["w"]["shape"] = "2x2"; }), "'w'");
  expect_parse_error(build_safetensors(one,
                                       [](json& h) {
                                         h["w"]["shape"] = {1ull << 62, 1ull << 62};
                                       }),
                     "'w'");
  expect_parse_error(build_safetensors(one,
                                       [](json& h) {
                                         h["w"]["shape"] = {1ull << 40, 0, 1ull << 40};
                                         h["w"]["data_offsets"] = {0, 0};
                                       }),
                     "'w'");
  expect_parse_error(build_safetensors(one,
                                       [](json& h) {
                                         h["w"]["data_offsets"] = {0, 17};
                                       }),
                     "tensor 'w' data_offsets [0, 17) lie outside");
  expect_parse_error(build_safetensors(one,
                                       [](json& h) {
                                         h["w"]["data_offsets"] = {8, 4};
                                       }),
                     "'w'");
  expect_parse_error(build_safetensors(one, [](json& h) { h["w"]["data_offsets"] = {0}; }), "'w'");
  expect_parse_error(build_safetensors(one,
                                       [](json& h) {
                                         h["w"]["data_offsets"] = {-4, 12};
                                       }),
                     "'w'");
  expect_parse_error(build_safetensors(one,
                                       [](json& h) {
                                         h["w"]["data_offsets"] = {~0ull - 3, ~0ull};
                                       }),
                     "'w'");
  expect_parse_error(build_safetensors(one, [](json& h) { h["w"] = 3; }), "'w'");
  expect_parse_error(build_safetensors(one, [](json& h) { h["w"].erase("dtype"); }), "'w'");
  // Truncated data section.
  std::string b = build_safetensors(one);
  b.resize(b.size() - 1);
  expect_parse_error(b, "'w'");
}

TEST(SafetensorsParse, GarbageNeverCrashes) {
  const std::string good = build_safetensors({{"w", "F32", {2, 2}, f32_data(4, 0)}});
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string b = good;
    const int flips = 1 + (int)(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = (char)(rng() & 0xff);
    auto r = parse_safetensors((const uint8_t*)b.data(), b.size(), "g");
    if (r.ok())
      for (const auto& [n, t] : *r)
        if (t.n_bytes) {
          volatile uint8_t x = t.data[t.n_bytes - 1];
          (void)x;
        }
    (void)parse_hf_config(b, "g");
  }
}

TEST(SafetensorsParse, CorpusSeeds) {
  const std::string dir = std::string(INFERCEPT_SOURCE_DIR) + "/fuzz/corpus/";
  const std::string st = testing::read_file(dir + "st_tiny.safetensors");
  if (st.empty()) GTEST_SKIP() << "no corpus";
  auto r = parse_safetensors((const uint8_t*)st.data(), st.size(), "st_tiny.safetensors");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->size(), 3u);
  EXPECT_EQ(r->at("lm_head.weight").dtype, DType::f16);
  auto c = parse_hf_config(testing::read_file(dir + "hf_config.json"), "hf_config.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->rope_scaling.type, "llama3");
  EXPECT_EQ(c->rope_scaling.original_max_position, 32);
}

TEST(HfConfig, ParsesFieldsAndDefaults) {
  TinyHf m;
  json c = m.config();
  c["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  c["head_dim"] = nullptr;
  auto r = parse_hf_config(c.dump(), "config.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->arch, "llama");
  EXPECT_EQ(r->n_layers, 2);
  EXPECT_EQ(r->d_model, 16);
  EXPECT_EQ(r->n_heads, 4);
  EXPECT_EQ(r->n_kv_heads, 2);
  EXPECT_EQ(r->head_dim, 4);
  EXPECT_EQ(r->d_ff, 32);
  EXPECT_EQ(r->vocab_size, 24);
  EXPECT_EQ(r->max_context, 128);
  EXPECT_FLOAT_EQ(r->rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(r->rope_theta, 500000.0f);
  EXPECT_EQ(r->rope_style, RopeStyle::neox);
  EXPECT_EQ(r->rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(r->rope_scaling.factor, 8.0f);
  EXPECT_EQ(r->rope_scaling.original_max_position, 8192);
  EXPECT_TRUE(r->tied_embeddings);
  EXPECT_FALSE(r->qkv_bias);

  c["architectures"] = {"Qwen2ForCausalLM"};
  c["head_dim"] = 8;
  c.erase("rope_scaling");
  c.erase("num_key_value_heads");
  auto q = parse_hf_config(c.dump(), "config.json");
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->arch, "qwen2");
  EXPECT_TRUE(q->qkv_bias);
  EXPECT_EQ(q->head_dim, 8);
  EXPECT_EQ(q->n_kv_heads, 4);

  // Llama's attention_bias puts a bias on o_proj too, which the forward pass does not take:
  // refused, not dropped.
  c["architectures"] = {"LlamaForCausalLM"};
  c["attention_bias"] = true;
  auto lb = parse_hf_config(c.dump(), "config.json");
  ASSERT_FALSE(lb.ok());
  EXPECT_NE(lb.error().message.find("o_proj"), std::string::npos) << lb.error().message;
}

// model_type names the architecture (the class alone in older files); Qwen3 gets its q/k
// norms and keeps an explicit head_dim; Mistral's window caps the context.
TEST(HfConfig, ArchitecturesByModelType) {
  TinyHf m;
  json c = m.config();
  c.erase("architectures");
  c["model_type"] = "qwen3";
  c["head_dim"] = 8;  // 16 / 4 = 4 otherwise
  auto q3 = parse_hf_config(c.dump(), "config.json");
  ASSERT_TRUE(q3.ok()) << q3.error().message;
  EXPECT_EQ(q3->arch, "qwen3");
  EXPECT_TRUE(q3->qk_norm);
  EXPECT_FALSE(q3->qkv_bias);
  EXPECT_EQ(q3->head_dim, 8);
  EXPECT_EQ(q3->rope_style, RopeStyle::neox);
  c["architectures"] = {"Qwen3ForCausalLM"};
  EXPECT_TRUE(parse_hf_config(c.dump(), "config.json").ok());

  c = m.config();
  c["architectures"] = {"MistralForCausalLM"};
  c["model_type"] = "mistral";
  c["max_position_embeddings"] = 32768;
  c["sliding_window"] = 4096;
  auto mi = parse_hf_config(c.dump(), "config.json");
  ASSERT_TRUE(mi.ok()) << mi.error().message;
  EXPECT_EQ(mi->arch, "mistral");
  EXPECT_EQ(mi->sliding_window, 4096);
  EXPECT_EQ(mi->max_context, 4096);
  EXPECT_NE(mi->max_context_note.find("4096"), std::string::npos) << mi->max_context_note;
  c["sliding_window"] = nullptr;  // Mistral 7B v0.3
  mi = parse_hf_config(c.dump(), "config.json");
  ASSERT_TRUE(mi.ok());
  EXPECT_EQ(mi->max_context, 32768);
  EXPECT_EQ(mi->sliding_window, 0);
  EXPECT_TRUE(mi->max_context_note.empty());
  c["sliding_window"] = 65536;  // longer than the context: nothing to cap
  EXPECT_EQ(parse_hf_config(c.dump(), "config.json")->max_context, 32768);

  // Qwen2's window counts only with use_sliding_window (or sliding layer types).
  c = m.config();
  c["architectures"] = {"Qwen2ForCausalLM"};
  c["model_type"] = "qwen2";
  c["sliding_window"] = 64;
  c["use_sliding_window"] = false;
  EXPECT_EQ(parse_hf_config(c.dump(), "config.json")->max_context, 128);
  c["use_sliding_window"] = true;
  EXPECT_EQ(parse_hf_config(c.dump(), "config.json")->max_context, 64);
  c["use_sliding_window"] = false;
  c["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_EQ(parse_hf_config(c.dump(), "config.json")->max_context, 64);
  c["layer_types"] = {"full_attention", "full_attention"};
  EXPECT_EQ(parse_hf_config(c.dump(), "config.json")->max_context, 128);

  // Newer transformers' rope_parameters.
  c = m.config();
  c.erase("rope_theta");
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  auto rp = parse_hf_config(c.dump(), "config.json");
  ASSERT_TRUE(rp.ok()) << rp.error().message;
  EXPECT_FLOAT_EQ(rp->rope_theta, 1e6f);
  c["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_FALSE(parse_hf_config(c.dump(), "config.json").ok());
}

TEST(HfConfig, Errors) {
  auto err = [](const json& c, const std::string& needle) {
    auto r = parse_hf_config(c.dump(), "cfg/config.json");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.error().message.find("cfg/config.json"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
  };
  TinyHf m;
  json c = m.config();
  json x = c;
  x["architectures"] = {"GPT2LMHeadModel"};
  err(x, "GPT2LMHeadModel");
  x = c;
  x.erase("architectures");
  err(x, "architectures");
  x = c;
  x.erase("hidden_size");
  err(x, "hidden_size");
  x = c;
  x["num_attention_heads"] = "four";
  err(x, "num_attention_heads");
  x = c;
  x["num_key_value_heads"] = 3;
  err(x, "n_kv_heads");
  x = c;
  x["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  err(x, "yarn");
  x = c;
  x["num_attention_heads"] = 0;
  err(x, "num_attention_heads");
  // An unknown model_type is named, with what is supported.
  x = c;
  x["model_type"] = "gemma2";
  x["architectures"] = {"Gemma2ForCausalLM"};
  err(x, "'gemma2'");
  err(x, "qwen3 (Qwen3ForCausalLM)");
  x["model_type"] = "qwen2_moe";
  x["architectures"] = {"Qwen2MoeForCausalLM"};
  err(x, "qwen2_moe");
  // A known model_type with a class that is not its causal LM.
  x = c;
  x["model_type"] = "qwen2";
  x["architectures"] = {"Qwen2ForSequenceClassification"};
  err(x, "Qwen2ForSequenceClassification");
  x = c;
  x["hidden_act"] = "gelu";
  err(x, "hidden_act");
  x = c;
  x["layer_types"] = {"chunked_attention", "full_attention"};
  err(x, "chunked_attention");
  auto r = parse_hf_config("{not json", "cfg/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("cfg/config.json"), std::string::npos);
}

TEST_F(SafetensorsTest, LoadsSingleFileCheckpoint) {
  TinyHf m;
  write_checkpoint(m);
  auto r = HfCheckpoint::open(dir_.string());
  ASSERT_TRUE(r.ok()) << r.error().message;
  const HfCheckpoint& ck = **r;
  EXPECT_EQ(ck.format(), "safetensors");
  EXPECT_EQ(ck.config().arch, "llama");
  EXPECT_TRUE(ck.config().tied_embeddings);
  EXPECT_EQ(ck.config().rope_style, RopeStyle::neox);
  EXPECT_EQ(ck.find("rope_freqs.weight"), nullptr);
  const TensorInfo* q = ck.find("blk.1.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::bf16);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(q->name, "blk.1.attn_q.weight");
  const TensorInfo* norm = ck.find("blk.0.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->dtype, DType::f32);
  // 2 + 9 per layer, inv_freq dropped.
  EXPECT_EQ(ck.tensors().size(), 2u + 9u * 2u);
  auto src = open_model_source(dir_.string());
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ((*src)->format(), "safetensors");
}

TEST_F(SafetensorsTest, LoadsShardedCheckpointWithBiasAndLmHead) {
  TinyHf m;
  m.arch = "Qwen2ForCausalLM";
  m.bias = true;
  m.lm_head = true;
  write("config.json", m.config().dump());
  const auto all = m.tensors();
  std::vector<StTensor> s1(all.begin(), all.begin() + (long)all.size() / 2);
  std::vector<StTensor> s2(all.begin() + (long)all.size() / 2, all.end());
  write("model-00001-of-00002.safetensors", build_safetensors(s1));
  write("model-00002-of-00002.safetensors", build_safetensors(s2));
  json idx = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  for (const auto& t : s1) idx["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : s2) idx["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  write("model.safetensors.index.json", idx.dump());
  auto r = HfCheckpoint::open(dir_.string());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)->config().arch, "qwen2");
  EXPECT_TRUE((*r)->config().qkv_bias);
  EXPECT_FALSE((*r)->config().tied_embeddings);
  ASSERT_NE((*r)->find("output.weight"), nullptr);
  ASSERT_NE((*r)->find("blk.1.attn_v.bias"), nullptr);
  EXPECT_NE((*r)->find("blk.1.attn_v.bias")->file.find("00002"), std::string::npos);

  // An index entry naming a tensor its shard lacks.
  idx["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors";
  write("model.safetensors.index.json", idx.dump());
  Error e = open_error();
  expect_has(e, "model.layers.9.mlp.up_proj.weight");
  expect_has(e, "model-00001-of-00002.safetensors");
  // A shard outside the directory.
  idx["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "../evil.safetensors";
  write("model.safetensors.index.json", idx.dump());
  expect_has(open_error(), "model.layers.9.mlp.up_proj.weight");
  // A missing shard file.
  idx["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "model-00003-of-00002.safetensors";
  write("model.safetensors.index.json", idx.dump());
  expect_has(open_error(), "model-00003-of-00002.safetensors");
}

TEST_F(SafetensorsTest, CheckpointErrorsNameFileAndTensor) {
  TinyHf m;
  // Missing tensor.
  write_checkpoint(m, [](json& h) { h.erase("model.layers.1.mlp.down_proj.weight"); });
  Error e = open_error();
  expect_has(e, dir_.string());
  expect_has(e, "missing tensor 'blk.1.ffn_down.weight'");
  // Shape mismatch with the config.
  TinyHf wrong = m;
  wrong.ff = 24;
  write("config.json", m.config().dump());
  write("model.safetensors", build_safetensors(wrong.tensors()));
  e = open_error();
  expect_has(e, "model.safetensors");
  expect_has(e, "'blk.0.ffn_gate.weight' has shape [24, 16], expected [32, 16]");
  // Bad dtype in the file.
  write_checkpoint(m, [](json& h) { h["model.norm.weight"]["dtype"] = "F8_E4M3"; });
  e = open_error();
  expect_has(e, "model.safetensors");
  expect_has(e, "'model.norm.weight' has unsupported dtype 'F8_E4M3'");
  // Bad offsets.
  write_checkpoint(m, [](json& h) { h["model.norm.weight"]["data_offsets"] = {0, 1 << 30}; });
  expect_has(open_error(), "'model.norm.weight' data_offsets");
  // No weights at all.
  std::filesystem::remove(dir_ / "model.safetensors");
  expect_has(open_error(), "neither model.safetensors nor model.safetensors.index.json");
  // No config.
  std::filesystem::remove(dir_ / "config.json");
  expect_has(open_error(), "config.json");
  auto r = open_model_source(dir_.string());
  ASSERT_FALSE(r.ok());
  expect_has(r.error(), dir_.string());
}

}  // namespace
}  // namespace infercept
