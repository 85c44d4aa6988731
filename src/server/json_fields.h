// Reading the fields of a request body in the other APIs' translations (responses_api.cpp,
// anthropic_api.cpp): a field that is absent or null, a required string, and the errors that
// name the parameter, as the chat parser's do.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "server/openai_protocol.h"

namespace infercept::server::fields {

inline std::string type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

inline ApiError wrong(const std::string& param, const std::string& expected, const json& got) {
  return invalid_request("'" + param + "' must be " + expected + " (got " + type_name(got) + ")",
                         param, "invalid_type");
}

inline ApiError unsupported(const std::string& what, const std::string& param) {
  return invalid_request(what, param, "unsupported_parameter");
}

inline ApiError missing(const std::string& param) {
  return invalid_request("'" + param + "' is required", param, "missing_required_parameter");
}

// The field, or null when it is absent or JSON null.
inline const json* member(const json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

inline std::optional<ApiError> string_member(const json& o, const char* key,
                                             const std::string& param, std::string& out) {
  const json* v = member(o, key);
  if (v == nullptr) return missing(param + "." + key);
  if (!v->is_string()) return wrong(param + "." + key, "a string", *v);
  out = v->get<std::string>();
  return std::nullopt;
}

// Text given as a string or as an array of typed parts joined: `text_key(type)` names the
// field that holds a part's text, or is null for a type that is refused (a 400 naming the
// part's type, `what` saying what the parts are called: "content part", "content block").
inline std::optional<ApiError> joined_text(
    const json& c, const std::string& param, const char* what,
    const std::function<const char*(const std::string&)>& text_key, std::string& out) {
  out.clear();
  if (c.is_string()) {
    out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return wrong(param, std::string("a string or an array of ") + what + "s", c);
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!c[i].is_object()) return wrong(p, "an object", c[i]);
    std::string type, text;
    if (auto e = string_member(c[i], "type", p, type)) return e;
    const char* key = text_key(type);
    if (key == nullptr)
      return invalid_request(
          std::string(what) + " type '" + type + "' is not supported (text only)", p + ".type",
          "unsupported_content");
    if (auto e = string_member(c[i], key, p, text)) return e;
    out += text;
  }
  return std::nullopt;
}

// Each element of the array `param` (which must be one), each an object, with its own param
// ("tools[2]"); the first error stops it.
inline std::optional<ApiError> each_object(
    const json& arr, const std::string& param,
    const std::function<std::optional<ApiError>(const json&, const std::string&)>& f) {
  if (!arr.is_array()) return wrong(param, "an array", arr);
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!arr[i].is_object()) return wrong(p, "an object", arr[i]);
    if (auto e = f(arr[i], p)) return e;
  }
  return std::nullopt;
}

}  // namespace infercept::server::fields
