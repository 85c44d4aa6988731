// jinja2's filters and tests, the Python methods templates call on strings, dicts and lists,
// and the globals transformers adds (raise_exception, strftime_now) or jinja2 has (range,
// namespace, dict). Each behaves as its Python original does on the values chat templates
// pass it; the names here are the whole of what a template may use (is_known_* below are
// checked when a template is loaded, so a template using something else fails at start-up).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace infercept::jinja {

struct BuiltinLimits {
  size_t max_bytes;   // any string or list a builtin makes
  int64_t max_items;  // range() and list repetition
  // Where namespace() records what it makes (the renderer empties them at the end, which
  // frees a namespace that holds itself); may be null.
  std::vector<std::shared_ptr<NamespaceData>>* namespaces = nullptr;
};

Value apply_filter(const std::string& name, const Value& subject, const CallArgs& args,
                   const BuiltinLimits& limits);
bool apply_test(const std::string& name, const Value& subject, const CallArgs& args);
// obj.name as a bound method (Undefined if obj's type has no such method). A mutating
// method (list.append, dict.update) is an error, as in transformers' sandbox.
Value get_method(const Value& obj, const std::string& name, const BuiltinLimits& limits);
// The global functions; Undefined for other names.
Value get_global(const std::string& name, const BuiltinLimits& limits);

// jinja2's getattr and getitem: obj.name (a method, then a dict key) and obj[key] (a key
// or index, then an attribute); Undefined when missing, an error on Undefined itself.
Value get_attr(const Value& obj, const std::string& name, const BuiltinLimits& limits);
Value get_item(const Value& obj, const Value& key, const BuiltinLimits& limits);

// HTML escaping as markupsafe.escape (& < > " '), the taint following each character.
Str html_escape(const Str& s);

// The text of a string argument; an error for anything else.
std::string need_text(const Value& v);

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
bool is_known_method(const std::string& name);
bool is_known_global(const std::string& name);

// raise_exception(msg): the error a template raises on purpose carries this prefix.
inline constexpr const char* kRaisedPrefix = "the template raised: ";

}  // namespace infercept::jinja
