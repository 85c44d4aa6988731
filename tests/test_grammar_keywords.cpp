// The JSON Schema keywords that bound values, enforced while the text is written: numeric
// bounds and multipleOf (src/grammar/number_range.h), string patterns (src/grammar/regex.h),
// and minProperties/maxProperties/uniqueItems where they change nothing. For each: which
// complete texts are accepted, which prefixes are cut at once (a prefix that no valid value
// begins with is refused at its first byte), which schemas are errors; masks against a
// brute-force check of every token.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/number_range.h"
#include "grammar/token_mask.h"

namespace infercept::grammar {
namespace {

using json = nlohmann::json;

std::shared_ptr<const Grammar> compile(const std::string& schema) {
  auto g = compile_json_schema(json::parse(schema), {false, 4});
  EXPECT_TRUE(g.ok()) << schema << ": " << (g.ok() ? "" : g.error().message);
  if (!g.ok()) return nullptr;
  return std::make_shared<const Grammar>(std::move(*g));
}
bool complete(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.advance(text) && m.accepting();
}
bool prefix(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.advance(text);
}
std::string error_of(const std::string& schema) {
  auto g = compile_json_schema(json::parse(schema));
  return g.ok() ? "" : g.error().message;
}
// A string schema with `pattern` (written as the regex's own text).
std::shared_ptr<const Grammar> pattern(const std::string& regex, const std::string& more = "") {
  return compile(json{{"type", "string"}, {"pattern", regex}}.dump().insert(1, more));
}

// Every prefix of `ok` is accepted, and the whole is complete.
void expect_valid(const std::shared_ptr<const Grammar>& g, const std::string& ok) {
  Matcher m(g);
  for (size_t k = 0; k < ok.size(); ++k)
    ASSERT_TRUE(m.advance(ok.substr(k, 1))) << "'" << ok << "' refused at byte " << k;
  EXPECT_TRUE(m.accepting()) << "'" << ok << "' is not complete";
}

TEST(GrammarKeywords, IntegerRangeCutsPrefixesThatCannotFit) {
  auto g = compile(R"({"type": "integer", "minimum": 1, "maximum": 10})");
  for (int v = 1; v <= 10; ++v) expect_valid(g, std::to_string(v));
  for (const char* bad : {"0", "11", "-1", "01", "100", "1.0", "1e1", "-0"})
    EXPECT_FALSE(complete(g, bad)) << bad;
  // After "1": "0" or the end; after "2": only the end; nothing negative, no leading zero.
  EXPECT_TRUE(prefix(g, "1"));
  EXPECT_TRUE(prefix(g, "10"));
  EXPECT_FALSE(prefix(g, "11"));
  EXPECT_FALSE(prefix(g, "20"));
  EXPECT_FALSE(prefix(g, "-"));
  EXPECT_FALSE(prefix(g, "0"));
  EXPECT_FALSE(prefix(g, "1."));
  // The number ends where its parent goes on.
  auto o = compile(R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1,
      "maximum": 10}}, "required": ["n"]})");
  EXPECT_TRUE(complete(o, R"({"n": 10})"));
  EXPECT_TRUE(complete(o, R"({"n":7 })"));
  EXPECT_FALSE(prefix(o, R"({"n": 0)"));
  EXPECT_FALSE(prefix(o, R"({"n": 10)"
                         "0"));
}

TEST(GrammarKeywords, ExclusiveBoundsBothDrafts) {
  auto g = compile(R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100})");
  EXPECT_FALSE(prefix(g, "0"));
  expect_valid(g, "1");
  expect_valid(g, "99");
  expect_valid(g, "10");
  EXPECT_FALSE(prefix(g, "100"));
  // Draft 4: booleans beside minimum/maximum.
  auto d4 = compile(R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true,
      "maximum": 5, "exclusiveMaximum": false})");
  EXPECT_FALSE(prefix(d4, "0"));
  expect_valid(d4, "1");
  expect_valid(d4, "5");
  EXPECT_FALSE(prefix(d4, "6"));
  // The tighter of two bounds on one side wins; at equal values the exclusive one.
  auto both = compile(R"({"type": "integer", "minimum": 3, "exclusiveMinimum": 3})");
  EXPECT_FALSE(complete(both, "3"));
  expect_valid(both, "4");
  auto both2 = compile(R"({"type": "integer", "minimum": 7, "exclusiveMinimum": 3})");
  EXPECT_FALSE(complete(both2, "6"));
  expect_valid(both2, "7");
}

TEST(GrammarKeywords, NegativeAndZeroCrossingRanges) {
  auto g = compile(R"({"type": "integer", "minimum": -20, "maximum": -5})");
  for (const char* ok : {"-5", "-20", "-13", "-10", "-19"}) expect_valid(g, ok);
  for (const char* cut : {"-4", "-3", "-21", "5", "0", "-0", "-200"})
    EXPECT_FALSE(prefix(g, cut)) << cut;
  EXPECT_TRUE(prefix(g, "-1"));  // -10 .. -19
  EXPECT_FALSE(complete(g, "-1"));
  EXPECT_TRUE(prefix(g, "-2"));  // -20
  EXPECT_FALSE(complete(g, "-2"));

  auto z = compile(R"({"type": "integer", "minimum": -3, "maximum": 250})");
  for (const char* ok : {"-3", "-1", "0", "250", "26", "199", "9", "-0"}) expect_valid(z, ok);
  for (const char* cut : {"-4", "251", "260", "300", "-30", "00", "-00", "-01"})
    EXPECT_FALSE(prefix(z, cut)) << cut;
  // minimum >= 0: no '-' at all.
  EXPECT_FALSE(prefix(compile(R"({"type": "integer", "minimum": 0})"), "-"));
  EXPECT_TRUE(complete(compile(R"({"type": "integer", "minimum": 0})"), "123456789012345678901"));
  // maximum < 0: only negative numbers.
  auto neg = compile(R"({"type": "number", "exclusiveMaximum": 0})");
  EXPECT_FALSE(prefix(neg, "0"));
  EXPECT_FALSE(prefix(neg, "1"));
  expect_valid(neg, "-0.001");
  EXPECT_FALSE(complete(neg, "-0.000"));  // -0 is not < 0
}

TEST(GrammarKeywords, DecimalBoundsAreExact) {
  auto g = compile(R"({"type": "number", "minimum": 0, "maximum": 0.1})");
  for (const char* ok : {"0.1", "0.10", "0.1000000", "0.09", "0", "0.0", "0.05"})
    expect_valid(g, ok);
  EXPECT_FALSE(prefix(g, "0.10000001"));
  EXPECT_FALSE(prefix(g, "0.2"));
  EXPECT_FALSE(prefix(g, "0.11"));
  EXPECT_FALSE(prefix(g, "1"));
  EXPECT_FALSE(prefix(g, "-"));
  EXPECT_FALSE(complete(g, "0."));
  EXPECT_FALSE(prefix(g, "0e1"));  // exponents are not written for bounded numbers

  auto x = compile(R"({"type": "number", "minimum": -1.25, "exclusiveMaximum": 2.5})");
  for (const char* ok : {"2.4999", "2", "-1.25", "-1.250", "-1.2", "0", "-0.5", "1.999"})
    expect_valid(x, ok);
  for (const char* cut : {"2.5", "2.6", "3", "-1.26", "-1.3", "-2", "1e2"})
    EXPECT_FALSE(prefix(x, cut)) << cut;
  EXPECT_FALSE(complete(x, "2.50"));

  // An integer with fractional bounds: the integers inside.
  auto i = compile(R"({"type": "integer", "minimum": 1.5, "maximum": 3.7})");
  expect_valid(i, "2");
  expect_valid(i, "3");
  EXPECT_FALSE(prefix(i, "1"));
  EXPECT_FALSE(prefix(i, "4"));
  EXPECT_FALSE(prefix(i, "3."));
  // Integers past a double's precision are compared as written.
  auto big = compile(R"({"type": "integer", "minimum": 0, "maximum": 9007199254740993})");
  expect_valid(big, "9007199254740993");
  EXPECT_FALSE(prefix(big, "9007199254740994"));
  EXPECT_FALSE(prefix(big, "90071992547409930"));
  // Exponent notation in the schema is read exactly.
  auto e = compile(R"({"type": "number", "minimum": 1e-3, "maximum": 1.5e2})");
  expect_valid(e, "0.001");
  expect_valid(e, "150");
  EXPECT_FALSE(prefix(e, "0.0009"));
  EXPECT_FALSE(prefix(e, "151"));
}

TEST(GrammarKeywords, MultipleOf) {
  auto g = compile(R"({"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 20})");
  for (const char* ok : {"0", "5", "10", "15", "20"}) expect_valid(g, ok);
  for (const char* cut : {"25", "3", "12", "-5", "21"}) EXPECT_FALSE(prefix(g, cut)) << cut;
  EXPECT_TRUE(prefix(g, "1"));  // 10, 15
  EXPECT_FALSE(complete(g, "1"));
  auto unbounded = compile(R"({"type": "integer", "multipleOf": 7})");
  expect_valid(unbounded, "-7000000000000000007");
  EXPECT_FALSE(complete(unbounded, "7000000000000000008"));
  auto cents = compile(R"({"type": "number", "multipleOf": 0.01})");
  for (const char* ok : {"1.25", "0.1", "-3", "100.07"}) expect_valid(cents, ok);
  EXPECT_FALSE(prefix(cents, "1.255"));
  auto q = compile(R"({"type": "number", "multipleOf": 2.5, "minimum": 0, "maximum": 10})");
  for (const char* ok : {"7.5", "10", "2.5", "5", "0"}) expect_valid(q, ok);
  EXPECT_FALSE(complete(q, "7.4"));
  EXPECT_FALSE(prefix(q, "7.4"));
  EXPECT_FALSE(prefix(q, "12"));
}

// Every text of up to 5 bytes over "-0159." against exact decimal arithmetic, for random
// bounds and steps: complete exactly when it is a JSON number (positional) in range, a
// multiple of the step, written as the automaton writes numbers ("-0" only where the range
// has negative numbers and 0; with a step, no more fraction digits than the step's).
TEST(GrammarKeywords, NumbersAgainstExactArithmeticExhaustively) {
  const char* values[] = {"-1.5", "-1", "0", "0.5", "1", "10", "1.05", "15", "-10"};
  const char* steps[] = {"5", "0.5", "0.25", "3"};
  std::vector<std::string> texts{""};
  for (size_t k = 0; k < texts.size(); ++k)
    if (texts[k].size() < 5)
      for (char c : std::string("-0159.")) texts.push_back(texts[k] + c);
  const std::regex syntax(R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?)");
  std::mt19937 rng(7);
  int accepted = 0, refused = 0, schemas = 0;
  for (int round = 0; round < 60; ++round) {
    json schema = {{"type", rng() % 2 ? "integer" : "number"}};
    NumberBounds b;
    if (rng() % 4) {
      b.lo = *parse_decimal(values[rng() % 9]);
      b.lo_exclusive = rng() % 2;
      schema[b.lo_exclusive ? "exclusiveMinimum" : "minimum"] =
          json::parse((b.lo->neg ? "-" : "") + (b.lo->int_digits.empty() ? "0" : b.lo->int_digits) +
                      (b.lo->frac_digits.empty() ? "" : "." + b.lo->frac_digits));
    }
    if (rng() % 4) {
      b.hi = *parse_decimal(values[rng() % 9]);
      b.hi_exclusive = rng() % 2;
      schema[b.hi_exclusive ? "exclusiveMaximum" : "maximum"] =
          json::parse((b.hi->neg ? "-" : "") + (b.hi->int_digits.empty() ? "0" : b.hi->int_digits) +
                      (b.hi->frac_digits.empty() ? "" : "." + b.hi->frac_digits));
    }
    std::optional<Decimal> step;
    if (rng() % 3 == 0) {
      const char* st = steps[rng() % 4];
      step = *parse_decimal(st);
      schema["multipleOf"] = json::parse(st);
    }
    auto g = compile_json_schema(schema, {false, 0});
    if (!g.ok()) {  // only an empty range is an error here
      EXPECT_NE(g.error().message.find("no number"), std::string::npos) << schema.dump();
      continue;
    }
    auto gp = std::make_shared<const Grammar>(std::move(*g));
    const bool integer = schema["type"] == "integer";
    const bool negatives = !b.lo || b.lo->neg;
    for (const std::string& t : texts) {
      bool want = std::regex_match(t, syntax) && !(integer && t.find('.') != std::string::npos);
      if (want) {
        const Decimal v = *parse_decimal(t);
        if (b.lo) want = want && compare(v, *b.lo) > (b.lo_exclusive ? 0 : -1);
        if (b.hi) want = want && compare(v, *b.hi) < (b.hi_exclusive ? 0 : 1);
        if (v.zero() && t[0] == '-') want = want && negatives;
        if (step) {
          // v / step is an integer: v * 10^S and step * 10^S as integers (small here).
          const size_t S = step->frac_digits.size();
          const size_t dot = t.find('.');
          const size_t frac = dot == std::string::npos ? 0 : t.size() - dot - 1;
          const double scaled = std::stod(t) * std::pow(10.0, (double)S);
          const double p = std::stod(step->int_digits + step->frac_digits);
          want = want && frac <= S && std::fmod(std::round(std::fabs(scaled)), p) == 0;
        }
      }
      EXPECT_EQ(complete(gp, t), want) << schema.dump() << " '" << t << "'";
      ++(want ? accepted : refused);
    }
    ++schemas;
  }
  EXPECT_GT(schemas, 40);
  EXPECT_GT(accepted, 10000);
  EXPECT_GT(refused, 10000);
  std::printf("%d schemas: %d texts complete, %d not\n", schemas, accepted, refused);
}

TEST(GrammarKeywords, NumericErrorsAndInference) {
  EXPECT_NE(error_of(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("no number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "integer", "exclusiveMinimum": 4, "exclusiveMaximum": 5})")
                .find("no number"),
            std::string::npos);
  EXPECT_NE(
      error_of(R"({"type": "integer", "minimum": "1"})").find("'minimum' at # must be a number"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"type": "integer", "multipleOf": 0})").find("'multipleOf'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "integer", "multipleOf": 1234567})").find("6 significant"),
            std::string::npos);
  // Without a type, the bounds make it a number; in a type list they bound the numbers only.
  auto n = compile(R"({"minimum": 2})");
  EXPECT_FALSE(prefix(n, "0"));
  EXPECT_FALSE(complete(n, "1"));
  EXPECT_TRUE(complete(n, "10"));
  EXPECT_FALSE(prefix(n, "\""));
  auto t = compile(R"({"type": ["integer", "null"], "maximum": 3})");
  expect_valid(t, "null");
  expect_valid(t, "3");
  EXPECT_FALSE(prefix(t, "4"));
}

TEST(GrammarKeywords, PatternsAnchoredAndNot) {
  auto code = pattern(R"(^[A-Z]{3}-\d{4}$)");
  expect_valid(code, R"("ABC-1234")");
  EXPECT_FALSE(prefix(code, R"("AB-)"));
  EXPECT_FALSE(prefix(code, R"("abc)"));
  EXPECT_FALSE(prefix(code, R"("ABC-12345)"));
  EXPECT_FALSE(complete(code, R"("ABC-123")"));
  EXPECT_FALSE(prefix(code, R"("ABC-123")"));

  auto mail = pattern(R"(^\S+@\S+$)");
  expect_valid(mail, R"("a@b")");
  expect_valid(mail, R"("a@b@c")");
  EXPECT_FALSE(prefix(mail, R"(" )"));
  EXPECT_FALSE(complete(mail, R"("ab")"));
  EXPECT_FALSE(prefix(mail, R"("a b)"));
  EXPECT_FALSE(prefix(mail, R"("a@")"));
  EXPECT_FALSE(prefix(mail, R"("a\tb)"));  // an escaped white-space character is still one

  // Unanchored: a match anywhere.
  auto abc = pattern("abc");
  expect_valid(abc, R"("xxabcyy")");
  expect_valid(abc, R"("abc")");
  expect_valid(abc, R"("ababc")");
  EXPECT_TRUE(prefix(abc, R"("xyz)"));
  EXPECT_FALSE(complete(abc, R"("ab")"));
  EXPECT_FALSE(complete(abc, R"("")"));
  auto start = pattern("^ab");
  expect_valid(start, R"("abzz")");
  EXPECT_FALSE(prefix(start, R"("z)"));
  auto end = pattern("c$");
  expect_valid(end, R"("xxc")");
  EXPECT_FALSE(complete(end, R"("cx")"));
  EXPECT_TRUE(prefix(end, R"("cx)"));
  auto either = pattern("^a|b$");  // ^a, or b$
  expect_valid(either, R"("axx")");
  expect_valid(either, R"("xxb")");
  EXPECT_FALSE(complete(either, R"("xa")"));
}

TEST(GrammarKeywords, PatternSyntax) {
  auto alt = pattern(R"(^(foo|ba(r|z))+$)");
  for (const char* ok : {R"("foo")", R"("barfoo")", R"("baz")"}) expect_valid(alt, ok);
  EXPECT_FALSE(complete(alt, R"("fo")"));
  EXPECT_FALSE(prefix(alt, R"("fob)"));
  auto rep = pattern(R"(^x{2,3}y{2,}z?$)");
  for (const char* ok : {R"("xxyy")", R"("xxxyyyyz")"}) expect_valid(rep, ok);
  EXPECT_FALSE(prefix(rep, R"("xxxx)"));
  EXPECT_FALSE(complete(rep, R"("xxy")"));
  auto neg = pattern(R"(^[^0-9\s]+$)");
  expect_valid(neg, R"("ab-_")");
  EXPECT_FALSE(prefix(neg, R"("a1)"));
  EXPECT_FALSE(prefix(neg, R"("a )"));
  auto cls = pattern(R"(^[\w.+-]+$)");
  expect_valid(cls, R"("a.b+c-d_9")");
  EXPECT_FALSE(prefix(cls, R"("a/)"));
  auto dot = pattern("^.+$");
  expect_valid(dot, "\"\xc3\xa9x\"");
  EXPECT_FALSE(prefix(dot, R"("a\n)"));  // '.' is not a line terminator
  auto lit = pattern(R"(^a\.b\/c\{1\}$)");
  expect_valid(lit, R"("a.b/c{1}")");
  EXPECT_FALSE(prefix(lit, R"("aXb)"));
  EXPECT_TRUE(complete(pattern("^a{$"), R"("a{")"));  // '{' that starts no quantifier
  // Non-ASCII characters, literal and in ranges.
  auto latin = pattern("^[\xc3\xa0-\xc3\xbf]+$");  // [à-ÿ]
  expect_valid(latin, "\"\xc3\xa9\xc3\xa0\"");
  EXPECT_FALSE(prefix(latin, R"("e)"));
  EXPECT_FALSE(prefix(latin, "\"\xc3\x9f"));  // ß is below à
  auto cjk = pattern(R"(^[\u4e00-\u9fff]{2}$)");
  expect_valid(cjk, "\"\xe6\x97\xa5\xe6\x9c\xac\"");  // 日本
  EXPECT_FALSE(prefix(cjk, "\"\xe3"));
  EXPECT_FALSE(prefix(cjk, "\"\xe6\x97\xa5\xe6\x9c\xac\xe6"));
}

TEST(GrammarKeywords, PatternReadsTheDecodedValue) {
  // JSON escapes decode before the regex sees them.
  auto nl = pattern("^a\\nb$");
  expect_valid(nl, R"("a\nb")");
  EXPECT_FALSE(prefix(nl, R"("a\t)"));
  auto quote = pattern(R"(^"[a-z]*"$)");
  expect_valid(quote, R"("\"abc\"")");
  EXPECT_FALSE(prefix(quote, R"("a)"));
  auto slash = pattern(R"(^a/b$)");
  expect_valid(slash, R"("a/b")");
  expect_valid(slash, R"("a\/b")");
  // \u escapes are not written with a pattern; the character comes raw.
  auto e = pattern("^\xc3\xa9$");
  expect_valid(e, "\"\xc3\xa9\"");
  EXPECT_FALSE(prefix(e, R"("\u)"));
  // A backslash only where an escape's character may come.
  EXPECT_FALSE(prefix(pattern("^[a-z]+$"), R"("a\)"));
}

// Every value of up to 4 characters over "ab1- \n" against std::regex (ECMAScript, searched
// as JSON Schema does), with and without length bounds.
TEST(GrammarKeywords, PatternsAgainstStdRegexExhaustively) {
  const char* regexes[] = {"abc",       "^a",     "b$",         "^a|b$",      "^[ab]+$",
                           "^(ab|a)*$", "a{2}",   "^a{1,2}b?$", "[^a]",       "^\\d+-?\\d*$",
                           "\\s",       "^\\S*$", "^.$",        "(a|1)b",     "^(?:a|b){2,3}$",
                           "^[a-]+$",   "^$",     "a|^$",       "^[\\w-]{2}", "1(?:-1)+$"};
  std::vector<std::string> values{""};
  for (size_t k = 0; k < values.size(); ++k)
    if (values[k].size() < 4)
      for (char c : std::string("ab1- \n")) values.push_back(values[k] + c);
  int matched = 0, total = 0;
  for (const char* r : regexes) {
    const std::regex re(r, std::regex::ECMAScript);
    for (const auto& [lo, hi] : {std::pair{0, -1}, std::pair{2, 3}}) {
      json schema = {{"type", "string"}, {"pattern", r}};
      if (lo > 0) schema["minLength"] = lo;
      if (hi >= 0) schema["maxLength"] = hi;
      auto g = compile_json_schema(schema, {false, 0});
      if (!g.ok()) {  // only where no value fits the lengths
        EXPECT_NE(g.error().message.find("no string"), std::string::npos) << schema.dump();
        continue;
      }
      auto gp = std::make_shared<const Grammar>(std::move(*g));
      for (const std::string& v : values) {
        const int n = (int)v.size();
        const bool want = std::regex_search(v, re) && n >= lo && (hi < 0 || n <= hi);
        EXPECT_EQ(complete(gp, json(v).dump()), want) << schema.dump() << " " << json(v).dump();
        matched += want;
        ++total;
      }
    }
  }
  EXPECT_GT(matched, 2000);
  EXPECT_GT(total - matched, 2000);
}

TEST(GrammarKeywords, PatternWithLengthBounds) {
  auto g = pattern("^[a-z]+$", R"("minLength": 2, "maxLength": 3, )");
  expect_valid(g, R"("ab")");
  expect_valid(g, R"("abc")");
  EXPECT_FALSE(complete(g, R"("a")"));
  EXPECT_FALSE(prefix(g, R"("abcd)"));
  // Lengths count characters, and a dead end is cut before it is written.
  auto two = pattern("^(aa)+$", R"("maxLength": 3, )");
  expect_valid(two, R"("aa")");
  EXPECT_FALSE(prefix(two, R"("aaa)"));
  auto wide = pattern("^.{2}$");
  expect_valid(wide, "\"\xe6\x97\xa5\xc3\xa9\"");
  EXPECT_FALSE(prefix(wide, "\"\xe6\x97\xa5\xc3\xa9x"));
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "^(aa)+$", "minLength": 3,
      "maxLength": 3})")
                .find("no string"),
            std::string::npos);
}

TEST(GrammarKeywords, PatternErrorsNameTheConstruct) {
  auto err = [](const std::string& regex) {
    return error_of(json{{"type", "string"}, {"pattern", regex}}.dump());
  };
  EXPECT_NE(err(R"((a)\1)").find("backreference '\\1'"), std::string::npos);
  EXPECT_NE(err(R"((?<n>a)\k<n>)").find("backreference '\\k'"), std::string::npos);
  EXPECT_NE(err("(?=a)b").find("lookahead '(?='"), std::string::npos);
  EXPECT_NE(err("(?!a)b").find("lookahead '(?!'"), std::string::npos);
  EXPECT_NE(err("(?<!a)b").find("lookbehind '(?<!'"), std::string::npos);
  EXPECT_NE(err(R"(\bfoo)").find("word boundary"), std::string::npos);
  EXPECT_NE(err(R"(\p{L})").find("Unicode property"), std::string::npos);
  EXPECT_NE(err("(?i)a").find("'(?i'"), std::string::npos);
  EXPECT_NE(err("a{1001}").find("too large"), std::string::npos);
  EXPECT_NE(err("(a|b)*a(a|b){12}").find("too large"), std::string::npos);
  EXPECT_NE(err("[z-a]").find("out of order"), std::string::npos);
  EXPECT_NE(err("(ab").find("missing ')'"), std::string::npos);
  EXPECT_NE(err("*a").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(err("[^\\s\\S]").find("no string"), std::string::npos);
  // The error says where in the schema.
  const std::string e = error_of(R"j({"type": "object", "properties": {"zip": {"type": "string",
      "pattern": "(?=1)"}}})j");
  EXPECT_NE(e.find("at #/properties/zip"), std::string::npos) << e;
  EXPECT_NE(e.find("lookahead"), std::string::npos) << e;
}

TEST(GrammarKeywords, PropertyCountsAndUniqueItemsOnlyWhereTrivial) {
  EXPECT_EQ(error_of(R"({"type": "object", "properties": {"a": {"type": "string"}},
      "required": ["a"], "minProperties": 1})"),
            "");
  EXPECT_EQ(error_of(R"({"type": "object", "properties": {"a": {"type": "string"}},
      "additionalProperties": false, "maxProperties": 1})"),
            "");
  EXPECT_NE(error_of(R"({"type": "object", "properties": {"a": {"type": "string"}},
      "minProperties": 1})")
                .find("'minProperties'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "object", "maxProperties": 3})").find("'maxProperties'"),
            std::string::npos);
  EXPECT_EQ(error_of(R"({"type": "array", "uniqueItems": true, "maxItems": 1})"), "");
  EXPECT_EQ(error_of(R"({"type": "array", "uniqueItems": false})"), "");
  EXPECT_NE(error_of(R"({"type": "array", "uniqueItems": true})").find("'uniqueItems'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"uniqueItems": true})").find("'uniqueItems'"), std::string::npos);
}

// Masks against feeding each token to a copy of the matcher, before every byte of `text`.
std::vector<std::string> vocab_bytes() {
  return {"",     "0",        "1",   "2",  "5",    "9",     "10",    "00",  "12", "25",
          "100",  ".",        ".0",  ".1", ".5",   "-",     "-1",    "-0",  "e",  "1e",
          ",",    "}",        "{",   "\"", "\":",  " ",     "\"n",   "\"s", "A",  "AB",
          "ABC",  "Z",        "-12", "34", "1234", "@",     "a",     "b@",  "ab", "abc",
          "xabc", "bc\"",     "x",   "yy", "\\n",  "\\\"",  "\\u00", "e9",  "\\", "\xc3",
          "\xa9", "\xc3\xa9", " a",  "\t", "\n",   "abc\"", "\"}",   "0}",  "5,"};
}

void expect_masks_exact(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  ASSERT_NE(g, nullptr);
  Vocabulary vocab(vocab_bytes(), {0});
  MaskCache cache;
  Matcher m(g);
  std::vector<uint64_t> mask(vocab.mask_words()), cached(vocab.mask_words());
  for (size_t pos = 0; pos <= text.size(); ++pos) {
    compute_mask(m, vocab, nullptr, mask.data());
    compute_mask(m, vocab, &cache, cached.data());
    EXPECT_EQ(mask, cached);
    for (int32_t id = 1; id < vocab.size(); ++id) {
      Matcher copy = m;
      EXPECT_EQ(copy.advance(vocab.bytes(id)), (bool)((mask[(size_t)id >> 6] >> (id & 63)) & 1))
          << "token '" << vocab.bytes(id) << "' after '" << text.substr(0, pos) << "'";
    }
    EXPECT_EQ(m.accepting(), (bool)(mask[0] & 1)) << "end after '" << text.substr(0, pos) << "'";
    if (pos < text.size()) {
      ASSERT_TRUE(m.advance(text.substr(pos, 1))) << text.substr(0, pos + 1);
    }
  }
}

TEST(GrammarKeywords, MasksMatchBruteForce) {
  expect_masks_exact(compile(R"({"type": "object", "properties": {
      "n": {"type": "integer", "minimum": 1, "maximum": 10},
      "s": {"type": "number", "minimum": -1.25, "exclusiveMaximum": 2.5, "multipleOf": 0.25}},
      "required": ["n", "s"]})"),
                     R"({"n": 10, "s": -1.25})");
  expect_masks_exact(compile(R"({"type": "integer", "minimum": -20, "maximum": 125})"), "-12");
  expect_masks_exact(pattern(R"(^[A-Z]{3}-\d{4}$)"), R"("ABC-1234")");
  expect_masks_exact(pattern(R"(^\S+@\S+$)"), "\"ab@\xc3\xa9\"");
  // Unanchored: once matched, a free string (the plain tokens' precomputed bits).
  expect_masks_exact(pattern("abc"), R"("xabc yy\n")");
  expect_masks_exact(pattern("^a\\nb\"?$", R"("maxLength": 4, )"), R"("a\nb\"")");
}

}  // namespace
}  // namespace infercept::grammar
