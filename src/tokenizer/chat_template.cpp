// Native renderers for the chat template families in use. Each follows the structure of the
// family's reference Jinja template (noted per function) so prompts match what the models
// were trained on; JSON that the reference templates print with Python's json.dumps (tool
// schemas, tool call arguments) is printed the same way here (", " and ": " separators,
// keys in their original order, non-ASCII kept as is).
#include "tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace infercept {
namespace {

using ojson = nlohmann::ordered_json;

void dump_py_string(const std::string& s, std::string& out) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: None).
void dump_py(const ojson& v, int indent, int depth, std::string& out) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  if (v.is_object()) {
    if (v.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) out += item_sep;
      first = false;
      newline(depth + 1);
      dump_py_string(k, out);
      out += ": ";
      dump_py(x, indent, depth + 1, out);
    }
    newline(depth);
    out += '}';
  } else if (v.is_array()) {
    if (v.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    bool first = true;
    for (const auto& x : v) {
      if (!first) out += item_sep;
      first = false;
      newline(depth + 1);
      dump_py(x, indent, depth + 1, out);
    }
    newline(depth);
    out += ']';
  } else if (v.is_string()) {
    dump_py_string(v.get<std::string>(), out);
  } else {
    out += v.dump();  // numbers, true, false, null print alike
  }
}

std::string py_json(const ojson& v, int indent = -1) {
  std::string out;
  dump_py(v, indent, 0, out);
  return out;
}

// Parses JSON text from a request; `what` names it in the error.
Result<ojson> parse_json(const std::string& text, const std::string& what) {
  try {
    return ojson::parse(text);
  } catch (const ojson::exception& e) {
    return make_error(what, " is not valid JSON: ", e.what());
  }
}

// The OpenAI-style tool object the reference templates print: {"type": "function",
// "function": {"name", "description", "parameters"}}.
Result<ojson> tool_object(const ToolDefinition& t) {
  ojson fn = ojson::object();
  fn["name"] = t.name;
  if (!t.description.empty()) fn["description"] = t.description;
  if (!t.parameters_json.empty()) {
    TRY_ASSIGN(fn["parameters"],
               parse_json(t.parameters_json, "parameters of tool '" + t.name + "'"));
  }
  ojson o = ojson::object();
  o["type"] = "function";
  o["function"] = std::move(fn);
  return o;
}

// A tool call's arguments as the templates print them: the parsed object when it parses,
// else the raw text as a JSON string.
std::string arguments_text(const ToolCall& c) {
  if (c.arguments_json.empty()) return "{}";
  try {
    return py_json(ojson::parse(c.arguments_json));
  } catch (const ojson::exception&) {
    return py_json(ojson(c.arguments_json));
  }
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
Result<std::string> render_chatml(const ChatTemplate& tmpl, const std::vector<ChatMessage>& msgs,
                                  const std::vector<ToolDefinition>& tools, bool add_gen) {
  std::string out;
  const bool has_system = !msgs.empty() && msgs[0].role == "system";
  if (!tools.empty()) {
    const std::string sys = has_system ? msgs[0].content : tmpl.default_system;
    out += "<|im_start|>system\n";
    if (!sys.empty()) out += sys + "\n\n";
    out +=
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const ToolDefinition& t : tools) {
      ojson o;
      TRY_ASSIGN(o, tool_object(t));
      out += "\n" + py_json(o);
    }
    out +=
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (has_system) {
    out += "<|im_start|>system\n" + msgs[0].content + "<|im_end|>\n";
  } else if (!tmpl.default_system.empty() && !msgs.empty()) {
    out += "<|im_start|>system\n" + tmpl.default_system + "<|im_end|>\n";
  }
  for (size_t i = has_system ? 1 : 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "tool") {
      if (i == 0 || msgs[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == msgs.size() || msgs[i + 1].role != "tool") out += "<|im_end|>\n";
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      out += "<|im_start|>assistant";
      if (!m.content.empty()) out += "\n" + m.content;
      for (const ToolCall& c : m.tool_calls) {
        out += "\n<tool_call>\n{\"name\": " + py_json(ojson(c.name)) +
               ", \"arguments\": " + arguments_text(c) + "}\n</tool_call>";
      }
      out += "<|im_end|>\n";
    } else {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    }
  }
  if (add_gen) out += "<|im_start|>assistant\n";
  return out;
}

// Llama 3.x, after Llama 3.1's template with tools given in the first user turn: the
// header/eot framing, contents trimmed, tool calls as {"name": ..., "parameters": ...},
// tool results as an "ipython" turn. No date/knowledge-cutoff preamble is added.
Result<std::string> render_llama3(const std::vector<ChatMessage>& msgs,
                                  const std::vector<ToolDefinition>& tools, bool add_gen) {
  std::string out = "<|begin_of_text|>";
  auto turn = [&](const std::string& role, const std::string& content) {
    out += "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + content + "<|eot_id|>";
  };
  size_t i = 0;
  if (!tools.empty()) {
    std::string sys;
    if (!msgs.empty() && msgs[0].role == "system") sys = trim(msgs[i++].content);
    turn("system", "Environment: ipython\n\n" + sys);
    if (i >= msgs.size() || msgs[i].role != "user") {
      return make_error(
          "llama3 chat template: tools need a user message to go in (after the "
          "optional system message)");
    }
    std::string user =
        "Given the following functions, please respond with a JSON for a function call with "
        "its proper arguments that best answers the given prompt.\n\nRespond in the format "
        "{\"name\": function name, \"parameters\": dictionary of argument name and its "
        "value}.Do not use variables.\n\n";
    for (const ToolDefinition& t : tools) {
      ojson o;
      TRY_ASSIGN(o, tool_object(t));
      user += py_json(o, 4) + "\n\n";
    }
    user += trim(msgs[i++].content);
    turn("user", user);
  }
  for (; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "tool" || m.role == "ipython") {
      turn("ipython", m.content);
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      std::string calls;
      for (const ToolCall& c : m.tool_calls) {
        if (!calls.empty()) calls += "\n";
        calls +=
            "{\"name\": " + py_json(ojson(c.name)) + ", \"parameters\": " + arguments_text(c) + "}";
      }
      turn("assistant", calls);
    } else {
      turn(m.role, trim(m.content));
    }
  }
  if (add_gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Llama 2 chat: "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s>".
// Llama 2 has no tool format of its own: tools are described in the system prompt, calls
// are written as JSON in the assistant turn and results go back as a user turn.
Result<std::string> render_llama2(const std::vector<ChatMessage>& msgs,
                                  const std::vector<ToolDefinition>& tools) {
  size_t i = 0;
  std::string sys;
  if (!msgs.empty() && msgs[0].role == "system") sys = msgs[i++].content;
  if (!tools.empty()) {
    if (!sys.empty()) sys += "\n\n";
    sys +=
        "You can call these functions. To call one, answer with only a JSON object "
        "{\"name\": function name, \"arguments\": dictionary of arguments}.\n";
    for (const ToolDefinition& t : tools) {
      ojson o;
      TRY_ASSIGN(o, tool_object(t));
      sys += py_json(o) + "\n";
    }
    sys = trim(sys);
  }
  std::string out;
  bool expect_user = true;
  bool first = true;
  for (; i < msgs.size(); ++i) {
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
    std::string content = m.content;
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      content.clear();
      for (const ToolCall& c : m.tool_calls) {
        if (!content.empty()) content += "\n";
        content +=
            "{\"name\": " + py_json(ojson(c.name)) + ", \"arguments\": " + arguments_text(c) + "}";
      }
    }
    if (is_user) {
      if (first && !sys.empty()) content = "<<SYS>>\n" + sys + "\n<</SYS>>\n\n" + content;
      out += "<s>[INST] " + trim(content) + " [/INST]";
    } else {
      out += " " + trim(content) + " </s>";
    }
    first = false;
    expect_user = !expect_user;
  }
  return out;
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

Result<std::string> render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                                const std::vector<ToolDefinition>& tools,
                                bool add_generation_prompt) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      return make_error("message ", std::to_string(i), " has unknown role '", r,
                        "' (expected system, user, assistant or tool)");
    }
  }
  switch (tmpl.kind) {
    case ChatTemplateKind::chatml:
      return render_chatml(tmpl, messages, tools, add_generation_prompt);
    case ChatTemplateKind::llama3:
      return render_llama3(messages, tools, add_generation_prompt);
    case ChatTemplateKind::llama2:
      return render_llama2(messages, tools);
  }
  return make_error("unknown chat template kind");
}

}  // namespace infercept
