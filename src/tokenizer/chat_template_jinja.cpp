#include "tokenizer/chat_template_jinja.h"

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/template.h"

namespace infercept {
namespace {

using jinja::DictData;
using jinja::make_str;
using jinja::Value;

jinja::StrPtr key(const char* k) {
  return std::get<jinja::StrPtr>(make_str(k).v);
}

// Client text: tainted.
Value client(const std::string& s) {
  return make_str(s, /*tainted=*/true);
}

// A tool call's arguments as transformers' templates see them: the parsed object (OpenAI
// sends JSON text; templates print it with tojson), or the text itself when it is not JSON.
Result<Value> arguments_value(const ToolCall& c) {
  if (c.arguments_json.empty()) return make_dict(DictData{});
  auto v = jinja::from_json(c.arguments_json, /*tainted=*/true);
  if (v.ok()) return v;
  if (v.error().message.find("nests deeper") != std::string::npos)
    return make_error("the arguments of the call to tool '", c.name, "': ", v.error().message);
  return client(c.arguments_json);
}

Result<Value> message_value(const ChatMessage& m) {
  DictData d;
  d.set(key("role"), make_str(m.role));
  d.set(key("content"), client(m.content));
  if (!m.tool_calls.empty()) {
    std::vector<Value> calls;
    for (const ToolCall& c : m.tool_calls) {
      DictData fn;
      fn.set(key("name"), client(c.name));
      TRY_ASSIGN(Value args, arguments_value(c));
      fn.set(key("arguments"), std::move(args));
      DictData call;
      call.set(key("type"), make_str("function"));
      call.set(key("id"), client(c.id));
      call.set(key("function"), make_dict(std::move(fn)));
      calls.push_back(make_dict(std::move(call)));
    }
    d.set(key("tool_calls"), jinja::make_list(std::move(calls)));
  }
  if (!m.tool_call_id.empty()) d.set(key("tool_call_id"), client(m.tool_call_id));
  if (!m.name.empty()) d.set(key("name"), client(m.name));
  return make_dict(std::move(d));
}

Result<Value> tool_value(const ToolDefinition& t) {
  DictData fn;
  fn.set(key("name"), client(t.name));
  if (!t.description.empty()) fn.set(key("description"), client(t.description));
  if (!t.parameters_json.empty()) {
    auto params = jinja::from_json(t.parameters_json, /*tainted=*/true);
    if (!params.ok())
      return make_error("the parameters of tool '", t.name, "': ", params.error().message);
    fn.set(key("parameters"), std::move(*params));
  }
  DictData tool;
  tool.set(key("type"), make_str("function"));
  tool.set(key("function"), make_dict(std::move(fn)));
  return make_dict(std::move(tool));
}

// The variables the renderer sets (transformers' apply_chat_template passes these).
constexpr const char* kRendererVariables[] = {
    "messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token"};

// A request's extra variables into the context, after the renderer's own (which they may
// not replace: a kwarg "messages" would swap the conversation the server checked).
Status add_template_vars(DictData& ctx, const std::string& vars_json) {
  if (vars_json.empty()) return ok_status();
  auto vars = jinja::from_json(vars_json, /*tainted=*/true);
  if (!vars.ok()) return make_error("the template variables: ", vars.error().message);
  if (!vars->is_dict()) return make_error("the template variables must be a JSON object");
  for (const auto& [k, v] : std::get<std::shared_ptr<const DictData>>(vars->v)->items) {
    if (reserved_template_variable(k->text))
      return make_error("the template variable '", k->text,
                        "' is set by the server and cannot be given");
    ctx.set(k, v);
  }
  return ok_status();
}

}  // namespace

bool reserved_template_variable(const std::string& name) {
  for (const char* r : kRendererVariables)
    if (name == r) return true;
  return jinja::is_known_global(name);
}

bool conversation_uses_tools(const std::vector<ChatMessage>& messages,
                             const std::vector<ToolDefinition>& tools) {
  if (!tools.empty()) return true;
  for (const ChatMessage& m : messages)
    if (!m.tool_calls.empty() || m.role == "tool") return true;
  return false;
}

Result<RenderedChat> render_jinja_chat(const ChatTemplate& tmpl,
                                       const std::vector<ChatMessage>& messages,
                                       const std::vector<ToolDefinition>& tools,
                                       bool add_generation_prompt, size_t max_bytes,
                                       const std::string& template_vars_json) {
  std::vector<Value> msgs;
  msgs.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    TRY_ASSIGN(Value v, message_value(m));
    msgs.push_back(std::move(v));
  }
  DictData ctx;
  ctx.set(key("messages"), jinja::make_list(std::move(msgs)));
  if (tools.empty()) {
    ctx.set(key("tools"), Value(jinja::None{}));
  } else {
    std::vector<Value> ts;
    for (const ToolDefinition& t : tools) {
      TRY_ASSIGN(Value v, tool_value(t));
      ts.push_back(std::move(v));
    }
    ctx.set(key("tools"), jinja::make_list(std::move(ts)));
  }
  ctx.set(key("documents"), Value(jinja::None{}));
  ctx.set(key("add_generation_prompt"), Value(add_generation_prompt));
  ctx.set(key("bos_token"), make_str(tmpl.bos_token));
  ctx.set(key("eos_token"), make_str(tmpl.eos_token));
  TRY(add_template_vars(ctx, template_vars_json));
  jinja::RenderOptions options;
  options.max_bytes = max_bytes;
  TRY_ASSIGN(jinja::Str out, tmpl.jinja->render(ctx, options));
  return RenderedChat{std::move(out.text), std::move(out.taint)};
}

}  // namespace infercept
