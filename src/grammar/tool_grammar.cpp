#include "grammar/tool_grammar.h"

#include "grammar/builder.h"
#include "grammar/json_schema.h"

namespace infercept::grammar {

ToolCallSyntax hermes_syntax() {
  return {ToolCallSyntax::Shape::object, "<tool_call>", "</tool_call>", "name", "arguments", ""};
}

ToolCallSyntax json_turn_syntax() {
  return {ToolCallSyntax::Shape::object, "", "", "name", "parameters", ""};
}

ToolCallSyntax mistral_list_syntax() {
  return {ToolCallSyntax::Shape::list, "[TOOL_CALLS]", "", "name", "arguments", ""};
}

ToolCallSyntax mistral_args_syntax() {
  return {ToolCallSyntax::Shape::name_args, "[TOOL_CALLS]", "", "", "", "[ARGS]"};
}

std::variant<Grammar, ToolGrammarError> tool_call_grammar(std::span<const ToolSpec> tools,
                                                          const ToolCallSyntax& syntax,
                                                          int32_t max_ws, int64_t max_calls) {
  GrammarBuilder b(max_ws);
  std::vector<int32_t> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ToolSpec& t = tools[i];
    int32_t args = -1;
    if (t.parameters == nullptr || t.parameters->is_null()) {
      args = b.any_object();
    } else {
      // Alone first, so that an error found only when the grammar is finished (a $ref cycle
      // with no way out) names its tool.
      if (auto alone = compile_json_schema(*t.parameters, {t.strict, max_ws}); !alone.ok())
        return ToolGrammarError{i, alone.error().message};
      auto a = add_schema(b, *t.parameters, t.strict);
      if (!a.ok()) return ToolGrammarError{i, a.error().message};
      args = *a;
    }
    if (syntax.shape == ToolCallSyntax::Shape::name_args) {
      // The name as it is, not a JSON string: the template writes it so.
      calls.push_back(b.seq({b.literal({t.name}), b.literal({syntax.args_marker}), args}));
      continue;
    }
    const int32_t name = b.literal(
        {nlohmann::json(t.name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)});
    calls.push_back(
        b.object({{syntax.name_key, name, true}, {syntax.arguments_key, args, true}}, -1));
  }
  if (calls.empty()) return ToolGrammarError{0, "no tools to call"};
  const int32_t call = calls.size() == 1 ? calls[0] : b.choice(calls);
  if (syntax.shape == ToolCallSyntax::Shape::list) {
    // One marker, then every call in one JSON array.
    std::vector<int32_t> all{b.ws(), b.literal({syntax.open}), b.ws(), b.array(call, 1, max_calls)};
    if (!syntax.close.empty()) all.push_back(b.literal({syntax.close}));
    all.push_back(b.ws());
    const int32_t root = b.seq(all);
    auto g = std::move(b).finish(root);
    if (!g.ok()) return ToolGrammarError{0, g.error().message};
    return std::move(*g);
  }
  std::vector<int32_t> one{b.ws()};
  if (!syntax.open.empty()) one.push_back(b.literal({syntax.open}));
  if (syntax.shape != ToolCallSyntax::Shape::name_args) one.push_back(b.ws());
  one.push_back(call);
  if (!syntax.close.empty()) {
    one.push_back(b.ws());
    one.push_back(b.literal({syntax.close}));
  }
  const int32_t root = b.seq({b.repeat(b.seq(one), 1, max_calls), b.ws()});
  auto g = std::move(b).finish(root);
  if (!g.ok()) return ToolGrammarError{0, g.error().message};
  return std::move(*g);
}

}  // namespace infercept::grammar
