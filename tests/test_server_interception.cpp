// Interception over HTTP. A chat completion that ends in tool calls leaves its request
// paused; the unmodified client's follow-up (the same conversation, the assistant's calls,
// the tool results) is recognized by its token prefix and resumes it, reusing its KV, and
// answers token for token what a server with interception off answers. The explicit API
// (list, resume, delete), expiry, and clients that go away are checked too.
#include <thread>

#include "server_harness.h"

namespace infercept::testing {
namespace {

json follow_up(const std::string& model, const json& assistant_message) {
  json req = weather_request(model);
  req.erase("tool_choice");
  req["max_tokens"] = 24;
  req["messages"] = with_tool_results(weather_messages(), assistant_message);
  return req;
}

// The one tool-call rule at the server: a call the model did not finish is text. A turn
// forced to open a call and cut after a few tokens comes back as content, with no tool_calls
// and nothing paused, the same streamed or not.
TEST(ServerInterception, CutToolCallIsTextAndNothingPauses) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  json req = weather_request(s.model());
  req["max_tokens"] = 3;
  Reply whole = s.post("/v1/chat/completions", req);
  ASSERT_EQ(whole.status, 200) << whole.raw;
  const json& choice = whole.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length") << whole.raw;
  EXPECT_FALSE(choice["message"].contains("tool_calls")) << whole.raw;
  const std::string content = choice["message"]["content"];
  EXPECT_EQ(content.rfind("<tool_call>", 0), 0u) << content;  // the forced opening, as text
  EXPECT_FALSE(whole.body.contains("interception"));
  EXPECT_EQ(s.get("/v1/interceptions").body["data"].size(), 0u);

  req["stream"] = true;
  Reply streamed = s.post("/v1/chat/completions", req);
  ASSERT_EQ(streamed.status, 200);
  bool done = false;
  std::string text;
  for (const json& ev : sse_events(streamed.raw, &done)) {
    const json& c = ev["choices"][0];
    EXPECT_FALSE(c["delta"].contains("tool_calls")) << ev.dump();
    if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) {
      EXPECT_EQ(c["finish_reason"], "length");
    }
    EXPECT_FALSE(ev.contains("interception"));
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(text, content);
  EXPECT_EQ(s.metric("infercept:num_interceptions_open"), 0);
  EXPECT_TRUE(s.kv_empty_within(5.0));
}

TEST(ServerInterception, RoundTripResumesByPrefixAndMatchesAFreshServer) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  Reply first = s.post("/v1/chat/completions", weather_request(s.model()));
  ASSERT_EQ(first.status, 200) << first.raw;
  const json& choice = first.body["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "tool_calls") << first.raw;
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_TRUE(
      json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false).is_object());
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_TRUE(first.body.contains("interception"));
  EXPECT_GT(first.body["interception"]["expires_at"].get<int64_t>(), 0);
  EXPECT_EQ(s.metric("infercept:num_interceptions_open"), 1);

  const json req = follow_up(s.model(), choice["message"]);
  Reply second = s.post("/v1/chat/completions", req);
  ASSERT_EQ(second.status, 200) << second.raw;
  const int64_t cached = second.body["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached, first.body["usage"]["prompt_tokens"].get<int64_t>() / 2);
  EXPECT_LT(cached, second.body["usage"]["prompt_tokens"].get<int64_t>());
  EXPECT_EQ(second.headers.count("X-Infercept-Resumed"), 1u);
  EXPECT_EQ(s.metric("infercept:interception_resumes_total{how=\"prefix\"}"), 1);
  EXPECT_EQ(s.metric("infercept:num_interceptions_open"), 0);
  EXPECT_TRUE(s.kv_empty_within(5.0));

  // A server with interception off answers the same conversation with the same tokens.
  server::ServerOptions off = server_test_options();
  off.interception = false;
  TestServer fresh(off);
  ASSERT_TRUE(fresh.ok());
  Reply f1 = fresh.post("/v1/chat/completions", weather_request(fresh.model()));
  ASSERT_EQ(f1.status, 200);
  EXPECT_FALSE(f1.body.contains("interception"));
  EXPECT_EQ(f1.body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(f1.body["choices"][0]["token_ids"], choice["token_ids"]);
  Reply f2 = fresh.post("/v1/chat/completions", req);
  ASSERT_EQ(f2.status, 200);
  EXPECT_EQ(f2.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(f2.body["usage"]["prompt_tokens"], second.body["usage"]["prompt_tokens"]);
  EXPECT_EQ(f2.body["choices"][0]["token_ids"], second.body["choices"][0]["token_ids"]);
  EXPECT_EQ(f2.body["choices"][0]["message"]["content"],
            second.body["choices"][0]["message"]["content"]);
  EXPECT_FALSE(second.body["choices"][0]["token_ids"].empty());
}

TEST(ServerInterception, StreamedToolCallPausesAndResumes) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  json req = weather_request(s.model());
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  Reply r = s.post("/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200);
  bool done = false;
  json calls, last_choice_chunk, usage;
  for (const json& e : sse_events(r.raw, &done)) {
    if (e["choices"].empty()) {
      usage = e["usage"];
      continue;
    }
    const json& d = e["choices"][0]["delta"];
    if (d.contains("tool_calls")) calls = d["tool_calls"];
    if (d.contains("content")) {
      EXPECT_EQ(d["content"], "");  // the call is not content
    }
    if (!e["choices"][0]["finish_reason"].is_null()) last_choice_chunk = e;
  }
  EXPECT_TRUE(done);
  ASSERT_EQ(calls.size(), 1u) << r.raw;
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(last_choice_chunk["choices"][0]["finish_reason"], "tool_calls");
  ASSERT_TRUE(last_choice_chunk.contains("interception"));
  EXPECT_GT(usage["completion_tokens"].get<int>(), 0);
  json assistant = {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}};
  assistant["tool_calls"].push_back(
      {{"id", calls[0]["id"]}, {"type", "function"}, {"function", calls[0]["function"]}});
  json follow = follow_up(s.model(), assistant);
  follow["stream"] = true;
  follow["stream_options"] = {{"include_usage", true}};
  Reply r2 = s.post("/v1/chat/completions", follow);
  json usage2;
  for (const json& e : sse_events(r2.raw))
    if (e["choices"].empty()) usage2 = e["usage"];
  ASSERT_TRUE(usage2.is_object()) << r2.raw;
  EXPECT_GT(usage2["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
}

TEST(ServerInterception, ExplicitApi) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  Reply first = s.post("/v1/chat/completions", weather_request(s.model()));
  ASSERT_EQ(first.status, 200);
  ASSERT_TRUE(first.body.contains("interception")) << first.raw;
  const std::string id = first.body["interception"]["id"];
  const std::string call_id = first.body["choices"][0]["message"]["tool_calls"][0]["id"];

  Reply list = s.get("/v1/interceptions");
  ASSERT_EQ(list.status, 200);
  ASSERT_EQ(list.body["data"].size(), 1u);
  const json& item = list.body["data"][0];
  EXPECT_EQ(item["id"], id);
  EXPECT_EQ(item["tier"], "device");  // no memory pressure: preserved
  EXPECT_GT(item["kv_tokens"]["device"].get<int>(), 0);
  EXPECT_GE(item["waiting_ms"].get<int>(), 0);
  EXPECT_EQ(item["tool_calls"][0]["name"], "get_weather");
  EXPECT_EQ(s.post("/v1/interceptions/" + id + "/hint", {{"expected_duration_ms", 250}}).status,
            200);

  // Resume with the tool results only: the continuation, from the paused KV.
  json results = {
      {"tool_results", json::array({{{"tool_call_id", call_id},
                                     {"content", "{\"temperature\": 25, \"sky\": \"sunny\"}"}}})},
      {"max_tokens", 24}};
  Reply resumed = s.post("/v1/interceptions/" + id + "/resume", results);
  ASSERT_EQ(resumed.status, 200) << resumed.raw;
  EXPECT_GT(resumed.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  // The same as the unmodified client's follow-up on a fresh server.
  server::ServerOptions off = server_test_options();
  off.interception = false;
  {
    TestServer fresh(off);
    Reply f1 = fresh.post("/v1/chat/completions", weather_request(fresh.model()));
    json fr = follow_up(fresh.model(), f1.body["choices"][0]["message"]);
    fr["messages"][6]["tool_call_id"] = call_id;
    Reply f2 = fresh.post("/v1/chat/completions", fr);
    EXPECT_EQ(f2.body["choices"][0]["token_ids"], resumed.body["choices"][0]["token_ids"]);
  }
  // A second resume of the same id, and ids that never were.
  Reply again = s.post("/v1/interceptions/" + id + "/resume", results);
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(again.body["error"]["code"], "interception_already_resumed");
  EXPECT_EQ(s.post("/v1/interceptions/icpt_unknown/resume", results).status, 404);
  EXPECT_EQ(s.post("/v1/interceptions/" + id + "/resume", json::object()).status, 400);

  // Delete releases a paused request; resuming it afterwards is an error.
  Reply p2 = s.post("/v1/chat/completions", weather_request(s.model()));
  ASSERT_TRUE(p2.body.contains("interception"));
  const std::string id2 = p2.body["interception"]["id"];
  Reply del = s.request("DELETE", "/v1/interceptions/" + id2);
  EXPECT_EQ(del.status, 200);
  EXPECT_EQ(del.body["deleted"], true);
  EXPECT_EQ(s.request("DELETE", "/v1/interceptions/" + id2).status, 404);
  EXPECT_EQ(s.post("/v1/interceptions/" + id2 + "/resume", results).status, 404);
  EXPECT_EQ(s.get("/v1/interceptions").body["data"].size(), 0u);
  EXPECT_TRUE(s.kv_empty_within(5.0));
}

// intercept_after_tokens (a benchmark extension): the turn generates exactly N tokens, EOS
// ignored, and ends as a call to the named tool, paused; the explicit resume may script the
// next turn the same way. Bad values are errors naming the field.
TEST(ServerInterception, ScriptedCallAfterNTokens) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  json req = weather_request(s.model());
  req.erase("tool_choice");  // free text: the model is not steered into a call
  req["messages"] = json::array({{{"role", "user"}, {"content", "Tell me a long story."}}});
  req["max_tokens"] = 64;
  req["intercept_after_tokens"] = 7;
  Reply first = s.post("/v1/chat/completions", req);
  ASSERT_EQ(first.status, 200) << first.raw;
  const json& choice = first.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(first.body["usage"]["completion_tokens"], 7);
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << first.raw;
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  ASSERT_TRUE(first.body.contains("interception")) << first.raw;
  const std::string id = first.body["interception"]["id"];
  const std::string call_id = choice["message"]["tool_calls"][0]["id"];

  // max_tokens equal to N: the call still ends the turn (what a client sizing turns sends).
  json results = {
      {"tool_results", json::array({{{"tool_call_id", call_id}, {"content", "sunny"}}})},
      {"max_tokens", 5},
      {"intercept_after_tokens", 5}};
  Reply resumed = s.post("/v1/interceptions/" + id + "/resume", results);
  ASSERT_EQ(resumed.status, 200) << resumed.raw;
  EXPECT_EQ(resumed.body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(resumed.body["usage"]["completion_tokens"], 5);
  EXPECT_GT(resumed.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  ASSERT_TRUE(resumed.body.contains("interception"));
  Reply del = s.request(
      "DELETE", "/v1/interceptions/" + resumed.body["interception"]["id"].get<std::string>());
  EXPECT_EQ(del.status, 200);

  for (const json& bad : {json(0), json("5"), json(-3)}) {
    json b = req;
    b["intercept_after_tokens"] = bad;
    Reply r = s.post("/v1/chat/completions", b);
    EXPECT_EQ(r.status, 400) << r.raw;
    EXPECT_EQ(r.body["error"]["param"], "intercept_after_tokens") << r.raw;
  }
  json unknown = req;
  unknown["intercept_tool"] = "no_such_tool";
  EXPECT_EQ(s.post("/v1/chat/completions", unknown).body["error"]["param"], "intercept_tool");
  json no_tools = req;
  no_tools.erase("tools");
  EXPECT_EQ(s.post("/v1/chat/completions", no_tools).status, 400);
  EXPECT_TRUE(s.kv_empty_within(5.0));
}

TEST(ServerInterception, ExpiryDropsThePausedRequest) {
  server::ServerOptions o = server_test_options();
  o.interception_expiry_s = 0.5;
  TestServer s(o);
  ASSERT_TRUE(s.ok());
  Reply first = s.post("/v1/chat/completions", weather_request(s.model()));
  ASSERT_TRUE(first.body.contains("interception")) << first.raw;
  const std::string id = first.body["interception"]["id"];
  EXPECT_TRUE(s.kv_empty_within(5.0));  // expired: KV back
  EXPECT_EQ(s.metric("infercept:interception_expired_total"), 1);
  EXPECT_EQ(s.get("/v1/interceptions/" + id).status, 410);
  json results = {{"tool_results", json::array({{{"tool_call_id", "x"}, {"content", "y"}}})}};
  Reply late = s.post("/v1/interceptions/" + id + "/resume", results);
  EXPECT_EQ(late.status, 410);
  EXPECT_EQ(late.body["error"]["code"], "interception_expired");
  // The unmodified client's follow-up still gets its answer, from scratch.
  Reply follow =
      s.post("/v1/chat/completions", follow_up(s.model(), first.body["choices"][0]["message"]));
  ASSERT_EQ(follow.status, 200);
  EXPECT_EQ(follow.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST(ServerInterception, ClientsThatGoAway) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  // Disconnects mid-stream: the request is cancelled and its KV released.
  {
    httplib::Client c = s.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = json{
        {"model", s.model()},
        {"messages", json::array({{{"role", "user"}, {"content", "Write a long poem."}}})},
        {"max_tokens", 2000},
        {"stream",
         true}}.dump();
    req.set_header("Content-Type", "application/json");
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };
    auto res = c.send(req);
    EXPECT_GE(chunks, 3);
  }
  EXPECT_TRUE(s.kv_empty_within(10.0));
  EXPECT_EQ(s.metric("infercept:num_requests_running"), 0);
  // Disconnects while paused (its response was complete): the request stays until resumed,
  // deleted or expired; another client's traffic goes on.
  Reply first = s.post("/v1/chat/completions", weather_request(s.model()));
  ASSERT_TRUE(first.body.contains("interception"));
  Reply other = s.post("/v1/chat/completions",
                       {{"model", s.model()},
                        {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
                        {"max_tokens", 3}});
  EXPECT_EQ(other.status, 200);
  EXPECT_EQ(s.metric("infercept:num_requests_intercepted{tier=\"device\"}"), 1);
}

// A resume refused for its body (here a tool result past the context) leaves the
// interception as it was: still listed, resumable, deletable; and no KV is held afterwards.
TEST(ServerInterception, RefusedResumeKeepsTheInterception) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  Reply first = s.post("/v1/chat/completions", weather_request(s.model()));
  ASSERT_TRUE(first.body.contains("interception")) << first.raw;
  const std::string id = first.body["interception"]["id"];
  const std::string call_id = first.body["choices"][0]["message"]["tool_calls"][0]["id"];
  std::string huge;
  for (int i = 0; i < 6000; ++i) huge += "word ";
  Reply refused =
      s.post("/v1/interceptions/" + id + "/resume",
             {{"tool_results", json::array({{{"tool_call_id", call_id}, {"content", huge}}})}});
  EXPECT_EQ(refused.status, 400) << refused.raw;
  EXPECT_EQ(refused.body["error"]["code"], "context_length_exceeded") << refused.raw;
  EXPECT_EQ(s.get("/v1/interceptions/" + id).status, 200);
  EXPECT_EQ(s.metric("infercept:num_interceptions_open"), 1);
  Reply resumed =
      s.post("/v1/interceptions/" + id + "/resume",
             {{"tool_results", json::array({{{"tool_call_id", call_id}, {"content", "sunny"}}})},
              {"max_tokens", 4},
              {"intercept", false}});
  EXPECT_EQ(resumed.status, 200) << resumed.raw;
  EXPECT_EQ(s.request("DELETE", "/v1/interceptions/" + id).status, 409);
  // Refused then deleted: the blocks go back with the delete.
  Reply second = s.post("/v1/chat/completions", weather_request(s.model()));
  ASSERT_TRUE(second.body.contains("interception")) << second.raw;
  const std::string id2 = second.body["interception"]["id"];
  EXPECT_EQ(s.post("/v1/interceptions/" + id2 + "/resume",
                   {{"tool_results", json::array({{{"tool_call_id", "x"}, {"content", huge}}})}})
                .status,
            400);
  EXPECT_EQ(s.request("DELETE", "/v1/interceptions/" + id2).status, 200);
  EXPECT_TRUE(s.kv_empty_within(5.0));
  EXPECT_EQ(s.metric("infercept:num_interceptions_open"), 0);
}

// Keys see their own paused requests and tools in the shared views; an admin key sees all.
// Tool names the model made up (not declared in the request) never become label values.
TEST(ServerInterception, SharedViewsAreScopedToTheCaller) {
  server::ServerOptions o = server_test_options();
  o.api_keys = {"key-a", "key-b"};
  o.admin_api_keys = {"key-admin"};
  TestServer s(o);
  ASSERT_TRUE(s.ok());
  json req = weather_request(s.model());
  req["tools"][0]["function"]["name"] = "secret_tool_a";
  req["tool_choice"]["function"]["name"] = "secret_tool_a";
  req.erase("tool_choice");
  req["messages"] = json::array({{{"role", "user"}, {"content", "Tell me a story."}}});
  req["intercept_after_tokens"] = 2;
  Reply first = s.post("/v1/chat/completions", req, "key-a");
  ASSERT_EQ(first.status, 200) << first.raw;
  ASSERT_TRUE(first.body.contains("interception")) << first.raw;
  const std::string id = first.body["interception"]["id"];
  const std::string call_id = first.body["choices"][0]["message"]["tool_calls"][0]["id"];
  // Resumed (so its pause is measured under its tool), and paused again.
  json results = {{"tool_results", json::array({{{"tool_call_id", call_id}, {"content", "ok"}}})},
                  {"intercept_after_tokens", 2}};
  Reply again = s.post("/v1/interceptions/" + id + "/resume", results, "key-a");
  ASSERT_EQ(again.status, 200) << again.raw;
  auto dashboard = [&](const std::string& key) { return s.get("/dashboard/data", key).raw; };
  EXPECT_NE(dashboard("key-a").find("secret_tool_a"), std::string::npos);
  EXPECT_EQ(dashboard("key-b").find("secret_tool_a"), std::string::npos);
  EXPECT_NE(dashboard("key-admin").find("secret_tool_a"), std::string::npos);
  EXPECT_EQ(s.get("/dashboard/data", "key-b").body["requests"]["open_interceptions"], 0);
  EXPECT_EQ(s.get("/dashboard/data", "key-a").body["requests"]["open_interceptions"], 1);
  EXPECT_EQ(s.get("/metrics", "key-b").raw.find("secret_tool_a"), std::string::npos);
  EXPECT_NE(s.get("/metrics", "key-admin").raw.find("tool=\"secret_tool_a\""), std::string::npos);
  EXPECT_EQ(s.get("/v1/interceptions", "key-b").body["data"].size(), 0u);
  // The key in the query string: the dashboard only.
  httplib::Client c("127.0.0.1", s.port());
  auto dash = c.Get("/dashboard/data?api_key=key-a");
  ASSERT_TRUE(dash);
  EXPECT_EQ(dash->status, 200);
  auto models = c.Get("/v1/models?api_key=key-a");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  // A call to a tool the request did not declare is measured as "other".
  json undeclared = req;
  undeclared["intercept_tool"] = "secret_tool_a";
  EXPECT_EQ(s.request("DELETE",
                      "/v1/interceptions/" + again.body["interception"]["id"].get<std::string>(),
                      "", "key-a")
                .status,
            200);
  EXPECT_TRUE(s.kv_empty_within(5.0, "key-admin"));
}

}  // namespace
}  // namespace infercept::testing
