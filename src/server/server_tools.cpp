#include "server/server_tools.h"

#include <httplib.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/json_depth.h"

namespace infercept::server {

namespace {

using json = nlohmann::json;
constexpr size_t kMaxResultBytes = 16 * 1024;

class ExprParser {
 public:
  explicit ExprParser(const std::string& s) : s_(s) {}
  Result<double> parse() {
    TRY_ASSIGN(double v, sum());
    skip();
    if (pos_ != s_.size()) return err("unexpected '" + std::string(1, s_[pos_]) + "'");
    return v;
  }

 private:
  Error err(const std::string& what) const {
    return make_error(what, " at position ", std::to_string(pos_), " of '", s_, "'");
  }
  void skip() {
    while (pos_ < s_.size() && std::isspace((unsigned char)s_[pos_])) ++pos_;
  }
  bool eat(char c) {
    skip();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  Result<double> sum() {
    TRY_ASSIGN(double v, product());
    for (;;) {
      if (eat('+')) {
        TRY_ASSIGN(double r, product());
        v += r;
      } else if (eat('-')) {
        TRY_ASSIGN(double r, product());
        v -= r;
      } else {
        return v;
      }
    }
  }
  Result<double> product() {
    TRY_ASSIGN(double v, power());
    for (;;) {
      if (eat('*')) {
        TRY_ASSIGN(double r, power());
        v *= r;
      } else if (eat('/')) {
        TRY_ASSIGN(double r, power());
        if (r == 0) return err("division by zero");
        v /= r;
      } else if (eat('%')) {
        TRY_ASSIGN(double r, power());
        if (r == 0) return err("modulo by zero");
        v = std::fmod(v, r);
      } else {
        return v;
      }
    }
  }
  Result<double> power() {
    TRY_ASSIGN(double base, unary());
    if (eat('^')) {
      TRY_ASSIGN(double ex, power());
      return std::pow(base, ex);
    }
    return base;
  }
  Result<double> unary() {
    if (++depth_ > 200) return err("expression nested too deeply");
    Result<double> r = eat('-') ? negate(unary()) : eat('+') ? unary() : atom();
    --depth_;
    return r;
  }
  static Result<double> negate(Result<double> r) {
    if (!r.ok()) return r;
    return -*r;
  }
  Result<double> atom() {
    skip();
    if (eat('(')) {
      TRY_ASSIGN(double v, sum());
      if (!eat(')')) return err("missing ')'");
      return v;
    }
    if (pos_ < s_.size() && (std::isdigit((unsigned char)s_[pos_]) || s_[pos_] == '.')) {
      const char* begin = s_.c_str() + pos_;
      char* end = nullptr;
      const double v = std::strtod(begin, &end);
      if (end == begin) return err("bad number");
      pos_ += (size_t)(end - begin);
      return v;
    }
    if (pos_ < s_.size() && std::isalpha((unsigned char)s_[pos_])) {
      size_t b = pos_;
      while (pos_ < s_.size() && (std::isalnum((unsigned char)s_[pos_]) || s_[pos_] == '_')) ++pos_;
      const std::string name = s_.substr(b, pos_ - b);
      if (name == "pi") return M_PI;
      if (name == "e") return M_E;
      if (!eat('(')) return err("unknown name '" + name + "'");
      TRY_ASSIGN(double x, sum());
      if (!eat(')')) return err("missing ')'");
      if (name == "sqrt") {
        if (x < 0) return err("sqrt of a negative number");
        return std::sqrt(x);
      }
      if (name == "abs") return std::fabs(x);
      if (name == "exp") return std::exp(x);
      if (name == "ln" || name == "log") {
        if (x <= 0) return err("log of a number <= 0");
        return std::log(x);
      }
      if (name == "log10") {
        if (x <= 0) return err("log of a number <= 0");
        return std::log10(x);
      }
      if (name == "sin") return std::sin(x);
      if (name == "cos") return std::cos(x);
      if (name == "tan") return std::tan(x);
      if (name == "floor") return std::floor(x);
      if (name == "ceil") return std::ceil(x);
      if (name == "round") return std::round(x);
      return err("unknown function '" + name + "'");
    }
    return err(pos_ < s_.size() ? "unexpected '" + std::string(1, s_[pos_]) + "'"
                                : "unexpected end");
  }

  const std::string& s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

std::string error_result(const std::string& message) {
  return json{{"error", message}}.dump();
}

std::string run_calculator(const std::string& arguments_json) {
  const json args =
      json_depth_ok(arguments_json) ? json::parse(arguments_json, nullptr, false) : json();
  // {"expression": "..."}; leniently also a bare expression or number, or an object whose
  // only string is the expression (small models misname the key).
  std::string expr;
  if (args.is_object() && args.contains("expression") && args["expression"].is_string()) {
    expr = args["expression"].get<std::string>();
  } else if (args.is_object()) {
    for (const auto& [k, v] : args.items())
      if (v.is_string() && expr.empty()) expr = v.get<std::string>();
  } else if (args.is_string()) {
    expr = args.get<std::string>();
  } else if (args.is_number()) {
    expr = args.dump();
  }
  if (expr.empty()) return error_result("the calculator needs {\"expression\": \"...\"}");
  if (expr.size() > 1000) return error_result("the expression is too long");
  auto v = evaluate_expression(expr);
  if (!v.ok()) return error_result(v.error().message);
  if (!std::isfinite(*v)) return error_result("the result is not a finite number");
  return json{{"result", *v}}.dump();
}

std::string run_http(const ServerTool& t, const std::string& arguments_json) {
  if (!json_depth_ok(arguments_json)) return error_result("the arguments nest too deep");
  const json args = json::parse(arguments_json, nullptr, false);
  if (!args.is_object()) return error_result("the arguments are not a JSON object");
  // scheme://host[:port] and the path.
  const size_t scheme_end = t.url.find("://");
  const size_t path_start = t.url.find('/', scheme_end == std::string::npos ? 0 : scheme_end + 3);
  const std::string base = path_start == std::string::npos ? t.url : t.url.substr(0, path_start);
  std::string path = path_start == std::string::npos ? "/" : t.url.substr(path_start);
  httplib::Client cli(base);
  const auto sec = (time_t)t.timeout_s;
  const auto usec = (time_t)((t.timeout_s - (double)sec) * 1e6);
  cli.set_connection_timeout(sec, usec);
  cli.set_read_timeout(sec, usec);
  cli.set_write_timeout(sec, usec);
  httplib::Headers headers(t.headers.begin(), t.headers.end());
  httplib::Result r = [&] {
    if (t.method == "GET") {
      httplib::Params params;
      for (const auto& [k, v] : args.items())
        params.emplace(k, v.is_string() ? v.get<std::string>() : v.dump());
      return cli.Get(path, params, headers);
    }
    return cli.Post(path, headers, args.dump(), "application/json");
  }();
  if (!r)
    return error_result("the tool '" + t.def.name +
                        "' did not answer: " + httplib::to_string(r.error()));
  if (r->status < 200 || r->status >= 300)
    return error_result("the tool '" + t.def.name + "' answered HTTP " + std::to_string(r->status) +
                        ": " + r->body.substr(0, 512));
  std::string body = r->body;
  if (body.size() > kMaxResultBytes) body = body.substr(0, kMaxResultBytes) + "...(cut)";
  return body;
}

}  // namespace

Result<double> evaluate_expression(const std::string& expression) {
  return ExprParser(expression).parse();
}

Result<ServerTools> ServerTools::load(const std::string& config_path) {
  if (config_path.empty()) return parse("", "");
  std::ifstream in(config_path);
  if (!in) return make_error("cannot read the tools config ", config_path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), config_path);
}

Result<ServerTools> ServerTools::parse(const std::string& text, const std::string& path) {
  ServerTools out;
  ServerTool calc;
  calc.kind = ServerTool::Kind::calculator;
  calc.def.name = "calculator";
  calc.def.description =
      "Evaluate an arithmetic expression (+ - * / % ^, parentheses, sqrt, ln, sin, ...)";
  calc.def.parameters_json =
      R"J({"type": "object", "properties": {"expression": {"type": "string", "description": "e.g. 2 * (3 + 4)"}}, "required": ["expression"]})J";
  out.tools_.push_back(calc);
  if (text.empty()) return out;
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tools") || !j["tools"].is_array())
    return make_error(path, ": expected {\"tools\": [...]}");
  for (size_t i = 0; i < j["tools"].size(); ++i) {
    const auto& t = j["tools"][i];
    const std::string where = path + ": tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return make_error(where, " is not an object");
    ServerTool st;
    st.kind = ServerTool::Kind::http;
    if (!t.contains("name") || !t["name"].is_string() || t["name"].get<std::string>().empty())
      return make_error(where, ": 'name' (a string) is required");
    st.def.name = t["name"].get<std::string>();
    if (out.find(st.def.name) != nullptr)
      return make_error(where, ": a second tool named '", st.def.name, "'");
    if (t.contains("description") && t["description"].is_string())
      st.def.description = t["description"];
    if (t.contains("parameters")) {
      if (!t["parameters"].is_object())
        return make_error(where, ": 'parameters' must be a JSON Schema object");
      st.def.parameters_json = t["parameters"].dump();
    }
    if (!t.contains("url") || !t["url"].is_string())
      return make_error(where, ": 'url' (a string) is required");
    st.url = t["url"];
    if (st.url.rfind("http://", 0) != 0 && st.url.rfind("https://", 0) != 0)
      return make_error(where, ": 'url' must start with http:// or https://");
    if (t.contains("method")) {
      if (!t["method"].is_string()) return make_error(where, ": 'method' must be GET or POST");
      st.method = t["method"];
      if (st.method != "GET" && st.method != "POST")
        return make_error(where, ": 'method' must be GET or POST");
    }
    if (t.contains("timeout_ms")) {
      if (!t["timeout_ms"].is_number() || t["timeout_ms"].get<double>() <= 0)
        return make_error(where, ": 'timeout_ms' must be a number > 0");
      st.timeout_s = t["timeout_ms"].get<double>() / 1000.0;
    }
    if (t.contains("headers")) {
      if (!t["headers"].is_object())
        return make_error(where, ": 'headers' must be an object of strings");
      for (const auto& [k, v] : t["headers"].items()) {
        if (!v.is_string()) return make_error(where, ": header '", k, "' must be a string");
        st.headers[k] = v.get<std::string>();
      }
    }
    out.tools_.push_back(std::move(st));
  }
  return out;
}

const ServerTool* ServerTools::find(const std::string& name) const {
  for (const ServerTool& t : tools_)
    if (t.def.name == name) return &t;
  return nullptr;
}

std::vector<std::string> ServerTools::names() const {
  std::vector<std::string> out;
  for (const ServerTool& t : tools_) out.push_back(t.def.name);
  return out;
}

std::string ServerTools::run(const ServerTool& tool, const std::string& arguments_json) const {
  try {
    return tool.kind == ServerTool::Kind::calculator ? run_calculator(arguments_json)
                                                     : run_http(tool, arguments_json);
  } catch (const std::exception& e) {
    return error_result(std::string("the tool failed: ") + e.what());
  }
}

}  // namespace infercept::server
