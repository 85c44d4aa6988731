// Token masks against llguidance's (its Python package, the maintained engine vLLM and
// SGLang use) on the default model's real vocabulary: for each schema, the masks before every
// token of a valid instance's tokenization and after its last, compiled compact on both
// sides (no free white space; separators "," and ":"), must allow exactly the same tokens.
// Skipped when the venv's llguidance is missing (make installs it in build/venv).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace infercept::grammar {
namespace {

using json = nlohmann::json;

struct Case {
  const char* schema;
  const char* instance;  // compact, keys in sorted order
};

const Case kCases[] = {
    {R"({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum":
        ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false})",
     R"({"city":"Paris \"centre\" \\ \n été","unit":"celsius"})"},
    {R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}}, "ok": {"type": "boolean"},
        "none": {"type": "null"}}, "required": ["a", "b", "tags", "ok", "none"],
        "additionalProperties": false})",
     R"({"a":-17,"b":2.5e-3,"none":null,"ok":true,"tags":["x","y z"]})"},
    {R"({"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"},
        "kids": {"type": "array", "items": {"type": "integer"}}}, "required": ["id", "kids"],
        "additionalProperties": false}})",
     R"([{"id":1,"kids":[2,3]},{"id":40,"kids":[]}])"},
    // Bounds, multipleOf and patterns. (The ratio is positive: llguidance 1.9.1 refuses
    // -1.2 for minimum -1.25, a valid value our masks allow.)
    {R"({"type": "object", "properties": {"code": {"type": "string", "pattern":
        "^[A-Z]{3}-\\d{4}$"}, "count": {"type": "integer", "minimum": 1, "maximum": 10},
        "mail": {"type": "string", "pattern": "^\\S+@\\S+$"}, "note": {"type": "string",
        "pattern": "abc"}, "ratio": {"type": "number", "minimum": -1.25, "exclusiveMaximum": 2.5},
        "temp": {"type": "integer", "minimum": -40, "maximum": 125}, "step": {"type": "integer",
        "multipleOf": 5, "minimum": 0, "maximum": 100}}, "required": ["code", "count", "mail",
        "note", "ratio", "temp", "step"], "additionalProperties": false})",
     R"({"code":"ABC-1234","count":10,"mail":"ann.lee@example.com","note":"an abc of it",)"
     R"("ratio":2.25,"step":95,"temp":-38})"},
};

TEST(GrammarLlguidance, MasksMatch) {
  const std::string python = INFERCEPT_VENV_PYTHON;
  if (std::ifstream(python).fail()) GTEST_SKIP() << "no venv python at " << python;
  auto gguf = GgufFile::open(INFERCEPT_DEFAULT_MODEL);
  ASSERT_TRUE(gguf.ok());
  auto spec = tokenizer_spec_from_gguf(**gguf);
  ASSERT_TRUE(spec.ok());
  auto tok = Tokenizer::create(std::move(*spec));
  ASSERT_TRUE(tok.ok());
  const Tokenizer& t = **tok;
  std::vector<std::string> bytes((size_t)t.vocab_size());
  json in = {{"vocab", json::array()},
             {"specials", json::array()},
             {"eos", json::array()},
             {"cases", json::array()}};
  std::vector<int32_t> ends;
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    std::string hex;
    if (t.is_eog(id)) {
      ends.push_back(id);
      in["eos"].push_back(id);
      in["specials"].push_back(id);
    } else if (t.is_control(id)) {
      in["specials"].push_back(id);
    } else {
      bytes[(size_t)id] = t.token_to_bytes(id);
      static const char* d = "0123456789abcdef";
      for (unsigned char c : bytes[(size_t)id]) hex += {d[c >> 4], d[c & 15]};
    }
    in["vocab"].push_back(hex);
  }
  Vocabulary vocab(bytes, ends);
  std::vector<std::vector<int32_t>> paths;
  for (const Case& c : kCases) {
    paths.push_back(t.encode(c.instance, false, false));
    in["cases"].push_back({{"schema", json::parse(c.schema)}, {"tokens", paths.back()}});
  }
  const std::string in_path = testing::TempDir() + "llg_in.json";
  const std::string out_path = testing::TempDir() + "llg_out.json";
  std::ofstream(in_path) << in.dump();
  const std::string cmd = python + " " + INFERCEPT_SOURCE_DIR +
                          "/tests/grammar_llguidance_masks.py " + in_path + " > " + out_path;
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "llguidance is not installed";
  ASSERT_EQ(rc, 0) << cmd;
  json out;
  std::ifstream(out_path) >> out;
  ASSERT_EQ(out.size(), std::size(kCases));
  for (size_t k = 0; k < std::size(kCases); ++k) {
    auto g = compile_json_schema(json::parse(kCases[k].schema), {false, 0});
    ASSERT_TRUE(g.ok()) << g.error().message;
    Matcher m(std::make_shared<const Grammar>(std::move(*g)));
    std::vector<uint64_t> mask(vocab.mask_words());
    const std::vector<int32_t>& path = paths[k];
    ASSERT_EQ(out[k].size(), path.size() + 1) << out[k].back();
    for (size_t pos = 0; pos <= path.size(); ++pos) {
      compute_mask(m, vocab, nullptr, mask.data());
      const std::string theirs = out[k][pos].get<std::string>();
      // What llguidance allows here: exactly one token where the grammar forces the text.
      std::vector<int32_t> theirs_ids;
      for (int32_t id = 0; id < vocab.size(); ++id)
        if ((std::stoi(theirs.substr((size_t)id / 8 * 2, 2), nullptr, 16) >> (id % 8)) & 1)
          theirs_ids.push_back(id);
      const bool after_backslash = pos > 0 && !vocab.bytes(path[pos - 1]).empty() &&
                                   vocab.bytes(path[pos - 1]).back() == '\\';
      int missing = 0, extra = 0;
      std::string extras;
      for (int32_t id = 0; id < vocab.size(); ++id) {
        const bool a = (mask[(size_t)id >> 6] >> (id & 63)) & 1;
        const int byte = std::stoi(theirs.substr((size_t)id / 8 * 2, 2), nullptr, 16);
        const bool b = (byte >> (id % 8)) & 1;
        if (a == b) continue;
        if (b) {
          if (missing++ < 5)
            ADD_FAILURE() << "case " << k << " before token " << pos << ": '" << vocab.bytes(id)
                          << "' (id " << id << ") allowed by llguidance, not by us";
        } else {
          // Ours may allow more, in three known ways only, all valid JSON: where the text is
          // forced, llguidance allows only its canonical token, we allow any token that
          // spells a prefix of it; after a backslash llguidance leaves out the escapes \/
          // and most \u; it leaves out DEL (0x7F) in strings, which JSON allows as it is.
          const std::string& e = vocab.bytes(id);
          const bool forced_prefix =
              theirs_ids.size() == 1 && vocab.bytes(theirs_ids[0]).compare(0, e.size(), e) == 0;
          const bool escape = after_backslash && (e[0] == '/' || e[0] == 'u');
          const bool del = e.find('\x7f') != std::string::npos;
          EXPECT_TRUE(forced_prefix || escape || del)
              << "case " << k << " before token " << pos << ": '" << e << "' (id " << id
              << ", first byte " << (int)(uint8_t)e[0] << ") allowed by us only";
          ++extra;
          if (extra <= 6) extras += " '" + e + "'";
        }
      }
      EXPECT_EQ(missing, 0) << "case " << k << " position " << pos;
      if (extra > 0)
        std::printf("case %zu before token %zu: %d extra:%s\n", k, pos, extra, extras.c_str());
      if (pos < path.size()) {
        ASSERT_TRUE(m.advance(vocab.bytes(path[pos])));
      }
    }
  }
}

}  // namespace
}  // namespace infercept::grammar
