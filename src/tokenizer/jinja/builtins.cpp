// jinja2's filters and tests, attribute and item lookup, and the globals.
#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>

#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/str_ops.h"
#include "tokenizer/unicode.h"

namespace infercept::jinja {

std::string need_text(const Value& v) {
  if (!v.is_str()) fail(std::string("expected a string, got ") + type_name(v));
  return v.str().text;
}

namespace {

const std::set<std::string>& filter_names() {
  static const std::set<std::string> f = {
      "tojson",     "trim",        "length", "count",     "items",  "first",      "last",
      "join",       "default",     "d",      "upper",     "lower",  "capitalize", "title",
      "replace",    "string",      "int",    "float",     "list",   "map",        "selectattr",
      "rejectattr", "select",      "reject", "dictsort",  "unique", "safe",       "e",
      "escape",     "forceescape", "abs",    "round",     "sum",    "min",        "max",
      "sort",       "reverse",     "indent", "wordcount", "attr",   "batch",      "center",
      "truncate",   "pprint",      "bool"};
  return f;
}
const std::set<std::string>& test_names() {
  static const std::set<std::string> t = {
      "defined",  "undefined", "none",        "string",  "mapping", "iterable", "sequence",
      "number",   "integer",   "float",       "boolean", "true",    "false",    "callable",
      "equalto",  "eq",        "==",          "ne",      "!=",      "lt",       "<",
      "le",       "<=",        "gt",          ">",       "ge",      ">=",       "greaterthan",
      "lessthan", "in",        "divisibleby", "odd",     "even",    "lower",    "upper",
      "sameas",   "escaped",   "filter",      "test"};
  return t;
}

void check_size(const Str& s, const BuiltinLimits& lim, const char* what) {
  if (s.text.size() > lim.max_bytes)
    fail(std::string(what) + ": the result is larger than " + std::to_string(lim.max_bytes) +
         " bytes");
}

// Python's int(x) for the `int` filter: nullopt when x does not convert.
std::optional<int64_t> to_int(const Value& v) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_float()) {
    const double d = std::get<double>(v.v);
    if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return std::nullopt;
    return int64_t(d);
  }
  if (v.is_str()) {
    std::string t = py_strip(v.str(), std::nullopt, true, true).text;
    std::string digits;
    size_t i = 0;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) digits += t[i++];
    bool any = false;
    for (; i < t.size(); ++i) {
      if (t[i] >= '0' && t[i] <= '9') {
        digits += t[i];
        any = true;
      } else if (t[i] != '_') {
        // jinja2 falls back to int(float(s))
        char* end = nullptr;
        const double d = std::strtod(t.c_str(), &end);
        if (end && *end == 0 && !t.empty() && std::isfinite(d)) return int64_t(d);
        return std::nullopt;
      }
    }
    if (!any) return std::nullopt;
    try {
      return std::stoll(digits);
    } catch (...) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::optional<double> to_float(const Value& v) {
  if (v.is_number()) return v.as_double();
  if (v.is_str()) {
    const std::string t = py_strip(v.str(), std::nullopt, true, true).text;
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && end && *end == 0) return d;
  }
  return std::nullopt;
}

// An attribute path "a.b" (or an integer index) on an item, as jinja2's make_attrgetter.
Value attr_path(const Value& item, const Value& attribute, const BuiltinLimits& lim) {
  if (attribute.is_int()) return get_item(item, attribute, lim);
  const std::string path = need_text(attribute);
  Value v = item;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? dot : dot - pos);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = digits ? get_item(v, Value(int64_t(std::stoll(part))), lim)
               : get_item(v, make_str(part), lim);
    if (dot == std::string::npos) return v;
    pos = dot + 1;
  }
}

// The key Python sorts or compares by for case-insensitive filters: lower-cased strings.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_str()) return make_str(py_case(v.str(), CaseMap::lower));
  return v;
}

}  // namespace

Str html_escape(const Str& s) {
  Str out;
  for (size_t i = 0; i < s.text.size(); ++i) {
    const char c = s.text[i];
    const char* rep = c == '&'    ? "&amp;"
                      : c == '<'  ? "&lt;"
                      : c == '>'  ? "&gt;"
                      : c == '"'  ? "&#34;"
                      : c == '\'' ? "&#39;"
                                  : nullptr;
    out.append(rep ? std::string_view(rep) : std::string_view(&s.text[i], 1), s.tainted_at(i));
  }
  return out;
}

namespace {

CallArgs shift_args(const CallArgs& a, size_t n) {
  CallArgs r;
  if (a.positional.size() > n)
    r.positional.assign(a.positional.begin() + long(n), a.positional.end());
  r.keyword = a.keyword;
  return r;
}

// select/reject/selectattr/rejectattr: keep the items whose test (or truthiness) holds.
Value select_items(const Value& seq, const CallArgs& a, bool by_attr, bool keep,
                   const BuiltinLimits& lim) {
  std::vector<Value> out;
  const size_t test_pos = by_attr ? 1 : 0;
  const bool has_test = a.positional.size() > test_pos;
  const std::string test = has_test ? need_text(a.positional[test_pos]) : "";
  if (has_test && !is_known_test(test)) fail("no test named '" + test + "'");
  const CallArgs targs = shift_args(a, test_pos + 1);
  if (!truthy(seq)) return make_list({});  // jinja2 iterates `if seq` only (None selects nothing)
  for (const Value& item : iterate(seq)) {
    const Value subject = by_attr ? attr_path(item, a.get(0, "attribute"), lim) : item;
    const bool ok = has_test ? apply_test(test, subject, targs) : truthy(subject);
    if (ok == keep) out.push_back(item);
  }
  return make_list(std::move(out));
}

Value sorted(std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute,
             const BuiltinLimits& lim) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& v : items) {
    Value k = attribute.is_undefined() || attribute.is_none() ? v : attr_path(v, attribute, lim);
    keyed.emplace_back(sort_key(k, case_sensitive), std::move(v));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return make_list(std::move(out));
}

Value add(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value(a.as_double() + b.as_double());
    return Value(a.as_int() + b.as_int());
  }
  fail(std::string("sum: cannot add ") + type_name(a) + " and " + type_name(b));
}

}  // namespace

bool is_known_filter(const std::string& name) {
  return filter_names().count(name) > 0;
}
bool is_known_test(const std::string& name) {
  return test_names().count(name) > 0;
}
bool is_known_global(const std::string& name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception" ||
         name == "strftime_now";
}

Value apply_filter(const std::string& f, const Value& v, const CallArgs& a,
                   const BuiltinLimits& lim) {
  if (f == "tojson") {
    JsonDumpOptions o;
    const Value& indent = a.get(0, "indent");
    if (indent.is_int()) o.indent = int(std::clamp<int64_t>(indent.as_int(), 0, 64));
    o.ensure_ascii = truthy(a.get(1, "ensure_ascii"));
    const Value& seps = a.get(2, "separators");
    if (seps.is_list() && seps.list().items.size() == 2) {
      o.item_sep = need_text(seps.list().items[0]);
      o.key_sep = need_text(seps.list().items[1]);
      if (o.item_sep.empty()) fail("tojson: an empty item separator is not supported");
    }
    o.sort_keys = truthy(a.get(3, "sort_keys"));
    return make_str(to_json(v, o, lim.max_bytes));
  }
  if (f == "trim") {
    const Value& chars = a.get(0, "chars");
    return make_str(py_strip(
        to_str(v), chars.is_str() ? std::optional(chars.str().text) : std::nullopt, true, true));
  }
  if (f == "length" || f == "count") return Value(length(v));
  if (f == "items") {
    if (v.is_undefined()) return make_list({});
    if (!v.is_dict()) fail("items: can only get item pairs from a mapping");
    return get_method(v, "items", lim).callable().fn(CallArgs{});
  }
  if (f == "first") {
    auto items = iterate(v);
    return items.empty() ? Value(Undefined{"no first item, sequence was empty"}) : items.front();
  }
  if (f == "last") {
    auto items = iterate(v);
    return items.empty() ? Value(Undefined{"no last item, sequence was empty"}) : items.back();
  }
  if (f == "join") {
    const Value& sep = a.get(0, "d");
    const Str s = sep.is_undefined() ? Str{} : to_str(sep);
    const Value& attribute = a.get(1, "attribute");
    Str out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out.append(s);
      first = false;
      out.append(to_str(attribute.is_undefined() ? item : attr_path(item, attribute, lim)));
      check_size(out, lim, "join");
    }
    return make_str(std::move(out));
  }
  if (f == "default" || f == "d") {
    const bool boolean = truthy(a.get(1, "boolean"));
    if (v.is_undefined() || (boolean && !truthy(v))) {
      const Value& d = a.get(0, "default_value");
      return d.is_undefined() ? make_str("") : d;
    }
    return v;
  }
  if (f == "upper") return make_str(py_case(to_str(v), CaseMap::upper));
  if (f == "lower") return make_str(py_case(to_str(v), CaseMap::lower));
  if (f == "capitalize") return make_str(py_case(to_str(v), CaseMap::capitalize));
  if (f == "title") return make_str(py_case(to_str(v), CaseMap::title_filter));
  if (f == "replace") {
    const Value& count = a.get(2, "count");
    Str r = py_replace(to_str(v), to_str(a.get(0, "old")), to_str(a.get(1, "new")),
                       count.is_int() ? count.as_int() : -1);
    check_size(r, lim, "replace");
    return make_str(std::move(r));
  }
  if (f == "string") return make_str(to_str(v));
  if (f == "int") {
    auto i = to_int(v);
    if (i) return Value(*i);
    const Value& d = a.get(0, "default");
    return d.is_undefined() ? Value(int64_t{0}) : d;
  }
  if (f == "float") {
    auto d = to_float(v);
    if (d) return Value(*d);
    const Value& dflt = a.get(0, "default");
    return dflt.is_undefined() ? Value(0.0) : dflt;
  }
  if (f == "bool") return Value(truthy(v));
  if (f == "list") return make_list(iterate(v));
  if (f == "map") {
    std::vector<Value> out;
    if (!truthy(v)) return make_list({});
    const Value& attribute = a.get(99, "attribute");
    if (!attribute.is_undefined()) {
      const Value& dflt = a.get(99, "default");
      for (const Value& item : iterate(v)) {
        Value x = attr_path(item, attribute, lim);
        out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
      }
      return make_list(std::move(out));
    }
    if (a.positional.empty()) fail("map: needs a filter name or attribute=");
    const std::string name = need_text(a.positional[0]);
    if (!is_known_filter(name)) fail("no filter named '" + name + "'");
    const CallArgs rest = shift_args(a, 1);
    for (const Value& item : iterate(v)) out.push_back(apply_filter(name, item, rest, lim));
    return make_list(std::move(out));
  }
  if (f == "select" || f == "reject") return select_items(v, a, false, f == "select", lim);
  if (f == "selectattr" || f == "rejectattr")
    return select_items(v, a, true, f == "selectattr", lim);
  if (f == "dictsort") {
    if (!v.is_dict()) fail("dictsort: expected a mapping");
    const bool cs = truthy(a.get(0, "case_sensitive"));
    const Value& by = a.get(1, "by");
    const bool by_value = by.is_str() && by.str().text == "value";
    const bool reverse = truthy(a.get(2, "reverse"));
    std::vector<std::pair<Value, Value>> keyed;
    for (const auto& [k, val] : v.dict().items)
      keyed.emplace_back(sort_key(by_value ? val : Value(k), cs), make_list({Value(k), val}, true));
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      return reverse ? less(y.first, x.first) : less(x.first, y.first);
    });
    std::vector<Value> out;
    for (auto& kv : keyed) out.push_back(std::move(kv.second));
    return make_list(std::move(out));
  }
  if (f == "unique") {
    const bool cs = truthy(a.get(0, "case_sensitive"));
    const Value& attribute = a.get(1, "attribute");
    std::vector<Value> out, seen;
    for (const Value& item : iterate(v)) {
      Value k = sort_key(attribute.is_undefined() ? item : attr_path(item, attribute, lim), cs);
      bool dup = false;
      for (const Value& s : seen) dup = dup || equal(s, k);
      if (!dup) {
        seen.push_back(k);
        out.push_back(item);
      }
    }
    return make_list(std::move(out));
  }
  if (f == "sort") {
    return sorted(iterate(v), truthy(a.get(0, "reverse")), truthy(a.get(1, "case_sensitive")),
                  a.get(2, "attribute"), lim);
  }
  if (f == "reverse") {
    if (v.is_str()) return make_str(py_slice(v.str(), std::nullopt, std::nullopt, -1));
    auto items = iterate(v);
    std::reverse(items.begin(), items.end());
    return make_list(std::move(items));
  }
  if (f == "min" || f == "max") {
    const bool cs = truthy(a.get(0, "case_sensitive"));
    const Value& attribute = a.get(1, "attribute");
    auto items = iterate(v);
    if (items.empty()) return Value(Undefined{"no " + f + " item, sequence was empty"});
    size_t best = 0;
    auto key = [&](const Value& x) {
      return sort_key(attribute.is_undefined() ? x : attr_path(x, attribute, lim), cs);
    };
    for (size_t i = 1; i < items.size(); ++i) {
      const bool better = f == "min" ? less(key(items[i]), key(items[best]))
                                     : less(key(items[best]), key(items[i]));
      if (better) best = i;
    }
    return items[best];
  }
  if (f == "sum") {
    const Value& attribute = a.get(0, "attribute");
    Value total = a.has(1, "start") ? a.get(1, "start") : Value(int64_t{0});
    for (const Value& item : iterate(v))
      total = add(total, attribute.is_undefined() ? item : attr_path(item, attribute, lim));
    return total;
  }
  if (f == "abs") {
    if (v.is_float()) return Value(std::fabs(std::get<double>(v.v)));
    if (v.is_number()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    fail(std::string("abs: bad operand type ") + type_name(v));
  }
  if (f == "round") {
    if (!v.is_number()) fail("round: expected a number");
    const int64_t p = a.get(0, "precision").is_int() ? a.get(0, "precision").as_int() : 0;
    const Value& method = a.get(1, "method");
    const std::string m = method.is_str() ? method.str().text : "common";
    const double scale = std::pow(10.0, double(p));
    const double x = v.as_double() * scale;
    const double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::nearbyint(x);
    return Value(r / scale);
  }
  if (f == "pprint") return make_str(to_repr(v));
  if (f == "safe") {
    Str s = to_str(v);
    s.markup = true;
    return make_str(std::move(s));
  }
  if (f == "e" || f == "escape" || f == "forceescape") {
    if (f != "forceescape" && v.is_str() && v.str().markup) return v;
    Str s = html_escape(to_str(v));
    s.markup = true;
    return make_str(std::move(s));
  }
  if (f == "indent") {
    const Value& width = a.get(0, "width");
    const std::string ind =
        width.is_str()
            ? width.str().text
            : std::string(size_t(width.is_int() ? std::clamp<int64_t>(width.as_int(), 0, 256) : 4),
                          ' ');
    const bool first = truthy(a.get(1, "first")), blank = truthy(a.get(2, "blank"));
    Str s = to_str(v);
    s.append("\n");
    std::vector<Str> lines = py_split(s, std::string("\n"), -1);
    lines.pop_back();  // splitlines drops the part after the final newline
    Str out;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out.append("\n");
      if ((i || first) && (blank || !lines[i].text.empty())) out.append(ind);
      out.append(lines[i]);
      check_size(out, lim, "indent");
    }
    return make_str(std::move(out));
  }
  if (f == "wordcount") return Value(int64_t(py_split(to_str(v), std::nullopt, -1).size()));
  if (f == "attr") return get_attr(v, need_text(a.get(0, "name")), lim);
  fail("the filter '" + f + "' is not supported");
}

bool apply_test(const std::string& t, const Value& v, const CallArgs& a) {
  const Value& x = a.get(0, "other");
  if (t == "defined") return !v.is_undefined();
  if (t == "undefined") return v.is_undefined();
  if (t == "none") return v.is_none();
  if (t == "string") return v.is_str();
  if (t == "mapping") return v.is_dict();
  if (t == "iterable") return v.is_str() || v.is_list() || v.is_dict() || v.is_undefined();
  if (t == "sequence") return v.is_str() || v.is_list() || v.is_dict() || v.is_undefined();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.is_int();
  if (t == "float") return v.is_float();
  if (t == "boolean") return v.is_bool();
  if (t == "true") return v.is_bool() && std::get<bool>(v.v);
  if (t == "false") return v.is_bool() && !std::get<bool>(v.v);
  if (t == "callable") return v.is_callable();
  if (t == "equalto" || t == "eq" || t == "==") return equal(v, x);
  if (t == "ne" || t == "!=") return !equal(v, x);
  if (t == "lt" || t == "<" || t == "lessthan") return less(v, x);
  if (t == "le" || t == "<=") return !less(x, v);
  if (t == "gt" || t == ">" || t == "greaterthan") return less(x, v);
  if (t == "ge" || t == ">=") return !less(v, x);
  if (t == "in") {
    const Value& seq = a.get(0, "seq");
    if (seq.is_str()) return v.is_str() && seq.str().text.find(v.str().text) != std::string::npos;
    if (seq.is_dict()) return v.is_str() && seq.dict().find(v.str().text);
    for (const Value& item : iterate(seq))
      if (equal(item, v)) return true;
    return false;
  }
  if (t == "divisibleby" || t == "odd" || t == "even") {
    if (!v.is_int() && !v.is_bool()) fail("the test '" + t + "' needs an integer");
    if (t == "odd") return v.as_int() % 2 != 0;
    if (t == "even") return v.as_int() % 2 == 0;
    const Value& n = a.get(0, "num");
    if (!n.is_int() || n.as_int() == 0) fail("divisibleby needs a non-zero integer");
    return v.as_int() % n.as_int() == 0;
  }
  if (t == "lower" || t == "upper") {
    if (!v.is_str()) return false;
    return py_case(v.str(), t == "lower" ? CaseMap::lower : CaseMap::upper).text == v.str().text;
  }
  if (t == "sameas") {
    if (v.is_none() || x.is_none()) return v.is_none() && x.is_none();
    if (v.is_bool() || x.is_bool()) return v.is_bool() && x.is_bool() && equal(v, x);
    if (v.is_str() && x.is_str()) return &v.str() == &x.str();
    return equal(v, x) && v.v.index() == x.v.index();
  }
  if (t == "escaped") return false;
  if (t == "filter") return v.is_str() && is_known_filter(v.str().text);
  if (t == "test") return v.is_str() && is_known_test(v.str().text);
  fail("the test '" + t + "' is not supported");
}

Value get_attr(const Value& obj, const std::string& name, const BuiltinLimits& lim) {
  if (obj.is_undefined()) {
    fail(std::get<Undefined>(obj.v).hint.empty()
             ? "'" + name + "' of an undefined value"
             : std::get<Undefined>(obj.v).hint + " (looking up '" + name + "')");
  }
  if (obj.is_loop()) {
    const LoopData& l = obj.loop();
    const int64_t n = int64_t(l.items->items.size()), i = int64_t(l.index0);
    if (name == "index0") return Value(i);
    if (name == "index") return Value(i + 1);
    if (name == "revindex0") return Value(n - i - 1);
    if (name == "revindex") return Value(n - i);
    if (name == "first") return Value(i == 0);
    if (name == "last") return Value(i == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth0") return Value(l.depth0);
    if (name == "depth") return Value(l.depth0 + 1);
    if (name == "previtem")
      return i > 0 ? l.items->items[size_t(i - 1)] : Value(Undefined{"there is no previous item"});
    if (name == "nextitem")
      return i + 1 < n ? l.items->items[size_t(i + 1)] : Value(Undefined{"there is no next item"});
    if (name == "cycle") {
      return make_callable("loop.cycle", [i](const CallArgs& a) {
        if (a.positional.empty()) fail("loop.cycle: no items given");
        return a.positional[size_t(i) % a.positional.size()];
      });
    }
    return Value(Undefined{"'LoopContext' object has no attribute '" + name + "'"});
  }
  if (obj.is_namespace()) {
    const Value* v = obj.ns().attrs.find(name);
    return v ? *v : Value(Undefined{"'Namespace' object has no attribute '" + name + "'"});
  }
  Value m = get_method(obj, name, lim);
  if (!m.is_undefined()) return m;
  if (obj.is_dict()) {
    const Value* v = obj.dict().find(name);
    if (v) return *v;
    return Value(Undefined{"'dict object' has no attribute '" + name + "'"});
  }
  return m;
}

Value get_item(const Value& obj, const Value& key, const BuiltinLimits& lim) {
  if (obj.is_undefined()) {
    fail(std::get<Undefined>(obj.v).hint.empty()
             ? "an item of an undefined value"
             : std::get<Undefined>(obj.v).hint + " (looking up an item)");
  }
  if (obj.is_dict() && key.is_str()) {
    const Value* v = obj.dict().find(key.str().text);
    if (v) return *v;
  } else if ((obj.is_list() || obj.is_str()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    const int64_t n = length(obj);
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.list().items[size_t(i)];
      return make_str(py_slice(obj.str(), i, i + 1, 1));
    }
    return Value(Undefined{std::string(type_name(obj)) + " index out of range"});
  }
  if (key.is_str()) return get_attr(obj, key.str().text, lim);
  return Value(
      Undefined{std::string("'") + type_name(obj) + " object' has no item " + to_str(key).text});
}

Value get_global(const std::string& name, const BuiltinLimits& lim) {
  if (name == "range") {
    return make_callable("range", [lim](const CallArgs& a) {
      int64_t start = 0, stop = 0, step = 1;
      auto num = [](const Value& v) {
        if (!v.is_int() && !v.is_bool()) fail("range() needs integers");
        return v.as_int();
      };
      if (a.positional.size() == 1) {
        stop = num(a.positional[0]);
      } else if (a.positional.size() >= 2) {
        start = num(a.positional[0]);
        stop = num(a.positional[1]);
        if (a.positional.size() > 2) step = num(a.positional[2]);
      } else {
        fail("range() needs 1 to 3 arguments");
      }
      if (step == 0) fail("range() step must not be zero");
      std::vector<Value> out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (int64_t(out.size()) >= lim.max_items)
          fail("range() is longer than " + std::to_string(lim.max_items) + " items");
        out.push_back(Value(i));
      }
      return make_list(std::move(out));
    });
  }
  if (name == "namespace" || name == "dict") {
    const bool ns = name == "namespace";
    return make_callable(name, [ns, lim](const CallArgs& a) {
      DictData d;
      for (const Value& p : a.positional) {
        if (!p.is_dict()) fail("namespace()/dict() take a mapping or keyword arguments");
        for (const auto& [k, v] : p.dict().items) d.set(k, v);
      }
      for (const auto& [k, v] : a.keyword) d.set(std::get<StrPtr>(make_str(k).v), v);
      if (!ns) return make_dict(std::move(d));
      auto n = std::make_shared<NamespaceData>();
      n->attrs = std::move(d);
      if (lim.namespaces) lim.namespaces->push_back(n);
      return Value(std::move(n));
    });
  }
  if (name == "raise_exception") {
    return make_callable(name, [](const CallArgs& a) -> Value {
      fail(std::string(kRaisedPrefix) + to_str(a.get(0, "message")).text);
    });
  }
  if (name == "strftime_now") {
    return make_callable(name, [](const CallArgs& a) {
      const std::string fmt = need_text(a.get(0, "format"));
      const std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      char buf[256];
      const size_t n = fmt.size() < 100 ? std::strftime(buf, sizeof buf, fmt.c_str(), &tm) : 0;
      return make_str(std::string(buf, n));
    });
  }
  return Value(Undefined{"'" + name + "' is undefined"});
}

}  // namespace infercept::jinja
