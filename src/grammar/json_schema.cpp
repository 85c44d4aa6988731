#include "grammar/json_schema.h"

#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "grammar/number_range.h"
#include "grammar/regex.h"

namespace infercept::grammar {

namespace {

using json = nlohmann::json;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Keywords that only describe.
const std::set<std::string> kAnnotations = {
    "title",   "description", "default",    "examples",         "$schema",
    "$id",     "$comment",    "deprecated", "readOnly",         "writeOnly",
    "$defs",   "definitions", "format",     "contentMediaType", "contentEncoding",
    "$anchor", "nullable",    "strict",     "discriminator",    "x-guidance"};
// Keywords that change validity and are not supported. (minProperties, maxProperties and
// uniqueItems are checked where they apply: accepted where they change nothing.)
const std::set<std::string> kUnsupported = {"patternProperties",
                                            "propertyNames",
                                            "dependentRequired",
                                            "dependentSchemas",
                                            "dependencies",
                                            "if",
                                            "then",
                                            "else",
                                            "not",
                                            "contains",
                                            "minContains",
                                            "maxContains",
                                            "prefixItems",
                                            "additionalItems",
                                            "unevaluatedItems",
                                            "unevaluatedProperties",
                                            "$dynamicRef",
                                            "$recursiveRef",
                                            "contentSchema"};
const std::set<std::string> kTypes = {"object",  "array",   "string", "number",
                                      "integer", "boolean", "null"};

class Compiler {
 public:
  Compiler(GrammarBuilder& b, const json& root, bool strict)
      : b_(b), root_(root), strict_(strict) {}

  Result<int32_t> compile(const json& s, const std::string& at) {
    if (++depth_ > 128) return make_error("the schema nests deeper than 128 levels at ", at);
    auto r = compile_inner(s, at);
    --depth_;
    return r;
  }

 private:
  Result<int32_t> compile_inner(const json& s, const std::string& at) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return b_.any_value();
      return make_error("the schema at ", at, " is false: nothing is valid");
    }
    if (!s.is_object()) return make_error("the schema at ", at, " must be an object or a boolean");
    for (const auto& [k, v] : s.items()) {
      if (kUnsupported.count(k) == 0) continue;
      return make_error("unsupported JSON Schema keyword '", k, "' at ", at);
    }
    if (const auto it = s.find("$ref"); it != s.end()) return ref(*it, at);
    if (const auto it = s.find("const"); it != s.end()) return b_.literal({dump(*it)});
    if (const auto it = s.find("enum"); it != s.end()) return enumeration(s, *it, at);
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (const auto it = s.find(kw); it != s.end()) {
        if (!it->is_array() || it->empty())
          return make_error("'", kw, "' at ", at, " must be a non-empty array");
        for (const auto& [k, v] : s.items())
          if (k != kw && kAnnotations.count(k) == 0 && k != "type")
            return make_error("'", kw, "' beside '", k, "' at ", at, " is not supported");
        std::vector<int32_t> alts;
        for (size_t i = 0; i < it->size(); ++i) {
          TRY_ASSIGN(int32_t n, compile((*it)[i], at + "/" + kw + "/" + std::to_string(i)));
          alts.push_back(n);
        }
        return b_.choice(std::move(alts));
      }
    }
    if (const auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1)
        return make_error("'allOf' at ", at, " is supported with one schema only");
      return compile((*it)[0], at + "/allOf/0");
    }
    std::vector<std::string> types;
    if (const auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const json& t : *it) {
          if (!t.is_string()) return make_error("'type' at ", at, " must name types");
          types.push_back(t.get<std::string>());
        }
      } else {
        return make_error("'type' at ", at, " must be a string or a non-empty array");
      }
      for (const std::string& t : types)
        if (kTypes.count(t) == 0) return make_error("unknown type '", t, "' at ", at);
    } else {
      // No type: taken from the keywords present (a tool's parameters often omit it).
      auto has = [&](std::initializer_list<const char*> kws) {
        for (const char* k : kws)
          if (s.contains(k)) return true;
        return false;
      };
      if (has({"properties", "required", "additionalProperties", "minProperties", "maxProperties"}))
        types.push_back("object");
      else if (has({"items", "minItems", "maxItems", "uniqueItems"}))
        types.push_back("array");
      else if (has({"minLength", "maxLength", "pattern"}))
        types.push_back("string");
      else if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}))
        types.push_back("number");
      else
        return b_.any_value();
    }
    std::vector<int32_t> alts;
    for (const std::string& t : types) {
      TRY_ASSIGN(int32_t n, typed(s, t, at));
      alts.push_back(n);
    }
    return alts.size() == 1 ? alts[0] : b_.choice(std::move(alts));
  }

  Result<int32_t> enumeration(const json& s, const json& values, const std::string& at) {
    if (!values.is_array() || values.empty())
      return make_error("'enum' at ", at, " must be a non-empty array");
    std::vector<std::string> texts;
    for (const json& v : values) texts.push_back(dump(v));
    (void)s;
    return b_.literal(texts);
  }

  Result<int64_t> count(const json& s, const char* kw, int64_t dflt, const std::string& at) {
    const auto it = s.find(kw);
    if (it == s.end()) return dflt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      return make_error("'", kw, "' at ", at, " must be a non-negative integer");
    return it->get<int64_t>();
  }

  Result<int32_t> typed(const json& s, const std::string& type, const std::string& at) {
    if (type == "string") {
      TRY_ASSIGN(int64_t lo, count(s, "minLength", 0, at));
      TRY_ASSIGN(int64_t hi, count(s, "maxLength", -1, at));
      if (hi >= 0 && lo > hi) return make_error("minLength > maxLength at ", at);
      if (lo > 1 << 20 || hi > 1 << 20) return make_error("string length bounds too large at ", at);
      if (const auto it = s.find("pattern"); it != s.end()) {
        if (!it->is_string()) return make_error("'pattern' at ", at, " must be a string");
        // The length bounds go into the pattern's automaton.
        auto dfa = compile_pattern(it->get<std::string>(), (int32_t)lo, (int32_t)hi);
        if (!dfa.ok())
          return make_error("'pattern' ", dump(*it), " at ", at, ": ", dfa.error().message);
        return b_.string(0, -1, b_.add_dfa(std::move(*dfa)));
      }
      return b_.string((int32_t)lo, (int32_t)hi);
    }
    if (type == "number" || type == "integer") {
      TRY_ASSIGN(std::optional<NumberBounds> bounds, numeric_bounds(s, at));
      if (!bounds) return b_.number(type == "integer");
      auto dfa = number_range_dfa(*bounds, type == "integer");
      if (!dfa.ok()) return make_error("the numeric bounds at ", at, ": ", dfa.error().message);
      return b_.number(type == "integer", b_.add_dfa(std::move(*dfa)));
    }
    if (type == "boolean") return b_.literal({"true", "false"});
    if (type == "null") return b_.literal({"null"});
    if (type == "array") {
      TRY_ASSIGN(int64_t lo, count(s, "minItems", 0, at));
      TRY_ASSIGN(int64_t hi, count(s, "maxItems", -1, at));
      if (hi >= 0 && lo > hi) return make_error("minItems > maxItems at ", at);
      int32_t items = -1;
      if (const auto it = s.find("items"); it != s.end()) {
        if (it->is_array())
          return make_error("'items' as an array (a tuple) at ", at, " is not supported");
        TRY_ASSIGN(items, compile(*it, at + "/items"));
      } else {
        items = b_.any_value();
      }
      // Unique items are left to the model unless at most one item can come.
      if (const auto it = s.find("uniqueItems"); it != s.end() && !(hi >= 0 && hi <= 1)) {
        if (!it->is_boolean()) return make_error("'uniqueItems' at ", at, " must be a boolean");
        if (it->get<bool>())
          return make_error("unsupported JSON Schema keyword 'uniqueItems' at ", at);
      }
      return b_.array(items, lo, hi);
    }
    return object(s, at);
  }

  // A numeric keyword's value as an exact decimal: an integer as written, a double as its
  // shortest round-trip text (the decimal the schema's author wrote: 0.1 is 0.1, not the
  // binary double nearest it).
  Result<Decimal> decimal(const json& v, const char* kw, const std::string& at) {
    if (!v.is_number()) return make_error("'", kw, "' at ", at, " must be a number");
    std::string text;
    if (v.is_number_integer()) {
      text = v.dump();
    } else {
      const double x = v.get<double>();
      if (!std::isfinite(x)) return make_error("'", kw, "' at ", at, " must be finite");
      char buf[64];
      const auto r = std::to_chars(buf, buf + sizeof buf, x);
      text.assign(buf, r.ptr);
    }
    auto d = parse_decimal(text);
    if (!d.ok()) return make_error("'", kw, "' at ", at, ": ", d.error().message);
    return d;
  }

  // minimum, maximum, exclusiveMinimum, exclusiveMaximum (a number, or draft 4's boolean
  // beside minimum/maximum), multipleOf; nullopt when none is there. Where several bound one
  // side, the tightest counts.
  Result<std::optional<NumberBounds>> numeric_bounds(const json& s, const std::string& at) {
    NumberBounds b;
    bool any = false;
    auto tighten = [&](std::optional<Decimal>& cur, bool& cur_excl, const Decimal& d, bool excl,
                       int sign) {
      const int c = cur ? compare(d, *cur) * sign : 1;
      if (c > 0 || (c == 0 && excl)) {
        cur = d;
        cur_excl = excl;
      }
    };
    for (const auto& [kw, lower] : {std::pair{"minimum", true}, std::pair{"maximum", false}}) {
      const auto it = s.find(kw);
      if (it == s.end()) continue;
      TRY_ASSIGN(Decimal d, decimal(*it, kw, at));
      const char* excl_kw = lower ? "exclusiveMinimum" : "exclusiveMaximum";
      const auto e = s.find(excl_kw);
      const bool excl = e != s.end() && e->is_boolean() && e->get<bool>();  // draft 4
      if (lower)
        tighten(b.lo, b.lo_exclusive, d, excl, 1);
      else
        tighten(b.hi, b.hi_exclusive, d, excl, -1);
      any = true;
    }
    for (const auto& [kw, lower] :
         {std::pair{"exclusiveMinimum", true}, std::pair{"exclusiveMaximum", false}}) {
      const auto it = s.find(kw);
      if (it == s.end() || it->is_boolean()) continue;  // a boolean: draft 4, read above
      TRY_ASSIGN(Decimal d, decimal(*it, kw, at));
      if (lower)
        tighten(b.lo, b.lo_exclusive, d, true, 1);
      else
        tighten(b.hi, b.hi_exclusive, d, true, -1);
      any = true;
    }
    if (const auto it = s.find("multipleOf"); it != s.end()) {
      TRY_ASSIGN(Decimal d, decimal(*it, "multipleOf", at));
      if (d.neg || d.zero()) return make_error("'multipleOf' at ", at, " must be greater than 0");
      b.step = d;
      any = true;
    }
    if (!any) return std::optional<NumberBounds>{};
    return std::optional<NumberBounds>{b};
  }

  Result<int32_t> object(const json& s, const std::string& at) {
    std::vector<Property> props;
    if (const auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) return make_error("'properties' at ", at, " must be an object");
      for (const auto& [name, sub] : it->items()) {
        TRY_ASSIGN(int32_t n, compile(sub, at + "/properties/" + name));
        props.push_back({name, n, strict_});
      }
    }
    // (nlohmann's objects keep their keys sorted: properties are written in that order,
    // the order the prompt's tool list shows them in.)
    // An absent additionalProperties is read as false where properties are declared (as
    // xgrammar, vLLM's default backend, does): the model writes the declared properties, not
    // inventions of its own, and every output is still valid for the schema. Without
    // declared properties an object is free, as the schema says.
    bool closed = strict_ || !props.empty();
    bool closed_explicitly = strict_;
    int32_t additional = -1;
    if (const auto it = s.find("additionalProperties"); it != s.end() && !strict_) {
      closed = false;
      if (it->is_boolean()) {
        closed = closed_explicitly = !it->get<bool>();
      } else if (it->is_object()) {
        TRY_ASSIGN(additional, compile(*it, at + "/additionalProperties"));
      } else {
        return make_error("'additionalProperties' at ", at, " must be a boolean or a schema");
      }
    }
    if (!closed && additional < 0) additional = b_.any_value();
    if (const auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return make_error("'required' at ", at, " must be an array");
      for (const json& r : *it) {
        if (!r.is_string()) return make_error("'required' at ", at, " must list strings");
        const std::string name = r.get<std::string>();
        bool found = false;
        for (Property& p : props)
          if (p.name == name) found = p.required = true;
        if (found) continue;
        if (closed_explicitly)
          return make_error("required property '", name, "' at ", at,
                            " is not in properties and no other property is allowed");
        props.push_back({name, b_.any_value(), true});
      }
    }
    if (props.size() > 64)
      return make_error("more than 64 properties in one object at ", at, " are not supported");
    // minProperties/maxProperties only where they change nothing: at most the required count,
    // at least every property a closed object can have.
    size_t required = 0;
    for (const Property& p : props) required += p.required;
    for (const char* kw : {"minProperties", "maxProperties"}) {
      const auto it = s.find(kw);
      if (it == s.end()) continue;
      TRY_ASSIGN(int64_t v, count(s, kw, 0, at));
      const bool trivial =
          kw[1] == 'i' ? (size_t)v <= required : (closed && (size_t)v >= props.size());
      if (!trivial)
        return make_error("unsupported JSON Schema keyword '", kw, "' at ", at,
                          " (supported only where it changes nothing)");
    }
    return b_.object(std::move(props), closed ? -1 : additional);
  }

  Result<int32_t> ref(const json& r, const std::string& at) {
    if (!r.is_string()) return make_error("'$ref' at ", at, " must be a string");
    const std::string ref = r.get<std::string>();
    if (ref.empty() || ref[0] != '#')
      return make_error("'$ref' '", ref, "' at ", at, " is not a local reference (#/...)");
    if (const auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const json* target = &root_;
    if (ref.size() > 1) {
      try {
        const json::json_pointer ptr(ref.substr(1));
        if (!root_.contains(ptr))
          return make_error("'$ref' '", ref, "' at ", at, " points nowhere");
        target = &root_.at(ptr);
      } catch (const json::exception&) {
        return make_error("'$ref' '", ref, "' at ", at, " is not a JSON pointer");
      }
    }
    const int32_t slot = b_.reserve();
    refs_[ref] = slot;
    TRY_ASSIGN(int32_t n, compile(*target, ref));
    b_.set_alias(slot, n);
    return slot;
  }

  GrammarBuilder& b_;
  const json& root_;
  bool strict_;
  int depth_ = 0;
  std::map<std::string, int32_t> refs_;
};

}  // namespace

Result<int32_t> add_schema(GrammarBuilder& b, const nlohmann::json& schema, bool strict) {
  Compiler c(b, schema, strict);
  return c.compile(schema, "#");
}

Result<Grammar> compile_json_schema(const nlohmann::json& schema, const SchemaOptions& o) {
  GrammarBuilder b(o.max_ws);
  TRY_ASSIGN(int32_t root, add_schema(b, schema, o.strict));
  return std::move(b).finish(root);
}

Grammar any_json_object_grammar(int32_t max_ws) {
  GrammarBuilder b(max_ws);
  const int32_t root = b.any_object();
  auto g = std::move(b).finish(root);
  CHECK(g.ok());
  return std::move(*g);
}

}  // namespace infercept::grammar
