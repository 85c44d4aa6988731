// Constrained decoding in the engine: a request with a grammar generates only text the
// grammar accepts (complete when it ends on end-of-turn), sampled or greedy, batched with
// free requests that are left as they are; a triggered constraint starts at its trigger;
// a forced start the grammar does not read is refused.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "grammar/builder.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/tool_grammar.h"
#include "test_util.h"

namespace infercept {
namespace {

std::unique_ptr<EngineCore> make_engine() {
  EngineConfig c;
  c.model_path = testing::default_model_path();
  c.check_invariants = true;
  auto e = EngineCore::create(c);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
  return e.ok() ? std::move(*e) : nullptr;
}

struct Outcome {
  std::string text;
  FinishReason finish = FinishReason::none;
  int32_t last = -1;
};

std::map<uint64_t, Outcome> run_all(EngineCore& e) {
  std::map<uint64_t, Outcome> out;
  for (int guard = 0; e.has_work() && guard < 100000; ++guard)
    for (const RequestOutput& o : e.step()) {
      Outcome& r = out[o.id];
      for (int32_t t : o.new_tokens) {
        if (!e.tokenizer().is_eog(t)) r.text += e.tokenizer().token_to_bytes(t);
        r.last = t;
      }
      if (o.finished()) r.finish = o.finish;
    }
  return out;
}

std::shared_ptr<const GenerationConstraint> schema_constraint(const char* schema) {
  auto g = grammar::compile_json_schema(nlohmann::json::parse(schema));
  EXPECT_TRUE(g.ok());
  auto c = std::make_shared<GenerationConstraint>();
  c->grammar = std::make_shared<const grammar::Grammar>(std::move(*g));
  c->cache = std::make_shared<grammar::MaskCache>();
  return c;
}

bool accepts(const GenerationConstraint& c, const std::string& text, bool complete) {
  grammar::Matcher m(c.grammar);
  return m.advance(text) && (!complete || m.accepting());
}

TEST(EngineConstrained, OutputKeepsToTheSchemaBesideFreeRequests) {
  auto e = make_engine();
  ASSERT_NE(e, nullptr);
  auto c = schema_constraint(R"({"type": "object", "properties": {"name": {"type": "string",
      "maxLength": 20}, "age": {"type": "integer"}, "tags": {"type": "array", "items":
      {"enum": ["a", "b"]}, "maxItems": 3}}, "required": ["age", "name", "tags"],
      "additionalProperties": false})");
  const std::vector<int32_t> prompt = e->tokenizer().encode("A person as JSON:", true, false);
  std::vector<uint64_t> constrained, free;
  for (int i = 0; i < 4; ++i) {
    GenerateRequest r;
    r.prompt = prompt;
    r.params.max_tokens = 120;
    r.params.temperature = i == 0 ? 0.0f : 1.0f;
    r.params.seed = (uint64_t)i;
    r.constraint = c;
    constrained.push_back(*e->add_request(r));
    GenerateRequest f;
    f.prompt = prompt;
    f.params.max_tokens = 20;
    f.params.temperature = 0.0f;
    free.push_back(*e->add_request(f));
  }
  const auto out = run_all(*e);
  int complete = 0;
  for (uint64_t id : constrained) {
    const Outcome& o = out.at(id);
    // Every prefix generated is in the grammar; a turn that ended on its own is complete.
    EXPECT_TRUE(accepts(*c, o.text, o.finish == FinishReason::stop)) << o.text;
    complete += o.finish == FinishReason::stop;
  }
  EXPECT_GE(complete, 3);
  // The free requests were not masked: greedy, they equal a run of their own.
  auto alone = make_engine();
  GenerateRequest f;
  f.prompt = prompt;
  f.params.max_tokens = 20;
  f.params.temperature = 0.0f;
  const uint64_t id = *alone->add_request(f);
  EXPECT_EQ(run_all(*alone).at(id).text, out.at(free[0]).text);
  EXPECT_GT(e->stats().masked_rows, 0);
  EXPECT_EQ(alone->stats().masked_rows, 0);
}

// A constrained row without logprobs or penalties is masked and drawn where its logits are
// (Backend::mask_rows; the CPU backend's is the oracle of a device's): no row goes to the host,
// and the text is the one the host path gives (a row with logprobs is masked on the host).
TEST(EngineConstrained, RowsMaskedWhereTheLogitsAreEqualTheHostPath) {
  auto c = schema_constraint(R"({"type": "object", "properties": {"city": {"type": "string",
      "maxLength": 24}, "unit": {"enum": ["celsius", "fahrenheit"]}, "days": {"type":
      "integer"}}, "required": ["city", "unit", "days"], "additionalProperties": false})");
  std::string text[2];
  for (int host = 0; host < 2; ++host) {
    auto e = make_engine();
    ASSERT_NE(e, nullptr);
    GenerateRequest r;
    r.prompt = e->tokenizer().encode("The weather query as JSON:", true, false);
    r.params.max_tokens = 60;
    r.params.temperature = 0.0f;
    r.logprobs = host ? 0 : -1;
    r.constraint = c;
    const uint64_t id = *e->add_request(r);
    const auto out = run_all(*e);
    text[host] = out.at(id).text;
    EXPECT_TRUE(accepts(*c, text[host], out.at(id).finish == FinishReason::stop)) << text[host];
    EXPECT_GT(e->stats().masked_rows, 0);
    if (host)
      EXPECT_EQ(e->stats().host_sampled_rows, e->stats().masked_rows);
    else
      EXPECT_EQ(e->stats().host_sampled_rows, 0);
  }
  EXPECT_EQ(text[0], text[1]);
  EXPECT_FALSE(text[0].empty());
}

TEST(EngineConstrained, TriggerStartsTheConstraintAndPrefixIsRead) {
  auto e = make_engine();
  ASSERT_NE(e, nullptr);
  const nlohmann::json params = nlohmann::json::parse(R"({"type": "object", "properties":
      {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false})");
  std::vector<grammar::ToolSpec> tools{{"get_weather", &params, false}};
  auto g = grammar::tool_call_grammar(tools, grammar::hermes_syntax(), 16, 1);
  auto c = std::make_shared<GenerationConstraint>();
  c->grammar = std::make_shared<const grammar::Grammar>(std::get<grammar::Grammar>(std::move(g)));
  // A forced start the grammar reads: the rest is a call of get_weather.
  GenerateRequest r;
  r.prompt = e->tokenizer().encode("Weather in Paris?\n", true, false);
  r.turn_prefix = "<tool_call>\n{\"name\": \"";
  r.params.max_tokens = 60;
  r.params.temperature = 1.0f;
  r.params.seed = 3;
  r.constraint = c;
  const uint64_t forced = *e->add_request(r);
  // A forced start it does not read is refused.
  GenerateRequest bad = r;
  bad.turn_prefix = "<tool_call>\n{\"name\": \"Paris";
  EXPECT_FALSE(e->validate(bad).ok());
  // Triggered by the forced start: constrained from the first token.
  auto t = std::make_shared<GenerationConstraint>(*c);
  t->trigger = "<tool_call>";
  GenerateRequest in_prefix = r;
  in_prefix.turn_prefix = "Let me look.\n<tool_call>";
  in_prefix.params.seed = 4;
  in_prefix.constraint = t;
  const uint64_t prefixed = *e->add_request(in_prefix);
  const auto out = run_all(*e);
  const Outcome& f = out.at(forced);
  EXPECT_TRUE(accepts(*c, r.turn_prefix + f.text, f.finish == FinishReason::stop)) << f.text;
  const Outcome& p = out.at(prefixed);
  EXPECT_TRUE(accepts(*t, "<tool_call>" + p.text, p.finish == FinishReason::stop)) << p.text;
}

// Triggered by generated text: the model writes what it would write unconstrained up to the
// trigger (here the first words of its greedy answer), and from there on the grammar holds.
TEST(EngineConstrained, GeneratedTriggerStartsTheConstraint) {
  auto e = make_engine();
  ASSERT_NE(e, nullptr);
  GenerateRequest free;
  free.prompt = e->tokenizer().encode("The capital of France is", true, false);
  free.params.max_tokens = 3;
  free.params.temperature = 0.0f;
  const uint64_t fid = *e->add_request(free);
  const std::string head = run_all(*e).at(fid).text;
  ASSERT_FALSE(head.empty());
  grammar::GrammarBuilder b;
  // (a literal set: what follows the trigger is one of two texts)
  const int32_t value = b.literal({" [1]", " [2, 3]"});
  const int32_t root = b.seq({b.literal({head}), value});
  auto g = std::move(b).finish(root);
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto t = std::make_shared<GenerationConstraint>();
  t->grammar = std::make_shared<const grammar::Grammar>(std::move(*g));
  t->trigger = head;
  GenerateRequest r = free;
  r.params.max_tokens = 20;
  r.constraint = t;
  const uint64_t id = *e->add_request(r);
  const Outcome o = run_all(*e).at(id);
  EXPECT_EQ(o.finish, FinishReason::stop);
  EXPECT_TRUE(o.text == head + " [1]" || o.text == head + " [2, 3]")
      << "'" << head << "' then '" << o.text << "'";
}

}  // namespace
}  // namespace infercept
