#include "tokenizer/py_json.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <utility>

namespace infercept {

const char* py_json_escape(unsigned char c) {
  static const auto table = [] {
    std::array<std::array<char, 16>, 128> t{};  // (room the format checker can bound)
    for (int b = 0; b < 0x20; ++b) std::snprintf(t[(size_t)b].data(), 16, "\\u%04x", b);
    const std::pair<char, const char*> named[] = {{'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"},
                                                  {'\r', "\\r"}, {'\t', "\\t"},  {'\b', "\\b"},
                                                  {'\f', "\\f"}};
    for (const auto& [ch, text] : named) std::snprintf(t[(size_t)ch].data(), 16, "%s", text);
    return t;
  }();
  if (c >= 0x80 || table[c][0] == 0) return nullptr;
  return table[c].data();
}

void append_py_json_string(std::string_view s, std::string& out) {
  out += '"';
  for (char ch : s) {
    if (const char* e = py_json_escape(static_cast<unsigned char>(ch)))
      out += e;
    else
      out += ch;
  }
  out += '"';
}

void PyJsonWriter::newline(size_t depth) {
  if (indent_ < 0) return;
  out_ += '\n';
  out_.append(static_cast<size_t>(indent_) * depth, ' ');
}

// A value in an array is preceded by the separator and its line; in an object key() did it.
void PyJsonWriter::before_value() {
  if (open_.empty() || open_.back().object) return;
  if (!open_.back().empty) out_ += indent_ < 0 ? ", " : ",";
  open_.back().empty = false;
  newline(open_.size());
}

void PyJsonWriter::key(std::string_view k) {
  if (!open_.back().empty) out_ += indent_ < 0 ? ", " : ",";
  open_.back().empty = false;
  newline(open_.size());
  append_py_json_string(k, out_);
  out_ += ": ";
}

void PyJsonWriter::open(char c, bool object) {
  before_value();
  out_ += c;
  open_.push_back(Level{object});
}

void PyJsonWriter::close(char c) {
  const bool empty = open_.back().empty;
  open_.pop_back();
  if (!empty) newline(open_.size());  // json.dumps writes an empty {} or [] on one line
  out_ += c;
}

void PyJsonWriter::string(std::string_view s) {
  before_value();
  append_py_json_string(s, out_);
}

void PyJsonWriter::raw(std::string_view text) {
  before_value();
  out_ += text;
}

namespace {

// nlohmann's SAX events to the writer; false (stop) once the writer is over its limit.
struct PySax {
  using json = nlohmann::json;
  PyJsonWriter& w;
  std::string& error;

  bool go() const { return !w.over(); }
  bool null() { return w.raw("null"), go(); }
  bool boolean(bool v) { return w.raw(v ? "true" : "false"), go(); }
  bool number_integer(json::number_integer_t v) { return w.raw(std::to_string(v)), go(); }
  bool number_unsigned(json::number_unsigned_t v) { return w.raw(std::to_string(v)), go(); }
  // As nlohmann's dump prints a double (shortest round trip, "1.0" for integral values),
  // which is what a parsed tree printed before.
  bool number_float(json::number_float_t v, const std::string&) {
    return w.raw(json(v).dump()), go();
  }
  bool string(std::string& s) { return w.string(s), go(); }
  bool binary(json::binary_t&) { return false; }  // not produced by the text parser
  bool start_object(std::size_t) { return w.begin_object(), go(); }
  bool key(std::string& k) { return w.key(k), go(); }
  bool end_object() { return w.end_object(), go(); }
  bool start_array(std::size_t) { return w.begin_array(), go(); }
  bool end_array() { return w.end_array(), go(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error = e.what();
    return false;
  }
};

}  // namespace

bool write_py_json(std::string_view text, PyJsonWriter& w, std::string& error) {
  error.clear();
  PySax sax{w, error};
  return nlohmann::json::sax_parse(text.begin(), text.end(), &sax) && !w.over();
}

}  // namespace infercept
