#include "tokenizer/jinja/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/json_depth.h"
#include "tokenizer/py_json.h"
#include "tokenizer/unicode.h"

namespace infercept::jinja {
namespace {

void append_u_escape(std::string& out, uint32_t u) {
  char b[16];  // "\\u" and 4 hex digits; room for what the compiler cannot bound
  std::snprintf(b, sizeof b, "\\u%04x", unsigned(u));
  out += b;
}

// One character of a JSON string literal, as json.dumps escapes it: ASCII as every JSON
// string the templates print (py_json_escape); with ensure_ascii, DEL and everything past
// ASCII as \u escapes (surrogate pairs past the BMP).
void escape_char(uint32_t c, std::string_view raw, bool ensure_ascii, std::string& out) {
  if (c < 0x80) {
    if (const char* e = py_json_escape((unsigned char)c)) {
      out += e;
      return;
    }
  }
  if (!ensure_ascii || c < 0x7f) {
    out += raw;
  } else if (c >= 0x10000) {
    const uint32_t v = c - 0x10000;
    append_u_escape(out, 0xD800 + (v >> 10));
    append_u_escape(out, 0xDC00 + (v & 0x3FF));
  } else {
    append_u_escape(out, c);
  }
}

class Dumper {
 public:
  Dumper(const JsonDumpOptions& o, size_t max_bytes) : o_(o), max_(max_bytes) {
    item_sep_ = !o.item_sep.empty() ? o.item_sep : (o.indent >= 0 ? "," : ", ");
  }

  void value(const Value& v, int depth) {
    if (depth > kMaxValueDepth)
      fail("tojson: the value nests deeper than " + std::to_string(kMaxValueDepth) + " levels");
    check_size();
    if (v.is_none()) {
      out_.append("null");
    } else if (v.is_bool()) {
      out_.append(std::get<bool>(v.v) ? "true" : "false");
    } else if (v.is_int()) {
      out_.append(std::to_string(std::get<int64_t>(v.v)));
    } else if (v.is_float()) {
      const double d = std::get<double>(v.v);
      out_.append(std::isnan(d)   ? "NaN"
                  : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                                  : float_repr(d));
    } else if (v.is_str()) {
      string(v.str());
    } else if (v.is_list()) {
      const auto& items = v.list().items;
      if (items.empty()) {
        out_.append("[]");
        return;
      }
      out_.append("[");
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out_.append(item_sep_);
        newline(depth + 1);
        value(items[i], depth + 1);
      }
      newline(depth);
      out_.append("]");
    } else if (v.is_dict() || v.is_namespace()) {
      if (v.is_namespace()) fail("tojson: Object of type Namespace is not JSON serializable");
      const DictData& d = v.dict();
      if (d.items.empty()) {
        out_.append("{}");
        return;
      }
      std::vector<size_t> order(d.items.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      if (o_.sort_keys) {
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          return d.items[a].first->text < d.items[b].first->text;
        });
      }
      out_.append("{");
      for (size_t i = 0; i < order.size(); ++i) {
        if (i) out_.append(item_sep_);
        newline(depth + 1);
        string(*d.items[order[i]].first);
        out_.append(o_.key_sep);
        value(d.items[order[i]].second, depth + 1);
      }
      newline(depth);
      out_.append("}");
    } else {
      fail(std::string("tojson: Object of type ") + type_name(v) + " is not JSON serializable");
    }
  }

  Str take() {
    check_size();
    return std::move(out_);
  }

 private:
  void check_size() {
    if (out_.text.size() > max_)
      fail("tojson: the output is larger than " + std::to_string(max_) + " bytes");
  }
  void newline(int depth) {
    if (o_.indent < 0) return;
    out_.append("\n");
    out_.append(std::string(size_t(o_.indent) * size_t(depth), ' '));
  }
  // The quotes are tainted when the whole string is, each escaped character as its source.
  void string(const Str& s) {
    const std::string& t = s.text;
    const bool all = !s.taint.empty() && s.taint[0].begin == 0 && s.taint[0].end == t.size();
    out_.append("\"", all);
    size_t i = 0, span = 0;
    std::string piece;
    while (i < t.size()) {
      const size_t start = i;
      const uint32_t c = unicode::decode_utf8(t, i);
      piece.clear();
      escape_char(c, std::string_view(t).substr(start, i - start), o_.ensure_ascii, piece);
      while (span < s.taint.size() && s.taint[span].end <= start) ++span;
      const bool tainted = span < s.taint.size() && s.taint[span].begin <= start;
      out_.append(piece, tainted);
    }
    out_.append("\"", all);
  }

  const JsonDumpOptions& o_;
  size_t max_;
  std::string item_sep_;
  Str out_;
};

// Builds values from nlohmann's SAX events: a stack of open containers, no recursion.
class Builder : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit Builder(bool tainted) : tainted_(tainted) {}

  bool null() override { return add(Value(None{})); }
  bool boolean(bool b) override { return add(Value(b)); }
  bool number_integer(number_integer_t v) override { return add(Value(int64_t(v))); }
  bool number_unsigned(number_unsigned_t v) override {
    if (v > uint64_t(std::numeric_limits<int64_t>::max())) return add(Value(double(v)));
    return add(Value(int64_t(v)));
  }
  bool number_float(number_float_t v, const string_t&) override { return add(Value(double(v))); }
  bool string(string_t& s) override { return add(make_str(std::move(s), tainted_)); }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override {
    stack_.push_back(Open{true, {}, {}, nullptr});
    return true;
  }
  bool key(string_t& k) override {
    stack_.back().key = std::get<StrPtr>(make_str(std::move(k), tainted_).v);
    return true;
  }
  bool end_object() override {
    Open o = std::move(stack_.back());
    stack_.pop_back();
    return add(make_dict(std::move(o.dict)));
  }
  bool start_array(std::size_t) override {
    stack_.push_back(Open{false, {}, {}, nullptr});
    return true;
  }
  bool end_array() override {
    Open o = std::move(stack_.back());
    stack_.pop_back();
    return add(make_list(std::move(o.items)));
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error_ = ex.what();
    return false;
  }

  Value result;
  std::string error_;

 private:
  struct Open {
    bool object;
    std::vector<Value> items;
    DictData dict;
    StrPtr key;
  };
  bool add(Value v) {
    if (stack_.empty()) {
      result = std::move(v);
    } else if (stack_.back().object) {
      stack_.back().dict.set(stack_.back().key, std::move(v));
    } else {
      stack_.back().items.push_back(std::move(v));
    }
    return true;
  }
  bool tainted_;
  std::vector<Open> stack_;
};

}  // namespace

Str to_json(const Value& v, const JsonDumpOptions& options, size_t max_bytes) {
  Dumper d(options, max_bytes);
  d.value(v, 0);
  return d.take();
}

Result<Value> from_json(std::string_view text, bool tainted) {
  if (!json_depth_ok(text))
    return make_error("JSON nests deeper than ", std::to_string(kMaxJsonDepth), " levels");
  Builder b(tainted);
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &b);
  if (!ok) return make_error("not valid JSON: ", b.error_.empty() ? "parse error" : b.error_);
  return std::move(b.result);
}

}  // namespace infercept::jinja
