// JSON as the reference chat templates print it: Python's json.dumps(v, ensure_ascii=False,
// indent=indent), keys in the order written, ", " and ": " separators (indent < 0) or a
// newline and `indent` spaces a level. PyJsonWriter writes one value from events, and
// write_py_json streams JSON text through it with nlohmann's SAX parser: no tree is built
// (a parsed ordered_json inserts each key with a linear search, quadratic in an object's
// keys), nothing recurses, and the writing stops once the output passes its limit.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace infercept {

class PyJsonWriter {
 public:
  PyJsonWriter(std::string& out, int indent, size_t limit)
      : out_(out), indent_(indent), limit_(limit) {}

  void begin_object() { open('{', true); }
  void end_object() { close('}'); }
  void begin_array() { open('[', false); }
  void end_array() { close(']'); }
  void key(std::string_view k);  // in an object, before each value
  void string(std::string_view s);
  void raw(std::string_view text);  // a number, true, false or null as printed

  // The output passed the limit: what follows is dropped, the caller's budget is spent.
  bool over() const { return out_.size() > limit_; }

 private:
  void open(char c, bool object);
  void close(char c);
  void before_value();
  void newline(size_t depth);

  struct Level {
    bool object;
    bool empty = true;
  };
  std::string& out_;
  int indent_;
  size_t limit_;
  std::vector<Level> open_;  // the containers being written, outermost first
};

// The escape json.dumps writes for an ASCII byte inside a string ("\\n", "\\u001f", ...),
// null where the byte stands for itself (and for every byte >= 0x80).
const char* py_json_escape(unsigned char c);

// A JSON string literal as json.dumps writes it (ensure_ascii=False).
void append_py_json_string(std::string_view s, std::string& out);

// Parses `text` and writes its value through w. False when the text is not JSON (`error`
// says why, as nlohmann's parser does) or when w passed its limit (w.over(); `error` empty);
// the output is then partial.
bool write_py_json(std::string_view text, PyJsonWriter& w, std::string& error);

}  // namespace infercept
