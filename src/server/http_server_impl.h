// Internals of the HTTP server shared by its files: the per-request state (Generation),
// the channel from the engine thread, and HttpServer::Impl. http_server.cpp holds the
// life cycle and the routes, generation.cpp the chat/completion handlers and how a turn
// is answered, interception_api.cpp the explicit /v1/interceptions endpoints.
#pragma once

#include "server/http_server.h"

#include <signal.h>
#include "server/http_transport.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "core/log.h"
#include "server/anthropic_api.h"
#include "server/auth.h"
#include "server/constraints.h"
#include "server/dashboard.h"
#include "server/interception_registry.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/response_store.h"
#include "server/responses_api.h"
#include "server/server_tools.h"
#include "server/tool_parser.h"

namespace infercept::server {

inline double steady_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

inline int64_t unix_now() {
  using namespace std::chrono;
  return duration_cast<seconds>(system_clock::now().time_since_epoch()).count();
}

// Outputs of one engine request, from the engine thread to the HTTP thread answering it.
struct Channel {
  struct Item {
    RequestOutput out;
    double t = 0.0;  // when the engine produced it
  };
  std::mutex mu;
  std::deque<Item> q;
  std::function<void()> waker;  // the response's producer: called after each push

  void push(const RequestOutput& o) {
    std::function<void()> wake;
    {
      std::lock_guard<std::mutex> lock(mu);
      q.push_back({o, steady_now()});
      wake = waker;
    }
    if (wake) wake();
  }
  void set_waker(std::function<void()> w) {
    std::lock_guard<std::mutex> lock(mu);
    waker = std::move(w);
  }
  std::optional<Item> try_pop() {
    std::lock_guard<std::mutex> lock(mu);
    if (q.empty()) return std::nullopt;
    Item it = std::move(q.front());
    q.pop_front();
    return it;
  }
};

// The API a generation answers: chat completions, completions, the Responses API
// (responses_api.h) or Anthropic's Messages API (anthropic_api.h), the last two a chat turn
// underneath answered in their own shape.
enum class Endpoint { chat, completion, responses, messages };

// Its name in the metrics and the prefix of its answers' ids.
struct EndpointInfo {
  const char* name;
  const char* id_prefix;
};
inline EndpointInfo endpoint_info(Endpoint e) {
  switch (e) {
    case Endpoint::completion:
      return {"completion", "cmpl-"};
    case Endpoint::responses:
      return {"responses", "resp_"};
    case Endpoint::messages:
      return {"messages", "msg_"};
    case Endpoint::chat:
      break;
  }
  return {"chat", "chatcmpl-"};
}

// One response being produced: what was asked and what has come so far.
struct Generation {
  Endpoint endpoint = Endpoint::chat;
  std::string response_id;
  int64_t created = 0;
  std::string model;
  std::string owner;
  ChatRequest chat;        // the request (chat): kept with a paused request for an explicit resume
  json responses_request;  // Endpoint::responses: the request body, echoed in the Response
  // A chat turn underneath (all but completions): the text is read as the model's turn.
  bool chat_turn() const { return endpoint != Endpoint::completion; }
  bool tools_active = false;  // the model saw tools: its turn may hold calls
  bool keep_paused = false;   // a turn with calls leaves the request paused
  std::string forced_prefix;  // the turn starts with this (tool_choice required/named)
  // What the turn is constrained to (constraints.h); null: free.
  std::shared_ptr<const GenerationConstraint> constraint;
  std::string scripted_tool;  // intercept_after_tokens: the call the turn ends in
  ChatTemplateKind kind = ChatTemplateKind::chatml;
  TurnFormat format;  // how the model writes calls and reasoning (EngineCore::turn_format)
  std::vector<int32_t> prompt;
  std::string cache_namespace;  // GenerateRequest::cache_namespace (owner, key, salt)
  bool stream = false, include_usage = false, return_token_ids = false;
  int32_t logprobs = -1;
  // Engine side.
  std::shared_ptr<Channel> ch;
  uint64_t engine_id = 0;
  int64_t cached_tokens = 0;
  std::string resumed_from;  // interception id
  // Where the KV of the paused request it continued was (its first token is reported by it).
  std::optional<KvPlace> resume_kv;
  // Progress.
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenInfo> lps;
  FinishReason finish = FinishReason::none;
  bool intercepted = false;
  bool done = false;
  bool finalized = false;
  double t_received = 0.0, t_first = 0.0, t_last = 0.0;
  ChatTurnStreamer streamer;       // chat streams: the turn's deltas as it comes
  std::vector<json> stream_ahead;  // deltas of the forced prefix, sent with the first output
  // Server-side tools: which this request may use, and the calls run so far.
  std::set<std::string> server_tool_names;
  int server_rounds = 0;
  json server_calls = json::array();
  int64_t completion_before = 0;  // tokens generated in earlier rounds
  int64_t completion_tokens() const { return completion_before + (int64_t)tokens.size(); }
};

// How a finished turn is reported.
struct FinalTurn {
  std::string finish_reason;
  std::string content;
  std::string reasoning;  // reasoning_content
  std::vector<ToolCall> calls;
  json interception;  // null unless the request stays paused
  std::optional<ApiError> error;
  bool server_round = false;  // every call is a server-side tool: run them and go on
  // The turn as the assistant's message of its conversation.
  ChatMessage message() const {
    return {.role = "assistant",
            .content = content,
            .tool_calls = calls,
            .reasoning_content = reasoning};
  }
};

inline ApiError server_error(std::string message, int status = 500) {
  ApiError e;
  e.status = status;
  e.type = status == 503 ? "service_unavailable" : "server_error";
  e.message = std::move(message);
  return e;
}

inline void send_json(HttpResponse& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

inline void send_error(HttpResponse& res, const ApiError& e) {
  send_json(res, e.status, error_body(e));
}

struct HttpServer::Impl {
  ServerOptions opt;
  std::unique_ptr<Engine> engine;
  const EngineCore* core =
      nullptr;  // immutable parts only (tokenizer, config) off the engine thread
  ApiKeys keys;
  ServerTools tools;
  std::unique_ptr<InterceptionRegistry> registry;
  std::unique_ptr<ResponseStore> responses;  // the Responses API's stored responses
  Metrics metrics;
  RequestLimits limits;
  std::string model_name;
  int64_t context_limit = 0;  // prompt + completion
  bool has_template = false;
  std::unique_ptr<HttpTransport> transport;
  int port = -1;
  std::thread reaper;
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::condition_variable cv;
  std::set<uint64_t> in_flight;  // engine ids generating for an HTTP request
  int64_t active = 0;            // handlers and streams in progress
  bool stopped = false;
  bool aborting_all = false;  // past the grace: a request tracked from now on is aborted at once
  bool reaper_stop = false;

  // Counts a handler (or a stream) in progress, for the shutdown.
  struct Guard {
    Impl* impl;
    explicit Guard(Impl* i) : impl(i) {
      std::lock_guard<std::mutex> lock(impl->mu);
      impl->active++;
    }
    ~Guard() {
      {
        std::lock_guard<std::mutex> lock(impl->mu);
        impl->active--;
      }
      impl->cv.notify_all();
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
  };

  void track(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    in_flight.insert(id);
    if (aborting_all) engine->abort(id);
  }
  void untrack(uint64_t id) {
    {
      std::lock_guard<std::mutex> lock(mu);
      in_flight.erase(id);
    }
    cv.notify_all();
  }

  // A key given other than as "Authorization: Bearer": Anthropic's clients send "x-api-key";
  // the key in the query string is taken on the dashboard only (a browser page cannot set
  // headers on its own navigation, and a key in a URL ends up in logs and histories).
  static std::string other_key(const HttpRequest& req) {
    if (req.has_header("x-api-key")) return req.get_header_value("x-api-key");
    return req.path == "/dashboard" || req.path == "/dashboard/data"
               ? req.get_param_value("api_key")
               : std::string();
  }
  std::string owner_of(const HttpRequest& req) const {
    auto o = keys.authenticate(req.get_header_value("Authorization"), other_key(req));
    return o.value_or("");
  }
  // Who looks at a shared view (/metrics, /dashboard/data, the interception list): the
  // caller's own paused requests and per-tool series, or all with an admin key (or with no
  // keys at all: one tenant).
  Viewer viewer_of(const HttpRequest& req) const {
    Viewer v;
    v.owner = owner_of(req);
    v.all = !keys.enabled() || keys.is_admin(v.owner);
    return v;
  }
  // A paused request's tool as a metric label: the name of its first call when the request
  // declared that tool, else "other" (names the model made up are not label values).
  static std::string tool_label(const PausedRequest& p) {
    if (p.tool_names.empty()) return "other";
    for (const ToolDefinition& d : p.request.tools)
      if (d.name == p.tool_names[0]) return d.name;
    return "other";
  }

  void log_line(const json& j) const {
    if (!opt.log_requests) return;
    json line = j;
    line["ts"] = unix_now();
    const std::string s = dump(line) + "\n";
    std::fwrite(s.data(), 1, s.size(), stderr);
  }

  // --- routes (http_server.cpp) ---------------------------------------------------------
  void setup_routes();
  TransportOptions transport_options() const;
  TransportHooks transport_hooks();
  bool refuse_before_routing(const HttpRequest& req, HttpResponse& res);
  ApiError transport_error(int status, const std::string& message);
  void log_http(const HttpRequest& req, int status);
  void add_openai_routes(HttpTransport& t);
  void add_interception_routes(HttpTransport& t);
  void add_observability_routes(HttpTransport& t);
  json model_json() const;
  void handle_metrics(const HttpRequest& req, HttpResponse& res);
  void handle_dashboard_data(const HttpRequest& req, HttpResponse& res);
  void reap_loop();

  // --- generation ---------------------------------------------------------------------
  void handle_chat(const HttpRequest& req, HttpResponse& res);
  void handle_completion(const HttpRequest& req, HttpResponse& res);
  void handle_responses(const HttpRequest& req, HttpResponse& res);
  void handle_messages(const HttpRequest& req, HttpResponse& res);
  void handle_count_tokens(const HttpRequest& req, HttpResponse& res);
  void handle_response_get(const HttpRequest& req, HttpResponse& res);
  void handle_response_delete(const HttpRequest& req, HttpResponse& res);
  void run_chat(ChatRequest cr, const std::string& owner, PausedLease entry, HttpResponse& res,
                Endpoint endpoint = Endpoint::chat, json responses_request = nullptr);
  // The model a request names must be the one served (a 404 otherwise).
  std::optional<ApiError> check_served_model(const std::string& model) const;
  // A Messages API body as a chat request (count_tokens: max_tokens may be left out).
  std::optional<ApiError> parse_messages_api(const std::string& text, bool count_only,
                                             ChatRequest& cr) const;
  std::shared_ptr<Generation> new_generation(Endpoint endpoint, const std::string& owner) const;
  std::optional<ApiError> add_server_tools(ChatRequest& cr, bool resume, Generation& g) const;
  std::optional<ApiError> check_tool_choice(const ChatRequest& cr) const;
  ConstraintCompiler constraints;  // compiled grammars by request shape
  std::optional<ApiError> render_chat_prompt(ChatRequest& cr, Generation& g);
  GenerateRequest chat_engine_request(const ChatRequest& cr, Generation& g) const;
  static std::set<std::string> call_ids_of(const ChatRequest& cr);
  void release_superseded(std::vector<PausedLease>& leases);
  std::optional<ApiError> start(Generation& g, GenerateRequest gr, PausedLease entry,
                                bool explicit_resume);
  std::optional<ApiError> check_lengths(const std::vector<int32_t>& prompt, SamplingParams& params,
                                        bool max_tokens_given, const char* param) const;
  void consume(Generation& g, const Channel::Item& item);
  FinalTurn finalize(Generation& g);
  void read_turn(const Generation& g, FinalTurn& f) const;
  bool server_round_due(const Generation& g, const FinalTurn& f) const;
  json keep_paused(const Generation& g, const FinalTurn& f, double t_end);
  void record_finished(const Generation& g, const FinalTurn& f, double t_end);
  std::optional<ApiError> server_tool_round(Generation& g, const FinalTurn& f);
  void respond(std::shared_ptr<Generation> g, HttpResponse& res);
  // The whole answer of a finished turn, in its endpoint's shape.
  json answer_json(const Generation& g, const FinalTurn& f) const;
  json chat_response(const Generation& g, const FinalTurn& f) const;
  json completion_response(const Generation& g, const FinalTurn& f) const;
  json responses_response(const Generation& g, const FinalTurn& f) const;
  json anthropic_response(const Generation& g, const FinalTurn& f) const;
  // What every chat-turn answer carries beside the turn: the interception when the request
  // stays paused, the server-side calls it ran (an object, empty when neither).
  static json answer_extras(const Generation& g, const FinalTurn& f);
  // An error answered in the shape of the endpoint's API (Anthropic's for /v1/messages).
  static void send_error_for(Endpoint endpoint, HttpResponse& res, const ApiError& e);
  // A finished Responses turn kept for previous_response_id (when its request stores it):
  // its conversation (the chat messages it ran, server-side rounds included, its instructions
  // left out) and its output turn.
  void store_response(const Generation& g, const FinalTurn& f, const json& response) const;
  static ResponseHeader responses_header(const Generation& g);
  TokenInfo token_info(const RequestOutput& o, size_t i) const;

  // --- interceptions ----------------------------------------------------------------------
  void handle_interception_list(const HttpRequest& req, HttpResponse& res);
  void handle_interception_get(const HttpRequest& req, HttpResponse& res);
  void handle_interception_delete(const HttpRequest& req, HttpResponse& res);
  void handle_interception_resume(const HttpRequest& req, HttpResponse& res);
  void handle_interception_hint(const HttpRequest& req, HttpResponse& res);
  json interception_json(const PausedRequest& p, const PausedSeqInfo* seq) const;
  ApiError take_error(const std::string& id, TakeError why) const;

  void stop();
};

}  // namespace infercept::server
