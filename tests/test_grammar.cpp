// The JSON Schema compiler, the matcher and the token masks (src/grammar): which texts a
// schema's grammar accepts and refuses, feature by feature; which schemas are errors; masks
// against a brute-force check of every token.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "grammar/tool_grammar.h"

namespace infercept::grammar {
namespace {

using json = nlohmann::json;

std::shared_ptr<const Grammar> compile(const std::string& schema, bool strict = false) {
  auto g = compile_json_schema(json::parse(schema), {strict, 4});
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  if (!g.ok()) return nullptr;
  return std::make_shared<const Grammar>(std::move(*g));
}

// The whole text is accepted and complete.
bool complete(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.advance(text) && m.accepting();
}
// The text is accepted as a prefix (byte by byte; rejected somewhere = false).
bool prefix(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.advance(text);
}

std::string error_of(const std::string& schema) {
  auto g = compile_json_schema(json::parse(schema));
  return g.ok() ? "" : g.error().message;
}

TEST(Grammar, Scalars) {
  auto s = compile(R"({"type": "string"})");
  EXPECT_TRUE(complete(s, R"("hello")"));
  EXPECT_TRUE(complete(s, R"("a\"b\\c\u00e9\n")"));
  EXPECT_TRUE(complete(s, "\"caf\xc3\xa9\""));
  EXPECT_FALSE(prefix(s, "\"a\nb\""));  // raw control character
  // Only valid UTF-8: no lone continuation byte, no overlong form, no surrogate, no 0xFF.
  EXPECT_TRUE(complete(s, "\"\xf0\x9f\x98\x80\xe6\x97\xa5\""));
  EXPECT_TRUE(prefix(s, "\"\xe6\x97"));  // a character still open
  EXPECT_FALSE(prefix(s, "\"\xa9"));
  EXPECT_FALSE(prefix(s, "\"\xe0\x80\x80"));
  EXPECT_FALSE(prefix(s, "\"\xed\xa0\x80"));
  EXPECT_FALSE(prefix(s, "\"\xff"));
  EXPECT_FALSE(prefix(s, "\"\xc3\""));  // the quote inside an open character
  EXPECT_FALSE(prefix(s, R"("\x")"));
  EXPECT_FALSE(prefix(s, R"("\u12g")"));
  EXPECT_FALSE(complete(s, R"("abc)"));
  EXPECT_FALSE(prefix(s, R"("a" ")"));  // nothing after the value
  EXPECT_FALSE(prefix(s, "17"));

  auto n = compile(R"({"type": "number"})");
  for (const char* ok : {"0", "-0", "17", "-3.25", "1e5", "1.5E-3", "0.5", "2e+10"})
    EXPECT_TRUE(complete(n, ok)) << ok;
  for (const char* bad : {"01", "-", "1.", ".5", "1e", "+1", "1.2.3", "--1", "\"1\""})
    EXPECT_FALSE(complete(n, bad)) << bad;

  auto i = compile(R"({"type": "integer"})");
  EXPECT_TRUE(complete(i, "-42"));
  EXPECT_TRUE(complete(i, "0"));
  EXPECT_FALSE(prefix(i, "4.5"));
  EXPECT_FALSE(prefix(i, "1e3"));

  auto b = compile(R"({"type": "boolean"})");
  EXPECT_TRUE(complete(b, "true"));
  EXPECT_TRUE(complete(b, "false"));
  EXPECT_FALSE(prefix(b, "tru e"));
  EXPECT_FALSE(prefix(b, "null"));
  EXPECT_TRUE(complete(compile(R"({"type": "null"})"), "null"));
}

TEST(Grammar, TypeListsEnumConst) {
  auto t = compile(R"({"type": ["string", "null", "integer"]})");
  EXPECT_TRUE(complete(t, "null"));
  EXPECT_TRUE(complete(t, R"("x")"));
  EXPECT_TRUE(complete(t, "12"));
  EXPECT_FALSE(prefix(t, "true"));

  auto e = compile(R"({"enum": ["celsius", "fahrenheit", 1, 12, null]})");
  EXPECT_TRUE(complete(e, R"("celsius")"));
  EXPECT_TRUE(complete(e, "1"));
  EXPECT_TRUE(complete(e, "12"));
  EXPECT_TRUE(complete(e, "null"));
  EXPECT_FALSE(prefix(e, R"("kelvin")"));
  EXPECT_FALSE(complete(e, R"("cels")"));
  EXPECT_FALSE(prefix(e, "13"));

  auto c = compile(R"({"const": {"a": [1, 2]}})");
  EXPECT_TRUE(complete(c, R"({"a":[1,2]})"));
  EXPECT_FALSE(prefix(c, R"({"a":[1,3]})"));
}

TEST(Grammar, ObjectsInSchemaOrderRequiredAndClosed) {
  auto o = compile(R"({"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}},
      "required": ["city"], "additionalProperties": false})");
  EXPECT_TRUE(complete(o, R"({"city": "Paris"})"));
  EXPECT_TRUE(complete(o, R"({"city":"Paris","days":3,"unit":"c"})"));
  EXPECT_TRUE(complete(o, "{\n  \"city\": \"Paris\",\n  \"unit\": \"f\"\n}"));
  EXPECT_FALSE(complete(o, R"({})"));                              // city is required
  EXPECT_FALSE(prefix(o, R"({"days": 3})"));                       // city comes first
  EXPECT_FALSE(prefix(o, R"({"city": "Paris", "country": ""})"));  // closed
  EXPECT_FALSE(prefix(o, R"({"city": 3})"));
  EXPECT_FALSE(prefix(o, R"({"city": "P", "unit": "k"})"));
  EXPECT_FALSE(prefix(o, R"({"city": "P",})"));  // no key after the comma can come... yet
  EXPECT_FALSE(prefix(o, R"({"city": "P", "unit": "c",)"));  // nothing may follow unit
  // Bounded white space (max_ws 4 here).
  EXPECT_TRUE(prefix(o, "{    \"city\""));
  EXPECT_FALSE(prefix(o, "{     \"city\""));
}

TEST(Grammar, AdditionalPropertiesOpenAndSchema) {
  auto open =
      compile(R"({"properties": {"a": {"type": "integer"}}, "additionalProperties": true})");
  EXPECT_TRUE(complete(open, R"({"a": 1, "zz": [true, {"x": null}]})"));
  EXPECT_TRUE(complete(open, R"({"other": "x"})"));
  // Absent: closed where properties are declared, free where none are.
  auto absent = compile(R"({"properties": {"a": {"type": "integer"}}, "required": ["a", "b"]})");
  EXPECT_TRUE(complete(absent, R"({"a": 1, "b": [2]})"));
  EXPECT_FALSE(prefix(absent, R"({"a": 1, "c")"));
  auto free = compile(R"({"type": "object"})");
  EXPECT_TRUE(complete(free, R"({"x": {"y": [1, "z"]}})"));
  auto typed = compile(R"({"type": "object", "additionalProperties": {"type": "number"}})");
  EXPECT_TRUE(complete(typed, R"({"x": 1.5, "y": -2})"));
  EXPECT_FALSE(prefix(typed, R"({"x": "no"})"));
}

TEST(Grammar, StrictMakesEveryPropertyRequiredAndClosed) {
  const char* schema = R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "string"}}})";
  auto loose = compile(schema);
  EXPECT_TRUE(complete(loose, R"({"a": 1})"));
  auto strict = compile(schema, /*strict=*/true);
  EXPECT_FALSE(complete(strict, R"({"a": 1})"));
  EXPECT_TRUE(complete(strict, R"({"a": 1, "b": "x"})"));
  EXPECT_FALSE(prefix(strict, R"({"a": 1, "b": "x", "c")"));
}

TEST(Grammar, ArraysNestedAndBounded) {
  auto a = compile(R"({"type": "array", "items": {"type": "object",
      "properties": {"id": {"type": "integer"}, "tags": {"type": "array",
      "items": {"type": "string"}}}, "required": ["id", "tags"],
      "additionalProperties": false}, "minItems": 1, "maxItems": 2})");
  EXPECT_TRUE(complete(a, R"([{"id": 1, "tags": []}])"));
  EXPECT_TRUE(complete(a, R"([{"id": 1, "tags": ["x", "y"]}, {"id": 2, "tags": ["z"]}])"));
  EXPECT_FALSE(complete(a, "[]"));
  EXPECT_FALSE(prefix(a, R"([{"id": 1, "tags": []}, {"id": 2, "tags": []}, )"));
  EXPECT_FALSE(prefix(a, R"([{"id": 1, "tags": [1]}])"));
  EXPECT_FALSE(prefix(a, R"([{"id": 1, "tags": [],}])"));
}

TEST(Grammar, StringLength) {
  auto s = compile(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(complete(s, R"("a")"));
  EXPECT_TRUE(complete(s, R"("ab")"));
  EXPECT_TRUE(complete(s, "\"\xc3\xa9\xc3\xa9\xc3\xa9\""));  // three characters, six bytes
  EXPECT_TRUE(complete(s, R"("a\nb")"));
  EXPECT_FALSE(prefix(s, R"("abcd)"));
}

TEST(Grammar, AnyOfOneOfAndRefs) {
  auto g = compile(R"({"anyOf": [
      {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
       "required": ["kind", "r"], "additionalProperties": false},
      {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
       "required": ["kind", "side"], "additionalProperties": false}]})");
  EXPECT_TRUE(complete(g, R"({"kind": "circle", "r": 2})"));
  EXPECT_TRUE(complete(g, R"({"kind": "square", "side": 2})"));
  EXPECT_FALSE(prefix(g, R"({"kind": "circle", "side")"));

  auto r = compile(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"], "additionalProperties": false}}, "$ref": "#/$defs/node"})");
  // (keys in the parsed schema's order: sorted)
  EXPECT_TRUE(complete(r, R"({"kids": [{"v": 2}, {"kids": [{"v": 4}], "v": 3}], "v": 1})"));
  EXPECT_FALSE(prefix(r, R"({"kids": [{"w": 2}]})"));
  EXPECT_FALSE(prefix(r, R"({"v": 1, "kids")"));
  auto d = compile(R"({"definitions": {"u": {"enum": ["a", "b"]}}, "type": "object",
      "properties": {"x": {"$ref": "#/definitions/u"}}, "additionalProperties": false})");
  EXPECT_TRUE(complete(d, R"({"x": "b"})"));
  EXPECT_FALSE(prefix(d, R"({"x": "c"})"));
}

TEST(Grammar, Errors) {
  EXPECT_NE(error_of(R"({"type": "string", "not": {"const": "a"}})").find("'not'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "object", "properties": {"n": {"type": "object",
      "patternProperties": {"^a": {}}}}})")
                .find("'patternProperties' at #/properties/n"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "strng"})").find("unknown type 'strng'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "object", "required": "a"})").find("'required'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})")
                .find("$ref cycle"),
            std::string::npos);
  // Recursion that can never end: a required property of the same schema.
  EXPECT_NE(error_of(R"({"type": "object", "properties": {"x": {"$ref": "#"}},
      "required": ["x"]})")
                .find("no finite instance"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "http://example.com/s.json"})").find("local"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "#/$defs/missing"})").find("points nowhere"), std::string::npos);
  EXPECT_NE(error_of(R"({"enum": []})").find("'enum'"), std::string::npos);
  EXPECT_NE(error_of("false").find("nothing is valid"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "object", "properties": {}, "required": ["a"],
      "additionalProperties": false})")
                .find("'a'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "array", "items": [{"type": "string"}]})").find("tuple"),
            std::string::npos);
  EXPECT_NE(error_of("17").find("must be an object"), std::string::npos);
  // Annotations and unknown keywords are fine.
  EXPECT_EQ(error_of(R"({"type": "string", "description": "d", "title": "t", "format": "date",
      "default": "x", "x-custom": 1})"),
            "");
}

TEST(Grammar, ToolCallsHermes) {
  const json weather = json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string"}}, "required": ["city"], "additionalProperties": false})");
  const json add = json::parse(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]})");
  std::vector<ToolSpec> tools{{"get_weather", &weather, false}, {"add", &add, true}};
  auto r = tool_call_grammar(tools, hermes_syntax(), 16);
  ASSERT_TRUE(std::holds_alternative<Grammar>(r));
  auto g = std::make_shared<const Grammar>(std::get<Grammar>(std::move(r)));
  EXPECT_TRUE(complete(g,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                       "\"Paris\"}}\n</tool_call>"));
  EXPECT_TRUE(complete(g,
                       "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n"
                       "</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3, "
                       "\"b\": 4}}\n</tool_call>\n"));
  EXPECT_FALSE(prefix(g, "<tool_call>\n{\"name\": \"Paris\""));
  EXPECT_FALSE(prefix(g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"city\""));
  EXPECT_FALSE(
      complete(g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>"));
  EXPECT_FALSE(prefix(g, "Sure! <tool_call>"));
  EXPECT_FALSE(complete(g, ""));
  // A schema error names its tool.
  const json bad = json::parse(R"({"type": "object", "properties": {"x": {"pattern": "(?=b)a"}}})");
  std::vector<ToolSpec> with_bad{{"ok", &weather, false}, {"bad", &bad, false}};
  auto e = tool_call_grammar(with_bad, hermes_syntax());
  ASSERT_TRUE(std::holds_alternative<ToolGrammarError>(e));
  EXPECT_EQ(std::get<ToolGrammarError>(e).tool, 1u);
  EXPECT_NE(std::get<ToolGrammarError>(e).message.find("lookahead"), std::string::npos);
}

TEST(Grammar, ToolCallsJsonTurn) {
  const json p = json::parse(R"({"type": "object", "properties": {"q": {"type": "string"}},
      "required": ["q"]})");
  std::vector<ToolSpec> tools{{"search", &p, true}};
  auto r = tool_call_grammar(tools, json_turn_syntax());
  ASSERT_TRUE(std::holds_alternative<Grammar>(r));
  auto g = std::make_shared<const Grammar>(std::get<Grammar>(std::move(r)));
  EXPECT_TRUE(complete(g, R"({"name": "search", "parameters": {"q": "x"}})"));
  EXPECT_FALSE(prefix(g, R"({"name": "search", "arguments")"));
}

// Mistral's two layouts, as its templates write calls back: v0.3 / Nemo one list after one
// [TOOL_CALLS]; the later tokenizers a [TOOL_CALLS]name[ARGS]{...} per call. Neither reads a
// Llama 3.1 JSON turn or the other layout.
TEST(Grammar, ToolCallsMistral) {
  const json weather = json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string"}}, "required": ["city"], "additionalProperties": false})");
  const json add = json::parse(R"({"type": "object", "properties": {
      "a": {"type": "integer"}}, "required": ["a"]})");
  std::vector<ToolSpec> tools{{"get_weather", &weather, false}, {"add", &add, false}};
  auto lr = tool_call_grammar(tools, mistral_list_syntax());
  ASSERT_TRUE(std::holds_alternative<Grammar>(lr));
  auto list = std::make_shared<const Grammar>(std::get<Grammar>(std::move(lr)));
  EXPECT_TRUE(
      complete(list, R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}])"));
  EXPECT_TRUE(complete(list,
                       R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, )"
                       R"({"name": "add", "arguments": {"a": 1}}])"));
  EXPECT_FALSE(prefix(list, R"({"name": "get_weather", "parameters")"));
  EXPECT_FALSE(prefix(list, R"({"name": "get_weather", "arguments")"));
  EXPECT_FALSE(prefix(list, R"([TOOL_CALLS]get_weather)"));
  EXPECT_FALSE(prefix(list, R"([TOOL_CALLS][{"name": "Paris")"));
  EXPECT_FALSE(complete(list, R"([TOOL_CALLS][])"));
  EXPECT_FALSE(prefix(list, R"([TOOL_CALLS][{"name": "add", "arguments": {"city")"));
  // One call at most (parallel_tool_calls false).
  auto one = std::make_shared<const Grammar>(
      std::get<Grammar>(tool_call_grammar(tools, mistral_list_syntax(), 16, 1)));
  EXPECT_FALSE(prefix(one, R"([TOOL_CALLS][{"name": "add", "arguments": {"a": 1}}, )"));

  auto ar = tool_call_grammar(tools, mistral_args_syntax());
  ASSERT_TRUE(std::holds_alternative<Grammar>(ar));
  auto args = std::make_shared<const Grammar>(std::get<Grammar>(std::move(ar)));
  EXPECT_TRUE(complete(args, R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})"));
  EXPECT_TRUE(complete(
      args, R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]add[ARGS]{"a": 2})"));
  EXPECT_FALSE(prefix(args, R"([TOOL_CALLS][{"name")"));
  EXPECT_FALSE(prefix(args, R"([TOOL_CALLS]Paris[ARGS])"));
  EXPECT_FALSE(prefix(args, R"({"name": "get_weather")"));
  EXPECT_FALSE(prefix(args, R"([TOOL_CALLS]add[ARGS]{"city")"));
}

// A small vocabulary with the kinds of tokens a real one has.
std::vector<std::string> test_vocab() {
  std::vector<std::string> v = {
      "",        "{",     "}",    "{\"",   "\":",   "\": ",  "\"",          ",",        ", \"",
      "city",    "Paris", " ",    "\n",    "  ",    "name",  "\"}",         "\"}}",     "1",
      "23",      "-",     ".5",   "true",  "false", "null",  "\\",          "\\n",      "\\u00",
      "e9",      "ab\"",  "x\"y", "\xc3",  "\xa9",  "\t",    "<tool_call>", "<",        "tool",
      "_call",   ">",     ">\n",  "</",    "add",   "\"add", "get",         "_weather", "arguments",
      "\": {\"", "a",     "b",    "\": 1", "]",     "[",     "\"]",         ",\n"};
  return v;
}

// Every mask bit against feeding the token's bytes to a copy of the matcher.
void expect_masks_exact(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Vocabulary vocab(test_vocab(), {0});
  MaskCache cache;
  Matcher m(g);
  std::vector<uint64_t> mask(vocab.mask_words()), cached(vocab.mask_words());
  for (size_t pos = 0; pos <= text.size(); ++pos) {
    compute_mask(m, vocab, nullptr, mask.data());
    compute_mask(m, vocab, &cache, cached.data());  // a miss, then hits on repeated states
    EXPECT_EQ(mask, cached);
    for (int32_t id = 1; id < vocab.size(); ++id) {
      Matcher copy = m;
      const bool ok = copy.advance(vocab.bytes(id));
      EXPECT_EQ(ok, (bool)((mask[(size_t)id >> 6] >> (id & 63)) & 1))
          << "token '" << vocab.bytes(id) << "' after '" << text.substr(0, pos) << "'";
    }
    EXPECT_EQ(m.accepting(), (bool)(mask[0] & 1))
        << "end token after '" << text.substr(0, pos) << "'";
    if (pos < text.size()) {
      ASSERT_TRUE(m.advance(text.substr(pos, 1)));
    }
  }
  EXPECT_GT(cache.size(), 0u);
}

TEST(TokenMask, MatchesBruteForce) {
  expect_masks_exact(compile(R"({"type": "object", "properties": {"city": {"type": "string"},
      "n": {"type": "array", "items": {"type": "number"}}}, "required": ["city"],
      "additionalProperties": false})"),
                     "{\"city\": \"Pa\\u00e9\\n\\\"ris\", \"n\": [1, -2.5, 3e2]}");
  expect_masks_exact(compile(R"({"type": "string", "maxLength": 3})"), "\"a\xc3\xa9\"");
  const json weather = json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string"}}, "required": ["city"], "additionalProperties": false})");
  std::vector<ToolSpec> tools{{"get_weather", &weather, false}, {"add", &weather, false}};
  auto g =
      std::make_shared<const Grammar>(std::get<Grammar>(tool_call_grammar(tools, hermes_syntax())));
  expect_masks_exact(
      g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>");
}

TEST(TokenMask, ApplySetsMinusInfinityOutsideTheMask) {
  std::vector<float> logits(130, 1.0f);
  std::vector<uint64_t> mask(3, 0);
  mask[0] = 0b101;
  mask[2] = 1;  // id 128
  apply_mask(logits, mask.data());
  for (size_t i = 0; i < logits.size(); ++i)
    EXPECT_EQ(std::isinf(logits[i]), !(i == 0 || i == 2 || i == 128)) << i;
}

}  // namespace
}  // namespace infercept::grammar
