// Python's semantics for the template's values: str/repr, truthiness, equality, ordering.
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/unicode.h"

namespace infercept::jinja {

void fail(std::string message) {
  throw TemplateError{std::move(message), 0};
}

// ---- Str ----

void Str::append(const Str& s) {
  const size_t base = text.size();
  text += s.text;
  for (const TextSpan& sp : s.taint) {
    const TextSpan moved{base + sp.begin, base + sp.end};
    if (!taint.empty() && taint.back().end == moved.begin) {
      taint.back().end = moved.end;
    } else {
      taint.push_back(moved);
    }
  }
}

void Str::append(std::string_view s, bool tainted) {
  const size_t base = text.size();
  text += s;
  if (!tainted || s.empty()) return;
  if (!taint.empty() && taint.back().end == base) {
    taint.back().end = text.size();
  } else {
    taint.push_back(TextSpan{base, text.size()});
  }
}

Str Str::substr(size_t b, size_t e) const {
  Str out;
  e = std::min(e, text.size());
  if (b >= e) return out;
  out.text = text.substr(b, e - b);
  for (const TextSpan& sp : taint) {
    const size_t sb = std::max(sp.begin, b), se = std::min(sp.end, e);
    if (sb < se) out.taint.push_back(TextSpan{sb - b, se - b});
  }
  return out;
}

bool Str::tainted_at(size_t pos) const {
  for (const TextSpan& sp : taint)
    if (pos >= sp.begin && pos < sp.end) return true;
  return false;
}

// ---- containers ----

const Value* DictData::find(std::string_view key) const {
  auto it = index.find(std::string(key));
  return it == index.end() ? nullptr : &items[it->second].second;
}

void DictData::set(StrPtr key, Value value) {
  auto [it, inserted] = index.emplace(key->text, items.size());
  if (inserted) {
    items.emplace_back(std::move(key), std::move(value));
  } else {
    items[it->second].second = std::move(value);
  }
}

const Value& CallArgs::get(size_t pos, std::string_view name) const {
  static const Value undefined;
  if (pos < positional.size()) return positional[pos];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return undefined;
}

bool CallArgs::has(size_t pos, std::string_view name) const {
  if (pos < positional.size()) return true;
  for (const auto& kv : keyword)
    if (kv.first == name) return true;
  return false;
}

Value make_str(std::string text, bool tainted) {
  auto s = std::make_shared<Str>();
  s->text = std::move(text);
  if (tainted && !s->text.empty()) s->taint.push_back(TextSpan{0, s->text.size()});
  return Value(StrPtr(std::move(s)));
}

Value make_str(Str s) {
  return Value(StrPtr(std::make_shared<Str>(std::move(s))));
}

Value make_list(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<ListData>();
  l->items = std::move(items);
  l->tuple = tuple;
  return Value(std::shared_ptr<const ListData>(std::move(l)));
}

Value make_dict(DictData d) {
  return Value(std::shared_ptr<const DictData>(std::make_shared<DictData>(std::move(d))));
}

Value make_callable(std::string name, std::function<Value(const CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value(std::shared_ptr<const Callable>(std::move(c)));
}

// ---- Python semantics ----

bool truthy(const Value& v) {
  if (v.is_undefined() || v.is_none()) return false;
  if (v.is_bool()) return std::get<bool>(v.v);
  if (v.is_int()) return std::get<int64_t>(v.v) != 0;
  if (v.is_float()) return std::get<double>(v.v) != 0.0;
  if (v.is_str()) return !v.str().text.empty();
  if (v.is_list()) return !v.list().items.empty();
  if (v.is_dict()) return !v.dict().items.empty();
  return true;
}

const char* type_name(const Value& v) {
  if (v.is_undefined()) return "Undefined";
  if (v.is_none()) return "NoneType";
  if (v.is_bool()) return "bool";
  if (v.is_int()) return "int";
  if (v.is_float()) return "float";
  if (v.is_str()) return "str";
  if (v.is_list()) return v.list().tuple ? "tuple" : "list";
  if (v.is_dict()) return "dict";
  if (v.is_namespace()) return "Namespace";
  if (v.is_loop()) return "LoopContext";
  return "function";
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest digits that round-trip, then laid out as Python's repr does: positional
  // for exponents in [-4, 16), scientific otherwise.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else if (size_t(exp) + 1 >= digits.size()) {
      out += digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char eb[16];
  std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + eb;
}

namespace {

void check_depth(int depth) {
  if (depth > kMaxValueDepth)
    fail("a value nests deeper than " + std::to_string(kMaxValueDepth) + " levels");
}

// Python's repr of a string: single quotes unless the text has ' and no ", escapes for
// the backslash, the quote and control characters; the taint follows each character.
void append_str_repr(const Str& s, Str& out) {
  const std::string& t = s.text;
  const bool dq = t.find('\'') != std::string::npos && t.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  const bool all = !s.taint.empty() && s.taint[0].begin == 0 && s.taint[0].end == t.size();
  out.append(std::string_view(&q, 1), all);
  size_t i = 0;
  while (i < t.size()) {
    const size_t start = i;
    const uint32_t c = unicode::decode_utf8(t, i);
    std::string piece;
    if (c == '\\' || c == uint32_t(q)) {
      piece = std::string("\\") + char(c);
    } else if (c == '\n') {
      piece = "\\n";
    } else if (c == '\r') {
      piece = "\\r";
    } else if (c == '\t') {
      piece = "\\t";
    } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0)) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", unsigned(c));
      piece = b;
    } else {
      piece = t.substr(start, i - start);
    }
    out.append(piece, s.tainted_at(start));
  }
  out.append(std::string_view(&q, 1), all);
}

void append_repr(const Value& v, Str& out, int depth);

void append_items_repr(const ListData& l, Str& out, int depth) {
  out.append(l.tuple ? "(" : "[");
  for (size_t i = 0; i < l.items.size(); ++i) {
    if (i) out.append(", ");
    append_repr(l.items[i], out, depth + 1);
  }
  if (l.tuple && l.items.size() == 1) out.append(",");
  out.append(l.tuple ? ")" : "]");
}

void append_repr(const Value& v, Str& out, int depth) {
  check_depth(depth);
  if (v.is_str()) {
    append_str_repr(v.str(), out);
  } else if (v.is_list()) {
    append_items_repr(v.list(), out, depth);
  } else if (v.is_dict()) {
    out.append("{");
    const DictData& d = v.dict();
    for (size_t i = 0; i < d.items.size(); ++i) {
      if (i) out.append(", ");
      append_str_repr(*d.items[i].first, out);
      out.append(": ");
      append_repr(d.items[i].second, out, depth + 1);
    }
    out.append("}");
  } else {
    out.append(to_str(v));
  }
}

bool equal_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.is_str() && b.is_str()) return a.str().text == b.str().text;
  if (a.is_undefined() && b.is_undefined()) return true;
  if (a.is_none() && b.is_none()) return true;
  if (a.is_list() && b.is_list()) {
    const ListData &x = a.list(), &y = b.list();
    if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x.items.size(); ++i)
      if (!equal_at(x.items[i], y.items[i], depth + 1)) return false;
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const DictData &x = a.dict(), &y = b.dict();
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [k, val] : x.items) {
      const Value* o = y.find(k->text);
      if (!o || !equal_at(val, *o, depth + 1)) return false;
    }
    return true;
  }
  if (a.is_namespace() && b.is_namespace()) return &a.ns() == &b.ns();
  if (a.is_callable() && b.is_callable()) return &a.callable() == &b.callable();
  return false;
}

bool less_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_str() && b.is_str()) return a.str().text < b.str().text;  // UTF-8 order = code points
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list().items, &y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less_at(x[i], y[i], depth + 1)) return true;
      if (less_at(y[i], x[i], depth + 1)) return false;
    }
    return x.size() < y.size();
  }
  fail(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" +
       type_name(b) + "'");
}

}  // namespace

Str to_str(const Value& v) {
  if (v.is_str()) return v.str();
  Str out;
  if (v.is_undefined()) return out;
  if (v.is_none()) {
    out.text = "None";
  } else if (v.is_bool()) {
    out.text = std::get<bool>(v.v) ? "True" : "False";
  } else if (v.is_int()) {
    out.text = std::to_string(std::get<int64_t>(v.v));
  } else if (v.is_float()) {
    out.text = float_repr(std::get<double>(v.v));
  } else if (v.is_list() || v.is_dict()) {
    append_repr(v, out, 0);
  } else if (v.is_namespace()) {
    out.text = "<Namespace>";
  } else if (v.is_loop()) {
    out.text = "<LoopContext>";
  } else {
    out.text = "<function " + v.callable().name + ">";
  }
  return out;
}

Str to_repr(const Value& v) {
  Str out;
  append_repr(v, out, 0);
  return out;
}

bool equal(const Value& a, const Value& b) {
  return equal_at(a, b, 0);
}

bool less(const Value& a, const Value& b) {
  return less_at(a, b, 0);
}

int64_t length(const Value& v) {
  if (v.is_str()) {
    int64_t n = 0;
    for (unsigned char c : v.str().text) n += (c & 0xC0) != 0x80;
    return n;
  }
  if (v.is_list()) return int64_t(v.list().items.size());
  if (v.is_dict()) return int64_t(v.dict().items.size());
  if (v.is_namespace()) return int64_t(v.ns().attrs.items.size());
  if (v.is_undefined()) return 0;
  fail(std::string("object of type '") + type_name(v) + "' has no len()");
}

std::vector<Value> iterate(const Value& v) {
  std::vector<Value> out;
  if (v.is_undefined()) return out;
  if (v.is_list()) return v.list().items;
  if (v.is_dict()) {
    for (const auto& kv : v.dict().items) out.push_back(Value(kv.first));
    return out;
  }
  if (v.is_str()) {
    const Str& s = v.str();
    size_t i = 0;
    while (i < s.text.size()) {
      const size_t b = i;
      i += std::max<size_t>(1, unicode::utf8_seq_len(uint8_t(s.text[i])));
      out.push_back(make_str(s.substr(b, i)));
    }
    return out;
  }
  fail(std::string("'") + type_name(v) + "' object is not iterable");
}

}  // namespace infercept::jinja
