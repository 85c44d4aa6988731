// The values a chat template computes with, modelled on the Python objects jinja2 passes
// around (str, int, float, bool, None, list, tuple, dict, jinja2's Undefined, namespace(),
// the loop object, callables), with Python's semantics where they show in the output:
// str() and repr() of every value, truthiness, ==, and the JSON of json.dumps.
//
// Strings carry taint: the byte ranges of them that came from the client (message contents,
// tool names, arguments, schemas). Every operation that builds a string from others keeps the
// ranges of the bytes it copies, so the rendered prompt knows which of its bytes are client
// text (RenderedChat::literal) whatever the template did to them.
//
// Containers are immutable once built (transformers renders in jinja2's
// ImmutableSandboxedEnvironment: list.append and dict.update are refused there too), so
// values share them freely.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "tokenizer/text_span.h"

namespace infercept::jinja {

// An error of the template or of what it was given: thrown inside the interpreter (errors
// arise deep in expression evaluation; unwinding keeps the evaluator readable) and turned
// into a Result at its public entry points, never past them.
struct TemplateError {
  std::string message;
  int line = 0;  // 0: not known yet (the evaluator fills in the statement's line)
};
[[noreturn]] void fail(std::string message);

// Text plus the byte ranges of it that came from the client (sorted, disjoint, merged when
// adjacent).
struct Str {
  std::string text;
  std::vector<TextSpan> taint;
  // A markupsafe.Markup (from `safe` or `escape`): `+` with a plain string HTML-escapes the
  // plain one, as Python's Markup.__add__ / __radd__ do.
  bool markup = false;

  // Appends `s`, with its taint moved to where it lands.
  void append(const Str& s);
  void append(std::string_view s, bool tainted = false);
  // Bytes [b, e) of this string, their taint clipped.
  Str substr(size_t b, size_t e) const;
  bool tainted_at(size_t pos) const;
};
using StrPtr = std::shared_ptr<const Str>;

struct Value;
struct ListData;
struct DictData;
struct NamespaceData;
struct LoopData;
struct Callable;

struct Undefined {
  std::string hint;  // what was looked up ("'x' is undefined"), for the error it may cause
};
struct None {};

struct Value {
  std::variant<Undefined, None, bool, int64_t, double, StrPtr, std::shared_ptr<const ListData>,
               std::shared_ptr<const DictData>, std::shared_ptr<NamespaceData>,
               std::shared_ptr<LoopData>, std::shared_ptr<const Callable>>
      v;

  Value() : v(Undefined{}) {}
  template <typename T>
  Value(T x) : v(std::move(x)) {}  // NOLINT: implicit by design
  Value(int x) : v(int64_t{x}) {}  // NOLINT
  Value(const char*) = delete;     // a string is a Str, say whether it is client text

  bool is_undefined() const { return std::holds_alternative<Undefined>(v); }
  bool is_none() const { return std::holds_alternative<None>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }
  bool is_float() const { return std::holds_alternative<double>(v); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_str() const { return std::holds_alternative<StrPtr>(v); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const ListData>>(v); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<const DictData>>(v); }
  bool is_namespace() const { return std::holds_alternative<std::shared_ptr<NamespaceData>>(v); }
  bool is_loop() const { return std::holds_alternative<std::shared_ptr<LoopData>>(v); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Callable>>(v); }

  const Str& str() const { return *std::get<StrPtr>(v); }
  const ListData& list() const { return *std::get<std::shared_ptr<const ListData>>(v); }
  const DictData& dict() const { return *std::get<std::shared_ptr<const DictData>>(v); }
  NamespaceData& ns() const { return *std::get<std::shared_ptr<NamespaceData>>(v); }
  const LoopData& loop() const { return *std::get<std::shared_ptr<LoopData>>(v); }
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(v); }
  int64_t as_int() const { return is_bool() ? std::get<bool>(v) : std::get<int64_t>(v); }
  double as_double() const { return is_float() ? std::get<double>(v) : double(as_int()); }
};

struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // a Python tuple (dict items, `a, b`): printed with ( )
};

// A dict with string keys, in insertion order (as Python's), indexed for lookups.
struct DictData {
  std::vector<std::pair<StrPtr, Value>> items;
  std::unordered_map<std::string, size_t> index;

  const Value* find(std::string_view key) const;
  // Sets key to value: in place when present (Python keeps the first position).
  void set(StrPtr key, Value value);
};

// namespace(): the one object a template may assign attributes of (`set ns.x = ...`).
struct NamespaceData {
  DictData attrs;
};

// The `loop` variable of a for loop.
struct LoopData {
  std::shared_ptr<const ListData> items;  // what is iterated, after the loop's `if` filter
  size_t index0 = 0;
  int64_t depth0 = 0;
};

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `pos` or named `name`; Undefined when not given.
  const Value& get(size_t pos, std::string_view name) const;
  bool has(size_t pos, std::string_view name) const;
};

// A function the template can call: a global (range, namespace, raise_exception, ...), a
// method bound to its object (s.strip), or a macro.
struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> fn;
};

// Constructors.
Value make_str(std::string text, bool tainted = false);
Value make_str(Str s);
Value make_list(std::vector<Value> items, bool tuple = false);
Value make_dict(DictData d);
Value make_callable(std::string name, std::function<Value(const CallArgs&)> fn);

// Python semantics.
bool truthy(const Value& v);
const char* type_name(const Value& v);  // Python's name for the type, for errors
// str(v): strings as they are, everything else as Python prints it.
Str to_str(const Value& v);
// repr(v), as Python writes it inside a list or dict.
Str to_repr(const Value& v);
// Python's float repr (shortest round-trip digits: 0.1, 1e-05, 1e+16, 2.0).
std::string float_repr(double d);
// ==, Python's: 1 == 1.0 == True, containers element-wise, dicts regardless of order.
bool equal(const Value& a, const Value& b);
// <, Python's, for numbers and strings (lists lexicographically); other pairs are an error.
bool less(const Value& a, const Value& b);
// Length for len(): strings in code points, containers in items.
int64_t length(const Value& v);
// The items a for loop runs over (a dict's keys, a string's characters); an error for
// values that are not iterable. Undefined iterates as empty (jinja2's default Undefined).
std::vector<Value> iterate(const Value& v);

// Containers nest this deep at most (JSON from the client is capped lower, kMaxJsonDepth);
// the printers and comparisons recurse once a level.
inline constexpr int kMaxValueDepth = 512;

}  // namespace infercept::jinja
