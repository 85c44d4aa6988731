// Tokenizer tests: golden token ids from llama.cpp for the default model's vocabulary
// (tests/fixtures/tokenizer_smollm2.json, made by scripts/make_tokenizer_fixtures.py),
// decode round trips, streaming detokenization, SentencePiece BPE on a synthetic vocabulary
// with hand-derived expectations, and tokenizer.json loading.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>

#include "io/gguf.h"
#include "test_util.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace infercept {
namespace {

using json = nlohmann::json;

std::string from_hex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  }
  return out;
}

class SmolLM2Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto gguf = GgufFile::open(testing::default_model_path());
    ASSERT_TRUE(gguf.ok()) << gguf.error().message;
    auto spec = tokenizer_spec_from_gguf(**gguf);
    ASSERT_TRUE(spec.ok()) << spec.error().message;
    spec_ = new TokenizerSpec(*spec);
    auto tok = Tokenizer::create(*spec);
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    tok_ = tok->release();
    fixture_ =
        new json(json::parse(testing::read_file(testing::fixture_path("tokenizer_smollm2.json"))));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete spec_;
    delete fixture_;
  }
  static Tokenizer* tok_;
  static TokenizerSpec* spec_;
  static json* fixture_;
};
Tokenizer* SmolLM2Tokenizer::tok_ = nullptr;
TokenizerSpec* SmolLM2Tokenizer::spec_ = nullptr;
json* SmolLM2Tokenizer::fixture_ = nullptr;

TEST_F(SmolLM2Tokenizer, SpecFromGguf) {
  EXPECT_EQ(spec_->kind, TokenizerKind::byte_bpe);
  EXPECT_EQ(spec_->pre, "smollm");
  EXPECT_EQ(tok_->vocab_size(), 49152);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_FALSE(spec_->add_bos);
  EXPECT_TRUE(tok_->is_eog(2));  // <|im_end|>
  EXPECT_TRUE(tok_->is_eog(0));  // <|endoftext|>
  EXPECT_FALSE(tok_->is_eog(1));
  EXPECT_TRUE(tok_->is_control(1));
  EXPECT_FALSE(tok_->is_control(17));
  EXPECT_EQ(tok_->token_id("<|im_start|>"), 1);
  EXPECT_NE(spec_->chat_template.find("<|im_start|>"), std::string::npos);
}

TEST_F(SmolLM2Tokenizer, GoldenIdsMatchLlamaCpp) {
  const json& cases = (*fixture_)["cases"];
  ASSERT_GE(cases.size(), 250u);
  size_t matched = 0;
  for (const json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    const auto ids = tok_->encode(text, /*add_bos=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, expected) << "text: '" << text << "'";
    matched += ids == expected;
    if (c["roundtrip"].get<bool>()) {
      EXPECT_EQ(tok_->decode(ids), text);
    }
  }
  std::printf("golden strings matched: %zu / %zu\n", matched, cases.size());
}

TEST_F(SmolLM2Tokenizer, GoldenSpecialTokenParsing) {
  const json& cases = (*fixture_)["special_cases"];
  ASSERT_FALSE(cases.empty());
  size_t matched = 0;
  for (const json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    const auto ids = tok_->encode(text, false, /*parse_special=*/true);
    EXPECT_EQ(ids, expected) << "text: '" << text << "'";
    matched += ids == expected;
    EXPECT_EQ(tok_->decode(ids, false), from_hex(c["decoded"])) << text;
    EXPECT_EQ(tok_->decode(ids, true), from_hex(c["decoded_special"])) << text;
    EXPECT_EQ(tok_->decode(ids, true), text);
  }
  std::printf("special-token strings matched: %zu / %zu\n", matched, cases.size());
}

TEST_F(SmolLM2Tokenizer, GoldenDecode) {
  for (const json& c : (*fixture_)["decode_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok_->decode(ids, false), from_hex(c["bytes"])) << c.dump();
    EXPECT_EQ(tok_->decode(ids, true), from_hex(c["bytes_special"])) << c.dump();
  }
}

TEST_F(SmolLM2Tokenizer, AddBosOnlyWhenVocabularyAsks) {
  // SmolLM2's GGUF says add_bos_token = false.
  EXPECT_EQ(tok_->encode("Hi", true, false), tok_->encode("Hi", false, false));
  TokenizerSpec s = *spec_;
  s.add_bos = true;
  auto t = Tokenizer::create(s);
  ASSERT_TRUE(t.ok());
  const auto ids = (*t)->encode("Hi", true, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
}

TEST_F(SmolLM2Tokenizer, StreamingDetokenizerNeverSplitsCharacters) {
  for (const json& c : (*fixture_)["cases"]) {
    const std::string text = c["text"].get<std::string>();
    StreamingDetokenizer detok(*tok_);
    std::string out;
    for (int32_t id : tok_->encode(text, false, false)) {
      const std::string piece = detok.push(id);
      EXPECT_EQ(unicode::complete_utf8_prefix(piece), piece.size());
      EXPECT_EQ(unicode::sanitize_utf8(piece), piece);  // valid UTF-8
      out += piece;
    }
    out += detok.flush();
    EXPECT_EQ(out, text);
  }
}

TEST_F(SmolLM2Tokenizer, StreamingDetokenizerHoldsAndReplaces) {
  // "😀" is F0 9F 98 80; byte tokens for its bytes come one by one.
  const std::string emoji = "\xF0\x9F\x98\x80";
  // The single-byte tokens (GPT-2 maps every byte to one).
  std::vector<int32_t> single(256, -1);
  for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
    const std::string b = tok_->token_to_bytes(id);
    if (b.size() == 1 && single[static_cast<unsigned char>(b[0])] < 0) {
      single[static_cast<unsigned char>(b[0])] = id;
    }
  }
  StreamingDetokenizer d(*tok_);
  EXPECT_EQ(d.push(single[0xF0]), "");
  EXPECT_EQ(d.push(single[0x9F]), "");
  EXPECT_EQ(d.push(single[0x98]), "");
  EXPECT_EQ(d.push(single[0x80]), emoji);
  // A truncated character before an ASCII one is replaced as soon as it cannot complete.
  EXPECT_EQ(d.push(single[0xE4]), "");
  EXPECT_EQ(d.push(single['a']),
            "\xEF\xBF\xBD"
            "a");
  // Held bytes at the end are replaced on flush.
  EXPECT_EQ(d.push(single[0xE4]), "");
  EXPECT_EQ(d.push(single[0xB8]), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(d.flush(), "");
  // Control tokens vanish unless rendered.
  EXPECT_EQ(d.push(2), "");
  StreamingDetokenizer r(*tok_, /*render_special=*/true);
  EXPECT_EQ(r.push(2), "<|im_end|>");
}

TEST_F(SmolLM2Tokenizer, SpecFromHfJsonMatchesGguf) {
  // Rebuild the vocabulary as a Hugging Face tokenizer.json (as SmolLM2 ships it:
  // Digits(individual) + ByteLevel) and check it tokenizes like the GGUF.
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < spec_->tokens.size(); ++i) {
    if (spec_->types[i] == TokenType::control) {
      added.push_back({{"id", i}, {"content", spec_->tokens[i]}, {"special", true}});
    } else {
      vocab[spec_->tokens[i]] = i;
    }
  }
  json merges = json::array();
  for (size_t i = 0; i < spec_->merges.size(); ++i) {
    const std::string& m = spec_->merges[i];
    const size_t sp = m.find(' ', 1);
    if (i % 2) {
      merges.push_back(m);
    } else {
      merges.push_back(json::array({m.substr(0, sp), m.substr(sp + 1)}));
    }
  }
  json root = {
      {"added_tokens", added},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Digits"}, {"individual_digits", true}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}})}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
  };
  json cfg = {{"bos_token", "<|im_start|>"},
              {"eos_token", {{"content", "<|im_end|>"}}},
              {"add_bos_token", false},
              {"chat_template", "{{ '<|im_start|>' }}"}};
  auto spec = tokenizer_spec_from_hf_json(root.dump(), cfg.dump(), "smollm2/tokenizer.json");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->pre, "smollm");
  EXPECT_EQ(spec->bos_id, 1);
  EXPECT_EQ(spec->eos_id, 2);
  EXPECT_EQ(spec->chat_template, "{{ '<|im_start|>' }}");
  auto tok = Tokenizer::create(*spec);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_TRUE((*tok)->is_eog(0));
  for (const json& c : (*fixture_)["cases"]) {
    EXPECT_EQ((*tok)->encode(c["text"].get<std::string>(), false, false),
              c["ids"].get<std::vector<int32_t>>());
  }
  for (const json& c : (*fixture_)["special_cases"]) {
    EXPECT_EQ((*tok)->encode(c["text"].get<std::string>(), false, true),
              c["ids"].get<std::vector<int32_t>>());
  }
}

TEST_F(SmolLM2Tokenizer, EncodesOneMegabyteQuickly) {
  std::string text;
  const char* words[] = {"the", "quick",   "brown",  "fox",    "jumps",      "over",    "lazy",
                         "dog", "serving", "engine", "tokens", "throughput", "latency", "request"};
  uint32_t x = 12345;
  while (text.size() < (1u << 20)) {
    x = x * 1103515245u + 12345u;
    if ((x >> 12) % 4 == 0) {  // a made-up word: misses the word cache
      for (uint32_t k = 0; k < 3 + (x >> 20) % 8; ++k) {
        text += static_cast<char>('a' + (x >> (k + 3)) % 26);
      }
    } else {
      text += words[(x >> 16) % 14];
    }
    text += ((x >> 8) % 17 == 0) ? ".\n" : ((x >> 8) % 11 == 0 ? ", " : " ");
    if ((x >> 4) % 23 == 0) text += std::to_string(x % 100000) + " ";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok_->encode(text, false, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("encoded %zu bytes into %zu tokens in %.3f s\n", text.size(), ids.size(), s);
  EXPECT_LT(s, 1.0);
  EXPECT_EQ(tok_->decode(ids), text);
}

TEST_F(SmolLM2Tokenizer, PreTokenizersMatchHuggingFaceRegexes) {
  // Splits by Hugging Face tokenizers' regex engine for the gpt2, llama3 and qwen2 patterns.
  const json& pre = (*fixture_)["pretokenize"];
  ASSERT_FALSE(pre.empty());
  for (const auto& [name, cases] : pre.items()) {
    auto kind = pre_tokenizer_from_name(name);
    ASSERT_TRUE(kind.has_value()) << name;
    size_t matched = 0;
    for (const json& c : cases) {
      const std::string text = c["text"].get<std::string>();
      const std::vector<uint32_t> cpts = unicode::decode_utf8_all(text);
      std::vector<std::pair<size_t, size_t>> spans;
      pre_tokenize(*kind, cpts.data(), cpts.size(), spans);
      std::vector<std::string> words;
      for (const auto& [b, e] : spans) {
        std::string w;
        for (size_t i = b; i < e; ++i) unicode::append_utf8(w, cpts[i]);
        words.push_back(w);
      }
      const auto expected = c["words"].get<std::vector<std::string>>();
      EXPECT_EQ(words, expected) << name << ": '" << text << "'";
      matched += words == expected;
    }
    std::printf("pre-tokenizer %s: %zu / %zu match Hugging Face\n", name.c_str(), matched,
                cases.size());
  }
}

// ---- SentencePiece BPE on a synthetic vocabulary ----

struct SpmVocab {
  TokenizerSpec spec;
  int32_t add(const std::string& piece, float score, TokenType type = TokenType::normal) {
    spec.tokens.push_back(piece);
    spec.scores.push_back(score);
    spec.types.push_back(type);
    return static_cast<int32_t>(spec.tokens.size() - 1);
  }
};

// ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the pieces below.
SpmVocab make_spm_vocab() {
  SpmVocab v;
  v.spec.kind = TokenizerKind::spm;
  v.add("<unk>", 0, TokenType::unknown);
  v.add("<s>", 0, TokenType::control);
  v.add("</s>", 0, TokenType::control);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    v.add(buf, 0, TokenType::byte);
  }
  for (const char* c : {"\xE2\x96\x81", "h", "e", "l", "o", "w", "r", "d"}) v.add(c, -100);
  v.add("ll", -1);
  v.add("he", -2);
  v.add("hell", -3);
  v.add("hello", -4);
  v.add("\xE2\x96\x81hello", -5);
  v.add("or", -6);
  v.add("\xE2\x96\x81w", -7);
  v.add("\xE2\x96\x81wor", -8);
  v.add("ld", -9);
  v.add("\xE2\x96\x81world", -10);
  v.add("wor", -0.5f);  // outranks "▁w": "▁world" must then come from "▁" + "wor"
  v.spec.bos_id = 1;
  v.spec.eos_id = 2;
  v.spec.unk_id = 0;
  v.spec.add_bos = true;
  v.spec.add_space_prefix = true;
  return v;
}

class SpmTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = Tokenizer::create(make_spm_vocab().spec);
    ASSERT_TRUE(t.ok()) << t.error().message;
    tok = std::move(*t);
  }
  int32_t id(const std::string& piece) const {
    auto i = tok->token_id(piece);
    EXPECT_TRUE(i.has_value()) << piece;
    return i.value_or(-1);
  }
  std::unique_ptr<Tokenizer> tok;
};

TEST_F(SpmTokenizer, MergesByScore) {
  // "hello world" -> "▁hello▁world"; merges by descending score of the merged token:
  //   ll(-1), he(-2), he+ll=hell(-3), hell+o=hello(-4), ▁+hello=▁hello(-5), or(-6),
  //   w+or=wor(-0.5, queued after "or" made it possible, so it goes next), ▁w(-7) is stale
  //   (its "w" is now "wor"), ▁+wor=▁wor(-8), ld(-9), ▁wor+ld=▁world(-10).
  EXPECT_EQ(tok->encode("hello world", false, false),
            (std::vector<int32_t>{id("\xE2\x96\x81hello"), id("\xE2\x96\x81world")}));
  EXPECT_EQ(tok->decode(tok->encode("hello world", false, false)), "hello world");
}

TEST_F(SpmTokenizer, BosAndRepeatedSpaces) {
  // Two spaces: "▁hello▁▁world"; the first "▁" after "hello" finds no partner ("▁▁" and
  // "hello▁" are not tokens), the second joins "wor" as above.
  const std::vector<int32_t> ids = tok->encode("hello  world", true, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, id("\xE2\x96\x81hello"), id("\xE2\x96\x81"),
                                       id("\xE2\x96\x81world")}));
  EXPECT_EQ(tok->decode(ids), "hello  world");  // BOS is not text; the prefix space goes
}

TEST_F(SpmTokenizer, ByteFallback) {
  // "hé" -> "▁hé": "▁h" and "hé" are not tokens; "é" (C3 A9) is no token, so it falls back
  // to <0xC3> <0xA9> (ids 3 + byte).
  const auto ids = tok->encode("h\xC3\xA9", false, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{id("\xE2\x96\x81"), id("h"), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->decode(ids), "h\xC3\xA9");
  StreamingDetokenizer d(*tok);
  std::string out;
  for (int32_t i : ids) out += d.push(i);
  EXPECT_EQ(out, " h\xC3\xA9");  // streaming keeps the prefix space (text continues a prompt)
}

TEST_F(SpmTokenizer, NoSpacePrefix) {
  TokenizerSpec s = make_spm_vocab().spec;
  s.add_space_prefix = false;
  auto t = Tokenizer::create(s);
  ASSERT_TRUE(t.ok());
  // "hello": ll, he, hell, hello.
  EXPECT_EQ((*t)->encode("hello", false, false), (std::vector<int32_t>{id("hello")}));
  EXPECT_EQ((*t)->decode({id("hello")}), "hello");
}

TEST_F(SpmTokenizer, SpecialTokensAndSpacePrefixAfterThem) {
  // With parse_special "<s>" and "</s>" are cut out; the text after a special token gets the
  // space prefix again (as llama.cpp does), so "hello" -> "▁hello".
  EXPECT_EQ(tok->encode("<s>hello</s>", false, true),
            (std::vector<int32_t>{1, id("\xE2\x96\x81hello"), 2}));
  EXPECT_EQ(tok->decode({1, id("\xE2\x96\x81hello"), 2}, true), "<s>hello</s>");
}

TEST(SpmUnknown, UnkWithoutByteTokens) {
  // No byte tokens: "ab" -> "▁ab": "▁a" is no token, "b" has no token and no byte token,
  // so it becomes <unk>.
  TokenizerSpec s;
  s.kind = TokenizerKind::spm;
  s.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a"};
  s.scores = {0, 0, 0, -1, -1};
  s.types = {TokenType::unknown, TokenType::control, TokenType::control, TokenType::normal,
             TokenType::normal};
  s.unk_id = 0;
  s.add_space_prefix = true;
  auto t = Tokenizer::create(s);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->encode("ab", false, false), (std::vector<int32_t>{3, 4, 0}));
}

// ---- tokenizer.json ----

TEST(HfJson, SmallByteLevelVocabulary) {
  // Merges by rank: "abc" -> a b c -> ab (rank 0) -> abc (rank 1). " ab" -> Ġ a b: "a b"
  // (rank 0) beats "Ġ a" (rank 2), and there is no "Ġ ab" merge, so Ġ + ab.
  const std::string tj = R"({
    "added_tokens": [{"id": 8, "content": "<|end|>", "special": true},
                     {"id": 9, "content": "<x>", "special": false}],
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "model": {"type": "BPE",
              "vocab": {"a": 0, "b": 1, "c": 2, "\u0120": 3, "ab": 4, "abc": 5, "\u0120a": 6,
                        "\u0120ab": 7},
              "merges": ["a b", ["ab", "c"], "\u0120 a", "\u0120a b"]}})";
  const std::string cfg = R"({"eos_token": "<|end|>", "chat_template": "T"})";
  auto spec = tokenizer_spec_from_hf_json(tj, cfg, "t.json");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->kind, TokenizerKind::byte_bpe);
  EXPECT_EQ(spec->pre, "gpt2");
  EXPECT_EQ(spec->eos_id, 8);
  EXPECT_EQ(spec->chat_template, "T");
  auto tok = Tokenizer::create(*spec);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ((*tok)->encode("abc ab", false, false), (std::vector<int32_t>{5, 3, 4}));
  // User-defined tokens are cut out even without parse_special; control ones only with it.
  EXPECT_EQ((*tok)->encode("ab<x>", false, false), (std::vector<int32_t>{4, 9}));
  EXPECT_EQ((*tok)->encode("ab<|end|>", false, true), (std::vector<int32_t>{4, 8}));
  EXPECT_TRUE((*tok)->is_eog(8));
  EXPECT_EQ((*tok)->decode({4, 9, 8}), "ab<x>");
  EXPECT_EQ((*tok)->decode({4, 9, 8}, true), "ab<x><|end|>");
}

TEST(HfJson, Errors) {
  auto bad = tokenizer_spec_from_hf_json("{not json", "", "x/tokenizer.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("x/tokenizer.json"), std::string::npos);
  auto uni =
      tokenizer_spec_from_hf_json(R"({"model": {"type": "Unigram", "vocab": []}})", "", "u.json");
  ASSERT_FALSE(uni.ok());
  EXPECT_NE(uni.error().message.find("Unigram"), std::string::npos);
  auto re = tokenizer_spec_from_hf_json(
      R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split",
          "pattern": {"Regex": "\\w+"}}]}, "model": {"type": "BPE", "vocab": {"a": 0},
          "merges": []}})",
      "", "r.json");
  ASSERT_FALSE(re.ok());
  EXPECT_NE(re.error().message.find("regex"), std::string::npos);
  auto merges = tokenizer_spec_from_hf_json(
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [1]}})", "", "m.json");
  ASSERT_FALSE(merges.ok());
}

TEST(HfJson, DetectsPreTokenizers) {
  auto make = [](const std::string& regex) {
    json root = {
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           json::array(
               {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}},
                {{"type", "ByteLevel"}, {"use_regex", false}}})}}},
        {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}}};
    auto s = tokenizer_spec_from_hf_json(root.dump(), "", "p.json");
    return s.ok() ? s->pre : s.error().message;
  };
  EXPECT_EQ(make("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                 "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
            "llama3");
  EXPECT_EQ(make("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                 "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
            "qwen2");
}

TEST(Tokenizer, CreateRejectsBadSpecs) {
  TokenizerSpec s;
  EXPECT_FALSE(Tokenizer::create(s).ok());  // empty
  s.tokens = {"a"};
  s.pre = "no-such-pre";
  auto r = Tokenizer::create(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no-such-pre"), std::string::npos);
  s.pre = "gpt2";
  s.bos_id = 5;
  EXPECT_FALSE(Tokenizer::create(s).ok());
  s.bos_id = -1;
  s.scores = {1, 2};
  EXPECT_FALSE(Tokenizer::create(s).ok());
}

}  // namespace
}  // namespace infercept
