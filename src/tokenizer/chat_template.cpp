// Native renderers for the chat template families in use. Each follows the structure of the
// family's reference Jinja template (noted per function) so prompts match what the models
// were trained on; JSON that the reference templates print with Python's json.dumps (tool
// schemas, tool call arguments) is printed the same way here (", " and ": " separators,
// keys in their original order, non-ASCII kept as is).
#include "tokenizer/chat_template.h"

#include <algorithm>
#include <string_view>

#include "core/json_depth.h"
#include "tokenizer/chat_template_jinja.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/py_json.h"

namespace infercept {
namespace {

// The prompt being rendered: the template's structure is appended with +=, what came from the
// client with literal() or quoted(), which also record its byte span. Past max_bytes nothing
// more is appended and over() is set, so memory stays within the budget whatever the input.
class PromptText {
 public:
  explicit PromptText(size_t max_bytes) : max_(max_bytes) {}

  PromptText& operator+=(std::string_view s) {
    add(s, false);
    return *this;
  }
  void literal(std::string_view s) { add(s, true); }
  // A JSON string literal of client text.
  void quoted(std::string_view s) {
    std::string q;
    append_py_json_string(s, q);
    add(q, true);
  }
  // Bytes left in the budget.
  size_t room() const { return max_ - text_.size(); }
  void append(const PromptText& o) {
    if (over_) return;
    if (o.over_ || o.text_.size() > max_ - text_.size()) {
      over_ = true;
      return;
    }
    const size_t base = text_.size();
    text_ += o.text_;
    for (const TextSpan& sp : o.spans_) add_span(base + sp.begin, base + sp.end);
  }
  // Leading and trailing whitespace removed, the spans clipped to what is left.
  PromptText trimmed() const {
    PromptText t(max_);
    t.over_ = over_;
    const char* ws = " \t\n\r\f\v";
    const size_t b = text_.find_first_not_of(ws);
    if (b == std::string::npos) return t;
    const size_t e = text_.find_last_not_of(ws) + 1;
    t.text_ = text_.substr(b, e - b);
    for (const TextSpan& sp : spans_) {
      const size_t sb = std::max(sp.begin, b), se = std::min(sp.end, e);
      if (sb < se) t.spans_.push_back(TextSpan{sb - b, se - b});
    }
    return t;
  }
  bool empty() const { return text_.empty(); }
  bool over() const { return over_; }

  Result<RenderedChat> finish() && {
    if (over_)
      return make_error("the rendered prompt is larger than ", std::to_string(max_), " bytes");
    return RenderedChat{std::move(text_), std::move(spans_)};
  }

 private:
  void add(std::string_view s, bool literal) {
    if (over_) return;
    if (s.size() > max_ - text_.size()) {
      over_ = true;
      return;
    }
    if (literal) add_span(text_.size(), text_.size() + s.size());
    text_ += s;
  }
  void add_span(size_t begin, size_t end) {
    if (begin == end) return;
    if (!spans_.empty() && spans_.back().end == begin) {
      spans_.back().end = end;  // adjacent spans are one
    } else {
      spans_.push_back(TextSpan{begin, end});
    }
  }

  size_t max_;
  bool over_ = false;
  std::string text_;  // never longer than max_
  std::vector<TextSpan> spans_;
};

// The OpenAI-style tool object the reference templates print: {"type": "function",
// "function": {"name", "description", "parameters"}}, as client text. A schema nested past
// kMaxJsonDepth is refused before it is parsed.
Status add_tool(PromptText& out, const ToolDefinition& t, int indent) {
  if (!json_depth_ok(t.parameters_json)) {
    return make_error("the parameters of tool '", t.name, "' nest deeper than ",
                      std::to_string(kMaxJsonDepth), " levels");
  }
  std::string s;
  PyJsonWriter w(s, indent, out.room());
  w.begin_object();
  w.key("type");
  w.string("function");
  w.key("function");
  w.begin_object();
  w.key("name");
  w.string(t.name);
  if (!t.description.empty()) {
    w.key("description");
    w.string(t.description);
  }
  if (!t.parameters_json.empty()) {
    w.key("parameters");
    std::string error;
    if (!write_py_json(t.parameters_json, w, error) && !w.over()) {
      return make_error("the parameters of tool '", t.name, "' are not valid JSON: ", error);
    }
  }
  if (!w.over()) {
    w.end_object();
    w.end_object();
  }
  out.literal(s);  // past the room left: the budget is spent
  return ok_status();
}

// A tool call's arguments as the templates print them: the parsed value when it parses,
// else the raw text as a JSON string. Arguments nested past kMaxJsonDepth are an error.
Status add_arguments(PromptText& out, const ToolCall& c) {
  if (c.arguments_json.empty()) {
    out.literal("{}");
    return ok_status();
  }
  if (!json_depth_ok(c.arguments_json)) {
    return make_error("the arguments of the call to tool '", c.name, "' nest deeper than ",
                      std::to_string(kMaxJsonDepth), " levels");
  }
  std::string s, error;
  PyJsonWriter w(s, -1, out.room());
  if (!write_py_json(c.arguments_json, w, error) && !w.over()) {
    s.clear();
    append_py_json_string(c.arguments_json, s);
  }
  out.literal(s);
  return ok_status();
}

// `{"name": <name>, "<args_key>": <arguments>}`, as the templates write a tool call.
Status add_call(PromptText& out, const ToolCall& c, std::string_view args_key) {
  out += "{\"name\": ";
  out.quoted(c.name);
  out += ", \"";
  out += args_key;
  out += "\": ";
  TRY(add_arguments(out, c));
  out += "}";
  return ok_status();
}

std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// ChatML, after Qwen2.5's template (tools in the system turn, Hermes-style <tool_call>,
// consecutive tool results in one user turn of <tool_response> blocks). The system turn
// defaults to tmpl.default_system (SmolLM2's GGUF template puts one in).
Result<RenderedChat> render_chatml(const ChatTemplate& tmpl, const std::vector<ChatMessage>& msgs,
                                   const std::vector<ToolDefinition>& tools, bool add_gen,
                                   size_t max_bytes) {
  PromptText out(max_bytes);
  const bool has_system = !msgs.empty() && msgs[0].role == "system";
  if (!tools.empty()) {
    out += "<|im_start|>system\n";
    if (has_system && !msgs[0].content.empty()) {
      out.literal(msgs[0].content);
      out += "\n\n";
    } else if (!has_system && !tmpl.default_system.empty()) {
      out += tmpl.default_system;
      out += "\n\n";
    }
    out +=
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const ToolDefinition& t : tools) {
      out += "\n";
      TRY(add_tool(out, t, -1));
    }
    out +=
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (has_system) {
    out += "<|im_start|>system\n";
    out.literal(msgs[0].content);
    out += "<|im_end|>\n";
  } else if (!tmpl.default_system.empty() && !msgs.empty()) {
    out += "<|im_start|>system\n";
    out += tmpl.default_system;
    out += "<|im_end|>\n";
  }
  for (size_t i = has_system ? 1 : 0; i < msgs.size() && !out.over(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "tool") {
      if (i == 0 || msgs[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      out.literal(m.content);
      out += "\n</tool_response>";
      if (i + 1 == msgs.size() || msgs[i + 1].role != "tool") out += "<|im_end|>\n";
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      out += "<|im_start|>assistant";
      if (!m.content.empty()) {
        out += "\n";
        out.literal(m.content);
      }
      for (const ToolCall& c : m.tool_calls) {
        out += "\n<tool_call>\n";
        TRY(add_call(out, c, "arguments"));
        out += "\n</tool_call>";
      }
      out += "<|im_end|>\n";
    } else {
      out += "<|im_start|>";
      out += m.role;  // one of four names (render_chat_spans checks)
      out += "\n";
      out.literal(m.content);
      out += "<|im_end|>\n";
    }
  }
  if (add_gen) out += "<|im_start|>assistant\n";
  return std::move(out).finish();
}

// Llama 3.x, after Llama 3.1's template with tools given in the first user turn: the
// header/eot framing, contents trimmed, tool calls as {"name": ..., "parameters": ...},
// tool results as an "ipython" turn. No date/knowledge-cutoff preamble is added.
Result<RenderedChat> render_llama3(const std::vector<ChatMessage>& msgs,
                                   const std::vector<ToolDefinition>& tools, bool add_gen,
                                   size_t max_bytes) {
  PromptText out(max_bytes);
  out += "<|begin_of_text|>";
  auto open = [&](std::string_view role) {
    out += "<|start_header_id|>";
    out += role;
    out += "<|end_header_id|>\n\n";
  };
  auto close = [&] { out += "<|eot_id|>"; };
  size_t i = 0;
  if (!tools.empty()) {
    open("system");
    out += "Environment: ipython\n\n";
    if (!msgs.empty() && msgs[0].role == "system") out.literal(trim(msgs[i++].content));
    close();
    if (i >= msgs.size() || msgs[i].role != "user") {
      return make_error(
          "llama3 chat template: tools need a user message to go in (after the "
          "optional system message)");
    }
    open("user");
    out +=
        "Given the following functions, please respond with a JSON for a function call with "
        "its proper arguments that best answers the given prompt.\n\nRespond in the format "
        "{\"name\": function name, \"parameters\": dictionary of argument name and its "
        "value}.Do not use variables.\n\n";
    for (const ToolDefinition& t : tools) {
      TRY(add_tool(out, t, 4));
      out += "\n\n";
    }
    out.literal(trim(msgs[i++].content));
    close();
  }
  for (; i < msgs.size() && !out.over(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "tool" || m.role == "ipython") {
      open("ipython");
      out.literal(m.content);
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      open("assistant");
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        if (k > 0) out += "\n";
        TRY(add_call(out, m.tool_calls[k], "parameters"));
      }
    } else {
      open(m.role);
      out.literal(trim(m.content));
    }
    close();
  }
  if (add_gen) open("assistant");
  return std::move(out).finish();
}

// Llama 2 chat: "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s>".
// Llama 2 has no tool format of its own: tools are described in the system prompt, calls
// are written as JSON in the assistant turn and results go back as a user turn.
Result<RenderedChat> render_llama2(const std::vector<ChatMessage>& msgs,
                                   const std::vector<ToolDefinition>& tools, size_t max_bytes) {
  size_t i = 0;
  PromptText sys(max_bytes);
  if (!msgs.empty() && msgs[0].role == "system") sys.literal(msgs[i++].content);
  if (!tools.empty()) {
    if (!sys.empty()) sys += "\n\n";
    sys +=
        "You can call these functions. To call one, answer with only a JSON object "
        "{\"name\": function name, \"arguments\": dictionary of arguments}.\n";
    for (const ToolDefinition& t : tools) {
      TRY(add_tool(sys, t, -1));
      sys += "\n";
    }
    sys = sys.trimmed();
  }
  PromptText out(max_bytes);
  bool expect_user = true;
  bool first = true;
  for (; i < msgs.size() && !out.over(); ++i) {
    const ChatMessage& m = msgs[i];
    const bool is_user = m.role == "user" || m.role == "tool";
    if (m.role != "user" && m.role != "tool" && m.role != "assistant") {
      return make_error("llama2 chat template: unsupported role '", m.role,
                        "' (a system message is only allowed first)");
    }
    if (is_user != expect_user) {
      return make_error("llama2 chat template: roles must alternate user/assistant (message ",
                        std::to_string(i), " is '", m.role, "')");
    }
    PromptText content(max_bytes);
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        if (k > 0) content += "\n";
        TRY(add_call(content, m.tool_calls[k], "arguments"));
      }
    } else {
      content.literal(m.content);
    }
    if (is_user) {
      out += "<s>[INST] ";
      if (first && !sys.empty()) {
        PromptText framed(max_bytes);
        framed += "<<SYS>>\n";
        framed.append(sys);
        framed += "\n<</SYS>>\n\n";
        framed.append(content);
        out.append(framed.trimmed());
      } else {
        out.append(content.trimmed());
      }
      out += " [/INST]";
    } else {
      out += " ";
      out.append(content.trimmed());
      out += " </s>";
    }
    first = false;
    expect_user = !expect_user;
  }
  return std::move(out).finish();
}

// The system text a ChatML template falls back to, if it has one as a literal:
// '<|im_start|>system\n<text><|im_end|>' where <text> has no Jinja in it.
std::string chatml_default_system(const std::string& t) {
  const std::string open = "<|im_start|>system";
  for (size_t pos = t.find(open); pos != std::string::npos; pos = t.find(open, pos + 1)) {
    size_t start = pos + open.size();
    if (t.compare(start, 1, "\n") == 0) {
      start += 1;
    } else if (t.compare(start, 2, "\\n") == 0) {
      start += 2;
    } else {
      continue;
    }
    const size_t end = t.find("<|im_end|>", start);
    if (end == std::string::npos) continue;
    const std::string text = t.substr(start, end - start);
    if (text.empty() || text.find_first_of("'\"{}+") != std::string::npos) continue;
    return text;
  }
  return {};
}

}  // namespace

Result<ChatTemplate> resolve_chat_template(const std::string& name,
                                           const std::string& model_template_text) {
  ChatTemplate t;
  if (!name.empty()) {
    if (name == "chatml") {
      t.kind = ChatTemplateKind::chatml;
      if (model_template_text.find("<|im_start|>") != std::string::npos) {
        t.default_system = chatml_default_system(model_template_text);
      }
    } else if (name == "llama3" || name == "llama-3") {
      t.kind = ChatTemplateKind::llama3;
    } else if (name == "llama2" || name == "llama-2") {
      t.kind = ChatTemplateKind::llama2;
    } else {
      return make_error("unknown chat template '", name,
                        "': pass --chat-template chatml|llama3|llama2");
    }
    return t;
  }
  if (model_template_text.find("<|im_start|>") != std::string::npos) {
    t.kind = ChatTemplateKind::chatml;
    t.default_system = chatml_default_system(model_template_text);
  } else if (model_template_text.find("<|start_header_id|>") != std::string::npos) {
    t.kind = ChatTemplateKind::llama3;
  } else if (model_template_text.find("[INST]") != std::string::npos) {
    t.kind = ChatTemplateKind::llama2;
  } else if (model_template_text.empty()) {
    return make_error("the model has no chat template: pass --chat-template chatml|llama3|llama2");
  } else {
    return make_error(
        "the model's chat template is not one infercept knows: pass "
        "--chat-template chatml|llama3|llama2");
  }
  return t;
}

Result<ChatTemplate> load_chat_template(const std::string& name, const std::string& jinja_source,
                                        const std::string& bos_token,
                                        const std::string& eos_token) {
  if (!name.empty()) return resolve_chat_template(name, jinja_source);
  if (jinja_source.empty())
    return make_error("the model has no chat template: pass --chat-template chatml|llama3|llama2");
  auto parsed = jinja::Template::parse(jinja_source);
  if (!parsed.ok()) {
    return make_error("the chat template cannot be used: ", parsed.error().message,
                      " (pass --chat-template chatml|llama3|llama2 to use a built-in one)");
  }
  ChatTemplate t;
  if (auto family = resolve_chat_template("", jinja_source); family.ok()) {
    t = *family;
  } else {
    t.has_family = false;
  }
  t.jinja = std::make_shared<const jinja::Template>(std::move(*parsed));
  t.jinja_source = jinja_source;
  t.jinja_reads_tools = t.jinja->uses_name("tools");
  t.bos_token = bos_token;
  t.eos_token = eos_token;
  // A template that reads tools teaches its own call format: the family is the one whose
  // format it teaches, so the server parses and forces calls in it.
  if (t.jinja_reads_tools) {
    if (jinja_source.find("[TOOL_CALLS]") != std::string::npos) {
      t.kind = ChatTemplateKind::llama2;
    } else if (jinja_source.find("<tool_call>") != std::string::npos) {
      t.kind = ChatTemplateKind::chatml;
    } else if (jinja_source.find("<|python_tag|>") != std::string::npos ||
               jinja_source.find("\"parameters\"") != std::string::npos) {
      t.kind = ChatTemplateKind::llama3;
    }
  }
  // Fails now rather than on the first request if the template cannot render a plain turn.
  const std::vector<ChatMessage> probe = {ChatMessage{"user", "Hello", {}, "", ""}};
  if (auto r = render_jinja_chat(t, probe, {}, true, kDefaultMaxRenderedBytes); !r.ok()) {
    return make_error(
        "the chat template cannot render a one-message conversation: ", r.error().message,
        " (pass --chat-template chatml|llama3|llama2 to use a built-in one)");
  }
  return t;
}

Result<RenderedChat> render_chat_spans(const ChatTemplate& tmpl,
                                       const std::vector<ChatMessage>& messages,
                                       const std::vector<ToolDefinition>& tools,
                                       bool add_generation_prompt, size_t max_bytes,
                                       const std::string& template_vars_json) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      return make_error("message ", std::to_string(i), " has unknown role '", r,
                        "' (expected system, user, assistant or tool)");
    }
  }
  if (tmpl.jinja) {
    if (tmpl.jinja_reads_tools || !conversation_uses_tools(messages, tools))
      return render_jinja_chat(tmpl, messages, tools, add_generation_prompt, max_bytes,
                               template_vars_json);
    if (!tmpl.has_family) {
      return make_error(
          "the model's chat template has no tool format and matches no built-in family: "
          "start the server with --chat-template chatml|llama3|llama2 to use tools");
    }
  }
  switch (tmpl.kind) {
    case ChatTemplateKind::chatml:
      return render_chatml(tmpl, messages, tools, add_generation_prompt, max_bytes);
    case ChatTemplateKind::llama3:
      return render_llama3(messages, tools, add_generation_prompt, max_bytes);
    case ChatTemplateKind::llama2:
      return render_llama2(messages, tools, max_bytes);
  }
  return make_error("unknown chat template kind");
}

Result<std::string> render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                                const std::vector<ToolDefinition>& tools,
                                bool add_generation_prompt, size_t max_bytes) {
  TRY_ASSIGN(RenderedChat r,
             render_chat_spans(tmpl, messages, tools, add_generation_prompt, max_bytes));
  return std::move(r.text);
}

}  // namespace infercept
