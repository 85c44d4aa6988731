// Server-side tools: tools the server runs itself, so a whole agent loop stays inside it
// (the paper's setting). While a tool runs, its request stays paused in the engine (a real
// interception, with the policy deciding about its KV); the result is appended and the
// request continues from its cached prefix.
//
//   calculator  built in: {"expression": "2 * (3 + 4) ^ 2"} -> {"result": 98}
//   HTTP tools  declared in a JSON config file (--tools-config):
//     {"tools": [{"name": "weather", "description": "...", "parameters": {JSON Schema},
//                 "url": "http://127.0.0.1:9000/weather", "method": "POST" | "GET",
//                 "timeout_ms": 5000, "headers": {"X-Key": "..."}}]}
//     POST sends the call's arguments as a JSON body, GET as query parameters; the
//     response body (2xx) is the result, anything else an {"error": ...} the model sees.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/result.h"
#include "tokenizer/chat_template.h"

namespace infercept::server {

struct ServerTool {
  enum class Kind { calculator, http };
  Kind kind = Kind::calculator;
  ToolDefinition def;
  std::string url;  // http: scheme://host[:port]/path
  std::string method = "POST";
  double timeout_s = 10.0;
  std::map<std::string, std::string> headers;
};

class ServerTools {
 public:
  // The built-in calculator, plus the HTTP tools of `config_path` when it is not empty.
  static Result<ServerTools> load(const std::string& config_path);
  // Parses the config file's text (`path` names it in errors).
  static Result<ServerTools> parse(const std::string& text, const std::string& path);

  const ServerTool* find(const std::string& name) const;
  std::vector<std::string> names() const;
  // Runs one call and returns the text the model sees as the tool's result (JSON). Errors of
  // the tool (bad arguments, HTTP failures, timeouts) are results too: the model reads them.
  std::string run(const ServerTool& tool, const std::string& arguments_json) const;

 private:
  std::vector<ServerTool> tools_;
};

// The calculator's arithmetic: numbers, + - * / % ^ (right-associative), parentheses, unary
// minus, and sqrt abs exp ln log10 sin cos tan floor ceil round, constants pi and e.
Result<double> evaluate_expression(const std::string& expression);

}  // namespace infercept::server
