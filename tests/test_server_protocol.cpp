// The server's pieces that need no model: a turn read into OpenAI tool calls (the engine's
// parser, so a malformed call is text here too), the streaming filter, the chunks and their
// event framing, the cache scope fields and namespaces, the interception registry's rules
// (follow-ups by call id, raw prompts extending a paused request, eviction at the limit),
// /metrics numbers and lines, histogram quantiles, and the dashboard's key page.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "server/dashboard.h"
#include "server/interception_registry.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/tool_parser.h"

namespace infercept::server {
namespace {

// What a client of the stream sees as content: the content deltas as the turn came and at
// its end.
std::string streamed_content(const std::string& turn, ChatTemplateKind kind, size_t piece) {
  ChatTurnStreamer f(TurnFormat{tool_call_format(kind), false}, true);
  std::vector<json> deltas;
  for (size_t i = 0; i < turn.size(); i += piece)
    for (json& d : f.push(turn.substr(i, piece))) deltas.push_back(std::move(d));
  for (json& d : f.finish()) deltas.push_back(std::move(d));
  std::string out;
  for (const json& d : deltas)
    if (d.contains("content")) out += d["content"].get<std::string>();
  return out;
}

TEST(ServerProtocol, ChatMessageJsonIsWhatParseMessagesReadsBack) {
  const std::vector<ChatMessage> in = {
      {.role = "system", .content = "Be brief."},
      {.role = "user", .content = "Paris?"},
      {.role = "assistant",
       .tool_calls = {ToolCall{"call_a", "get_weather", "{\"city\":\"Paris\"}"}},
       .reasoning_content = "Hm."},
      {.role = "tool", .content = "20 C", .tool_call_id = "call_a", .name = "get_weather"},
      {.role = "assistant", .content = "It is 20 C."}};
  json arr = json::array();
  for (const ChatMessage& m : in) arr.push_back(chat_message_json(m));
  EXPECT_TRUE(arr[2]["content"].is_null()) << "a turn of calls only has null content";
  EXPECT_EQ(arr[4]["content"], "It is 20 C.");
  EXPECT_FALSE(arr[4].contains("tool_calls"));
  std::vector<ChatMessage> back;
  ASSERT_FALSE(parse_messages(arr, "messages", back).has_value());
  ASSERT_EQ(back.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(back[i].role, in[i].role);
    EXPECT_EQ(back[i].content, in[i].content);
    EXPECT_EQ(back[i].reasoning_content, in[i].reasoning_content);
    EXPECT_EQ(back[i].tool_call_id, in[i].tool_call_id);
    EXPECT_EQ(back[i].name, in[i].name);
    ASSERT_EQ(back[i].tool_calls.size(), in[i].tool_calls.size());
    for (size_t k = 0; k < in[i].tool_calls.size(); ++k) {
      EXPECT_EQ(back[i].tool_calls[k].id, in[i].tool_calls[k].id);
      EXPECT_EQ(back[i].tool_calls[k].name, in[i].tool_calls[k].name);
      EXPECT_EQ(json::parse(back[i].tool_calls[k].arguments_json),
                json::parse(in[i].tool_calls[k].arguments_json));
    }
  }
}

TEST(ServerToolParser, CallsGetIdsAndContentIsTheRest) {
  const AssistantTurn t = parse_assistant_turn(
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>",
      ChatTemplateKind::chatml);
  ASSERT_EQ(t.calls.size(), 1u);
  EXPECT_EQ(t.calls[0].name, "get_weather");
  EXPECT_EQ(t.calls[0].arguments_json, "{\"city\": \"Paris\"}");
  EXPECT_EQ(t.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(t.content, "Let me look.");
}

// The one rule, as the server applies it: a malformed call is content, verbatim, and the
// stream delivers the same content as the whole answer.
TEST(ServerToolParser, MalformedHermesCallIsContentStreamedOrNot) {
  for (const std::string& turn :
       {std::string("Sure.\n<tool_call>\nnot json\n</tool_call>"),
        std::string("<tool_call>\n{\"name\": 7}\n</tool_call>"),
        std::string("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci")}) {
    const AssistantTurn t = parse_assistant_turn(turn, ChatTemplateKind::chatml);
    EXPECT_TRUE(t.calls.empty()) << turn;
    EXPECT_EQ(t.content, turn);
    for (size_t piece : {1, 3, 64})
      EXPECT_EQ(streamed_content(turn, ChatTemplateKind::chatml, piece), turn) << piece;
  }
  // A malformed block and a call: the call is a call, the block stays in the content.
  const std::string mixed =
      "A <tool_call>oops</tool_call> B\n<tool_call>{\"name\": \"f\"}</tool_call>";
  const AssistantTurn t = parse_assistant_turn(mixed, ChatTemplateKind::chatml);
  ASSERT_EQ(t.calls.size(), 1u);
  EXPECT_EQ(t.calls[0].name, "f");
  EXPECT_EQ(t.content, "A <tool_call>oops</tool_call> B");
  EXPECT_EQ(streamed_content(mixed, ChatTemplateKind::chatml, 2), t.content);
}

TEST(ServerToolParser, MalformedJsonTurnIsContentStreamedOrNot) {
  for (const std::string& turn : {std::string("{\"name\": \"f\", \"parameters\": {\"x\": 1}"),
                                  std::string("<|python_tag|>{\"nam\": \"f\"}"),
                                  std::string("{\"name\": \"f\"}\nnot a call")}) {
    const AssistantTurn t = parse_assistant_turn(turn, ChatTemplateKind::llama3);
    EXPECT_TRUE(t.calls.empty()) << turn;
    EXPECT_EQ(t.content, turn);
    EXPECT_EQ(streamed_content(turn, ChatTemplateKind::llama3, 4), turn);
  }
  const AssistantTurn ok = parse_assistant_turn(
      "{\"name\": \"f\", \"parameters\": {\"x\": 1}}\n{\"name\": \"g\", \"parameters\": {}}",
      ChatTemplateKind::llama3);
  ASSERT_EQ(ok.calls.size(), 2u);
  EXPECT_EQ(ok.calls[1].name, "g");
  EXPECT_EQ(ok.content, "");
}

// A client's view of a streamed chat turn, accumulated as the openai SDK does: content and
// reasoning appended, tool calls by index (the first chunk of one has its id, type and name,
// the later ones pieces of its arguments).
struct Accumulated {
  std::string content, reasoning;
  std::vector<ToolCall> calls;
  bool name_before_arguments_done = true;
};

void accumulate(Accumulated& a, const json& d) {
  if (d.contains("content")) a.content += d["content"].get<std::string>();
  if (d.contains("reasoning_content")) a.reasoning += d["reasoning_content"].get<std::string>();
  if (!d.contains("tool_calls")) return;
  for (const json& c : d["tool_calls"]) {
    const size_t i = c["index"].get<size_t>();
    if (c.contains("id")) {
      ASSERT_EQ(i, a.calls.size()) << d.dump();  // a new call takes the next index
      EXPECT_EQ(c["type"], "function");
      a.calls.push_back({c["id"], c["function"]["name"], ""});
    }
    ASSERT_LT(i, a.calls.size()) << d.dump();  // arguments only after the name
    a.calls[i].arguments_json += c["function"]["arguments"].get<std::string>();
  }
}

// Streamed in pieces of every size, a turn adds up to what the whole-turn parse reports, the
// calls with the ids they were streamed with; the name comes in a chunk before the last piece
// of the arguments.
TEST(ServerToolParser, StreamedDeltasAddUpToTheWholeTurn) {
  const struct {
    std::string turn;
    TurnFormat format;
  } cases[] = {
      {"Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
       "{\"tz\": \"CET\"}}\n</tool_call>",
       {ToolCallFormat::hermes, false}},
      {"<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}; {\"name\": "
       "\"calc\", \"parameters\": {\"e\": \"1+2\"}}",
       {ToolCallFormat::json_turn, false}},
      {"[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}",
       {ToolCallFormat::mistral, false}},
      {"<think>\nThe weather, then.\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"w\", "
       "\"arguments\": {}}\n</tool_call>",
       {ToolCallFormat::hermes, true}},
      {"No calls here, <b>just</b> text.  ", {ToolCallFormat::hermes, false}},
  };
  for (const auto& c : cases) {
    for (size_t piece : {1, 2, 5, 7, 1000}) {
      ChatTurnStreamer s(c.format, true);
      Accumulated a;
      for (size_t i = 0; i < c.turn.size(); i += piece)
        for (const json& d : s.push(c.turn.substr(i, piece))) {
          accumulate(a, d);
          if (piece == 1 && d.contains("tool_calls") && d["tool_calls"][0].contains("id")) {
            // The name went out while the rest of the turn was still to come.
            EXPECT_LT(i + 1, c.turn.size());
          }
        }
      for (const json& d : s.finish()) accumulate(a, d);
      AssistantTurn whole = parse_assistant_turn(c.turn, c.format);
      s.assign_ids(whole.calls);
      EXPECT_EQ(a.content, whole.content) << c.turn;
      EXPECT_EQ(a.reasoning, whole.reasoning) << c.turn;
      ASSERT_EQ(a.calls.size(), whole.calls.size()) << c.turn;
      for (size_t i = 0; i < a.calls.size(); ++i) {
        EXPECT_EQ(a.calls[i].id, whole.calls[i].id);
        EXPECT_EQ(a.calls[i].name, whole.calls[i].name);
        EXPECT_EQ(a.calls[i].arguments_json, whole.calls[i].arguments_json);
        EXPECT_TRUE(json::parse(a.calls[i].arguments_json).is_object());
      }
      size_t first = 9;
      EXPECT_TRUE(s.held_calls(whole.calls, &first).empty());
    }
  }
}

// Calls to server-side tools are held back, with every call after one; the turn's end says
// which the client gets (held_calls), at the next indexes.
TEST(ServerToolParser, ServerToolCallsAreHeldBack) {
  const std::string turn =
      "<tool_call>{\"name\": \"client\", \"arguments\": {}}</tool_call><tool_call>{\"name\": "
      "\"calculator\", \"arguments\": {\"expression\": \"1\"}}</tool_call><tool_call>"
      "{\"name\": \"client\", \"arguments\": {\"b\": 2}}</tool_call>";
  ChatTurnStreamer s({ToolCallFormat::hermes, false}, true, {"calculator"});
  Accumulated a;
  for (const json& d : s.push(turn)) accumulate(a, d);
  for (const json& d : s.finish()) accumulate(a, d);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "client");
  AssistantTurn whole = parse_assistant_turn(turn, TurnFormat{});
  s.assign_ids(whole.calls);
  EXPECT_EQ(whole.calls[0].id, a.calls[0].id);
  size_t first = 0;
  const std::vector<ToolCall> held = s.held_calls(whole.calls, &first);
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(first, 1u);
  EXPECT_EQ(held[0].name, "calculator");
  EXPECT_EQ(held[1].arguments_json, "{\"b\": 2}");
}

TEST(ServerStream, ChunksAndEventFraming) {
  StreamHeader h{"chatcmpl-1", true, 1700000000, "m", false};
  EXPECT_EQ(sse_event(stream_chunk(h, chat_chunk_choice(chat_first_delta()))),
            "data: {\"choices\":[{\"delta\":{\"content\":\"\",\"role\":\"assistant\"},"
            "\"finish_reason\":null,\"index\":0,\"logprobs\":null}],\"created\":1700000000,"
            "\"id\":\"chatcmpl-1\",\"model\":\"m\",\"object\":\"chat.completion.chunk\"}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  h.include_usage = true;
  const json c = stream_chunk(h, chat_chunk_choice(json::object(), nullptr, "tool_calls"));
  EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
  EXPECT_EQ(c["choices"][0]["finish_reason"], "tool_calls");
  const json u = usage_chunk(h, usage_json(5, 2, 3));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 7);
  EXPECT_EQ(u["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  const json d = tool_calls_delta({{"call_a", "f", "{}"}, {"call_b", "g", "{\"x\":1}"}});
  ASSERT_EQ(d["tool_calls"].size(), 2u);
  EXPECT_EQ(d["tool_calls"][1]["index"], 1);
  EXPECT_EQ(d["tool_calls"][1]["function"]["arguments"], "{\"x\":1}");
  h.chat = false;
  const json t = stream_chunk(h, completion_chunk_choice("hi", nullptr));
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["choices"][0]["text"], "hi");
  const json lp = completion_logprobs_json({{"ab", -0.5f, {}}, {"c", -1.0f, {}}}, 10);
  EXPECT_EQ(lp["text_offset"], json::array({10, 12}));
}

TEST(ServerMetrics, ValuesPrintInFull) {
  EXPECT_EQ(format_metric_value(20), "20");
  EXPECT_EQ(format_metric_value(10), "10");
  EXPECT_EQ(format_metric_value(1800), "1800");
  EXPECT_EQ(format_metric_value(123456789), "123456789");
  EXPECT_EQ(format_metric_value(0), "0");
  EXPECT_EQ(format_metric_value(-3), "-3");
  EXPECT_EQ(format_metric_value(0.25), "0.25");
  EXPECT_EQ(format_metric_value(0.001), "0.001");
  EXPECT_EQ(format_metric_value(2.5), "2.5");
  EXPECT_EQ(format_metric_value(0.1 + 0.2), "0.30000000000000004");  // reads back the same
  EXPECT_EQ(format_metric_value(12345.678), "12345.678");
  EXPECT_EQ(format_metric_value(0.0000123), "0.0000123");
  EXPECT_EQ(format_metric_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(format_metric_value(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(format_metric_value(0.0 / 0.0), "NaN");
  for (double v : {0.1, 1.0 / 3.0, 7.5, 42.0, 3.14159e5, 0.0625})
    EXPECT_EQ(std::stod(format_metric_value(v)), v) << v;
}

TEST(ServerMetrics, HistogramBucketEdgesPrintInFull) {
  Histogram h({0.5, 10.0, 20.0, 1800.0});
  h.observe(15.0);
  std::string out;
  h.render(out, "x", "tool=\"t\"");
  EXPECT_NE(out.find("x_bucket{tool=\"t\",le=\"10\"} 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{tool=\"t\",le=\"20\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("le=\"1800\""), std::string::npos) << out;
  EXPECT_NE(out.find("le=\"0.5\""), std::string::npos) << out;
  EXPECT_NE(out.find("le=\"+Inf\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum{tool=\"t\"} 15\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("e+"), std::string::npos) << out;
}

TEST(ServerMetrics, QuantilesAreInterpolatedWithinTheBucket) {
  Histogram h({1.0, 2.0, 5.0, 10.0});
  EXPECT_EQ(h.quantile(0.5), 0.0);             // empty
  for (int i = 0; i < 4; ++i) h.observe(3.0);  // all in (2, 5]
  // Rank 2 of 4 in a bucket from 2 to 5 holding all 4: halfway.
  EXPECT_DOUBLE_EQ(h.quantile(0.5), 3.5);
  EXPECT_DOUBLE_EQ(h.quantile(1.0), 5.0);
  EXPECT_DOUBLE_EQ(h.quantile(0.25), 2.75);
  Histogram g({1.0, 2.0, 5.0, 10.0});
  g.observe(0.5);  // (0, 1]
  g.observe(0.7);
  g.observe(1.5);                            // (1, 2]
  g.observe(8.0);                            // (5, 10]
  EXPECT_DOUBLE_EQ(g.quantile(0.25), 0.5);   // rank 1 of the 2 in (0, 1]
  EXPECT_DOUBLE_EQ(g.quantile(0.5), 1.0);    // rank 2: the top of (0, 1]
  EXPECT_DOUBLE_EQ(g.quantile(0.625), 1.5);  // rank 2.5: halfway through (1, 2]
  EXPECT_NEAR(g.quantile(0.95), 9.0, 1e-9);  // rank 3.8: 80% into (5, 10]
  Histogram inf({1.0, 2.0});
  inf.observe(100.0);
  EXPECT_DOUBLE_EQ(inf.quantile(0.5), 2.0);  // past the last bound: that bound
  // The dashboard's p50/p95 are these.
  const nlohmann::json j = g.to_json();
  EXPECT_DOUBLE_EQ(j["p50"].get<double>(), 1.0);
  EXPECT_NEAR(j["p95"].get<double>(), 9.0, 1e-9);
}

TEST(ServerDashboard, KeyPageSaysHowToPassAKey) {
  for (bool given : {false, true}) {
    const std::string page = dashboard_key_page(given);
    EXPECT_NE(page.find("<html"), std::string::npos);
    EXPECT_NE(page.find("?api_key="), std::string::npos);
    EXPECT_NE(page.find("Authorization: Bearer"), std::string::npos);
    EXPECT_NE(page.find("name=\"api_key\""), std::string::npos);  // the form
    EXPECT_NE(page.find(given ? "not accepted" : "No API key was given"), std::string::npos);
  }
}

// prompt_cache_key (OpenAI) and cache_salt (vLLM) on both endpoints: optional strings of at
// most 512 bytes, the salt not empty; anything else a 400 naming the parameter.
TEST(ServerProtocol, CacheScopeFieldsAreCheckedAndNamed) {
  RequestLimits limits;
  limits.context = 2048;
  const json chat = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  const json completion = {{"model", "m"}, {"prompt", "hi"}};
  auto error_of = [&](json body) -> std::optional<ApiError> {
    if (body.contains("messages")) {
      ChatRequest cr;
      return parse_chat_request(body, limits, cr);
    }
    CompletionRequest cr;
    return parse_completion_request(body, limits, cr);
  };
  for (const json& base : {chat, completion}) {
    struct Bad {
      const char* field;
      json value;
      const char* code;  // "" = null
    };
    for (const Bad& bad : {Bad{"prompt_cache_key", 5, "invalid_type"},
                           Bad{"prompt_cache_key", json::array({"a"}), "invalid_type"},
                           Bad{"prompt_cache_key", std::string(513, 'k'), ""},
                           Bad{"cache_salt", true, "invalid_type"}, Bad{"cache_salt", "", ""},
                           Bad{"cache_salt", std::string(513, 's'), ""}}) {
      json body = base;
      body[bad.field] = bad.value;
      auto e = error_of(body);
      ASSERT_TRUE(e.has_value()) << body.dump();
      EXPECT_EQ(e->status, 400);
      EXPECT_EQ(e->param, bad.field) << e->message;
      EXPECT_EQ(e->code, bad.code) << e->message;
      const json wire = error_body(*e);
      EXPECT_EQ(wire["error"]["type"], "invalid_request_error");
      EXPECT_EQ(wire["error"]["param"], bad.field);
    }
    json ok = base;
    ok["prompt_cache_key"] = std::string(512, 'k');
    ok["cache_salt"] = std::string(512, 's');
    EXPECT_FALSE(error_of(ok).has_value());
    ok["prompt_cache_key"] = "";  // an empty key is the default scope
    ok["cache_salt"] = nullptr;   // null: absent
    EXPECT_FALSE(error_of(ok).has_value());
  }
  ChatRequest cr;
  json body = chat;
  body["prompt_cache_key"] = "conversation-7";
  body["cache_salt"] = "tenant-3";
  ASSERT_FALSE(parse_chat_request(body, limits, cr).has_value());
  EXPECT_EQ(cr.cache.prompt_cache_key, "conversation-7");
  EXPECT_EQ(cr.cache.cache_salt, "tenant-3");
  CompletionRequest comp;
  body = completion;
  body["cache_salt"] = "tenant-3";
  ASSERT_FALSE(parse_completion_request(body, limits, comp).has_value());
  EXPECT_EQ(comp.cache.prompt_cache_key, "");
  EXPECT_EQ(comp.cache.cache_salt, "tenant-3");
}

// Two requests share a namespace exactly when their owner, key and salt are all equal; no
// key and salt can spell another pair's namespace.
TEST(ServerProtocol, CacheNamespacesSeparateOwnersKeysAndSalts) {
  const std::string base = cache_namespace("key0", {"k", "s"});
  EXPECT_EQ(base, cache_namespace("key0", {"k", "s"}));
  EXPECT_NE(base, cache_namespace("key1", {"k", "s"}));
  EXPECT_NE(base, cache_namespace("key0", {"k2", "s"}));
  EXPECT_NE(base, cache_namespace("key0", {"k", "s2"}));
  EXPECT_NE(cache_namespace("key0", {}), cache_namespace("key0", {"", "s"}));
  EXPECT_NE(cache_namespace("", {}), cache_namespace("key0", {}));
  EXPECT_NE(cache_namespace("key0", {"a\x1f"
                                     "b",
                                     "c"}),
            cache_namespace("key0", {"a",
                                     "b\x1f"
                                     "c"}));
  EXPECT_NE(cache_namespace("key0", {"a:1", ""}), cache_namespace("key0", {"a", "1"}));
}

// A registry whose releases are recorded (the engine's abort in the server).
struct RecordingRegistry {
  std::vector<uint64_t> released;
  InterceptionRegistry r;
  explicit RecordingRegistry(int64_t max_per_owner)
      : r(600.0, max_per_owner, [this](uint64_t id) { released.push_back(id); }) {}
  std::string pause(const std::string& owner, uint64_t engine_id, std::vector<std::string> call_ids,
                    std::vector<int32_t> tokens = {1, 2, 3}, const std::string& ns = "ns",
                    std::vector<PausedLease>* evicted = nullptr) {
    PausedRequest p;
    p.owner = owner;
    p.cache_namespace = ns;
    p.engine_id = engine_id;
    p.call_ids = std::move(call_ids);
    p.tokens = std::move(tokens);
    p.paused_at = (double)engine_id;  // later engine ids paused later
    const double now = p.paused_at;
    return r.add(std::move(p), now, evicted);
  }
};

// A chat follow-up continues the paused request whose call ids it carries, whatever else its
// tokens do; one that carries none continues nothing. Another owner's or another namespace's
// ids match nothing. Several matched: the newest is taken, the older ones released.
TEST(ServerInterceptionRegistry, ChatFollowUpsMatchByCallId) {
  RecordingRegistry rr(0);
  InterceptionRegistry& r = rr.r;
  const std::string a = rr.pause("o", 1, {"call_a1", "call_a2"});
  const std::string b = rr.pause("o", 2, {"call_b"});
  const std::string other = rr.pause("p", 3, {"call_p"});
  std::vector<PausedLease> superseded;
  EXPECT_FALSE(r.take_followup("o", "ns", {}, &superseded));
  EXPECT_FALSE(r.take_followup("o", "ns", {"call_1", "call_x"}, &superseded));
  EXPECT_FALSE(r.take_followup("o", "ns", {"call_p"}, &superseded));  // not the owner's
  EXPECT_FALSE(r.take_followup("o", "other-ns", {"call_b"}, &superseded));
  EXPECT_EQ(r.size(), 3u);
  {
    PausedLease l = r.take_followup("o", "ns", {"call_1", "call_a2"}, &superseded);
    ASSERT_TRUE(l);
    EXPECT_EQ(l->id, a);
    EXPECT_TRUE(superseded.empty());
    l.commit();  // handed on to a generation: nothing released
  }
  EXPECT_TRUE(rr.released.empty());
  EXPECT_EQ(r.gone_reason("o", a), TakeError::resumed);
  // A later turn carrying both turns' ids (a resume the client skipped): the newest wins.
  const std::string c = rr.pause("o", 4, {"call_c"});
  {
    PausedLease l = r.take_followup("o", "ns", {"call_b", "call_c"}, &superseded);
    ASSERT_TRUE(l);
    EXPECT_EQ(l->id, c);
    ASSERT_EQ(superseded.size(), 1u);
    EXPECT_EQ(superseded[0]->id, b);
    superseded.clear();  // released
    EXPECT_EQ(rr.released, std::vector<uint64_t>({2}));
    l.commit();
  }
  EXPECT_EQ(r.gone_reason("o", b), TakeError::superseded);
  EXPECT_EQ(r.gone_reason("o", c), TakeError::resumed);
  EXPECT_EQ(r.list("o").size(), 0u);
  EXPECT_EQ(r.list("p").size(), 1u);
  EXPECT_EQ(r.list("p")[0].id, other);
}

// A raw completion continues a paused request only when it extends all of its tokens.
// A follow-up that sends the paused turn's calls back without its reasoning gets it back,
// so a template that renders reasoning gives the paused request's tokens again.
TEST(ServerInterceptionRegistry, FollowUpGetsThePausedTurnsReasoning) {
  PausedRequest p;
  ChatMessage generated;
  generated.role = "assistant";
  generated.reasoning_content = "The weather tool, then.";
  generated.tool_calls = {{"call_a", "w", "{}"}};
  p.request.messages = {{"user", "hi"}, generated};
  p.call_ids = {"call_a"};
  ChatMessage sent_back;
  sent_back.role = "assistant";
  sent_back.tool_calls = {{"call_a", "w", "{}"}};
  ChatMessage other = sent_back;
  other.tool_calls[0].id = "call_other";
  std::vector<ChatMessage> follow = {{"user", "hi"}, other, sent_back, {"tool", "sunny"}};
  EXPECT_TRUE(restore_reasoning(follow, p));
  EXPECT_EQ(follow[2].reasoning_content, "The weather tool, then.");
  EXPECT_EQ(follow[1].reasoning_content, "");  // another turn's calls
  EXPECT_FALSE(restore_reasoning(follow, p));  // present now: nothing changes
  follow[2].reasoning_content = "the client's own";
  EXPECT_FALSE(restore_reasoning(follow, p));
  EXPECT_EQ(follow[2].reasoning_content, "the client's own");
  p.request.messages.back().reasoning_content.clear();
  std::vector<ChatMessage> plain = {sent_back};
  EXPECT_FALSE(restore_reasoning(plain, p));  // the turn had no reasoning
}

TEST(ServerInterceptionRegistry, RawPromptsMustExtendAllTokens) {
  RecordingRegistry rr(0);
  InterceptionRegistry& r = rr.r;
  const std::string a = rr.pause("o", 1, {"call_a"}, {5, 6, 7, 8});
  std::vector<PausedLease> superseded;
  EXPECT_FALSE(r.take_extended("o", "ns", {5, 6, 7}, &superseded));         // a prefix of it
  EXPECT_FALSE(r.take_extended("o", "ns", {5, 6, 7, 9, 10}, &superseded));  // the last differs
  EXPECT_FALSE(r.take_extended("o", "ns", {6, 7, 8, 9}, &superseded));
  EXPECT_FALSE(r.take_extended("o", "ns2", {5, 6, 7, 8, 9}, &superseded));
  EXPECT_FALSE(r.take_extended("q", "ns", {5, 6, 7, 8, 9}, &superseded));
  const std::string b = rr.pause("o", 2, {"call_b"}, {5, 6, 7, 8, 9, 10});
  PausedLease l = r.take_extended("o", "ns", {5, 6, 7, 8, 9, 10, 11}, &superseded);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->id, b);
  ASSERT_EQ(superseded.size(), 1u);  // a's tokens are extended too, and it is older
  EXPECT_EQ(superseded[0]->id, a);
  EXPECT_EQ(r.size(), 0u);
}

// At the limit a new pause is never refused: the owner's oldest paused request makes room,
// released, and its id says it was evicted. Other owners are not touched.
TEST(ServerInterceptionRegistry, AtTheLimitTheOldestIsEvicted) {
  RecordingRegistry rr(2);
  InterceptionRegistry& r = rr.r;
  const std::string a = rr.pause("o", 1, {"call_a"});
  const std::string other = rr.pause("p", 2, {"call_p"});
  const std::string b = rr.pause("o", 3, {"call_b"});
  std::vector<PausedLease> evicted;
  const std::string c = rr.pause("o", 4, {"call_c"}, {1}, "ns", &evicted);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0]->id, a);
  evicted.clear();
  EXPECT_EQ(rr.released, std::vector<uint64_t>({1}));
  EXPECT_EQ(r.count("o"), 2u);
  EXPECT_EQ(r.count("p"), 1u);
  EXPECT_EQ(r.gone_reason("o", a), TakeError::evicted);
  EXPECT_TRUE(r.get("o", b).has_value());
  EXPECT_TRUE(r.get("o", c).has_value());
  // Without a caller to take them, the evicted are released all the same.
  (void)rr.pause("o", 5, {"call_d"});
  EXPECT_EQ(rr.released, std::vector<uint64_t>({1, 3}));
  EXPECT_EQ(r.gone_reason("o", b), TakeError::evicted);
  EXPECT_TRUE(r.get("p", other).has_value());
}

// The prefix cache's counters and gauges, and the released interceptions, on /metrics and in
// the dashboard's JSON.
TEST(ServerMetrics, PrefixCacheAndReleasedInterceptions) {
  Metrics m;
  EngineSnapshot s;
  s.stats.prefix_query_tokens = 400;
  s.stats.prefix_hit_tokens = 160;
  s.stats.prefix_evicted_blocks = 9;
  s.stats.prefix_demoted_blocks = 4;
  s.stats.prefix_promoted_blocks = 2;
  s.device_blocks_cached = 31;
  s.host_blocks_cached = 12;
  m.add_evicted(3);
  m.add_superseded(1);
  const std::string out = m.prometheus(s, 0, Viewer{"", true});
  for (const char* line :
       {"infercept:prefix_cache_queries_total 400\n", "infercept:prefix_cache_hits_total 160\n",
        "infercept:kv_cached_blocks{tier=\"device\"} 31\n",
        "infercept:kv_cached_blocks{tier=\"host\"} 12\n",
        "infercept:prefix_cache_evicted_blocks_total 9\n",
        "infercept:prefix_cache_demoted_blocks_total 4\n",
        "infercept:prefix_cache_promoted_blocks_total 2\n",
        "infercept:interceptions_evicted_total 3\n", "infercept:interceptions_superseded_total 1\n",
        "# TYPE infercept:prefix_cache_queries_total counter\n",
        "# TYPE infercept:prefix_cache_hits_total counter\n",
        "# TYPE infercept:kv_cached_blocks gauge\n"})
    EXPECT_NE(out.find(line), std::string::npos) << line;
  // The HELP lines name vLLM's metrics these correspond to.
  EXPECT_TRUE(std::regex_search(
      out,
      std::regex("# HELP infercept:prefix_cache_queries_total [^\n]*vllm:prefix_cache_queries")));
  EXPECT_TRUE(std::regex_search(
      out, std::regex("# HELP infercept:prefix_cache_hits_total [^\n]*vllm:prefix_cache_hits")));
  const nlohmann::json d = m.dashboard_json(s, 0, Viewer{"", true}, {});
  EXPECT_EQ(d["prefix_cache"]["queries"], 400);
  EXPECT_EQ(d["prefix_cache"]["hits"], 160);
  EXPECT_DOUBLE_EQ(d["prefix_cache"]["hit_rate"].get<double>(), 0.4);
  EXPECT_EQ(d["prefix_cache"]["cached_blocks"]["device"], 31);
  EXPECT_EQ(d["prefix_cache"]["cached_blocks"]["host"], 12);
  EXPECT_EQ(d["interceptions"]["evicted"], 3);
  EXPECT_EQ(d["interceptions"]["superseded"], 1);
  EXPECT_DOUBLE_EQ(
      m.dashboard_json(EngineSnapshot(), 0, Viewer{"", true}, {})["prefix_cache"]["hit_rate"]
          .get<double>(),
      0.0);
}

}  // namespace
}  // namespace infercept::server
