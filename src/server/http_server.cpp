#include "server/http_server.h"

#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "core/log.h"
#include "server/auth.h"
#include "server/dashboard.h"
#include "server/interception_registry.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/server_tools.h"
#include "server/tool_parser.h"

namespace infercept::server {

namespace {

double steady_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

int64_t unix_now() {
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
  std::condition_variable cv;
  std::deque<Item> q;

  void push(const RequestOutput& o) {
    {
      std::lock_guard<std::mutex> lock(mu);
      q.push_back({o, steady_now()});
    }
    cv.notify_all();
  }
  std::optional<Item> pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, timeout, [&] { return !q.empty(); })) return std::nullopt;
    Item it = std::move(q.front());
    q.pop_front();
    return it;
  }
};

enum class Endpoint { chat, completion };

// One response being produced: what was asked and what has come so far.
struct Generation {
  Endpoint endpoint = Endpoint::chat;
  std::string response_id;
  int64_t created = 0;
  std::string model;
  std::string owner;
  ChatRequest chat;  // the request (chat): kept with a paused request for an explicit resume
  bool tools_active = false;  // the model saw tools: its turn may hold calls
  bool keep_paused = false;   // a turn with calls leaves the request paused
  std::string forced_prefix;  // the turn starts with this (tool_choice required/named)
  std::string scripted_tool;  // intercept_after_tokens: the call the turn ends in
  ChatTemplateKind kind = ChatTemplateKind::chatml;
  std::vector<int32_t> prompt;
  bool stream = false, include_usage = false, return_token_ids = false;
  int32_t logprobs = -1;
  // Engine side.
  std::shared_ptr<Channel> ch;
  uint64_t engine_id = 0;
  int64_t cached_tokens = 0;
  std::string resumed_from;  // interception id
  // Progress.
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenInfo> lps;
  FinishReason finish = FinishReason::none;
  bool intercepted = false;
  bool done = false;
  bool finalized = false;
  double t_received = 0.0, t_first = 0.0, t_last = 0.0;
  ToolTextFilter filter{ChatTemplateKind::chatml, false};
  // Server-side tools: which this request may use, and the calls run so far.
  std::set<std::string> server_tool_names;
  int server_rounds = 0;
  json server_calls = json::array();
  int64_t completion_before = 0;  // tokens generated in earlier rounds
  bool cancel_sent = false;
  int64_t completion_tokens() const { return completion_before + (int64_t)tokens.size(); }
};

// How a finished turn is reported.
struct FinalTurn {
  std::string finish_reason;
  std::string content;
  std::vector<ToolCall> calls;
  json interception;  // null unless the request stays paused
  std::optional<ApiError> error;
  bool server_round = false;  // every call is a server-side tool: run them and go on
};

ApiError server_error(std::string message, int status = 500) {
  ApiError e;
  e.status = status;
  e.type = status == 503 ? "service_unavailable" : "server_error";
  e.message = std::move(message);
  return e;
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, error_body(e));
}

std::string sse(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

}  // namespace

struct HttpServer::Impl {
  ServerOptions opt;
  std::unique_ptr<Engine> engine;
  const EngineCore* core =
      nullptr;  // immutable parts only (tokenizer, config) off the engine thread
  ApiKeys keys;
  ServerTools tools;
  std::unique_ptr<InterceptionRegistry> registry;
  Metrics metrics;
  RequestLimits limits;
  std::string model_name;
  int64_t context_limit = 0;  // prompt + completion
  bool has_template = false;
  httplib::Server svr;
  int port = -1;
  std::thread listen_thread;
  std::thread reaper;
  std::atomic<bool> stopping{false};
  std::atomic<double> cancel_after{0.0};  // steady time past which stragglers cancel themselves
  std::mutex mu;
  std::condition_variable cv;
  std::set<uint64_t> in_flight;  // engine ids generating for an HTTP request
  int64_t active = 0;            // handlers and streams in progress
  bool stopped = false;
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
  }
  void untrack(uint64_t id) {
    {
      std::lock_guard<std::mutex> lock(mu);
      in_flight.erase(id);
    }
    cv.notify_all();
  }

  std::string owner_of(const httplib::Request& req) const {
    auto o =
        keys.authenticate(req.get_header_value("Authorization"), req.get_param_value("api_key"));
    return o.value_or("");
  }

  void log_line(const json& j) const {
    if (!opt.log_requests) return;
    json line = j;
    line["ts"] = unix_now();
    const std::string s = dump(line) + "\n";
    std::fwrite(s.data(), 1, s.size(), stderr);
  }

  void setup_routes();
  void reap_loop();

  // --- generation ---------------------------------------------------------------------
  void handle_chat(const httplib::Request& req, httplib::Response& res);
  void handle_completion(const httplib::Request& req, httplib::Response& res);
  void run_chat(ChatRequest cr, const std::string& owner, std::optional<PausedRequest> entry,
                httplib::Response& res);
  std::optional<ApiError> start(Generation& g, GenerateRequest gr,
                                std::optional<PausedRequest> entry, bool explicit_resume);
  std::optional<ApiError> check_lengths(const std::vector<int32_t>& prompt, SamplingParams& params,
                                        bool max_tokens_given, const char* param) const;
  void consume(Generation& g, const Channel::Item& item);
  FinalTurn finalize(Generation& g);
  std::optional<ApiError> server_tool_round(Generation& g, const FinalTurn& f);
  void respond(std::shared_ptr<Generation> g, httplib::Response& res);
  json chat_response(const Generation& g, const FinalTurn& f) const;
  json completion_response(const Generation& g, const FinalTurn& f) const;
  json completion_logprobs(const std::vector<TokenInfo>& lps, size_t text_offset) const;
  json chunk(const Generation& g, json choice) const;
  TokenInfo token_info(const RequestOutput& o, size_t i) const;
  // A request that started while the server began to stop cancels itself after the grace.
  void cancel_if_stopping(Generation& g) {
    if (stopping && !g.cancel_sent && steady_now() > cancel_after) {
      g.cancel_sent = true;
      engine->abort(g.engine_id);
    }
  }

  // --- interceptions ----------------------------------------------------------------------
  void handle_interception_list(const httplib::Request& req, httplib::Response& res);
  void handle_interception_get(const httplib::Request& req, httplib::Response& res);
  void handle_interception_delete(const httplib::Request& req, httplib::Response& res);
  void handle_interception_resume(const httplib::Request& req, httplib::Response& res);
  void handle_interception_hint(const httplib::Request& req, httplib::Response& res);
  json interception_json(const PausedRequest& p, const PausedSeqInfo* seq) const;
  ApiError take_error(const std::string& id, TakeError why) const;

  void stop();
};

// ---------------------------------------------------------------------------------------

Result<std::unique_ptr<HttpServer>> HttpServer::create(std::unique_ptr<EngineCore> core,
                                                       ServerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->opt = std::move(options);
  TRY_ASSIGN(impl->keys, ApiKeys::load(impl->opt.api_keys, impl->opt.api_key_file));
  TRY_ASSIGN(impl->tools, ServerTools::load(impl->opt.tools_config));
  if (impl->opt.interception_expiry_s <= 0) return make_error("--interception-expiry must be > 0");
  if (impl->opt.http_threads < 1) return make_error("--http-threads must be >= 1");
  impl->context_limit = std::min(core->max_context(), core->kv_capacity_tokens());
  impl->has_template =
      !core->tokenizer().spec().chat_template.empty() || !core->config().chat_template.empty();
  impl->model_name = impl->opt.model_name;
  if (impl->model_name.empty()) {
    std::filesystem::path p(core->config().model_path);
    impl->model_name =
        p.has_extension() && p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
    if (impl->model_name.empty()) impl->model_name = p.parent_path().filename().string();
  }
  impl->limits.context = impl->context_limit;
  impl->limits.max_tokens = impl->opt.max_tokens_limit;
  impl->limits.defaults = impl->opt.defaults;
  if (auto st = impl->limits.defaults.validate(); !st.ok()) return st.error();
  impl->registry = std::make_unique<InterceptionRegistry>(impl->opt.interception_expiry_s,
                                                          impl->opt.max_paused_per_key);
  impl->engine = std::make_unique<Engine>(std::move(core));
  impl->core = &impl->engine->core();
  impl->setup_routes();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  stop();
}

Result<int> HttpServer::bind() {
  // A client that goes away mid-write must not kill the process.
  ::signal(SIGPIPE, SIG_IGN);
  Impl& s = *impl_;
  if (s.opt.port == 0) {
    const int port = s.svr.bind_to_any_port(s.opt.host);
    if (port <= 0) return make_error("cannot bind to ", s.opt.host, " (any port)");
    s.port = port;
  } else {
    if (!s.svr.bind_to_port(s.opt.host, s.opt.port))
      return make_error("cannot bind to ", s.opt.host, ":", std::to_string(s.opt.port),
                        " (in use, or not an address of this machine)");
    s.port = s.opt.port;
  }
  s.reaper = std::thread([&s] { s.reap_loop(); });
  return s.port;
}

void HttpServer::run() {
  impl_->svr.listen_after_bind();
}

void HttpServer::start() {
  impl_->listen_thread = std::thread([this] { impl_->svr.listen_after_bind(); });
  // Wait until it accepts, so a test can connect right away.
  for (int i = 0; i < 500 && !impl_->svr.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

void HttpServer::stop() {
  if (impl_) impl_->stop();
}

int HttpServer::port() const {
  return impl_->port;
}
const std::string& HttpServer::model_name() const {
  return impl_->model_name;
}

void HttpServer::Impl::stop() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopped) return;
    stopped = true;
  }
  cancel_after = steady_now() + opt.shutdown_grace_s;
  stopping = true;  // new requests get 503
  // In-flight requests may finish within the grace period; the rest are cancelled.
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::duration<double>(opt.shutdown_grace_s),
                [&] { return in_flight.empty(); });
    for (uint64_t id : in_flight) engine->abort(id);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return active == 0; });
  }
  svr.stop();
  if (listen_thread.joinable()) listen_thread.join();
  {
    std::lock_guard<std::mutex> lock(mu);
    reaper_stop = true;
  }
  cv.notify_all();
  if (reaper.joinable()) reaper.join();
  for (const PausedRequest& p : registry->take_all()) engine->abort(p.engine_id);
  // Let the engine run the aborts so every block is back before it is destroyed.
  (void)snapshot(*engine, std::chrono::seconds(10));
}

void HttpServer::Impl::reap_loop() {
  std::unique_lock<std::mutex> lock(mu);
  while (!reaper_stop) {
    cv.wait_for(lock, std::chrono::milliseconds(250));
    if (reaper_stop) break;
    lock.unlock();
    auto expired = registry->take_expired(steady_now());
    for (const PausedRequest& p : expired) {
      engine->abort(p.engine_id);
      log_line({{"event", "interception_expired"}, {"id", p.id}, {"owner", p.owner}});
    }
    if (!expired.empty()) metrics.add_expired((int64_t)expired.size());
    lock.lock();
  }
}

void HttpServer::Impl::setup_routes() {
  const int threads = opt.http_threads;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool((size_t)threads); };
  svr.set_payload_max_length(opt.max_body_bytes);
  svr.set_read_timeout(30);
  svr.set_write_timeout(30);
  svr.set_keep_alive_timeout(2);

  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (stopping) {
      send_error(res, server_error("the server is shutting down", 503));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!keys.authenticate(req.get_header_value("Authorization"), req.get_param_value("api_key"))) {
      ApiError e;
      e.status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      e.message = req.has_header("Authorization")
                      ? "Incorrect API key provided."
                      : "You didn't provide an API key: send \"Authorization: Bearer <key>\".";
      send_error(res, e);
      res.set_header("WWW-Authenticate", "Bearer");
      metrics.add_rejected("unauthorized");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        ApiError e;
        e.status = res.status;
        if (res.status == 404) {
          e.type = "invalid_request_error";
          e.code = "not_found";
          e.message = "no route " + req.method + " " + req.path;
        } else if (res.status == 413) {
          e.code = "payload_too_large";
          e.message = "the request body is larger than this server accepts (" +
                      std::to_string(opt.max_body_bytes) + " bytes)";
          metrics.add_rejected("body_too_large");
        } else if (res.status == 405) {
          e.message = "method " + req.method + " is not allowed on " + req.path;
        } else if (res.status >= 500) {
          e.type = "server_error";
          e.message = "internal error";
        } else {
          e.message = "bad request";
        }
        send_error(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        send_error(res, server_error(what));
      });
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.add_http_status(res.status);
    log_line({{"event", "http"},
              {"method", req.method},
              {"path", req.path},
              {"status", res.status},
              {"remote", req.remote_addr},
              {"owner", owner_of(req)}});
  });

  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (stopping)
      send_json(res, 503, {{"status", "stopping"}});
    else
      send_json(res, 200, {{"status", "ok"}});
  });
  auto model_obj = [this] {
    return json{{"id", model_name},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "infercept"},
                {"max_model_len", context_limit}};
  };
  svr.Get("/v1/models", [model_obj](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"object", "list"}, {"data", json::array({model_obj()})}});
  });
  svr.Get("/v1/models/(.+)",
          [this, model_obj](const httplib::Request& req, httplib::Response& res) {
            if (req.matches[1] != model_name)
              return send_error(
                  res, not_found("The model '" + std::string(req.matches[1]) + "' does not exist.",
                                 "model_not_found"));
            send_json(res, 200, model_obj());
          });
  svr.Post("/v1/chat/completions",
           [this](const httplib::Request& req, httplib::Response& res) { handle_chat(req, res); });
  svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res);
  });
  svr.Get("/v1/interceptions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_interception_list(req, res);
  });
  svr.Get("/v1/interceptions/([^/]+)", [this](const httplib::Request& req, httplib::Response& res) {
    handle_interception_get(req, res);
  });
  svr.Delete("/v1/interceptions/([^/]+)",
             [this](const httplib::Request& req, httplib::Response& res) {
               handle_interception_delete(req, res);
             });
  svr.Post("/v1/interceptions/([^/]+)/resume",
           [this](const httplib::Request& req, httplib::Response& res) {
             handle_interception_resume(req, res);
           });
  svr.Post("/v1/interceptions/([^/]+)/hint",
           [this](const httplib::Request& req, httplib::Response& res) {
             handle_interception_hint(req, res);
           });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    auto snap = snapshot(*engine, std::chrono::seconds(10));
    if (!snap) return send_error(res, server_error("the engine did not answer in time", 503));
    res.status = 200;
    res.set_content(metrics.prometheus(*snap, (int64_t)registry->size()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  svr.Get("/dashboard", [](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(dashboard_html(), "text/html; charset=utf-8");
  });
  svr.Get("/dashboard/data", [this](const httplib::Request&, httplib::Response& res) {
    auto snap = snapshot(*engine, std::chrono::seconds(10));
    if (!snap) return send_error(res, server_error("the engine did not answer in time", 503));
    json j = metrics.dashboard_json(*snap, (int64_t)registry->size());
    j["model"] = model_name;
    j["time"] = unix_now();
    send_json(res, 200, j);
  });
}

// --- generation -------------------------------------------------------------------------

std::optional<ApiError> HttpServer::Impl::check_lengths(const std::vector<int32_t>& prompt,
                                                        SamplingParams& params,
                                                        bool max_tokens_given,
                                                        const char* param) const {
  const auto n = (int64_t)prompt.size();
  if (n >= context_limit)
    return invalid_request("This model's maximum context length is " +
                               std::to_string(context_limit) + " tokens. However, your " + param +
                               " resulted in " + std::to_string(n) + " tokens.",
                           param, "context_length_exceeded");
  const int64_t room = context_limit - n;
  if (max_tokens_given && params.max_tokens > room)
    return invalid_request("This model's maximum context length is " +
                               std::to_string(context_limit) + " tokens. However, you requested " +
                               std::to_string(n + params.max_tokens) + " tokens (" +
                               std::to_string(n) + " in the " + param + ", " +
                               std::to_string(params.max_tokens) + " in the completion).",
                           "max_tokens", "context_length_exceeded");
  params.max_tokens = (int32_t)std::min<int64_t>(params.max_tokens, room);
  return std::nullopt;
}

void HttpServer::Impl::handle_chat(const httplib::Request& req, httplib::Response& res) {
  Guard guard(this);
  json body;
  if (auto e = parse_body(req.body, body)) return send_error(res, *e);
  ChatRequest cr;
  if (auto e = parse_chat_request(body, limits, cr)) return send_error(res, *e);
  if (cr.model != model_name)
    return send_error(res,
                      not_found("The model '" + cr.model + "' does not exist.", "model_not_found"));
  run_chat(std::move(cr), owner_of(req), std::nullopt, res);
}

void HttpServer::Impl::run_chat(ChatRequest cr, const std::string& owner,
                                std::optional<PausedRequest> entry, httplib::Response& res) {
  if (!has_template)
    return send_error(
        res, invalid_request("the model has no chat template; start the server with "
                             "--chat-template chatml|llama3|llama2 or use /v1/completions"));
  auto g = std::make_shared<Generation>();
  g->endpoint = Endpoint::chat;
  g->t_received = steady_now();
  g->response_id = random_id("chatcmpl-");
  g->created = unix_now();
  g->model = model_name;
  g->owner = owner;
  g->kind = core->chat_template().kind;
  // Server-side tools join the client's in the prompt.
  const std::vector<std::string> st_names = cr.all_server_tools ? tools.names() : cr.server_tools;
  for (const std::string& name : st_names) {
    const ServerTool* t = tools.find(name);
    if (t == nullptr) {
      std::string have;
      for (const std::string& n : tools.names()) have += (have.empty() ? "" : ", ") + n;
      return send_error(
          res, invalid_request("no server-side tool '" + name + "' (this server has: " + have + ")",
                               "server_tools"));
    }
    if (g->server_tool_names.count(name) != 0) continue;
    for (const ToolDefinition& d : cr.tools)
      if (d.name == name && !entry)
        return send_error(
            res, invalid_request("tool '" + name + "' is both a client and a server-side tool",
                                 "tools"));
    g->server_tool_names.insert(name);
    bool listed = false;
    for (const ToolDefinition& d : cr.tools) listed = listed || d.name == name;
    if (!listed) cr.tools.push_back(t->def);
  }
  if (cr.tool_choice == ToolChoice::named) {
    bool known = false;
    for (const ToolDefinition& d : cr.tools) known = known || d.name == cr.tool_choice_name;
    if (!known)
      return send_error(res, invalid_request("tool_choice names '" + cr.tool_choice_name +
                                                 "', which is not in tools",
                                             "tool_choice.function.name"));
  }
  const std::vector<ToolDefinition> prompt_tools =
      cr.tool_choice == ToolChoice::none ? std::vector<ToolDefinition>() : cr.tools;
  g->tools_active = !prompt_tools.empty();
  g->forced_prefix = forced_tool_prefix(g->kind, cr.tool_choice, cr.tool_choice_name);
  g->keep_paused = opt.interception && cr.intercept && g->tools_active;
  g->stream = cr.stream;
  g->include_usage = cr.include_usage;
  g->logprobs = cr.logprobs;
  g->return_token_ids = cr.return_token_ids;
  g->filter = ToolTextFilter(g->kind, g->tools_active);
  (void)g->filter.push(g->forced_prefix);
  auto text = render_chat(core->chat_template(), cr.messages, prompt_tools, true);
  if (!text.ok()) return send_error(res, invalid_request(text.error().message, "messages"));
  g->prompt =
      core->tokenizer().encode(*text + g->forced_prefix, /*add_bos=*/true, /*parse_special=*/true);
  if (auto e = check_lengths(g->prompt, cr.params, cr.max_tokens_given, "messages")) {
    metrics.add_rejected("context_length");
    return send_error(res, *e);
  }
  GenerateRequest gr;
  gr.prompt = g->prompt;
  gr.params = cr.params;
  gr.pause_at_tool_turn_end = g->keep_paused || (g->tools_active && !g->server_tool_names.empty());
  gr.turn_prefix = g->forced_prefix;
  gr.tool_duration_hints = cr.tool_hints_s;
  gr.logprobs = cr.logprobs;
  if (cr.intercept_after_tokens > 0) {
    ScriptedInterception si;
    si.after_generated = cr.intercept_after_tokens;
    si.tool = cr.intercept_tool;
    if (auto h = cr.tool_hints_s.find(si.tool); h != cr.tool_hints_s.end()) si.hint = h->second;
    gr.script.push_back(std::move(si));
    gr.params.ignore_eos = true;
    // The engine ends a request at max_tokens before it looks for a pause: with N equal to
    // max_tokens the call must still win, so leave one token of room (never generated).
    if (gr.params.max_tokens == cr.intercept_after_tokens) gr.params.max_tokens += 1;
    g->scripted_tool = cr.intercept_tool;
  }
  const bool explicit_resume = entry.has_value();
  if (!entry && opt.interception) entry = registry->take_match(owner, g->prompt);
  if (!entry && g->keep_paused && registry->full(owner)) {
    metrics.add_rejected("too_many_paused");
    ApiError e;
    e.status = 429;
    e.type = "rate_limit_error";
    e.code = "too_many_paused_requests";
    e.message = "this key already has " + std::to_string(registry->count(owner)) +
                " paused requests (the limit): resume or DELETE /v1/interceptions/{id} first";
    return send_error(res, e);
  }
  g->chat = std::move(cr);
  if (auto e = start(*g, std::move(gr), std::move(entry), explicit_resume))
    return send_error(res, *e);
  respond(g, res);
}

void HttpServer::Impl::handle_completion(const httplib::Request& req, httplib::Response& res) {
  Guard guard(this);
  json body;
  if (auto e = parse_body(req.body, body)) return send_error(res, *e);
  CompletionRequest cr;
  if (auto e = parse_completion_request(body, limits, cr)) return send_error(res, *e);
  if (cr.model != model_name)
    return send_error(res,
                      not_found("The model '" + cr.model + "' does not exist.", "model_not_found"));
  auto g = std::make_shared<Generation>();
  g->endpoint = Endpoint::completion;
  g->t_received = steady_now();
  g->response_id = random_id("cmpl-");
  g->created = unix_now();
  g->model = model_name;
  g->owner = owner_of(req);
  g->stream = cr.stream;
  g->include_usage = cr.include_usage;
  g->logprobs = cr.logprobs;
  g->return_token_ids = cr.return_token_ids;
  if (!cr.prompt_tokens.empty()) {
    const int32_t vocab = core->tokenizer().vocab_size();
    for (int32_t t : cr.prompt_tokens)
      if (t >= vocab)
        return send_error(
            res, invalid_request("prompt token id " + std::to_string(t) +
                                     " is outside the vocabulary (" + std::to_string(vocab) + ")",
                                 "prompt"));
    g->prompt = cr.prompt_tokens;
  } else {
    g->prompt = core->tokenizer().encode(cr.prompt_text, /*add_bos=*/true, /*parse_special=*/false);
  }
  if (g->prompt.empty()) return send_error(res, invalid_request("the prompt is empty", "prompt"));
  if (auto e = check_lengths(g->prompt, cr.params, cr.max_tokens_given, "prompt")) {
    metrics.add_rejected("context_length");
    return send_error(res, *e);
  }
  GenerateRequest gr;
  gr.prompt = g->prompt;
  gr.params = cr.params;
  gr.logprobs = cr.logprobs;
  if (auto e = start(*g, std::move(gr), std::nullopt, false)) return send_error(res, *e);
  respond(g, res);
}

std::optional<ApiError> HttpServer::Impl::start(Generation& g, GenerateRequest gr,
                                                std::optional<PausedRequest> entry,
                                                bool explicit_resume) {
  if (stopping) return server_error("the server is shutting down", 503);
  g.ch = std::make_shared<Channel>();
  auto cb = [ch = g.ch](const RequestOutput& o) { ch->push(o); };
  if (entry) {
    const double waited = steady_now() - entry->paused_at;
    auto r = engine->continue_paused(entry->engine_id, gr, cb);
    if (r.ok()) {
      g.engine_id = entry->engine_id;
      g.cached_tokens = *r;
      g.resumed_from = entry->id;
      track(g.engine_id);
      metrics.observe_interception(entry->tool_names.empty() ? "?" : entry->tool_names[0], waited);
      metrics.add_resume(!explicit_resume);
      return std::nullopt;
    }
    // The paused request is gone or cannot take this prompt: answer from scratch.
    LOG_INFO("resume of %s failed (%s); prefilling from scratch", entry->id.c_str(),
             r.error().message.c_str());
    engine->abort(entry->engine_id);
  }
  auto id = engine->submit(std::move(gr), cb);
  if (!id.ok()) return invalid_request(id.error().message);
  g.engine_id = *id;
  track(g.engine_id);
  return std::nullopt;
}

TokenInfo HttpServer::Impl::token_info(const RequestOutput& o, size_t i) const {
  TokenInfo t;
  t.text = core->tokenizer().token_to_bytes(o.new_tokens[i], /*render_special=*/true);
  t.logprob = i < o.logprobs.size() ? o.logprobs[i] : 0.0f;
  if (i < o.top_logprobs.size())
    for (const TokenLogprob& tl : o.top_logprobs[i])
      t.top.emplace_back(core->tokenizer().token_to_bytes(tl.id, true), tl.logprob);
  return t;
}

void HttpServer::Impl::consume(Generation& g, const Channel::Item& item) {
  const RequestOutput& o = item.out;
  if (!o.new_tokens.empty()) {
    if (g.tokens.empty()) {
      g.t_first = item.t;
      metrics.observe_ttft(item.t - g.t_received);
    } else {
      metrics.observe_itl(item.t - g.t_last);
    }
    g.t_last = item.t;
    for (size_t i = 0; i < o.new_tokens.size(); ++i) {
      g.tokens.push_back(o.new_tokens[i]);
      if (g.logprobs >= 0) g.lps.push_back(token_info(o, i));
    }
  }
  g.text += o.text;
  if (o.intercepted) {
    g.intercepted = true;
    g.done = true;
  }
  if (o.finished()) {
    g.finish = o.finish;
    g.done = true;
  }
}

FinalTurn HttpServer::Impl::finalize(Generation& g) {
  FinalTurn f;
  g.finalized = true;
  const double t_end = steady_now();
  if (g.finish == FinishReason::abort) {
    untrack(g.engine_id);
    f.error =
        server_error(stopping ? "the server is shutting down" : "the request was cancelled", 503);
    f.finish_reason = "abort";
    return f;
  }
  AssistantTurn turn;
  if (g.endpoint == Endpoint::chat && g.tools_active)
    turn = parse_assistant_turn(g.forced_prefix + g.text, g.kind);
  else
    turn.content = g.text;
  f.content = turn.content;
  f.calls = turn.calls;
  if (g.intercepted && f.calls.empty() && !g.scripted_tool.empty()) {
    // intercept_after_tokens: the turn's tokens were generated; it ends in the scripted call.
    ToolCall c;
    c.id = random_id("call_");
    c.name = g.scripted_tool;
    c.arguments_json = "{}";
    f.calls.push_back(std::move(c));
  }
  if (g.intercepted && !f.calls.empty() && !g.server_tool_names.empty() && !stopping &&
      g.server_rounds < opt.max_server_tool_rounds) {
    bool all_server = true;
    for (const ToolCall& c : f.calls)
      all_server = all_server && g.server_tool_names.count(c.name) != 0;
    if (all_server) {
      f.server_round = true;
      return f;
    }
  }
  untrack(g.engine_id);
  if (g.intercepted) {
    if (!f.calls.empty() && g.keep_paused && !stopping) {
      PausedRequest p;
      p.owner = g.owner;
      p.engine_id = g.engine_id;
      p.tokens = g.prompt;
      p.tokens.insert(p.tokens.end(), g.tokens.begin(), g.tokens.end());
      p.n_prompt = (int64_t)g.prompt.size();
      p.request = g.chat;
      ChatMessage assistant;
      assistant.role = "assistant";
      assistant.content = f.content;
      assistant.tool_calls = f.calls;
      p.request.messages.push_back(std::move(assistant));
      for (const ToolCall& c : f.calls) {
        p.tool_names.push_back(c.name);
        p.call_ids.push_back(c.id);
      }
      p.paused_at = t_end;
      const std::string id = registry->add(std::move(p), t_end);
      auto stored = registry->get(g.owner, id);
      f.interception = {{"id", id},
                        {"expires_at", stored ? stored->expires_at_unix : unix_now()},
                        {"resume_url", "/v1/interceptions/" + id + "/resume"}};
      metrics.add_pause();
    } else {
      engine->abort(g.engine_id);  // nobody will resume it
    }
    f.finish_reason = f.calls.empty() ? "stop" : "tool_calls";
  } else if (g.finish == FinishReason::length) {
    f.finish_reason = "length";
  } else {
    f.finish_reason = f.calls.empty() ? "stop" : "tool_calls";
  }
  metrics.observe_e2e(t_end - g.t_received);
  metrics.add_request(g.endpoint == Endpoint::chat ? "chat" : "completion", f.finish_reason,
                      (int64_t)g.prompt.size(), g.completion_tokens(), g.cached_tokens);
  log_line({{"event", "generation"},
            {"id", g.response_id},
            {"owner", g.owner},
            {"prompt_tokens", g.prompt.size()},
            {"completion_tokens", g.completion_tokens()},
            {"server_tool_calls", g.server_calls.size()},
            {"cached_tokens", g.cached_tokens},
            {"finish_reason", f.finish_reason},
            {"resumed_from", g.resumed_from},
            {"interception", f.interception.is_null() ? json(nullptr) : f.interception["id"]},
            {"ttft_ms", g.t_first > 0 ? (g.t_first - g.t_received) * 1000.0 : 0.0},
            {"e2e_ms", (t_end - g.t_received) * 1000.0}});
  return f;
}

std::optional<ApiError> HttpServer::Impl::server_tool_round(Generation& g, const FinalTurn& f) {
  ChatRequest& cr = g.chat;
  ChatMessage assistant;
  assistant.role = "assistant";
  assistant.content = f.content;
  assistant.tool_calls = f.calls;
  cr.messages.push_back(assistant);
  // The request stays paused in the engine while the tools run: a real interception.
  for (const ToolCall& c : f.calls) {
    const double t0 = steady_now();
    const std::string result = tools.run(*tools.find(c.name), c.arguments_json);
    const double dt = steady_now() - t0;
    ChatMessage m;
    m.role = "tool";
    m.tool_call_id = c.id;
    m.name = c.name;
    m.content = result;
    cr.messages.push_back(std::move(m));
    g.server_calls.push_back({{"id", c.id},
                              {"name", c.name},
                              {"arguments", c.arguments_json},
                              {"result", result},
                              {"duration_ms", dt * 1000.0}});
  }
  if (cr.tool_choice == ToolChoice::required || cr.tool_choice == ToolChoice::named)
    cr.tool_choice = ToolChoice::automatic;
  const double waited = steady_now() - g.t_last;
  auto text = render_chat(core->chat_template(), cr.messages, cr.tools, true);
  if (!text.ok()) {
    engine->abort(g.engine_id);
    untrack(g.engine_id);
    return invalid_request(text.error().message, "messages");
  }
  std::vector<int32_t> prompt =
      core->tokenizer().encode(*text, /*add_bos=*/true, /*parse_special=*/true);
  SamplingParams params = cr.params;
  const int64_t left = (int64_t)params.max_tokens - g.completion_tokens();
  if (auto e = check_lengths(prompt, params, false, "messages"); e || left <= 0) {
    engine->abort(g.engine_id);
    untrack(g.engine_id);
    if (e) return e;
    return invalid_request("max_tokens was used up by the server-side tool rounds", "max_tokens");
  }
  params.max_tokens = (int32_t)std::min<int64_t>(params.max_tokens, left);
  GenerateRequest gr;
  gr.prompt = prompt;
  gr.params = params;
  gr.pause_at_tool_turn_end = true;
  gr.tool_duration_hints = cr.tool_hints_s;
  gr.logprobs = g.logprobs;
  auto cb = [ch = g.ch](const RequestOutput& o) { ch->push(o); };
  auto r = engine->continue_paused(g.engine_id, std::move(gr), cb);
  if (!r.ok()) {
    engine->abort(g.engine_id);
    untrack(g.engine_id);
    return server_error("the paused request could not continue: " + r.error().message);
  }
  metrics.observe_interception(f.calls[0].name, waited);
  // The next turn starts; what the response reports is the last turn's, tokens summed.
  g.completion_before += (int64_t)g.tokens.size();
  g.prompt = std::move(prompt);
  g.cached_tokens = *r;
  g.text.clear();
  g.tokens.clear();
  g.lps.clear();
  g.finish = FinishReason::none;
  g.intercepted = false;
  g.done = false;
  g.finalized = false;
  g.forced_prefix.clear();
  g.filter = ToolTextFilter(g.kind, true);
  g.server_rounds++;
  return std::nullopt;
}

json HttpServer::Impl::chunk(const Generation& g, json choice) const {
  json c = {{"id", g.response_id},
            {"object", g.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
            {"created", g.created},
            {"model", g.model},
            {"choices", json::array({std::move(choice)})}};
  if (g.include_usage) c["usage"] = nullptr;
  return c;
}

json HttpServer::Impl::completion_logprobs(const std::vector<TokenInfo>& lps,
                                           size_t text_offset) const {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  size_t off = text_offset;
  for (const TokenInfo& t : lps) {
    tokens.push_back(t.text);
    token_lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [text, lp] : t.top) top[text] = lp;
    tops.push_back(top);
    offsets.push_back(off);
    off += t.text.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

json HttpServer::Impl::chat_response(const Generation& g, const FinalTurn& f) const {
  json msg = {{"role", "assistant"}};
  msg["content"] = f.calls.empty() || !f.content.empty() ? json(f.content) : json(nullptr);
  if (!f.calls.empty()) msg["tool_calls"] = tool_calls_json(f.calls);
  json choice = {{"index", 0}, {"message", msg}, {"finish_reason", f.finish_reason}};
  if (g.logprobs >= 0) {
    json content = json::array();
    for (const TokenInfo& t : g.lps) content.push_back(chat_logprob_entry(t));
    choice["logprobs"] = {{"content", content}};
  } else {
    choice["logprobs"] = nullptr;
  }
  if (g.return_token_ids) choice["token_ids"] = g.tokens;
  json r = {
      {"id", g.response_id},
      {"object", "chat.completion"},
      {"created", g.created},
      {"model", g.model},
      {"choices", json::array({choice})},
      {"usage", usage_json((int64_t)g.prompt.size(), g.completion_tokens(), g.cached_tokens)}};
  if (!f.interception.is_null()) r["interception"] = f.interception;
  if (!g.server_calls.empty()) r["server_tool_calls"] = g.server_calls;
  return r;
}

json HttpServer::Impl::completion_response(const Generation& g, const FinalTurn& f) const {
  json choice = {{"index", 0}, {"text", f.content}, {"finish_reason", f.finish_reason}};
  choice["logprobs"] = g.logprobs >= 0 ? completion_logprobs(g.lps, 0) : json(nullptr);
  if (g.return_token_ids) choice["token_ids"] = g.tokens;
  return {
      {"id", g.response_id},
      {"object", "text_completion"},
      {"created", g.created},
      {"model", g.model},
      {"choices", json::array({choice})},
      {"usage", usage_json((int64_t)g.prompt.size(), (int64_t)g.tokens.size(), g.cached_tokens)}};
}

void HttpServer::Impl::respond(std::shared_ptr<Generation> g, httplib::Response& res) {
  if (!g->resumed_from.empty()) res.set_header("X-Infercept-Resumed", g->resumed_from);
  if (!g->stream) {
    FinalTurn f;
    for (;;) {
      while (!g->done) {
        auto item = g->ch->pop(std::chrono::milliseconds(500));
        cancel_if_stopping(*g);
        if (item) consume(*g, *item);
      }
      f = finalize(*g);
      if (!f.server_round) break;
      if (auto e = server_tool_round(*g, f)) return send_error(res, *e);
    }
    if (f.error) return send_error(res, *f.error);
    send_json(res, 200,
              g->endpoint == Endpoint::chat ? chat_response(*g, f) : completion_response(*g, f));
    return;
  }
  struct StreamState {
    std::shared_ptr<Generation> g;
    std::unique_ptr<Guard> guard;
    bool started = false;
    size_t text_offset = 0;  // completions: bytes of text sent
  };
  auto st = std::make_shared<StreamState>();
  st->g = g;
  st->guard = std::make_unique<Guard>(this);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t, httplib::DataSink& sink) -> bool {
        Generation& g = *st->g;
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        const bool chat = g.endpoint == Endpoint::chat;
        if (!st->started) {
          st->started = true;
          if (chat) {
            json choice = {{"index", 0},
                           {"delta", {{"role", "assistant"}, {"content", ""}}},
                           {"logprobs", nullptr},
                           {"finish_reason", nullptr}};
            return write(sse(chunk(g, choice)));
          }
          return true;
        }
        auto item = g.ch->pop(std::chrono::milliseconds(250));
        cancel_if_stopping(g);
        if (!item) return sink.is_writable();
        const size_t lp_before = g.lps.size();
        consume(g, *item);
        json lps_now = json::array();
        std::vector<TokenInfo> new_lps(g.lps.begin() + (ptrdiff_t)lp_before, g.lps.end());
        if (!g.done) {
          const std::string piece = chat ? g.filter.push(item->out.text) : item->out.text;
          if (piece.empty() && new_lps.empty()) return true;
          json choice;
          if (chat) {
            json lp = nullptr;
            if (g.logprobs >= 0) {
              json content = json::array();
              for (const TokenInfo& t : new_lps) content.push_back(chat_logprob_entry(t));
              lp = {{"content", content}};
            }
            choice = {{"index", 0},
                      {"delta", {{"content", piece}}},
                      {"logprobs", lp},
                      {"finish_reason", nullptr}};
          } else {
            choice = {{"index", 0},
                      {"text", piece},
                      {"logprobs", g.logprobs >= 0 ? completion_logprobs(new_lps, st->text_offset)
                                                   : json(nullptr)},
                      {"finish_reason", nullptr}};
            st->text_offset += piece.size();
          }
          return write(sse(chunk(g, choice)));
        }
        // The turn is over.
        FinalTurn f = finalize(g);
        if (f.server_round) {
          // The turn's content went out already; the calls run here, the next turn streams on.
          if (auto e = server_tool_round(g, f))
            f.error = e;
          else
            return true;
        }
        if (f.error) {
          write(sse(error_body(*f.error)));
          write("data: [DONE]\n\n");
          sink.done();
          return true;
        }
        std::string out;
        if (chat) {
          const size_t sent = g.filter.emitted();
          const std::string rest = f.content.size() > sent ? f.content.substr(sent) : std::string();
          json lp = nullptr;
          if (g.logprobs >= 0) {
            json content = json::array();
            for (const TokenInfo& t : new_lps) content.push_back(chat_logprob_entry(t));
            lp = {{"content", content}};
          }
          if (!rest.empty() || (g.logprobs >= 0 && !new_lps.empty()))
            out += sse(chunk(g, {{"index", 0},
                                 {"delta", {{"content", rest}}},
                                 {"logprobs", lp},
                                 {"finish_reason", nullptr}}));
          if (!f.calls.empty()) {
            json calls = json::array();
            for (size_t i = 0; i < f.calls.size(); ++i)
              calls.push_back(
                  {{"index", i},
                   {"id", f.calls[i].id},
                   {"type", "function"},
                   {"function",
                    {{"name", f.calls[i].name}, {"arguments", f.calls[i].arguments_json}}}});
            out += sse(chunk(g, {{"index", 0},
                                 {"delta", {{"tool_calls", calls}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}));
          }
          json last = chunk(g, {{"index", 0},
                                {"delta", json::object()},
                                {"logprobs", nullptr},
                                {"finish_reason", f.finish_reason}});
          if (!f.interception.is_null()) last["interception"] = f.interception;
          if (!g.server_calls.empty()) last["server_tool_calls"] = g.server_calls;
          if (g.return_token_ids) last["choices"][0]["token_ids"] = g.tokens;
          out += sse(last);
        } else {
          json choice = {
              {"index", 0},
              {"text", item->out.text},
              {"logprobs",
               g.logprobs >= 0 ? completion_logprobs(new_lps, st->text_offset) : json(nullptr)},
              {"finish_reason", f.finish_reason}};
          if (g.return_token_ids) choice["token_ids"] = g.tokens;
          out += sse(chunk(g, choice));
        }
        if (g.include_usage) {
          json u = {{"id", g.response_id},
                    {"object", chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", g.created},
                    {"model", g.model},
                    {"choices", json::array()},
                    {"usage",
                     usage_json((int64_t)g.prompt.size(), g.completion_tokens(), g.cached_tokens)}};
          out += sse(u);
        }
        out += "data: [DONE]\n\n";
        if (!write(out)) return false;
        sink.done();
        return true;
      },
      [this, st](bool success) {
        Generation& g = *st->g;
        if (!g.finalized) {
          // The client went away mid-stream: stop generating for it.
          engine->abort(g.engine_id);
          untrack(g.engine_id);
          log_line({{"event", "client_disconnected"}, {"id", g.response_id}, {"owner", g.owner}});
        }
        (void)success;
        st->guard.reset();
      });
}

// --- interceptions ------------------------------------------------------------------------

json HttpServer::Impl::interception_json(const PausedRequest& p, const PausedSeqInfo* seq) const {
  const double now = steady_now();
  json calls = json::array();
  for (size_t i = 0; i < p.tool_names.size(); ++i)
    calls.push_back(
        {{"id", i < p.call_ids.size() ? p.call_ids[i] : ""}, {"name", p.tool_names[i]}});
  json j = {{"id", p.id},
            {"object", "interception"},
            {"model", model_name},
            {"tool_calls", calls},
            {"waiting_ms", (int64_t)((now - p.paused_at) * 1000.0)},
            {"expires_at", p.expires_at_unix},
            {"tokens", p.tokens.size()}};
  if (seq != nullptr) {
    j["tier"] = seq->tier();
    j["kv_tokens"] = {{"device", seq->device_tokens}, {"host", seq->host_tokens}};
  } else {
    j["tier"] = "released";
    j["kv_tokens"] = {{"device", 0}, {"host", 0}};
  }
  return j;
}

ApiError HttpServer::Impl::take_error(const std::string& id, TakeError why) const {
  ApiError e;
  switch (why) {
    case TakeError::resumed:
      e.status = 409;
      e.code = "interception_already_resumed";
      e.message = "interception " + id + " was already resumed";
      break;
    case TakeError::expired:
      e.status = 410;
      e.code = "interception_expired";
      e.message =
          "interception " + id + " expired; send the whole conversation to /v1/chat/completions";
      break;
    case TakeError::deleted:
      e.status = 404;
      e.code = "interception_not_found";
      e.message = "interception " + id + " was deleted";
      break;
    case TakeError::unknown:
      e.status = 404;
      e.code = "interception_not_found";
      e.message = "no interception " + id;
      break;
  }
  return e;
}

void HttpServer::Impl::handle_interception_list(const httplib::Request& req,
                                                httplib::Response& res) {
  Guard guard(this);
  const std::string owner = owner_of(req);
  auto snap = snapshot(*engine, std::chrono::seconds(10));
  json data = json::array();
  for (const PausedRequest& p : registry->list(owner)) {
    const PausedSeqInfo* seq = nullptr;
    if (snap)
      for (const PausedSeqInfo& s : snap->paused_seqs)
        if (s.id == p.engine_id) seq = &s;
    data.push_back(interception_json(p, seq));
  }
  send_json(res, 200, {{"object", "list"}, {"data", data}});
}

void HttpServer::Impl::handle_interception_get(const httplib::Request& req,
                                               httplib::Response& res) {
  Guard guard(this);
  const std::string id = req.matches[1];
  auto p = registry->get(owner_of(req), id);
  if (!p) return send_error(res, take_error(id, TakeError::unknown));
  auto snap = snapshot(*engine, std::chrono::seconds(10));
  const PausedSeqInfo* seq = nullptr;
  if (snap)
    for (const PausedSeqInfo& s : snap->paused_seqs)
      if (s.id == p->engine_id) seq = &s;
  send_json(res, 200, interception_json(*p, seq));
}

void HttpServer::Impl::handle_interception_delete(const httplib::Request& req,
                                                  httplib::Response& res) {
  Guard guard(this);
  const std::string id = req.matches[1];
  TakeError why = TakeError::unknown;
  auto p = registry->take(owner_of(req), id, /*is_delete=*/true, &why);
  if (!p) return send_error(res, take_error(id, why));
  engine->abort(p->engine_id);
  send_json(res, 200, {{"id", id}, {"object", "interception.deleted"}, {"deleted", true}});
}

void HttpServer::Impl::handle_interception_hint(const httplib::Request& req,
                                                httplib::Response& res) {
  Guard guard(this);
  const std::string id = req.matches[1];
  json body;
  if (auto e = parse_body(req.body, body)) return send_error(res, *e);
  auto ms = body.find("expected_duration_ms");
  if (ms == body.end() || !ms->is_number() || ms->get<double>() < 0)
    return send_error(res, invalid_request("'expected_duration_ms' must be a number >= 0",
                                           "expected_duration_ms"));
  auto p = registry->get(owner_of(req), id);
  if (!p) return send_error(res, take_error(id, TakeError::unknown));
  const double seconds = ms->get<double>() / 1000.0;
  const uint64_t engine_id = p->engine_id;
  engine->post([engine_id, seconds](EngineCore& core) {
    (void)core.set_interception_hint(engine_id, seconds);
  });
  send_json(res, 200,
            {{"id", id}, {"object", "interception"}, {"expected_duration_ms", ms->get<double>()}});
}

void HttpServer::Impl::handle_interception_resume(const httplib::Request& req,
                                                  httplib::Response& res) {
  Guard guard(this);
  const std::string id = req.matches[1];
  const std::string owner = owner_of(req);
  json body;
  if (auto e = parse_body(req.body, body)) return send_error(res, *e);
  // The tool results: "messages" (tool messages, possibly more) or the shorthand
  // "tool_results": [{"tool_call_id", "content"}].
  std::vector<ChatMessage> added;
  if (auto m = body.find("messages"); m != body.end() && !m->is_null()) {
    if (auto e = parse_messages(*m, "messages", added)) return send_error(res, *e);
  } else if (auto t = body.find("tool_results"); t != body.end() && !t->is_null()) {
    if (!t->is_array())
      return send_error(res, invalid_request("'tool_results' must be an array", "tool_results"));
    json msgs = json::array();
    for (const json& r : *t) {
      if (!r.is_object())
        return send_error(res,
                          invalid_request("'tool_results' items must be objects", "tool_results"));
      json m = r;
      m["role"] = "tool";
      msgs.push_back(m);
    }
    if (auto e = parse_messages(msgs, "tool_results", added)) return send_error(res, *e);
  }
  if (added.empty())
    return send_error(res, invalid_request("give the tool results as 'messages' or 'tool_results'",
                                           "messages", "missing_required_parameter"));
  auto peek = registry->get(owner, id);
  if (!peek) {
    TakeError why = TakeError::unknown;
    (void)registry->take(owner, id, false, &why);
    return send_error(res, take_error(id, why));
  }
  ChatRequest cr = peek->request;
  cr.messages.insert(cr.messages.end(), added.begin(), added.end());
  RequestLimits l = limits;
  l.defaults = cr.params;
  if (auto e = parse_sampling(body, l, /*chat=*/true, cr.params, cr.max_tokens_given))
    return send_error(res, *e);
  bool stream = false, include_usage = false;
  {
    json sb = json::object();
    if (body.contains("stream")) sb["stream"] = body["stream"];
    if (body.contains("stream_options")) sb["stream_options"] = body["stream_options"];
    sb["model"] = model_name;
    sb["messages"] = json::array({{{"role", "user"}, {"content", ""}}});
    ChatRequest tmp;
    if (auto e = parse_chat_request(sb, limits, tmp)) return send_error(res, *e);
    stream = tmp.stream;
    include_usage = tmp.include_usage;
  }
  cr.stream = stream;
  cr.include_usage = include_usage;
  // A scripted call is per turn: the resume names its own or none.
  if (auto e = parse_scripted_call(body, cr)) return send_error(res, *e);
  // A forced tool call was for the first turn; the continuation chooses freely.
  if (cr.tool_choice == ToolChoice::required || cr.tool_choice == ToolChoice::named)
    cr.tool_choice = ToolChoice::automatic;
  TakeError why = TakeError::unknown;
  auto entry = registry->take(owner, id, /*is_delete=*/false, &why);
  if (!entry) return send_error(res, take_error(id, why));
  run_chat(std::move(cr), owner, std::move(entry), res);
}

}  // namespace infercept::server
