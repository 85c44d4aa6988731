#include "server/openai_protocol.h"

#include "core/json_depth.h"

#include <cmath>
#include <random>

namespace infercept::server {

namespace {

#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    if (auto api_err_ = (expr)) return api_err_; \
  } while (0)

std::string join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    default:
      return "a value";
  }
}

ApiError wrong_type(const std::string& param, const char* expected, const json& v) {
  return invalid_request("'" + param + "' must be " + expected + ", got " + type_name(v), param,
                         "invalid_type");
}

// Optional fields: absent or null leave `out` unset.
const json* field(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<ApiError> opt_number(const json& o, const char* key, const std::string& prefix,
                                   std::optional<double>& out) {
  const json* v = field(o, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return wrong_type(join(prefix, key), "a number", *v);
  out = v->get<double>();
  if (!std::isfinite(*out))
    return invalid_request("'" + join(prefix, key) + "' must be finite", join(prefix, key));
  return std::nullopt;
}

std::optional<ApiError> opt_int(const json& o, const char* key, const std::string& prefix,
                                std::optional<int64_t>& out) {
  const json* v = field(o, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t)INT64_MAX)
      return invalid_request("'" + join(prefix, key) + "' is too large", join(prefix, key));
    out = v->get<int64_t>();
    return std::nullopt;
  }
  // 5.0 is an integer too (JavaScript clients send numbers).
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
      out = (int64_t)d;
      return std::nullopt;
    }
  }
  return wrong_type(join(prefix, key), "an integer", *v);
}

std::optional<ApiError> opt_bool(const json& o, const char* key, const std::string& prefix,
                                 std::optional<bool>& out) {
  const json* v = field(o, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return wrong_type(join(prefix, key), "a boolean", *v);
  out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> opt_string(const json& o, const char* key, const std::string& prefix,
                                   std::optional<std::string>& out) {
  const json* v = field(o, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return wrong_type(join(prefix, key), "a string", *v);
  out = v->get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> require_string(const json& o, const char* key, const std::string& prefix,
                                       std::string& out) {
  std::optional<std::string> s;
  RETURN_IF_ERROR(opt_string(o, key, prefix, s));
  if (!s)
    return invalid_request("'" + join(prefix, key) + "' is required", join(prefix, key),
                           "missing_required_parameter");
  out = *s;
  return std::nullopt;
}

// Message content: a string, null, or an array of text parts.
std::optional<ApiError> parse_content(const json& m, const std::string& prefix, std::string& out) {
  const json* c = field(m, "content");
  out.clear();
  if (c == nullptr) return std::nullopt;
  if (c->is_string()) {
    out = c->get<std::string>();
    return std::nullopt;
  }
  if (!c->is_array())
    return wrong_type(join(prefix, "content"), "a string or an array of parts", *c);
  for (size_t i = 0; i < c->size(); ++i) {
    const json& part = (*c)[i];
    const std::string pp = join(prefix, "content") + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return wrong_type(pp, "an object", part);
    std::string type;
    RETURN_IF_ERROR(require_string(part, "type", pp, type));
    if (type != "text" && type != "input_text")
      return invalid_request("content part type '" + type + "' is not supported (text only)",
                             pp + ".type", "unsupported_content");
    std::string text;
    RETURN_IF_ERROR(require_string(part, "text", pp, text));
    out += text;
  }
  return std::nullopt;
}

std::optional<ApiError> parse_tool_calls(const json& m, const std::string& prefix,
                                         std::vector<ToolCall>& out) {
  const json* tc = field(m, "tool_calls");
  if (tc == nullptr) return std::nullopt;
  const std::string p = join(prefix, "tool_calls");
  if (!tc->is_array()) return wrong_type(p, "an array", *tc);
  for (size_t i = 0; i < tc->size(); ++i) {
    const json& c = (*tc)[i];
    const std::string cp = p + "[" + std::to_string(i) + "]";
    if (!c.is_object()) return wrong_type(cp, "an object", c);
    ToolCall call;
    std::optional<std::string> id, type;
    RETURN_IF_ERROR(opt_string(c, "id", cp, id));
    RETURN_IF_ERROR(opt_string(c, "type", cp, type));
    if (type && *type != "function")
      return invalid_request("tool call type '" + *type + "' is not supported (function only)",
                             cp + ".type");
    call.id = id.value_or("");
    const json* fn = field(c, "function");
    if (fn == nullptr)
      return invalid_request("'" + cp + ".function' is required", cp + ".function",
                             "missing_required_parameter");
    if (!fn->is_object()) return wrong_type(cp + ".function", "an object", *fn);
    RETURN_IF_ERROR(require_string(*fn, "name", cp + ".function", call.name));
    const json* args = field(*fn, "arguments");
    if (args == nullptr)
      call.arguments_json = "{}";
    else if (args->is_string())
      call.arguments_json = args->get<std::string>();
    else if (args->is_object())
      call.arguments_json = args->dump();
    else
      return wrong_type(cp + ".function.arguments", "a string", *args);
    out.push_back(std::move(call));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_tools(const json& body, ChatRequest& out) {
  const json* tools = field(body, "tools");
  if (tools == nullptr) return std::nullopt;
  if (!tools->is_array()) return wrong_type("tools", "an array", *tools);
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const std::string p = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return wrong_type(p, "an object", t);
    std::optional<std::string> type;
    RETURN_IF_ERROR(opt_string(t, "type", p, type));
    if (type && *type != "function")
      return invalid_request("tool type '" + *type + "' is not supported (function only)",
                             p + ".type");
    const json* fn = field(t, "function");
    if (fn == nullptr)
      return invalid_request("'" + p + ".function' is required", p + ".function",
                             "missing_required_parameter");
    if (!fn->is_object()) return wrong_type(p + ".function", "an object", *fn);
    ToolDefinition d;
    RETURN_IF_ERROR(require_string(*fn, "name", p + ".function", d.name));
    if (d.name.empty())
      return invalid_request("a tool's name must not be empty", p + ".function.name");
    std::optional<std::string> desc;
    RETURN_IF_ERROR(opt_string(*fn, "description", p + ".function", desc));
    d.description = desc.value_or("");
    if (const json* params = field(*fn, "parameters")) {
      if (!params->is_object()) return wrong_type(p + ".function.parameters", "an object", *params);
      // The body was parsed into a json whose objects are sorted maps, so its dump is the
      // schema with sorted keys (parsing it again into an ordered_json would cost a linear
      // search per key: quadratic in an object's size, and nothing gained).
      d.parameters_json = params->dump();
    }
    std::optional<bool> strict;
    RETURN_IF_ERROR(opt_bool(*fn, "strict", p + ".function", strict));
    d.strict = strict.value_or(false);
    // Extension: the expected duration of this tool, a hint for the oracle estimator.
    std::optional<double> ms;
    RETURN_IF_ERROR(opt_number(t, "expected_duration_ms", p, ms));
    if (!ms) RETURN_IF_ERROR(opt_number(*fn, "expected_duration_ms", p + ".function", ms));
    if (ms) {
      if (*ms < 0)
        return invalid_request("expected_duration_ms must be >= 0", p + ".expected_duration_ms");
      out.tool_hints_s[d.name] = *ms / 1000.0;
    }
    for (const ToolDefinition& other : out.tools)
      if (other.name == d.name)
        return invalid_request("two tools are named '" + d.name + "'", p + ".function.name");
    out.tools.push_back(std::move(d));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_tool_choice(const json& body, ChatRequest& out) {
  const json* tc = field(body, "tool_choice");
  if (tc == nullptr) {
    const bool any = !out.tools.empty() || !out.server_tools.empty() || out.all_server_tools;
    out.tool_choice = any ? ToolChoice::automatic : ToolChoice::none;
    return std::nullopt;
  }
  if (tc->is_string()) {
    const std::string s = tc->get<std::string>();
    if (s == "none")
      out.tool_choice = ToolChoice::none;
    else if (s == "auto")
      out.tool_choice = ToolChoice::automatic;
    else if (s == "required")
      out.tool_choice = ToolChoice::required;
    else
      return invalid_request(
          "tool_choice must be none, auto, required or a named function, got '" + s + "'",
          "tool_choice");
  } else if (tc->is_object()) {
    const json* fn = field(*tc, "function");
    if (fn == nullptr || !fn->is_object())
      return invalid_request(
          "tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
          "tool_choice");
    RETURN_IF_ERROR(require_string(*fn, "name", "tool_choice.function", out.tool_choice_name));
    out.tool_choice = ToolChoice::named;
    bool known = !out.server_tools.empty() || out.all_server_tools;  // checked by the server
    for (const ToolDefinition& t : out.tools) known = known || t.name == out.tool_choice_name;
    if (!known)
      return invalid_request(
          "tool_choice names '" + out.tool_choice_name + "', which is not in tools",
          "tool_choice.function.name");
  } else {
    return wrong_type("tool_choice", "a string or an object", *tc);
  }
  const bool server_tools = !out.server_tools.empty() || out.all_server_tools;
  if (out.tools.empty() && !server_tools && out.tool_choice != ToolChoice::none)
    return invalid_request("tool_choice needs tools", "tool_choice");
  return std::nullopt;
}

std::optional<ApiError> parse_stream(const json& body, bool& stream, bool& include_usage) {
  std::optional<bool> s;
  RETURN_IF_ERROR(opt_bool(body, "stream", "", s));
  stream = s.value_or(false);
  include_usage = false;
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) return wrong_type("stream_options", "an object", *so);
    if (!stream)
      return invalid_request("stream_options is only allowed with stream: true", "stream_options");
    std::optional<bool> iu;
    RETURN_IF_ERROR(opt_bool(*so, "include_usage", "stream_options", iu));
    include_usage = iu.value_or(false);
  }
  return std::nullopt;
}

std::optional<ApiError> check_model(const json& body, std::string& model) {
  return require_string(body, "model", "", model);
}

// prompt_cache_key (OpenAI) and cache_salt (vLLM): optional strings of at most 512 bytes; a
// salt, when given, is not empty (vLLM refuses an empty one too).
std::optional<ApiError> parse_cache_scope(const json& body, CacheScope& out) {
  std::optional<std::string> key, salt;
  RETURN_IF_ERROR(opt_string(body, "prompt_cache_key", "", key));
  RETURN_IF_ERROR(opt_string(body, "cache_salt", "", salt));
  auto too_long = [](const char* name, const std::optional<std::string>& v) {
    return v && v->size() > kMaxCacheFieldBytes
               ? std::optional<ApiError>(
                     invalid_request(std::string("'") + name + "' is longer than " +
                                         std::to_string(kMaxCacheFieldBytes) + " bytes",
                                     name))
               : std::nullopt;
  };
  RETURN_IF_ERROR(too_long("prompt_cache_key", key));
  RETURN_IF_ERROR(too_long("cache_salt", salt));
  if (salt && salt->empty()) return invalid_request("'cache_salt' must not be empty", "cache_salt");
  out.prompt_cache_key = key.value_or("");
  out.cache_salt = salt.value_or("");
  return std::nullopt;
}

// chat_template_kwargs: an object of any JSON values (null: absent); a name the renderer
// sets itself, or a template global, is refused rather than silently replacing what the
// server rendered from the request (the conversation, its tools, the generation prompt).
std::optional<ApiError> parse_template_kwargs(const json& body, std::string& out) {
  out.clear();
  const json* kw = field(body, "chat_template_kwargs");
  if (kw == nullptr) return std::nullopt;
  if (!kw->is_object()) return wrong_type("chat_template_kwargs", "an object", *kw);
  for (const auto& [k, v] : kw->items())
    if (reserved_template_variable(k))
      return invalid_request(
          "chat_template_kwargs cannot set '" + k + "': the server sets it from the request",
          "chat_template_kwargs." + k);
  if (!kw->empty()) out = kw->dump(-1, ' ', false, json::error_handler_t::replace);
  return std::nullopt;
}

}  // namespace

ApiError invalid_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError not_found(std::string message, std::string code) {
  ApiError e;
  e.status = 404;
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

json error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", err}};
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<ApiError> parse_body(const std::string& text, json& out) {
  if (text.empty())
    return invalid_request("the request body is empty; send a JSON object", "", "invalid_json");
  if (!json_depth_ok(text))
    return invalid_request(
        "the request body nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels", "",
        "invalid_json");
  out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) {
    // Parse again for the position of the problem (a syntax error, or a number out of
    // range such as 1e400, which nlohmann reports as out_of_range).
    try {
      json ignored = json::parse(text);
      (void)ignored;
    } catch (const json::exception& e) {
      return invalid_request(std::string("the request body is not valid JSON: ") + e.what(), "",
                             "invalid_json");
    }
    return invalid_request("the request body is not valid JSON", "", "invalid_json");
  }
  if (!out.is_object())
    return invalid_request(
        std::string("the request body must be a JSON object, got ") + type_name(out), "",
        "invalid_json");
  return std::nullopt;
}

std::optional<ApiError> parse_sampling(const json& body, const RequestLimits& limits, bool chat,
                                       SamplingParams& p, bool& max_tokens_given) {
  p = limits.defaults;
  std::optional<double> temperature, top_p, min_p, presence, frequency, repetition;
  std::optional<int64_t> top_k, seed, max_tokens, n;
  RETURN_IF_ERROR(opt_number(body, "temperature", "", temperature));
  RETURN_IF_ERROR(opt_number(body, "top_p", "", top_p));
  RETURN_IF_ERROR(opt_number(body, "min_p", "", min_p));
  RETURN_IF_ERROR(opt_number(body, "presence_penalty", "", presence));
  RETURN_IF_ERROR(opt_number(body, "frequency_penalty", "", frequency));
  RETURN_IF_ERROR(opt_number(body, "repetition_penalty", "", repetition));
  RETURN_IF_ERROR(opt_int(body, "top_k", "", top_k));
  RETURN_IF_ERROR(opt_int(body, "seed", "", seed));
  RETURN_IF_ERROR(opt_int(body, "n", "", n));
  const char* mt_name = "max_tokens";
  if (chat) {
    RETURN_IF_ERROR(opt_int(body, "max_completion_tokens", "", max_tokens));
    if (max_tokens) mt_name = "max_completion_tokens";
  }
  if (!max_tokens) RETURN_IF_ERROR(opt_int(body, "max_tokens", "", max_tokens));
  if (n && *n != 1) return invalid_request("only n = 1 is supported", "n", "unsupported_parameter");
  if (temperature) {
    if (*temperature < 0 || *temperature > 2)
      return invalid_request("temperature must be in [0, 2]", "temperature");
    p.temperature = (float)*temperature;
  }
  if (top_p) {
    if (*top_p <= 0 || *top_p > 1) return invalid_request("top_p must be in (0, 1]", "top_p");
    p.top_p = (float)*top_p;
  }
  if (min_p) {
    if (*min_p < 0 || *min_p > 1) return invalid_request("min_p must be in [0, 1]", "min_p");
    p.min_p = (float)*min_p;
  }
  if (top_k) {
    if (*top_k < -1 || *top_k > (1 << 30))
      return invalid_request("top_k must be >= -1 (0 or -1 = off)", "top_k");
    p.top_k = (int32_t)*top_k;
  }
  if (presence) {
    if (*presence < -2 || *presence > 2)
      return invalid_request("presence_penalty must be in [-2, 2]", "presence_penalty");
    p.presence_penalty = (float)*presence;
  }
  if (frequency) {
    if (*frequency < -2 || *frequency > 2)
      return invalid_request("frequency_penalty must be in [-2, 2]", "frequency_penalty");
    p.frequency_penalty = (float)*frequency;
  }
  if (repetition) {
    if (*repetition <= 0 || *repetition > 10)
      return invalid_request("repetition_penalty must be in (0, 10]", "repetition_penalty");
    p.repetition_penalty = (float)*repetition;
  }
  if (seed) p.seed = (uint64_t)*seed;
  max_tokens_given = max_tokens.has_value();
  if (max_tokens) {
    const int64_t cap = limits.max_tokens > 0 ? limits.max_tokens : limits.context;
    if (*max_tokens < 1)
      return invalid_request(
          std::string(mt_name) + " must be >= 1, got " + std::to_string(*max_tokens), mt_name);
    if (cap > 0 && *max_tokens > cap)
      return invalid_request(std::string(mt_name) + " is " + std::to_string(*max_tokens) +
                                 "; this server allows at most " + std::to_string(cap),
                             mt_name);
    p.max_tokens = (int32_t)*max_tokens;
  }
  if (const json* stop = field(body, "stop")) {
    p.stop.clear();
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 16) return invalid_request("at most 16 stop sequences", "stop");
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string())
          return wrong_type("stop[" + std::to_string(i) + "]", "a string", (*stop)[i]);
        p.stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      return wrong_type("stop", "a string or an array of strings", *stop);
    }
    for (const std::string& s : p.stop)
      if (s.empty()) return invalid_request("stop sequences must not be empty", "stop");
  }
  if (auto st = p.validate(); !st.ok()) return invalid_request(st.error().message);
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const json& arr, const std::string& param,
                                       std::vector<ChatMessage>& out) {
  if (!arr.is_array()) return wrong_type(param, "an array", arr);
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& m = arr[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!m.is_object()) return wrong_type(p, "an object", m);
    ChatMessage msg;
    RETURN_IF_ERROR(require_string(m, "role", p, msg.role));
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      return invalid_request(
          "unknown role '" + msg.role + "' (system, developer, user, assistant or tool)",
          p + ".role");
    RETURN_IF_ERROR(parse_content(m, p, msg.content));
    if (msg.role == "assistant") {
      RETURN_IF_ERROR(parse_tool_calls(m, p, msg.tool_calls));
      std::optional<std::string> reasoning;
      RETURN_IF_ERROR(opt_string(m, "reasoning_content", p, reasoning));
      msg.reasoning_content = reasoning.value_or("");
    } else if (field(m, "tool_calls") != nullptr) {
      return invalid_request("only assistant messages carry tool_calls", p + ".tool_calls");
    }
    if (msg.role == "tool") {
      std::optional<std::string> id;
      RETURN_IF_ERROR(opt_string(m, "tool_call_id", p, id));
      msg.tool_call_id = id.value_or("");
      if (!id)
        return invalid_request("'" + p + ".tool_call_id' is required for tool messages",
                               p + ".tool_call_id", "missing_required_parameter");
    }
    std::optional<std::string> name;
    RETURN_IF_ERROR(opt_string(m, "name", p, name));
    if (msg.role == "tool") msg.name = name.value_or("");
    if (field(m, "content") == nullptr && msg.tool_calls.empty())
      return invalid_request("'" + p + ".content' is required", p + ".content",
                             "missing_required_parameter");
    out.push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_scripted_call(const json& body, ChatRequest& out) {
  std::optional<int64_t> after;
  std::optional<std::string> tool;
  RETURN_IF_ERROR(opt_int(body, "intercept_after_tokens", "", after));
  RETURN_IF_ERROR(opt_string(body, "intercept_tool", "", tool));
  out.intercept_after_tokens = 0;
  out.intercept_tool.clear();
  if (!after) {
    if (tool)
      return invalid_request("intercept_tool needs intercept_after_tokens", "intercept_tool");
    return std::nullopt;
  }
  if (*after < 1)
    return invalid_request("intercept_after_tokens must be >= 1", "intercept_after_tokens");
  if (out.tools.empty())
    return invalid_request("intercept_after_tokens needs tools", "intercept_after_tokens");
  std::string name = tool.value_or(out.tool_choice == ToolChoice::named ? out.tool_choice_name
                                                                        : out.tools[0].name);
  bool known = false;
  for (const ToolDefinition& t : out.tools) known = known || t.name == name;
  if (!known)
    return invalid_request("intercept_tool names '" + name + "', which is not in tools",
                           "intercept_tool");
  out.intercept_after_tokens = *after;
  out.intercept_tool = std::move(name);
  return std::nullopt;
}

std::optional<ApiError> parse_chat_request(const json& body, const RequestLimits& limits,
                                           ChatRequest& out) {
  RETURN_IF_ERROR(check_model(body, out.model));
  const json* msgs = field(body, "messages");
  if (msgs == nullptr)
    return invalid_request("'messages' is required", "messages", "missing_required_parameter");
  RETURN_IF_ERROR(parse_messages(*msgs, "messages", out.messages));
  if (out.messages.empty()) return invalid_request("'messages' must not be empty", "messages");
  RETURN_IF_ERROR(parse_tools(body, out));
  if (const json* st = field(body, "server_tools")) {
    if (st->is_boolean()) {
      out.all_server_tools = st->get<bool>();
    } else if (st->is_array()) {
      for (size_t i = 0; i < st->size(); ++i) {
        if (!(*st)[i].is_string())
          return wrong_type("server_tools[" + std::to_string(i) + "]", "a tool name", (*st)[i]);
        out.server_tools.push_back((*st)[i].get<std::string>());
      }
    } else {
      return wrong_type("server_tools", "an array of tool names or a boolean", *st);
    }
  }
  RETURN_IF_ERROR(parse_tool_choice(body, out));
  RETURN_IF_ERROR(parse_sampling(body, limits, /*chat=*/true, out.params, out.max_tokens_given));
  RETURN_IF_ERROR(parse_stream(body, out.stream, out.include_usage));
  std::optional<bool> logprobs, intercept, ids, parallel;
  std::optional<int64_t> top;
  RETURN_IF_ERROR(opt_bool(body, "logprobs", "", logprobs));
  RETURN_IF_ERROR(opt_int(body, "top_logprobs", "", top));
  RETURN_IF_ERROR(opt_bool(body, "intercept", "", intercept));
  RETURN_IF_ERROR(opt_bool(body, "return_token_ids", "", ids));
  RETURN_IF_ERROR(opt_bool(body, "parallel_tool_calls", "", parallel));
  if (top && (*top < 0 || *top > 20))
    return invalid_request("top_logprobs must be in [0, 20]", "top_logprobs");
  if (top && !logprobs.value_or(false))
    return invalid_request("top_logprobs needs logprobs: true", "top_logprobs");
  out.logprobs = logprobs.value_or(false) ? (int32_t)top.value_or(0) : -1;
  out.parallel_tool_calls = parallel.value_or(true);
  out.intercept = intercept.value_or(true);
  out.return_token_ids = ids.value_or(false);
  RETURN_IF_ERROR(parse_scripted_call(body, out));
  RETURN_IF_ERROR(parse_cache_scope(body, out.cache));
  RETURN_IF_ERROR(parse_template_kwargs(body, out.chat_template_kwargs_json));
  if (const json* rf = field(body, "response_format")) {
    if (!rf->is_object()) return wrong_type("response_format", "an object", *rf);
    std::optional<std::string> type;
    RETURN_IF_ERROR(opt_string(*rf, "type", "response_format", type));
    ResponseFormat& f = out.response_format;
    if (!type || *type == "text") {
      f.kind = ResponseFormat::Kind::text;
    } else if (*type == "json_object") {
      f.kind = ResponseFormat::Kind::json_object;
    } else if (*type == "json_schema") {
      f.kind = ResponseFormat::Kind::json_schema;
      const json* js = field(*rf, "json_schema");
      if (js == nullptr)
        return invalid_request("response_format json_schema needs 'json_schema'",
                               "response_format.json_schema", "missing_required_parameter");
      if (!js->is_object()) return wrong_type("response_format.json_schema", "an object", *js);
      if (const json* schema = field(*js, "schema")) {
        if (!schema->is_object() && !schema->is_boolean())
          return wrong_type("response_format.json_schema.schema", "an object", *schema);
        f.schema = *schema;
      }
      std::optional<bool> strict;
      RETURN_IF_ERROR(opt_bool(*js, "strict", "response_format.json_schema", strict));
      f.strict = strict.value_or(false);
    } else {
      return invalid_request(
          "response_format '" + *type + "' is not supported (text, json_object, json_schema)",
          "response_format.type", "unsupported_parameter");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> parse_completion_request(const json& body, const RequestLimits& limits,
                                                 CompletionRequest& out) {
  RETURN_IF_ERROR(check_model(body, out.model));
  const json* prompt = field(body, "prompt");
  if (prompt == nullptr)
    return invalid_request("'prompt' is required", "prompt", "missing_required_parameter");
  if (prompt->is_string()) {
    out.prompt_text = prompt->get<std::string>();
  } else if (prompt->is_array()) {
    if (prompt->size() == 1 && (*prompt)[0].is_string()) {
      out.prompt_text = (*prompt)[0].get<std::string>();
    } else if (!prompt->empty() && (*prompt)[0].is_array()) {
      return invalid_request("only one prompt per request is supported", "prompt",
                             "unsupported_parameter");
    } else {
      for (size_t i = 0; i < prompt->size(); ++i) {
        const json& t = (*prompt)[i];
        if (t.is_string())
          return invalid_request("only one prompt per request is supported", "prompt",
                                 "unsupported_parameter");
        if (!t.is_number_integer())
          return wrong_type("prompt[" + std::to_string(i) + "]", "a token id", t);
        const int64_t id = t.get<int64_t>();
        if (id < 0 || id > INT32_MAX)
          return invalid_request("prompt token ids must be >= 0", "prompt");
        out.prompt_tokens.push_back((int32_t)id);
      }
    }
  } else {
    return wrong_type("prompt", "a string or an array of token ids", *prompt);
  }
  if (out.prompt_text.empty() && out.prompt_tokens.empty())
    return invalid_request("'prompt' must not be empty", "prompt");
  RequestLimits l = limits;
  if (body.find("max_tokens") == body.end()) l.defaults.max_tokens = 16;  // OpenAI's default
  RETURN_IF_ERROR(parse_sampling(body, l, /*chat=*/false, out.params, out.max_tokens_given));
  RETURN_IF_ERROR(parse_stream(body, out.stream, out.include_usage));
  std::optional<int64_t> logprobs;
  std::optional<bool> echo, ids;
  RETURN_IF_ERROR(opt_int(body, "logprobs", "", logprobs));
  RETURN_IF_ERROR(opt_bool(body, "echo", "", echo));
  RETURN_IF_ERROR(opt_bool(body, "return_token_ids", "", ids));
  if (logprobs && (*logprobs < 0 || *logprobs > 5))
    return invalid_request("logprobs must be in [0, 5]", "logprobs");
  out.logprobs = logprobs ? (int32_t)*logprobs : -1;
  if (echo.value_or(false))
    return invalid_request("echo is not supported", "echo", "unsupported_parameter");
  if (const json* suffix = field(body, "suffix"))
    if (!suffix->is_string() || !suffix->get<std::string>().empty())
      return invalid_request("suffix is not supported", "suffix", "unsupported_parameter");
  std::optional<int64_t> best_of;
  RETURN_IF_ERROR(opt_int(body, "best_of", "", best_of));
  if (best_of && *best_of != 1)
    return invalid_request("only best_of = 1 is supported", "best_of", "unsupported_parameter");
  out.return_token_ids = ids.value_or(false);
  RETURN_IF_ERROR(parse_cache_scope(body, out.cache));
  return std::nullopt;
}

std::string cache_namespace(const std::string& owner, const CacheScope& scope) {
  // The owner is "", "key<N>" or "admin<N>" (auth.h); the key is length-prefixed, so no
  // choice of key and salt can spell another pair's namespace.
  return owner + '\x1f' + std::to_string(scope.prompt_cache_key.size()) + ':' +
         scope.prompt_cache_key + '\x1f' + scope.cache_salt;
}

std::string random_id(const std::string& prefix) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += kChars[rng() % (sizeof(kChars) - 1)];
  return s;
}

}  // namespace infercept::server
