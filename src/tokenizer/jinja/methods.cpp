// The Python methods templates call on values: str, dict and list methods, bound to their
// object. Mutating ones are refused as transformers' ImmutableSandboxedEnvironment refuses
// them.
#include <set>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/str_ops.h"
#include "tokenizer/unicode.h"

namespace infercept::jinja {
namespace {

const std::set<std::string>& str_methods() {
  static const std::set<std::string> m = {
      "strip",    "lstrip",  "rstrip",  "split",   "rsplit",     "startswith",
      "endswith", "upper",   "lower",   "replace", "title",      "capitalize",
      "find",     "rfind",   "count",   "join",    "splitlines", "isdigit",
      "isalpha",  "isspace", "isupper", "islower", "isalnum"};
  return m;
}
const std::set<std::string>& dict_methods() {
  static const std::set<std::string> m = {"items", "keys", "values", "get"};
  return m;
}
const std::set<std::string>& list_methods() {
  static const std::set<std::string> m = {"index", "count"};
  return m;
}
const std::set<std::string>& mutating_methods() {
  static const std::set<std::string> m = {"append", "extend",     "insert", "pop",
                                          "remove", "clear",      "sort",   "reverse",
                                          "update", "setdefault", "popitem"};
  return m;
}

std::optional<std::string> opt_str(const Value& v, const char* what) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_str()) fail(std::string(what) + " must be a string or None");
  return v.str().text;
}
int64_t opt_int(const Value& v, int64_t dflt, const char* what) {
  if (v.is_undefined() || v.is_none()) return dflt;
  if (!v.is_int() && !v.is_bool()) fail(std::string(what) + " must be an integer");
  return v.as_int();
}
const Str& need_str(const Value& v, const char* what) {
  if (!v.is_str()) fail(std::string(what) + " must be a string, not " + type_name(v));
  return v.str();
}

Value str_list(std::vector<Str> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (Str& p : parts) items.push_back(make_str(std::move(p)));
  return make_list(std::move(items));
}

// s.startswith(prefix) / endswith(suffix); prefix may be a tuple of strings.
bool affix(const std::string& s, const Value& arg, bool start) {
  std::vector<Value> options;
  if (arg.is_list()) {
    options = arg.list().items;
  } else {
    options.push_back(arg);
  }
  for (const Value& o : options) {
    const std::string& a =
        need_str(o, start ? "startswith's argument" : "endswith's argument").text;
    if (a.size() > s.size()) continue;
    if (start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0)
      return true;
  }
  return false;
}

template <typename Pred>
bool all_cpts(const std::string& s, Pred p) {
  if (s.empty()) return false;
  for (uint32_t c : unicode::decode_utf8_all(s))
    if (!p(c)) return false;
  return true;
}

Value str_method(const Value& self, const std::string& name, const CallArgs& a,
                 const BuiltinLimits& lim) {
  const Str& s = self.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const auto chars = opt_str(a.get(0, "chars"), "strip's argument");
    return make_str(py_strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const auto sep = opt_str(a.get(0, "sep"), "split's separator");
    const int64_t maxsplit = opt_int(a.get(1, "maxsplit"), -1, "maxsplit");
    return str_list(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
  }
  if (name == "startswith" || name == "endswith")
    return Value(affix(s.text, a.get(0, "prefix"), name == "startswith"));
  if (name == "upper") return make_str(py_case(s, CaseMap::upper));
  if (name == "lower") return make_str(py_case(s, CaseMap::lower));
  if (name == "title") return make_str(py_case(s, CaseMap::title_method));
  if (name == "capitalize") return make_str(py_case(s, CaseMap::capitalize));
  if (name == "replace") {
    Str r = py_replace(s, need_str(a.get(0, "old"), "replace's first argument"),
                       need_str(a.get(1, "new"), "replace's second argument"),
                       opt_int(a.get(2, "count"), -1, "count"));
    if (r.text.size() > lim.max_bytes) fail("replace: the result is too large");
    return make_str(std::move(r));
  }
  if (name == "find" || name == "rfind") {
    const std::string& sub = need_str(a.get(0, "sub"), "find's argument").text;
    const size_t f = name == "find" ? s.text.find(sub) : s.text.rfind(sub);
    if (f == std::string::npos) return Value(int64_t{-1});
    return Value(int64_t(cpt_offsets(s.text.substr(0, f)).size() - 1));
  }
  if (name == "count") {
    const std::string& sub = need_str(a.get(0, "sub"), "count's argument").text;
    if (sub.empty()) return Value(length(self) + 1);
    int64_t n = 0;
    for (size_t p = s.text.find(sub); p != std::string::npos; p = s.text.find(sub, p + sub.size()))
      ++n;
    return Value(n);
  }
  if (name == "join") {
    Str out;
    bool first = true;
    for (const Value& v : iterate(a.get(0, "iterable"))) {
      if (!first) out.append(s);
      first = false;
      out.append(need_str(v, "join's items"));
      if (out.text.size() > lim.max_bytes) fail("join: the result is too large");
    }
    return make_str(std::move(out));
  }
  if (name == "splitlines") {
    std::vector<Str> parts = py_split(s, std::string("\n"), -1);
    if (!parts.empty() && parts.back().text.empty()) parts.pop_back();
    return str_list(std::move(parts));
  }
  if (name == "isdigit")
    return Value(all_cpts(s.text, [](uint32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha")
    return Value(all_cpts(s.text, [](uint32_t c) { return unicode::is_letter(c); }));
  if (name == "isalnum")
    return Value(all_cpts(
        s.text, [](uint32_t c) { return unicode::is_letter(c) || unicode::is_number(c); }));
  if (name == "isspace") return Value(all_cpts(s.text, py_isspace));
  if (name == "isupper" || name == "islower") {
    const Str mapped = py_case(s, name == "isupper" ? CaseMap::upper : CaseMap::lower);
    const Str other = py_case(s, name == "isupper" ? CaseMap::lower : CaseMap::upper);
    return Value(mapped.text == s.text && other.text != s.text);
  }
  fail("str has no method '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name, const CallArgs& a) {
  const DictData& d = self.dict();
  if (name == "items") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.items) out.push_back(make_list({Value(k), v}, /*tuple=*/true));
    return make_list(std::move(out));
  }
  if (name == "keys") {
    std::vector<Value> out;
    for (const auto& kv : d.items) out.push_back(Value(kv.first));
    return make_list(std::move(out));
  }
  if (name == "values") {
    std::vector<Value> out;
    for (const auto& kv : d.items) out.push_back(kv.second);
    return make_list(std::move(out));
  }
  // get(key, default=None)
  const Value& key = a.get(0, "key");
  const Value* v = key.is_str() ? d.find(key.str().text) : nullptr;
  if (v) return *v;
  return a.has(1, "default") ? a.get(1, "default") : Value(None{});
}

Value list_method(const Value& self, const std::string& name, const CallArgs& a) {
  const auto& items = self.list().items;
  const Value& x = a.get(0, "value");
  if (name == "count") {
    int64_t n = 0;
    for (const Value& v : items) n += equal(v, x);
    return Value(n);
  }
  for (size_t i = 0; i < items.size(); ++i)
    if (equal(items[i], x)) return Value(int64_t(i));
  fail("list.index(x): x not in list");
}

}  // namespace

bool is_known_method(const std::string& name) {
  // Mutating methods are known: calling one is an error when it runs, as in the sandbox, so
  // a template that only calls them on paths a conversation never takes still renders.
  return str_methods().count(name) || dict_methods().count(name) || list_methods().count(name) ||
         mutating_methods().count(name) || name == "cycle";
}

Value get_method(const Value& obj, const std::string& name, const BuiltinLimits& limits) {
  const std::string qual = std::string(type_name(obj)) + "." + name;
  if ((obj.is_list() || obj.is_dict()) && mutating_methods().count(name)) {
    return make_callable(qual, [qual](const CallArgs&) -> Value {
      fail("access to the method " + qual + " is unsafe (the template's values are immutable)");
    });
  }
  if (obj.is_str() && str_methods().count(name)) {
    return make_callable(
        qual, [obj, name, limits](const CallArgs& a) { return str_method(obj, name, a, limits); });
  }
  if (obj.is_dict() && dict_methods().count(name)) {
    return make_callable(qual,
                         [obj, name](const CallArgs& a) { return dict_method(obj, name, a); });
  }
  if (obj.is_list() && list_methods().count(name)) {
    return make_callable(qual,
                         [obj, name](const CallArgs& a) { return list_method(obj, name, a); });
  }
  return Value(
      Undefined{"'" + std::string(type_name(obj)) + " object' has no attribute '" + name + "'"});
}

}  // namespace infercept::jinja
