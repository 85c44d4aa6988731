// The server in-process on a free port with the default model, and small helpers to talk
// to it over HTTP through httplib's client (tests/test_server*.cpp).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/http_server.h"
#include "test_util.h"

namespace infercept::testing {

using json = nlohmann::json;

inline CostModel server_test_cost_model() {
  CostModel c;
  c.t_fwd_samples = {{1, 0.01}, {64, 0.012}, {512, 0.06}};
  c.kv_bytes_per_token = 2.0 * 30 * 3 * 64 * 2;  // SmolLM2-135M, f16
  c.swap_bytes_per_second = 2e8;
  c.saturation_tokens = 64;
  return c;
}

inline EngineConfig server_test_engine_config() {
  EngineConfig c;
  c.model_path = default_model_path();
  c.check_invariants = true;  // every step: KV bookkeeping consistent (aborts otherwise)
  c.kv_cache_tokens = 4096;
  c.swap_space_tokens = 2048;
  // These tests check the protocol: a paused request must still hold its KV when its
  // follow-up comes (cached_tokens > 0) however slow the machine. minwaste may rightly drop
  // the KV of a pause that lasts long enough even without memory pressure (a loaded CI
  // machine made one such pause 25 s), so the server tests keep it; the policies have their
  // own tests (test_interception, test_continue_paused).
  c.policy = "preserve";
  c.max_tokens_per_step = 256;
  c.cost_model = server_test_cost_model();
  return c;
}

inline server::ServerOptions server_test_options() {
  server::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.http_threads = 8;
  o.defaults.temperature = 0.0f;
  o.defaults.max_tokens = 16;
  o.shutdown_grace_s = 0.5;
  return o;
}

struct Reply {
  int status = 0;
  json body;        // parsed when the body is JSON
  std::string raw;  // the body as received
  httplib::Headers headers;
};

class TestServer {
 public:
  explicit TestServer(server::ServerOptions opt = server_test_options(),
                      EngineConfig ec = server_test_engine_config()) {
    auto core = EngineCore::create(ec);
    if (!core.ok()) {
      ADD_FAILURE() << core.error().message;
      return;
    }
    auto s = server::HttpServer::create(std::move(*core), opt);
    if (!s.ok()) {
      ADD_FAILURE() << s.error().message;
      return;
    }
    server_ = std::move(*s);
    auto port = server_->bind();
    if (!port.ok()) {
      ADD_FAILURE() << port.error().message;
      return;
    }
    port_ = *port;
    server_->start();
  }
  ~TestServer() {
    if (server_) server_->stop();
  }
  bool ok() const { return server_ != nullptr && port_ > 0; }
  int port() const { return port_; }
  const std::string& model() const { return server_->model_name(); }
  server::HttpServer& server() { return *server_; }

  httplib::Client client(const std::string& key = "") const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(300, 0);
    c.set_write_timeout(30, 0);
    if (!key.empty()) c.set_bearer_token_auth(key.c_str());
    return c;
  }

  Reply request(const std::string& method, const std::string& path, const std::string& body = "",
                const std::string& key = "") const {
    httplib::Client c = client(key);
    httplib::Result r = method == "GET"      ? c.Get(path.c_str())
                        : method == "DELETE" ? c.Delete(path.c_str())
                                             : c.Post(path.c_str(), body, "application/json");
    Reply out;
    if (!r) {
      ADD_FAILURE() << method << " " << path << ": " << httplib::to_string(r.error());
      return out;
    }
    out.status = r->status;
    out.raw = r->body;
    out.headers = r->headers;
    out.body = json::parse(r->body, nullptr, false);
    return out;
  }
  Reply post(const std::string& path, const json& body, const std::string& key = "") const {
    return request("POST", path, body.dump(), key);
  }
  Reply get(const std::string& path, const std::string& key = "") const {
    return request("GET", path, "", key);
  }

  // The value of one Prometheus sample ("name{labels}"), or -1 when it is not there.
  double metric(const std::string& sample, const std::string& key = "") const {
    const Reply r = get("/metrics", key);
    size_t pos = 0;
    while ((pos = r.raw.find(sample + " ", pos)) != std::string::npos) {
      if (pos == 0 || r.raw[pos - 1] == '\n')
        return std::stod(r.raw.substr(pos + sample.size() + 1));
      pos += sample.size();
    }
    return -1.0;
  }

  // Waits until the KV cache of both tiers is empty (the engine gets the aborts between
  // steps); true when it is.
  bool kv_empty_within(double seconds, const std::string& key = "") const {
    for (int i = 0; i < (int)(seconds * 20); ++i) {
      if (metric("infercept:kv_cache_blocks{tier=\"device\",state=\"used\"}", key) == 0 &&
          metric("infercept:kv_cache_blocks{tier=\"host\",state=\"used\"}", key) == 0)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  std::unique_ptr<server::HttpServer> server_;
  int port_ = -1;
};

// Server-sent events of a streamed response: the JSON of every "data:" line but [DONE].
inline std::vector<json> sse_events(const std::string& body, bool* saw_done = nullptr) {
  std::vector<json> out;
  size_t pos = 0;
  if (saw_done) *saw_done = false;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string data =
        body.substr(pos + 6, end == std::string::npos ? std::string::npos : end - pos - 6);
    pos = end == std::string::npos ? body.size() : end + 2;
    if (data == "[DONE]") {
      if (saw_done) *saw_done = true;
      continue;
    }
    out.push_back(json::parse(data, nullptr, false));
  }
  return out;
}

// A streamed chat answer as a client accumulates it: content appended, tool calls by index
// (the chunk that opens one has its id, type and name; later ones add to its arguments).
struct StreamedTurn {
  std::string content;
  json calls = json::array();  // [{"id", "type", "function": {"name", "arguments"}}]
  json last;                   // the chunk with the finish_reason
  int call_chunks = 0;         // chunks that carried tool_calls
};
inline StreamedTurn accumulate_stream(const std::vector<json>& events) {
  StreamedTurn t;
  for (const json& e : events) {
    if (!e.contains("choices") || e["choices"].empty()) continue;
    const json& c = e["choices"][0];
    const json& d = c["delta"];
    if (d.contains("content") && d["content"].is_string())
      t.content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      ++t.call_chunks;
      for (const json& tc : d["tool_calls"]) {
        const size_t i = tc["index"].get<size_t>();
        while (t.calls.size() <= i)
          t.calls.push_back(
              {{"id", ""}, {"type", ""}, {"function", {{"name", ""}, {"arguments", ""}}}});
        json& call = t.calls[i];
        if (tc.contains("id")) call["id"] = tc["id"];
        if (tc.contains("type")) call["type"] = tc["type"];
        if (tc["function"].contains("name")) call["function"]["name"] = tc["function"]["name"];
        if (tc["function"].contains("arguments"))
          call["function"]["arguments"] = call["function"]["arguments"].get<std::string>() +
                                          tc["function"]["arguments"].get<std::string>();
      }
    }
    if (!c["finish_reason"].is_null()) t.last = e;
  }
  return t;
}

// A conversation that SmolLM2-135M answers with a get_weather call when told to call it
// (tool_choice named): one earlier exchange shows the format.
inline json weather_tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Get the weather in a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
}
inline json weather_messages() {
  return json::parse(R"([
    {"role": "user", "content": "What is the weather in London?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"London\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 12, \"sky\": \"rain\"}"},
    {"role": "assistant", "content": "It is 12 degrees and raining in London."},
    {"role": "user", "content": "What is the weather in Paris?"}])");
}
inline json weather_request(const std::string& model) {
  return {{"model", model},
          {"messages", weather_messages()},
          {"tools", weather_tools()},
          {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
          {"temperature", 0},
          {"max_tokens", 40},
          {"return_token_ids", true}};
}
// The conversation continued with the assistant's calls and a result for each.
inline json with_tool_results(
    json messages, const json& assistant_message,
    const std::string& result = "{\"temperature\": 25, \"sky\": \"sunny\"}") {
  messages.push_back(assistant_message);
  for (const json& call : assistant_message["tool_calls"])
    messages.push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", result}});
  return messages;
}

// Everything a turn's engine request held when it ended (return_token_ids: the prompt's ids
// and the generated ones): what a follow-up can find in place.
inline std::vector<int32_t> held_tokens(const json& response) {
  std::vector<int32_t> all = response.at("prompt_token_ids").get<std::vector<int32_t>>();
  for (const json& t : response["choices"][0].at("token_ids")) all.push_back(t.get<int32_t>());
  return all;
}

// The prompt tokens whose KV `next` must find in place after `prev` (both answered with
// return_token_ids): the tokens the two share from the start, short of the last of what prev
// held (sampled, never computed) and of next's last prompt token (computed again to sample
// from), floored to whole KV blocks (the prefix cache keeps full blocks; a continued paused
// request keeps a partial last block too).
inline int64_t expected_reuse(const json& prev, const json& next, int64_t block_size = 16) {
  const std::vector<int32_t> a = held_tokens(prev);
  const std::vector<int32_t> b = next.at("prompt_token_ids").get<std::vector<int32_t>>();
  size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
  const int64_t n =
      std::min<int64_t>({(int64_t)common, (int64_t)a.size() - 1, (int64_t)b.size() - 1});
  return std::max<int64_t>(0, n) / block_size * block_size;
}
inline int64_t cached_tokens(const json& response) {
  return response["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
}
// The interception a response says its request was continued from ("" when none).
inline std::string resumed_from(const Reply& r) {
  auto it = r.headers.find("X-Infercept-Resumed");
  return it == r.headers.end() ? std::string() : it->second;
}

}  // namespace infercept::testing
