// Interception over HTTP. A chat completion that ends in tool calls leaves its request
// paused; the unmodified client's follow-up (the same conversation, the assistant's calls,
// the tool results) is recognized by the call ids it carries and resumes it, reusing its KV,
// and answers token for token what a server with interception off answers; a request that
// carries none of them (a repeated turn, another conversation) continues nothing, and a raw
// completion continues a paused request only when it extends all of its tokens. The explicit
// API (list, resume, delete), expiry, cache scopes, and clients that go away are checked too;
// last, what the engine's prefix cache gives requests that continue nothing.
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
// and nothing paused. Streamed, the call went out as it started (a stream cannot take it
// back); its text follows as content, so the content adds up to the same.
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
  const std::vector<json> events = sse_events(streamed.raw, &done);
  for (const json& ev : events) EXPECT_FALSE(ev.contains("interception"));
  const StreamedTurn st = accumulate_stream(events);
  EXPECT_TRUE(done);
  EXPECT_EQ(st.last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(st.content, content);
  for (const json& c : st.calls) EXPECT_EQ(c["function"]["name"], "get_weather");
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
  // The resumed request's first token, by where its KV was: one, under one place.
  double resumed = 0;
  for (const char* kv : {"device", "host", "disk", "recompute"})
    resumed += s.metric(std::string("infercept:resumed_time_to_first_token_seconds_count{kv=\"") +
                        kv + "\"}");
  EXPECT_EQ(resumed, 1);
  EXPECT_TRUE(s.kv_empty_within(5.0));

  // A server with interception and the prefix cache off answers the same conversation with
  // the same tokens, computing every prompt.
  server::ServerOptions off = server_test_options();
  off.interception = false;
  EngineConfig no_cache = server_test_engine_config();
  no_cache.prefix_cache = false;
  TestServer fresh(off, no_cache);
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
  json usage;
  const std::vector<json> events = sse_events(r.raw, &done);
  for (const json& e : events)
    if (e["choices"].empty()) usage = e["usage"];
  const StreamedTurn st = accumulate_stream(events);
  const json& calls = st.calls;
  const json& last_choice_chunk = st.last;
  EXPECT_TRUE(done);
  EXPECT_EQ(st.content, "");  // the call is not content
  ASSERT_EQ(calls.size(), 1u) << r.raw;
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_TRUE(json::parse(calls[0]["function"]["arguments"].get<std::string>(), nullptr, false)
                  .is_object());
  EXPECT_GT(st.call_chunks, 1);  // the name first, then the arguments in pieces
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
  // The unmodified client's follow-up still gets its answer: the paused KV went back to the
  // prefix cache, which still holds the full blocks of the first turn.
  Reply follow =
      s.post("/v1/chat/completions", follow_up(s.model(), first.body["choices"][0]["message"]));
  ASSERT_EQ(follow.status, 200);
  const int64_t prompt0 = first.body["usage"]["prompt_tokens"];
  EXPECT_GE(follow.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
            prompt0 - prompt0 % 16);
  EXPECT_EQ(follow.headers.count("X-Infercept-Resumed"), 0u);
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

// What real SDKs send back: the text the model wrote around its calls as the assistant's
// content, another tool_choice, the tools left out on the last turn. The follow-ups are
// recognized by their call ids all the same, and keep the KV of what they share with the
// paused turn.
TEST(ServerInterception, FollowUpsAreRecognizedByCallIdWhateverElseChanges) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  Reply first = s.post("/v1/chat/completions", weather_request(s.model()));
  ASSERT_EQ(first.status, 200) << first.raw;
  ASSERT_TRUE(first.body.contains("interception")) << first.raw;
  EXPECT_EQ(first.body["prompt_token_ids"].size(),
            first.body["usage"]["prompt_tokens"].get<size_t>());
  json assistant = first.body["choices"][0]["message"];
  assistant["content"] = "Let me look that up for you.";
  json second_req = weather_request(s.model());
  second_req["tool_choice"] = "required";
  second_req["messages"] = with_tool_results(weather_messages(), assistant);
  Reply second = s.post("/v1/chat/completions", second_req);
  ASSERT_EQ(second.status, 200) << second.raw;
  EXPECT_EQ(resumed_from(second), first.body["interception"]["id"]);
  const int64_t want = expected_reuse(first.body, second.body);
  // The content changed the tokens right after the assistant's turn opened: the rest of the
  // prompt is still shared.
  EXPECT_GT(want, first.body["usage"]["prompt_tokens"].get<int64_t>() / 2);
  EXPECT_GE(cached_tokens(second.body), want);
  ASSERT_TRUE(second.body.contains("interception")) << second.raw;  // required: a call again

  // The last turn leaves the tools out (a final answer): still this conversation's follow-up.
  json last_req = {
      {"model", s.model()},
      {"messages", with_tool_results(second_req["messages"], second.body["choices"][0]["message"])},
      {"temperature", 0},
      {"max_tokens", 8},
      {"return_token_ids", true}};
  Reply last = s.post("/v1/chat/completions", last_req);
  ASSERT_EQ(last.status, 200) << last.raw;
  EXPECT_EQ(resumed_from(last), second.body["interception"]["id"]);
  EXPECT_GE(cached_tokens(last.body), expected_reuse(second.body, last.body));
  EXPECT_EQ(s.metric("infercept:interception_resumes_total{how=\"prefix\"}"), 2);
  EXPECT_EQ(s.get("/v1/interceptions").body["data"].size(), 0u);
  EXPECT_TRUE(s.kv_empty_within(5.0));
}

// A request that carries none of a paused request's call ids never consumes it, however much
// of its prompt it repeats: a repeated first turn, or another conversation that extends the
// paused one's prompt. The paused request's own follow-up still finds it.
TEST(ServerInterception, ARequestWithoutItsCallIdsContinuesNothing) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  json req = weather_request(s.model());
  req.erase("tool_choice");  // no forced opening: the prompt ends where the turn starts
  req["intercept_after_tokens"] = 3;
  Reply first = s.post("/v1/chat/completions", req);
  ASSERT_EQ(first.status, 200) << first.raw;
  ASSERT_TRUE(first.body.contains("interception")) << first.raw;
  const std::string id = first.body["interception"]["id"];

  Reply repeat = s.post("/v1/chat/completions", req);
  ASSERT_EQ(repeat.status, 200) << repeat.raw;
  EXPECT_EQ(resumed_from(repeat), "");
  ASSERT_TRUE(repeat.body.contains("interception")) << repeat.raw;
  EXPECT_NE(repeat.body["interception"]["id"], id);
  EXPECT_EQ(s.get("/v1/interceptions/" + id).status, 200);

  // Its prompt starts with all of the paused request's prompt, and goes on elsewhere.
  json stranger = req;
  stranger.erase("intercept_after_tokens");
  stranger["intercept"] = false;
  stranger["max_tokens"] = 4;
  stranger["messages"].push_back({{"role", "assistant"}, {"content", "I will check."}});
  stranger["messages"].push_back({{"role", "user"}, {"content", "Thanks. And Rome?"}});
  Reply other = s.post("/v1/chat/completions", stranger);
  ASSERT_EQ(other.status, 200) << other.raw;
  EXPECT_EQ(resumed_from(other), "");
  EXPECT_EQ(s.get("/v1/interceptions").body["data"].size(), 2u);
  EXPECT_EQ(s.metric("infercept:interception_resumes_total{how=\"prefix\"}"), 0);

  json follow = req;
  follow.erase("intercept_after_tokens");
  follow["intercept"] = false;
  follow["max_tokens"] = 4;
  follow["messages"] = with_tool_results(weather_messages(), first.body["choices"][0]["message"]);
  Reply mine = s.post("/v1/chat/completions", follow);
  ASSERT_EQ(mine.status, 200) << mine.raw;
  EXPECT_EQ(resumed_from(mine), id);
  EXPECT_GE(cached_tokens(mine.body), expected_reuse(first.body, mine.body));
  EXPECT_GT(expected_reuse(first.body, mine.body), 0);
  const std::string repeat_id = repeat.body["interception"]["id"];
  EXPECT_EQ(s.get("/v1/interceptions").body["data"][0]["id"], repeat_id);
  EXPECT_EQ(s.request("DELETE", "/v1/interceptions/" + repeat_id).status, 200);
  EXPECT_TRUE(s.kv_empty_within(5.0));
}

// A later turn that carries the call ids of two paused requests (a client that skipped a
// resume) continues the newest; the older one is released, and its id says why.
TEST(ServerInterception, SeveralMatchedTakeTheNewestAndReleaseTheRest) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  json req = weather_request(s.model());
  req.erase("tool_choice");
  req["intercept_after_tokens"] = 2;
  Reply a = s.post("/v1/chat/completions", req);
  ASSERT_TRUE(a.body.contains("interception")) << a.raw;
  json rome = req;
  rome["messages"][4]["content"] = "What is the weather in Rome?";
  Reply b = s.post("/v1/chat/completions", rome);
  ASSERT_TRUE(b.body.contains("interception")) << b.raw;
  // Both exchanges in one conversation.
  json msgs = with_tool_results(weather_messages(), a.body["choices"][0]["message"]);
  msgs.push_back({{"role", "user"}, {"content", "What is the weather in Rome?"}});
  msgs = with_tool_results(msgs, b.body["choices"][0]["message"]);
  json later = req;
  later.erase("intercept_after_tokens");
  later["intercept"] = false;
  later["max_tokens"] = 4;
  later["messages"] = msgs;
  Reply r = s.post("/v1/chat/completions", later);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(resumed_from(r), b.body["interception"]["id"]);
  Reply gone = s.get("/v1/interceptions/" + a.body["interception"]["id"].get<std::string>());
  EXPECT_EQ(gone.status, 409);
  EXPECT_EQ(gone.body["error"]["code"], "interception_superseded");
  EXPECT_EQ(s.metric("infercept:interceptions_superseded_total"), 1);
  EXPECT_EQ(s.get("/v1/interceptions").body["data"].size(), 0u);
  EXPECT_TRUE(s.kv_empty_within(5.0));
}

// /v1/completions has no call ids: a raw prompt continues a paused request only when it
// extends all of that request's tokens (prompt and generated), not one token less.
TEST(ServerInterception, RawCompletionsContinueOnlyWhenExtendingAllTokens) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  Reply first = s.post("/v1/chat/completions", weather_request(s.model()));
  ASSERT_TRUE(first.body.contains("interception")) << first.raw;
  const std::vector<int32_t> all = held_tokens(first.body);
  std::vector<int32_t> short_one(all.begin(), all.end() - 1);
  short_one.push_back(all[5] == all.back() ? all[6] : all[5]);  // the last token differs
  short_one.insert(short_one.end(), all.begin(), all.begin() + 8);
  auto completion = [&](const std::vector<int32_t>& prompt) {
    return s.post("/v1/completions", {{"model", s.model()},
                                      {"prompt", prompt},
                                      {"max_tokens", 2},
                                      {"temperature", 0},
                                      {"return_token_ids", true}});
  };
  Reply no = completion(short_one);
  ASSERT_EQ(no.status, 200) << no.raw;
  EXPECT_EQ(resumed_from(no), "");
  EXPECT_EQ(no.body["choices"][0]["prompt_token_ids"].get<std::vector<int32_t>>(), short_one);
  EXPECT_EQ(s.metric("infercept:num_interceptions_open"), 1);

  std::vector<int32_t> extended = all;
  extended.insert(extended.end(), all.begin(), all.begin() + 8);
  Reply yes = completion(extended);
  ASSERT_EQ(yes.status, 200) << yes.raw;
  EXPECT_EQ(resumed_from(yes), first.body["interception"]["id"]);
  EXPECT_GE(cached_tokens(yes.body), ((int64_t)all.size() - 1) / 16 * 16);
  EXPECT_EQ(s.metric("infercept:num_interceptions_open"), 0);
  EXPECT_TRUE(s.kv_empty_within(5.0));
}

// tool_choice none renders the request's tools (vLLM's default), so a final turn shares its
// prompt, tools included, with the turns before; its text is read as text: no calls, no
// pause.
TEST(ServerInterception, ToolChoiceNoneKeepsTheToolsInThePrompt) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  json req = weather_request(s.model());
  req.erase("tool_choice");
  req["intercept"] = false;
  req["max_tokens"] = 1;
  Reply with_auto = s.post("/v1/chat/completions", req);
  ASSERT_EQ(with_auto.status, 200) << with_auto.raw;
  req["tool_choice"] = "none";
  req["max_tokens"] = 40;
  req.erase("intercept");
  Reply with_none = s.post("/v1/chat/completions", req);
  ASSERT_EQ(with_none.status, 200) << with_none.raw;
  EXPECT_EQ(with_none.body["prompt_token_ids"], with_auto.body["prompt_token_ids"]);
  json no_tools = req;
  no_tools.erase("tools");
  no_tools.erase("tool_choice");
  no_tools["max_tokens"] = 1;
  Reply bare = s.post("/v1/chat/completions", no_tools);
  ASSERT_EQ(bare.status, 200);
  EXPECT_LT(bare.body["usage"]["prompt_tokens"], with_none.body["usage"]["prompt_tokens"]);
  const json& msg = with_none.body["choices"][0]["message"];
  EXPECT_FALSE(msg.contains("tool_calls")) << with_none.raw;
  EXPECT_NE(with_none.body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_FALSE(with_none.body.contains("interception"));
  // Streamed alike: no call, the text as content.
  req["stream"] = true;
  Reply streamed = s.post("/v1/chat/completions", req);
  std::string text;
  for (const json& ev : sse_events(streamed.raw)) {
    if (ev["choices"].empty()) continue;
    const json& d = ev["choices"][0]["delta"];
    EXPECT_FALSE(d.contains("tool_calls")) << ev.dump();
    if (d.contains("content")) text += d["content"].get<std::string>();
  }
  EXPECT_EQ(text, msg["content"].get<std::string>());

  // The final answer of a tool loop asked with tool_choice none continues the paused turn
  // and keeps its KV through the tools.
  Reply paused = s.post("/v1/chat/completions", weather_request(s.model()));
  ASSERT_TRUE(paused.body.contains("interception")) << paused.raw;
  json final_req = weather_request(s.model());
  final_req["tool_choice"] = "none";
  final_req["max_tokens"] = 8;
  final_req["messages"] =
      with_tool_results(weather_messages(), paused.body["choices"][0]["message"]);
  Reply final_turn = s.post("/v1/chat/completions", final_req);
  ASSERT_EQ(final_turn.status, 200) << final_turn.raw;
  EXPECT_EQ(resumed_from(final_turn), paused.body["interception"]["id"]);
  const int64_t want = expected_reuse(paused.body, final_turn.body);
  EXPECT_GT(want, paused.body["usage"]["prompt_tokens"].get<int64_t>() / 2);
  EXPECT_GE(cached_tokens(final_turn.body), want);
  EXPECT_EQ(s.get("/v1/interceptions").body["data"].size(), 0u);
  EXPECT_TRUE(s.kv_empty_within(5.0));
}

// prompt_cache_key and cache_salt scope the cache: a follow-up in another scope continues
// nothing, even with the call ids; in the same scope it does. Bad values are 400s naming the
// parameter.
TEST(ServerInterception, CacheScopesSeparateFollowUps) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  json req = weather_request(s.model());
  req["prompt_cache_key"] = "conversation-1";
  Reply first = s.post("/v1/chat/completions", req);
  ASSERT_TRUE(first.body.contains("interception")) << first.raw;
  json follow = req;
  follow.erase("tool_choice");
  follow["intercept"] = false;
  follow["max_tokens"] = 4;
  follow["messages"] = with_tool_results(weather_messages(), first.body["choices"][0]["message"]);
  for (const auto& [field, value] :
       {std::pair<const char*, const char*>{"prompt_cache_key", "conversation-2"},
        {"cache_salt", "tenant-9"}}) {
    json elsewhere = follow;
    elsewhere[field] = value;
    Reply r = s.post("/v1/chat/completions", elsewhere);
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(resumed_from(r), "") << field;
  }
  Reply mine = s.post("/v1/chat/completions", follow);
  ASSERT_EQ(mine.status, 200) << mine.raw;
  EXPECT_EQ(resumed_from(mine), first.body["interception"]["id"]);
  for (const auto& [field, value] : {std::pair<const char*, json>{"cache_salt", ""},
                                     {"prompt_cache_key", 7},
                                     {"prompt_cache_key", std::string(513, 'k')}}) {
    json bad = follow;
    bad[field] = value;
    for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
      if (std::string(path) == "/v1/completions") {
        bad.erase("messages");
        bad["prompt"] = "Hello";
      }
      Reply r = s.post(path, bad);
      EXPECT_EQ(r.status, 400) << path << " " << r.raw;
      EXPECT_EQ(r.body["error"]["param"], field) << r.raw;
      EXPECT_EQ(r.body["error"]["type"], "invalid_request_error") << r.raw;
    }
  }
  EXPECT_TRUE(s.kv_empty_within(5.0));
}

// The engine's prefix cache (issue 30's engine side): requests that continue no paused
// request still find the KV of what they share with earlier ones of their scope (a repeated
// turn, another conversation with the same start), in whole blocks; other keys and salts
// find nothing. Needs the engine to report RequestOutput::cached_tokens.
TEST(ServerPrefixCache, RequestsThatContinueNothingStillReuseTheirScopesPrefix) {
  server::ServerOptions o = server_test_options();
  o.api_keys = {"key-a", "key-b"};
  TestServer s(o);
  ASSERT_TRUE(s.ok());
  Reply first = s.post("/v1/chat/completions", weather_request(s.model()), "key-a");
  ASSERT_TRUE(first.body.contains("interception")) << first.raw;
  Reply repeat = s.post("/v1/chat/completions", weather_request(s.model()), "key-a");
  ASSERT_EQ(repeat.status, 200) << repeat.raw;
  EXPECT_EQ(resumed_from(repeat), "");
  EXPECT_GE(cached_tokens(repeat.body), expected_reuse(first.body, repeat.body));
  EXPECT_GT(expected_reuse(first.body, repeat.body), 0);
  json rome = weather_request(s.model());
  rome["messages"][4]["content"] = "What is the weather in Rome?";
  rome["intercept"] = false;
  Reply other = s.post("/v1/chat/completions", rome, "key-a");
  ASSERT_EQ(other.status, 200) << other.raw;
  EXPECT_GE(cached_tokens(other.body), expected_reuse(first.body, other.body));
  EXPECT_GT(s.metric("infercept:prefix_cache_hits_total", "key-a"), 0);
  EXPECT_GE(s.metric("infercept:prefix_cache_queries_total", "key-a"),
            s.metric("infercept:prefix_cache_hits_total", "key-a"));
  // Another key, or another salt of the same key: nothing shared.
  Reply b = s.post("/v1/chat/completions", rome, "key-b");
  ASSERT_EQ(b.status, 200) << b.raw;
  EXPECT_EQ(cached_tokens(b.body), 0);
  json salted = rome;
  salted["cache_salt"] = "tenant-2";
  Reply c = s.post("/v1/chat/completions", salted, "key-a");
  ASSERT_EQ(c.status, 200) << c.raw;
  EXPECT_EQ(cached_tokens(c.body), 0);
}

}  // namespace
}  // namespace infercept::testing
