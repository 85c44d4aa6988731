// GGUF reader tests: round trips of every metadata and tensor type through files built by
// tests/gguf_writer.h, every failure mode giving an Error that names the file and the key or
// tensor, and the real default model's config.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/half.h"
#include "gguf_writer.h"
#include "io/gguf.h"
#include "test_util.h"

namespace infercept {
namespace {

using testing::GgufWriter;
using testing::TinyLlama;

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("infercept_test_gguf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary).write(bytes.data(), (std::streamsize)bytes.size());
    return p;
  }
  // Writes `w` and expects opening it to fail with a message holding the path and `needle`.
  void expect_error(const GgufWriter& w, const std::string& needle,
                    GgufLoad load = GgufLoad::model) {
    expect_error_bytes(w.build(), needle, load);
  }
  void expect_error_bytes(const std::string& bytes, const std::string& needle,
                          GgufLoad load = GgufLoad::model) {
    const std::string p = write("bad.gguf", bytes);
    auto r = GgufFile::open(p, load);
    ASSERT_FALSE(r.ok()) << "expected an error mentioning " << needle;
    const std::string& msg = r.error().message;
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }

  std::filesystem::path dir_;
};

void write_all_metadata_types(GgufWriter& w) {
  w.add_u8("t.u8", 200);
  w.add_i8("t.i8", -100);
  w.add_u16("t.u16", 60000);
  w.add_i16("t.i16", -30000);
  w.add_u32("t.u32", 4000000000u);
  w.add_i32("t.i32", -2000000000);
  w.add_u64("t.u64", 1ull << 40);
  w.add_i64("t.i64", -(1ll << 40));
  w.add_f32("t.f32", 1.5f);
  w.add_f64("t.f64", -2.25);
  w.add_bool("t.bool", true);
  w.add_string("t.str", "hello \xE2\x96\x81 world");
  w.add_string_array("t.strs", {"a", "", "ccc"});
  w.add_array<int32_t>("t.i32s", 5, {1, -2, 3});
  w.add_array<uint8_t>("t.u8s", 0, {7, 255});
  w.add_array<float>("t.f32s", 6, {0.5f, -1.0f});
  w.add_array<double>("t.f64s", 12, {3.0});
  w.add_array<uint8_t>("t.bools", 7, {1, 0});
  w.add_array<int32_t>("t.empty", 5, {});
}

void check_all_metadata_types(const GgufFile& g) {
  EXPECT_EQ(g.get_int("t.u8"), 200);
  EXPECT_EQ(g.get_int("t.i8"), -100);
  EXPECT_EQ(g.get_int("t.u16"), 60000);
  EXPECT_EQ(g.get_int("t.i16"), -30000);
  EXPECT_EQ(g.get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(g.get_int("t.i32"), -2000000000);
  EXPECT_EQ(g.get_int("t.u64"), 1ll << 40);
  EXPECT_EQ(g.get_int("t.i64"), -(1ll << 40));
  EXPECT_EQ(g.get_float("t.f32"), 1.5);
  EXPECT_EQ(g.get_float("t.f64"), -2.25);
  EXPECT_EQ(g.get_bool("t.bool"), true);
  EXPECT_EQ(g.get_string("t.str"), "hello \xE2\x96\x81 world");
  ASSERT_NE(g.get_string_array("t.strs"), nullptr);
  EXPECT_EQ(*g.get_string_array("t.strs"), (std::vector<std::string>{"a", "", "ccc"}));
  ASSERT_NE(g.get_int_array("t.i32s"), nullptr);
  EXPECT_EQ(*g.get_int_array("t.i32s"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*g.get_int_array("t.u8s"), (std::vector<int64_t>{7, 255}));
  EXPECT_EQ(*g.get_float_array("t.f32s"), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(*g.get_float_array("t.f64s"), (std::vector<double>{3.0}));
  EXPECT_EQ(*g.get_int_array("t.bools"), (std::vector<int64_t>{1, 0}));
  EXPECT_TRUE(g.get_int_array("t.empty")->empty());
  // Wrong-type and absent lookups give nullopt / nullptr.
  EXPECT_EQ(g.get_int("t.str"), std::nullopt);
  EXPECT_EQ(g.get_string("t.u8"), std::nullopt);
  EXPECT_EQ(g.get_bool("t.u8"), std::nullopt);
  EXPECT_EQ(g.get_int("absent"), std::nullopt);
  EXPECT_EQ(g.get_string_array("t.i32s"), nullptr);
  EXPECT_EQ(g.get("absent"), nullptr);
}

struct TypeCase {
  uint32_t id;
  DType dtype;
};
const TypeCase kTypes[] = {
    {testing::kGgmlF32, DType::f32},   {testing::kGgmlF16, DType::f16},
    {testing::kGgmlBF16, DType::bf16}, {testing::kGgmlI32, DType::i32},
    {testing::kGgmlQ4_0, DType::q4_0}, {testing::kGgmlQ4_1, DType::q4_1},
    {testing::kGgmlQ8_0, DType::q8_0}, {testing::kGgmlQ8_1, DType::q8_1},
    {testing::kGgmlQ4_K, DType::q4_k}, {testing::kGgmlQ6_K, DType::q6_k},
};

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string b(n, '\0');
  for (auto& c : b) c = (char)(rng() & 0xff);
  return b;
}

TEST_F(GgufTest, MetadataAndTensorsOfEveryTypeRoundTrip) {
  for (uint32_t version : {2u, 3u}) {
    GgufWriter w;
    w.version = version;
    write_all_metadata_types(w);
    std::vector<std::string> datas;
    for (const TypeCase& tc : kTypes) {
      // [3, 256]: 256 is a multiple of every block size.
      const size_t bytes = dtype_row_bytes(tc.dtype, 256) * 3;
      datas.push_back(random_bytes(bytes, tc.id));
      w.add_tensor("t" + std::to_string(tc.id), tc.id, {256, 3}, datas.back());
    }
    const std::string p = write("all.gguf", w.build());
    auto r = GgufFile::open(p, GgufLoad::container_only);
    ASSERT_TRUE(r.ok()) << r.error().message;
    const GgufFile& g = **r;
    EXPECT_EQ(g.version(), version);
    EXPECT_EQ(g.alignment(), 32u);
    EXPECT_EQ(g.data_offset() % 32, 0u);
    EXPECT_EQ(g.format(), "gguf");
    EXPECT_EQ(g.path(), p);
    check_all_metadata_types(g);
    ASSERT_EQ(g.tensors().size(), std::size(kTypes));
    for (size_t i = 0; i < std::size(kTypes); ++i) {
      const TensorInfo* t = g.find("t" + std::to_string(kTypes[i].id));
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->dtype, kTypes[i].dtype) << dtype_name(kTypes[i].dtype);
      EXPECT_EQ(t->shape, (std::vector<int64_t>{3, 256}));
      EXPECT_EQ(t->rows(), 3);
      EXPECT_EQ(t->cols(), 256);
      EXPECT_EQ(t->n_elements(), 768);
      EXPECT_EQ(t->file, p);
      ASSERT_EQ(t->n_bytes, datas[i].size());
      EXPECT_EQ(std::memcmp(t->data, datas[i].data(), t->n_bytes), 0);
    }
    EXPECT_EQ(g.find("nope"), nullptr);
  }
}

TEST_F(GgufTest, ShapesAreReversedAndAlignmentIsHonoured) {
  GgufWriter w;
  w.alignment = 64;
  w.add_u32("general.alignment", 64);
  w.add_tensor("a", testing::kGgmlF32, {2, 3, 4, 5}, testing::f32_bytes(120, 1.0f));
  w.add_tensor("b", testing::kGgmlF32, {7}, testing::f32_bytes(7, 2.0f));
  auto r = GgufFile::parse((const uint8_t*)nullptr, 0, "x", GgufLoad::container_only);
  EXPECT_FALSE(r.ok());
  const std::string bytes = w.build();
  auto g = GgufFile::parse((const uint8_t*)bytes.data(), bytes.size(), "mem.gguf",
                           GgufLoad::container_only);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ((*g)->alignment(), 64u);
  EXPECT_EQ((*g)->data_offset() % 64, 0u);
  EXPECT_EQ((*g)->find("a")->shape, (std::vector<int64_t>{5, 4, 3, 2}));
  EXPECT_EQ((*g)->find("b")->shape, (std::vector<int64_t>{7}));
  EXPECT_EQ(((uintptr_t)(*g)->find("b")->data - (uintptr_t)bytes.data()) % 64, 0u);
  float v;
  std::memcpy(&v, (*g)->find("b")->data, 4);
  EXPECT_EQ(v, 2.0f);
}

TEST_F(GgufTest, DequantizeF16AndF32) {
  std::string h;
  const float vals[4] = {1.0f, -2.5f, 0.0f, 65504.0f};
  for (float f : vals) {
    const uint16_t x = fp32_to_fp16(f);
    h.append((const char*)&x, 2);
  }
  float out[4];
  dequantize_to_f32(DType::f16, h.data(), out, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], vals[i]);
  dequantize_to_f32(DType::f32, vals, out, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], vals[i]);
}

TEST_F(GgufTest, TinyLlamaDerivesConfig) {
  for (uint32_t version : {2u, 3u}) {
    GgufWriter w;
    w.version = version;
    TinyLlama m;
    add_tiny_llama(w, m);
    const std::string p = write("tiny.gguf", w.build());
    auto r = GgufFile::open(p);
    ASSERT_TRUE(r.ok()) << r.error().message;
    const ModelConfig& c = (*r)->config();
    EXPECT_EQ(c.arch, "llama");
    EXPECT_EQ(c.name, "tiny");
    EXPECT_EQ(c.n_layers, 2);
    EXPECT_EQ(c.d_model, 16);
    EXPECT_EQ(c.n_heads, 4);
    EXPECT_EQ(c.n_kv_heads, 2);
    EXPECT_EQ(c.head_dim, 4);
    EXPECT_EQ(c.d_ff, 32);
    EXPECT_EQ(c.vocab_size, 24);  // from tokenizer.ggml.tokens
    EXPECT_EQ(c.max_context, 256);
    EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
    EXPECT_FLOAT_EQ(c.rope_theta, 50000.0f);
    EXPECT_EQ(c.rope_style, RopeStyle::interleaved);
    EXPECT_EQ(c.rope_scaling.type, "none");
    EXPECT_FALSE(c.rope_scaling.has_freq_factors_tensor);
    EXPECT_TRUE(c.tied_embeddings);
    EXPECT_FALSE(c.qkv_bias);
    EXPECT_EQ((*r)->find("blk.1.attn_k.weight")->shape, (std::vector<int64_t>{8, 16}));
  }
}

TEST_F(GgufTest, Qwen2WithBiasAndUntiedOutput) {
  GgufWriter w;
  TinyLlama m;
  m.arch = "qwen2";
  m.tied = false;
  m.qkv_bias = true;
  add_tiny_llama(w, m);
  w.add_string("qwen2.rope.scaling.type", "llama3");
  w.add_f32("qwen2.rope.scaling.factor", 8.0f);
  w.add_tensor("rope_freqs.weight", testing::kGgmlF32, {2}, testing::f32_bytes(2, 1.0f));
  auto r = GgufFile::open(write("q.gguf", w.build()));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ModelConfig& c = (*r)->config();
  EXPECT_EQ(c.rope_style, RopeStyle::neox);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_TRUE(c.rope_scaling.has_freq_factors_tensor);
}

TEST_F(GgufTest, Qwen3WithHeadNormsAndItsOwnHeadDim) {
  GgufWriter w;
  TinyLlama m;
  m.arch = "qwen3";
  m.qk_norm = true;
  m.explicit_head_dim = 8;  // d / n_heads = 4
  add_tiny_llama(w, m);
  auto r = GgufFile::open(write("q3.gguf", w.build()));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ModelConfig& c = (*r)->config();
  EXPECT_EQ(c.arch, "qwen3");
  EXPECT_EQ(c.rope_style, RopeStyle::neox);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.sliding_window, 0);

  // A qwen3 file without its head norms names the first missing one.
  GgufWriter w2;
  m.qk_norm = false;
  add_tiny_llama(w2, m);
  auto bad = GgufFile::open(write("q3bad.gguf", w2.build()));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("blk.0.attn_q_norm.weight"), std::string::npos)
      << bad.error().message;
}

TEST_F(GgufTest, SlidingWindowCapsTheContext) {
  GgufWriter w;
  add_tiny_llama(w, TinyLlama{});  // context_length 256
  w.add_u32("llama.attention.sliding_window", 64);
  auto r = GgufFile::open(write("sw.gguf", w.build()));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)->config().sliding_window, 64);
  EXPECT_EQ((*r)->config().max_context, 64);
  EXPECT_NE((*r)->config().max_context_note.find("sliding window"), std::string::npos);
}

TEST_F(GgufTest, VocabFallsBackToEmbeddingRowsAndKvHeadsToHeads) {
  GgufWriter w;
  TinyLlama m;
  m.n_kv = m.n_heads;
  GgufWriter full;
  add_tiny_llama(full, m);
  // Rebuild without tokens and without head_count_kv.
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 2);
  w.add_u32("llama.embedding_length", 16);
  w.add_u32("llama.feed_forward_length", 32);
  w.add_u32("llama.attention.head_count", 4);
  w.add_u32("llama.context_length", 64);
  std::string bytes = full.build();
  auto src = GgufFile::parse((const uint8_t*)bytes.data(), bytes.size(), "full");
  ASSERT_TRUE(src.ok()) << src.error().message;
  for (const auto& [name, t] : (*src)->tensors()) {
    std::vector<uint64_t> ne(t.shape.rbegin(), t.shape.rend());
    w.add_tensor(name, testing::kGgmlF32, ne, std::string((const char*)t.data, t.n_bytes));
  }
  auto r = GgufFile::open(write("v.gguf", w.build()));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)->config().vocab_size, 24);
  EXPECT_EQ((*r)->config().n_kv_heads, 4);
  EXPECT_FLOAT_EQ((*r)->config().rope_theta, 10000.0f);
}

// ---- failure modes -------------------------------------------------------------------

TEST_F(GgufTest, EveryTruncationIsAnError) {
  GgufWriter w;
  add_tiny_llama(w, TinyLlama{});
  const std::string bytes = w.build();
  const std::string p = write("full.gguf", bytes);
  ASSERT_TRUE(GgufFile::open(p).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = GgufFile::parse((const uint8_t*)bytes.data(), n, "cut.gguf");
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_NE(r.error().message.find("cut.gguf"), std::string::npos) << r.error().message;
  }
}

TEST_F(GgufTest, TruncatedInMetadataNamesKey) {
  GgufWriter w;
  w.add_string("general.name", std::string(100, 'x'));
  std::string b = w.build();
  b.resize(b.size() - 10);
  expect_error_bytes(b, "general.name", GgufLoad::container_only);
}

TEST_F(GgufTest, BadMagicAndVersion) {
  GgufWriter w;
  w.magic = "GGML";
  expect_error(w, "bad magic", GgufLoad::container_only);
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    GgufWriter wv;
    wv.version = v;
    expect_error(wv, "version", GgufLoad::container_only);
  }
  expect_error_bytes("GG", "magic", GgufLoad::container_only);
  expect_error_bytes("", "magic", GgufLoad::container_only);
}

TEST_F(GgufTest, AbsurdCounts) {
  GgufWriter w;
  w.kv_count_override = 1ull << 60;
  expect_error(w, "key/value count", GgufLoad::container_only);
  GgufWriter t;
  t.tensor_count_override = ~0ull;
  expect_error(t, "tensor count", GgufLoad::container_only);
  // A string length larger than the file.
  GgufWriter s;
  std::string v;
  GgufWriter::put_u64(v, 1ull << 62);
  s.add_raw("general.name", 8, v);
  expect_error(s, "general.name", GgufLoad::container_only);
  // An array length larger than the file.
  GgufWriter a;
  std::string av;
  GgufWriter::put_u32(av, 8);
  GgufWriter::put_u64(av, 1ull << 40);
  a.add_raw("tokenizer.ggml.tokens", 9, av);
  expect_error(a, "tokenizer.ggml.tokens", GgufLoad::container_only);
}

TEST_F(GgufTest, NestedArraysAndUnknownValueTypes) {
  GgufWriter w;
  std::string v;
  GgufWriter::put_u32(v, 9);  // array of arrays
  GgufWriter::put_u64(v, 1);
  GgufWriter::put_u32(v, 4);
  GgufWriter::put_u64(v, 0);
  w.add_raw("t.nested", 9, v);
  expect_error(w, "t.nested", GgufLoad::container_only);
  GgufWriter u;
  u.add_raw("t.weird", 13, "xxxx");
  expect_error(u, "t.weird", GgufLoad::container_only);
  GgufWriter ua;
  std::string av;
  GgufWriter::put_u32(av, 77);
  GgufWriter::put_u64(av, 1);
  ua.add_raw("t.weirdarr", 9, av + "xxxxxxxx");
  expect_error(ua, "t.weirdarr", GgufLoad::container_only);
}

TEST_F(GgufTest, DuplicateKeyOrTensor) {
  GgufWriter w;
  w.add_u32("k", 1);
  w.add_u32("k", 2);
  expect_error(w, "duplicate metadata key 'k'", GgufLoad::container_only);
  GgufWriter t;
  t.add_tensor("x", testing::kGgmlF32, {4}, testing::f32_bytes(4, 0));
  t.add_tensor("x", testing::kGgmlF32, {4}, testing::f32_bytes(4, 0));
  expect_error(t, "duplicate tensor name 'x'", GgufLoad::container_only);
}

TEST_F(GgufTest, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufWriter w;
    w.add_u32("general.alignment", a);
    expect_error(w, "general.alignment", GgufLoad::container_only);
  }
  GgufWriter s;
  s.add_string("general.alignment", "32");
  expect_error(s, "general.alignment", GgufLoad::container_only);
}

TEST_F(GgufTest, TensorTableErrorsNameTheTensor) {
  {
    GgufWriter w;  // unknown type id
    w.add_tensor("weird.weight", 6, {32}, std::string(32, '\0'));
    expect_error(w, "'weird.weight' has unsupported ggml type id 6", GgufLoad::container_only);
  }
  {
    GgufWriter w;  // too many dims
    w.add_tensor("t5", testing::kGgmlF32, {1, 1, 1, 1, 1}, std::string(4, '\0'));
    expect_error(w, "'t5'", GgufLoad::container_only);
  }
  {
    GgufWriter w;  // zero dims
    w.add_tensor("t0", testing::kGgmlF32, {}, std::string(4, '\0'));
    expect_error(w, "'t0'", GgufLoad::container_only);
  }
  {
    GgufWriter w;  // row not a multiple of the block
    w.add_tensor("q.weight", testing::kGgmlQ4_0, {48, 2}, std::string(18 * 3, '\0'));
    expect_error(w, "'q.weight' has a row of 48", GgufLoad::container_only);
  }
  {
    GgufWriter w;  // element count overflow
    w.add_tensor("huge", testing::kGgmlF32, {1ull << 40, 1ull << 40}, std::string(4, '\0'));
    expect_error(w, "'huge'", GgufLoad::container_only);
  }
  {
    GgufWriter w;  // a zero dim must not hide an overflowing product of the others
    w.add_tensor("zero", testing::kGgmlF32, {1ull << 40, 0, 1ull << 40}, "");
    expect_error(w, "'zero'", GgufLoad::container_only);
  }
  {
    GgufWriter w;  // byte count overflow (fits in elements, not in bytes)
    w.add_tensor("huge2", testing::kGgmlF32, {1ull << 62}, std::string(4, '\0'));
    expect_error(w, "'huge2'", GgufLoad::container_only);
  }
  {
    GgufWriter w;  // ne above int64
    w.add_tensor("neg", testing::kGgmlF32, {~0ull}, std::string(4, '\0'));
    expect_error(w, "'neg'", GgufLoad::container_only);
  }
  {
    GgufWriter w;  // data beyond the end of the file
    w.add_tensor("a", testing::kGgmlF32, {8}, testing::f32_bytes(8, 0));
    w.add_tensor("far", testing::kGgmlF32, {8}, testing::f32_bytes(8, 0), 1u << 20);
    std::string b = w.build();
    b.resize(b.size() - (1u << 20));  // keep the table, drop the data
    expect_error_bytes(b, "'far'", GgufLoad::container_only);
  }
  {
    GgufWriter w;  // offset that overflows when added to the data section start
    w.add_tensor("wrap", testing::kGgmlF32, {8}, "", ~0ull - 31);
    expect_error(w, "'wrap'", GgufLoad::container_only);
  }
  {
    GgufWriter w;  // misaligned offset
    w.add_tensor("mis", testing::kGgmlF32, {8}, testing::f32_bytes(8, 0), 4);
    expect_error(w, "'mis' data offset 4 is not a multiple of the alignment 32",
                 GgufLoad::container_only);
  }
}

TEST_F(GgufTest, ModelLevelErrors) {
  {
    GgufWriter w;  // no architecture
    w.add_u32("llama.block_count", 1);
    expect_error(w, "general.architecture");
  }
  {
    GgufWriter w;
    w.add_string("general.architecture", "gpt2");
    expect_error(w, "unsupported architecture 'gpt2'");
    expect_error(w, "llama, mistral, qwen2, qwen3");
  }
  {
    GgufWriter w;  // q/k head norms in an architecture that has none
    TinyLlama m;
    m.qk_norm = true;
    add_tiny_llama(w, m);
    expect_error(w, "attn_q_norm");
  }
  {
    GgufWriter w;  // a bias on the output projection would be dropped: refused
    add_tiny_llama(w, TinyLlama{});
    w.add_tensor("blk.0.attn_output.bias", testing::kGgmlF32, {16}, testing::f32_bytes(16, 1));
    expect_error(w, "attn_output.bias");
  }
  {
    GgufWriter w;  // required key missing
    w.add_string("general.architecture", "llama");
    expect_error(w, "llama.block_count");
  }
  {
    GgufWriter w;  // required key of the wrong type
    w.add_string("general.architecture", "mistral");
    w.add_string("mistral.block_count", "two");
    expect_error(w, "mistral.block_count");
  }
  {
    GgufWriter w;  // heads do not divide
    TinyLlama m;
    m.n_kv = 3;
    add_tiny_llama(w, m);
    expect_error(w, "n_kv_heads");
  }
  {
    GgufWriter w;  // unsupported rope scaling
    add_tiny_llama(w, TinyLlama{});
    w.add_string("llama.rope.scaling.type", "yarn");
    w.add_f32("llama.rope.scaling.factor", 4.0f);
    expect_error(w, "llama.rope.scaling.type");
  }
}

TEST_F(GgufTest, MissingTensorOrWrongShapeNamesTensor) {
  // Drop each required tensor of layer 1 in turn.
  for (const char* drop : {"blk.1.attn_q.weight", "blk.1.ffn_down.weight", "output_norm.weight",
                           "token_embd.weight"}) {
    GgufWriter full;
    add_tiny_llama(full, TinyLlama{});
    const std::string bytes = full.build();
    auto src = GgufFile::parse((const uint8_t*)bytes.data(), bytes.size(), "full");
    ASSERT_TRUE(src.ok()) << src.error().message;
    GgufWriter w;
    for (const auto& [k, v] : (*src)->metadata()) {
      if (const auto* s = std::get_if<std::string>(&v.v)) w.add_string(k, *s);
      if (const auto* u = std::get_if<uint64_t>(&v.v)) w.add_u32(k, (uint32_t)*u);
      if (const auto* d = std::get_if<double>(&v.v)) w.add_f32(k, (float)*d);
      if (const auto* a = std::get_if<std::vector<std::string>>(&v.v)) w.add_string_array(k, *a);
    }
    for (const auto& [name, t] : (*src)->tensors()) {
      if (name == drop) continue;
      std::vector<uint64_t> ne(t.shape.rbegin(), t.shape.rend());
      w.add_tensor(name, testing::kGgmlF32, ne, std::string((const char*)t.data, t.n_bytes));
    }
    expect_error(w, std::string("missing tensor '") + drop + "'");
  }
  {
    GgufWriter w;
    TinyLlama m;
    add_tiny_llama(w, m);
    w.add_tensor("output.weight", testing::kGgmlF32, {16, 23}, testing::f32_bytes(16 * 23, 0));
    expect_error(w, "tensor 'output.weight' has shape [23, 16], expected [24, 16]");
  }
  {
    // q/k/v bias tensors missing while blk.0 has one: blk.1.attn_q.bias absent.
    GgufWriter w;
    add_tiny_llama(w, TinyLlama{});
    w.add_tensor("blk.0.attn_q.bias", testing::kGgmlF32, {16}, testing::f32_bytes(16, 0));
    expect_error(w, "blk.0.attn_k.bias");
  }
}

TEST_F(GgufTest, GarbageNeverCrashes) {
  GgufWriter w;
  add_tiny_llama(w, TinyLlama{});
  const std::string good = w.build();
  std::mt19937 rng(123);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string b = good;
    const int flips = 1 + (int)(rng() % 8);
    for (int i = 0; i < flips; ++i) b[rng() % std::min<size_t>(b.size(), 2048)] = (char)rng();
    auto r = GgufFile::parse((const uint8_t*)b.data(), b.size(), "fuzz.gguf");
    if (r.ok()) {
      for (const auto& [name, t] : (*r)->tensors())
        if (t.n_bytes > 0) {
          volatile uint8_t x = t.data[0];
          x = t.data[t.n_bytes - 1];
          (void)x;
        }
    } else {
      EXPECT_NE(r.error().message.find("fuzz.gguf"), std::string::npos);
    }
  }
}

// The fuzz seeds are written by fuzz/make_corpus.py, a writer independent of this reader.
TEST(GgufCorpus, SeedsParse) {
  const std::string dir = std::string(INFERCEPT_SOURCE_DIR) + "/fuzz/corpus/";
  if (!std::filesystem::exists(dir + "gguf_tiny_llama.gguf")) GTEST_SKIP() << "no corpus";
  auto tiny = GgufFile::open(dir + "gguf_tiny_llama.gguf");
  ASSERT_TRUE(tiny.ok()) << tiny.error().message;
  EXPECT_EQ((*tiny)->config().d_model, 8);
  EXPECT_EQ((*tiny)->config().n_kv_heads, 1);
  EXPECT_EQ((*tiny)->get_int("t.i64"), -4);
  auto types = GgufFile::open(dir + "gguf_block_types.gguf", GgufLoad::container_only);
  ASSERT_TRUE(types.ok()) << types.error().message;
  EXPECT_EQ((*types)->version(), 2u);
  EXPECT_EQ((*types)->tensors().size(), 9u);
  EXPECT_EQ((*types)->find("q6_k")->dtype, DType::q6_k);
  EXPECT_FALSE(GgufFile::open(dir + "gguf_truncated.gguf", GgufLoad::container_only).ok());
}

// ---- the real default model ------------------------------------------------------------

TEST(GgufDefaultModel, SmolLM2Config) {
  const std::string p = testing::default_model_path();
  if (!std::filesystem::exists(p)) GTEST_SKIP() << "default model not present: " << p;
  auto r = GgufFile::open(p);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const GgufFile& g = **r;
  const ModelConfig& c = g.config();
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.d_model, 576);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.d_ff, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.rope_style, RopeStyle::interleaved);
  EXPECT_GT(c.max_context, 0);
  ASSERT_NE(g.find("token_embd.weight"), nullptr);
  EXPECT_EQ(g.find("token_embd.weight")->dtype, DType::q8_0);
  EXPECT_EQ(g.find("token_embd.weight")->shape, (std::vector<int64_t>{49152, 576}));
  ASSERT_NE(g.find("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(g.find("blk.0.attn_q.weight")->dtype, DType::q4_1);
  EXPECT_EQ(g.find("blk.0.attn_q.weight")->shape, (std::vector<int64_t>{576, 576}));
  EXPECT_EQ(g.find("blk.0.attn_k.weight")->shape, (std::vector<int64_t>{192, 576}));
  ASSERT_NE(g.get_string_array("tokenizer.ggml.tokens"), nullptr);
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.tokens")->size(), 49152u);

  // open_model_source dispatches on the extension.
  auto src = open_model_source(p);
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ((*src)->format(), "gguf");
  EXPECT_EQ((*src)->config().n_layers, 30);
}

TEST_F(GgufTest, OpenModelSourceDispatch) {
  GgufWriter w;
  add_tiny_llama(w, TinyLlama{});
  // No .gguf extension, but the magic.
  const std::string p = write("model.bin", w.build());
  auto r = open_model_source(p);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)->format(), "gguf");
  const std::string other = write("notes.txt", "hello");
  auto bad = open_model_source(other);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find(other), std::string::npos);
  auto missing = open_model_source((dir_ / "absent.gguf").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("absent.gguf"), std::string::npos);
}

}  // namespace
}  // namespace infercept
