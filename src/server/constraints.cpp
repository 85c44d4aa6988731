#include "server/constraints.h"

#include "grammar/json_schema.h"

namespace infercept::server {

namespace {
constexpr size_t kMaxCachedGrammars = 64;
}

grammar::ToolCallSyntax tool_call_syntax(ToolCallFormat format, ChatTemplateKind kind,
                                         const std::string& template_text) {
  switch (format) {
    case ToolCallFormat::hermes:
      return grammar::hermes_syntax();
    case ToolCallFormat::json_turn: {
      grammar::ToolCallSyntax s = grammar::json_turn_syntax();
      if (kind == ChatTemplateKind::llama2) s.arguments_key = "arguments";
      return s;
    }
    case ToolCallFormat::mistral:
      return template_text.find("[ARGS]") != std::string::npos ? grammar::mistral_args_syntax()
                                                               : grammar::mistral_list_syntax();
  }
  return grammar::hermes_syntax();
}

grammar::ToolCallSyntax tool_call_syntax(const ChatTemplate& tmpl, TurnFormat format) {
  return tool_call_syntax(format.calls, tmpl.kind, tmpl.jinja ? tmpl.jinja_source : "");
}

std::optional<ApiError> ConstraintCompiler::build(
    const ChatRequest& cr, const grammar::ToolCallSyntax& syntax, bool tools_active,
    std::shared_ptr<const GenerationConstraint>& out) {
  out = nullptr;
  const bool forced = cr.tool_choice == ToolChoice::required || cr.tool_choice == ToolChoice::named;
  const ResponseFormat& rf = cr.response_format;
  const bool calls = tools_active && (forced || rf.kind == ResponseFormat::Kind::text);
  if (!calls && rf.kind == ResponseFormat::Kind::text) return std::nullopt;

  // The key: everything the grammar depends on.
  std::string key;
  if (calls) {
    key = "tools\n" + std::to_string((int)syntax.shape) + '\0' + syntax.open + '\0' + syntax.close +
          '\0' + syntax.name_key + '\0' + syntax.arguments_key + '\0' + syntax.args_marker + "\n" +
          std::to_string((int)cr.tool_choice) + "\n" + cr.tool_choice_name + "\n" +
          (cr.parallel_tool_calls ? "n" : "1") + "\n";
    for (const ToolDefinition& t : cr.tools)
      key += t.name + '\0' + t.parameters_json + '\0' + (t.strict ? "1" : "0") + '\n';
  } else {
    key = "format\n" + std::to_string((int)rf.kind) + "\n" + (rf.strict ? "1" : "0") + "\n" +
          rf.schema.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      out = it->second;
      return std::nullopt;
    }
  }

  auto c = std::make_shared<GenerationConstraint>();
  c->cache = std::make_shared<grammar::MaskCache>();
  if (calls) {
    std::vector<json> params(cr.tools.size());
    std::vector<grammar::ToolSpec> specs;
    std::vector<size_t> index;  // spec -> tools[i]
    for (size_t i = 0; i < cr.tools.size(); ++i) {
      const ToolDefinition& t = cr.tools[i];
      if (cr.tool_choice == ToolChoice::named && t.name != cr.tool_choice_name) continue;
      if (!t.parameters_json.empty()) params[i] = json::parse(t.parameters_json, nullptr, false);
      specs.push_back({t.name, t.parameters_json.empty() ? nullptr : &params[i], t.strict});
      index.push_back(i);
    }
    auto g = grammar::tool_call_grammar(specs, syntax, 16, cr.parallel_tool_calls ? -1 : 1);
    if (auto* e = std::get_if<grammar::ToolGrammarError>(&g)) {
      const size_t i = index.empty() ? 0 : index[std::min(e->tool, index.size() - 1)];
      return invalid_request("tools[" + std::to_string(i) + "] ('" + cr.tools[i].name +
                                 "'): its parameters cannot constrain the call: " + e->message,
                             "tools[" + std::to_string(i) + "].function.parameters");
    }
    c->grammar = std::make_shared<const grammar::Grammar>(std::get<grammar::Grammar>(std::move(g)));
    if (!forced) {
      // auto: the model opens a call itself.
      c->trigger = syntax.open.empty() ? "{" : syntax.open;
      c->trigger_at_start = syntax.open.empty();
    }
  } else if (rf.kind == ResponseFormat::Kind::json_object) {
    c->grammar = std::make_shared<const grammar::Grammar>(grammar::any_json_object_grammar());
  } else {
    const json schema = rf.schema.is_null() ? json::object() : rf.schema;
    auto g = grammar::compile_json_schema(schema, {rf.strict, 16});
    if (!g.ok())
      return invalid_request(
          "response_format's schema cannot constrain the output: " + g.error().message,
          "response_format.json_schema.schema");
    c->grammar = std::make_shared<const grammar::Grammar>(std::move(*g));
  }
  out = c;
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.size() >= kMaxCachedGrammars) cache_.clear();
  cache_.emplace(std::move(key), std::move(c));
  return std::nullopt;
}

}  // namespace infercept::server
