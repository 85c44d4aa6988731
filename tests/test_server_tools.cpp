// Server-side tools: the built-in calculator and HTTP tools from a config file, run by the
// server while the request stays paused in the engine; the whole loop stays inside it.
#include <cstdio>
#include <fstream>
#include <thread>

#include "server/server_tools.h"
#include "server_harness.h"

namespace infercept::testing {
namespace {

TEST(ServerTools, CalculatorArithmetic) {
  using server::evaluate_expression;
  EXPECT_DOUBLE_EQ(*evaluate_expression("2 + 3 * 4"), 14.0);
  EXPECT_DOUBLE_EQ(*evaluate_expression("(2 + 3) * 4"), 20.0);
  EXPECT_DOUBLE_EQ(*evaluate_expression("2 ^ 3 ^ 2"), 512.0);  // right-associative
  EXPECT_DOUBLE_EQ(*evaluate_expression("-2 ^ 2"), 4.0);
  EXPECT_DOUBLE_EQ(*evaluate_expression("10 % 4 + sqrt(16) - abs(-1)"), 5.0);
  EXPECT_NEAR(*evaluate_expression("2 * pi"), 6.283185307, 1e-6);
  EXPECT_DOUBLE_EQ(*evaluate_expression("1.5e2 / 3"), 50.0);
  for (const char* bad : {"", "1 +", "(1", "1 / 0", "sqrt(-1)", "foo(2)", "2 $ 3", "x"})
    EXPECT_FALSE(evaluate_expression(bad).ok()) << bad;
  std::string deep(500, '(');
  EXPECT_FALSE(evaluate_expression(deep + "1").ok());  // no stack overflow
  auto tools = server::ServerTools::load("");
  ASSERT_TRUE(tools.ok());
  const server::ServerTool* calc = tools->find("calculator");
  ASSERT_NE(calc, nullptr);
  EXPECT_EQ(json::parse(tools->run(*calc, R"({"expression": "6 * 7"})"))["result"], 42.0);
  EXPECT_TRUE(json::parse(tools->run(*calc, R"({"expression": "6 *"})")).contains("error"));
  EXPECT_TRUE(json::parse(tools->run(*calc, "not json")).contains("error"));
}

TEST(ServerTools, ConfigErrors) {
  using server::ServerTools;
  EXPECT_FALSE(ServerTools::parse("{", "t.json").ok());
  EXPECT_FALSE(ServerTools::parse(R"({"tools": [{"url": "http://x"}]})", "t.json").ok());
  EXPECT_FALSE(ServerTools::parse(R"({"tools": [{"name": "a"}]})", "t.json").ok());
  EXPECT_FALSE(
      ServerTools::parse(R"({"tools": [{"name": "a", "url": "ftp://x"}]})", "t.json").ok());
  EXPECT_FALSE(
      ServerTools::parse(R"({"tools": [{"name": "calculator", "url": "http://x"}]})", "t.json")
          .ok());
  EXPECT_FALSE(ServerTools::parse(
                   R"({"tools": [{"name": "a", "url": "http://x", "method": "PUT"}]})", "t.json")
                   .ok());
  EXPECT_FALSE(ServerTools::load("/nonexistent/tools.json").ok());
  auto ok = ServerTools::parse(
      R"({"tools": [{"name": "a", "url": "http://127.0.0.1:1/x", "method": "GET", "timeout_ms": 200}]})",
      "t.json");
  ASSERT_TRUE(ok.ok());
  // An unreachable tool answers with an error the model reads, not a failure.
  EXPECT_TRUE(json::parse(ok->run(*ok->find("a"), "{}")).contains("error"));
}

json calc_request(const std::string& model) {
  json messages = json::parse(R"([
    {"role": "user", "content": "What is 12 * 7?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "calculator", "arguments": "{\"expression\": \"12 * 7\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"result\": 84}"},
    {"role": "assistant", "content": "12 * 7 = 84."},
    {"role": "user", "content": "What is 23 * 19?"}])");
  return {{"model", model},
          {"messages", messages},
          {"server_tools", json::array({"calculator"})},
          {"tool_choice", {{"type", "function"}, {"function", {{"name", "calculator"}}}}},
          {"temperature", 0},
          {"max_tokens", 60}};
}

TEST(ServerTools, CalculatorLoopStaysInTheServer) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  Reply r = s.post("/v1/chat/completions", calc_request(s.model()));
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_TRUE(r.body.contains("server_tool_calls")) << r.raw;
  const json& calls = r.body["server_tool_calls"];
  ASSERT_GE(calls.size(), 1u);
  EXPECT_EQ(calls[0]["name"], "calculator");
  EXPECT_TRUE(json::parse(calls[0]["result"].get<std::string>(), nullptr, false).is_object());
  EXPECT_NE(r.body["choices"][0]["finish_reason"], "tool_calls");  // the server ran them
  EXPECT_FALSE(r.body.contains("interception"));
  // The continuation reused the paused request's KV.
  EXPECT_GT(r.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  EXPECT_GE(s.metric("infercept:interception_duration_seconds_count{tool=\"calculator\"}"), 1);
  EXPECT_TRUE(s.kv_empty_within(5.0));
  // Streaming gives the same final answer.
  json st = calc_request(s.model());
  st["stream"] = true;
  Reply sr = s.post("/v1/chat/completions", st);
  std::string text;
  json last;
  for (const json& e : sse_events(sr.raw)) {
    if (e["choices"].empty()) continue;
    if (e["choices"][0]["delta"].contains("content"))
      text += e["choices"][0]["delta"]["content"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) last = e;
  }
  EXPECT_EQ(text, r.body["choices"][0]["message"]["content"].is_null()
                      ? std::string()
                      : r.body["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_TRUE(last.contains("server_tool_calls"));
  // An unknown server tool is a clear error.
  json bad = calc_request(s.model());
  bad["server_tools"] = json::array({"nope"});
  Reply b = s.post("/v1/chat/completions", bad);
  EXPECT_EQ(b.status, 400);
  EXPECT_EQ(b.body["error"]["param"], "server_tools");
}

TEST(ServerTools, HttpToolFromConfig) {
  // The tool: a small HTTP service in this process.
  httplib::Server tool;
  std::string seen_body;
  std::mutex mu;
  tool.Post("/weather", [&](const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(mu);
      seen_body = req.body;
    }
    res.set_content(R"({"temperature": 25, "sky": "sunny"})", "application/json");
  });
  const int tool_port = tool.bind_to_any_port("127.0.0.1");
  ASSERT_GT(tool_port, 0);
  std::thread tool_thread([&] { tool.listen_after_bind(); });
  const std::string config = ::testing::TempDir() + "/infercept_tools.json";
  {
    std::ofstream f(config);
    f << json{{"tools",
               json::array({{{"name", "get_weather"},
                             {"description", "Get the weather in a city"},
                             {"parameters", weather_tools()[0]["function"]["parameters"]},
                             {"url", "http://127.0.0.1:" + std::to_string(tool_port) + "/weather"},
                             {"method", "POST"},
                             {"timeout_ms", 5000}}})}}
             .dump();
  }
  server::ServerOptions o = server_test_options();
  o.tools_config = config;
  {
    TestServer s(o);
    ASSERT_TRUE(s.ok());
    json req = weather_request(s.model());
    req.erase("tools");
    req["server_tools"] = true;
    req["max_tokens"] = 60;
    Reply r = s.post("/v1/chat/completions", req);
    ASSERT_EQ(r.status, 200) << r.raw;
    ASSERT_TRUE(r.body.contains("server_tool_calls")) << r.raw;
    EXPECT_EQ(r.body["server_tool_calls"][0]["name"], "get_weather");
    EXPECT_EQ(
        json::parse(r.body["server_tool_calls"][0]["result"].get<std::string>())["temperature"],
        25);
    {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_TRUE(json::parse(seen_body, nullptr, false).is_object()) << seen_body;
    }
    EXPECT_TRUE(s.kv_empty_within(5.0));
  }
  tool.stop();
  tool_thread.join();
  std::remove(config.c_str());
}

}  // namespace
}  // namespace infercept::testing
