// The HTTP server: creation, life cycle (bind, run, graceful stop), routes, the reaper.
#include "server/http_server_impl.h"

namespace infercept::server {

Result<std::unique_ptr<HttpServer>> HttpServer::create(std::unique_ptr<EngineCore> core,
                                                       ServerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->opt = std::move(options);
  TRY_ASSIGN(impl->keys,
             ApiKeys::load(impl->opt.api_keys, impl->opt.api_key_file, impl->opt.admin_api_keys));
  TRY_ASSIGN(impl->tools, ServerTools::load(impl->opt.tools_config));
  if (impl->opt.interception_expiry_s <= 0) return make_error("--interception-expiry must be > 0");
  if (impl->opt.http_threads < 1) return make_error("--http-threads must be >= 1");
  if (impl->opt.max_connections < 1) return make_error("--max-connections must be >= 1");
  if (impl->opt.header_timeout_s <= 0 || impl->opt.body_timeout_s <= 0 ||
      impl->opt.write_timeout_s <= 0)
    return make_error("--header-timeout, --body-timeout and --write-timeout must be > 0");
  impl->context_limit = std::min(core->max_context(), core->kv_capacity_tokens());
  impl->has_template = !core->tokenizer().spec().chat_template.empty() ||
                       !core->config().chat_template.empty() ||
                       !core->config().chat_template_file.empty();
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
  impl->engine = std::make_unique<Engine>(std::move(core));
  Engine* engine = impl->engine.get();
  impl->registry = std::make_unique<InterceptionRegistry>(
      impl->opt.interception_expiry_s, impl->opt.max_paused_per_key,
      [engine](uint64_t engine_id) { engine->abort(engine_id); });
  impl->responses = std::make_unique<ResponseStore>(impl->opt.responses_store_bytes);
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
  TRY_ASSIGN(s.port, s.transport->bind());
  s.reaper = std::thread([&s] { s.reap_loop(); });
  return s.port;
}

void HttpServer::run() {
  impl_->transport->start();
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->cv.wait(lock, [this] { return impl_->stopped; });
}

void HttpServer::start() {
  impl_->transport->start();
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

// Within the grace whatever the clients do: connections are closed by the transport, not
// waited for; only generations get the grace.
void HttpServer::Impl::stop() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopped) return;
    stopped = true;
  }
  cv.notify_all();
  stopping = true;  // new requests get 503
  std::chrono::steady_clock::time_point drain_end;
  // In-flight requests may finish within the grace period; the rest are cancelled.
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::duration<double>(opt.shutdown_grace_s),
                [&] { return in_flight.empty(); });
    drain_end = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(opt.shutdown_drain_s));
    aborting_all = true;
    for (uint64_t id : in_flight) engine->abort(id);
    // Cancelled streams end with an error event: give the engine a moment to process the
    // aborts (at its next step) and the answers a moment to be produced and written.
    // Bounded, so that the whole stop stays within the grace and shutdown_drain_s whatever
    // the clients do.
    cv.wait_until(lock, drain_end, [&] { return active == 0; });
  }
  transport->stop(std::max(
      0.1, std::chrono::duration<double>(drain_end - std::chrono::steady_clock::now()).count()));
  {
    std::lock_guard<std::mutex> lock(mu);
    reaper_stop = true;
  }
  cv.notify_all();
  if (reaper.joinable()) reaper.join();
  registry->take_all();  // the leases release their engine requests
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
    for (const PausedLease& p : expired)
      log_line({{"event", "interception_expired"}, {"id", p->id}, {"owner", p->owner}});
    if (!expired.empty()) metrics.add_expired((int64_t)expired.size());
    expired.clear();  // released
    lock.lock();
  }
}

// The transport with its limits and hooks, then the routes by area.
void HttpServer::Impl::setup_routes() {
  transport = std::make_unique<HttpTransport>(transport_options(), transport_hooks());
  add_openai_routes(*transport);
  add_interception_routes(*transport);
  add_observability_routes(*transport);
}

TransportOptions HttpServer::Impl::transport_options() const {
  TransportOptions to;
  to.host = opt.host;
  to.port = opt.port;
  to.worker_threads = opt.http_threads;
  to.max_connections = opt.max_connections;
  to.header_timeout_s = opt.header_timeout_s;
  to.body_timeout_s = opt.body_timeout_s;
  to.write_timeout_s = opt.write_timeout_s;
  to.max_header_bytes = opt.max_header_bytes;
  to.max_body_bytes = opt.max_body_bytes;
  return to;
}

TransportHooks HttpServer::Impl::transport_hooks() {
  TransportHooks hooks;
  hooks.pre_routing = [this](const HttpRequest& req, HttpResponse& res) {
    return refuse_before_routing(req, res);
  };
  hooks.error = [this](const HttpRequest&, int status, const std::string& message,
                       HttpResponse& res) { send_error(res, transport_error(status, message)); };
  hooks.logger = [this](const HttpRequest& req, int status) { log_http(req, status); };
  return hooks;
}

// Every request but /health: 503 while stopping, 401 without a valid key.
bool HttpServer::Impl::refuse_before_routing(const HttpRequest& req, HttpResponse& res) {
  if (req.path == "/health") return false;
  if (stopping) {
    send_error(res, server_error("the server is shutting down", 503));
    return true;
  }
  if (keys.authenticate(req.get_header_value("Authorization"), other_key(req))) return false;
  metrics.add_rejected("unauthorized");
  res.set_header("WWW-Authenticate", "Bearer");
  const bool key_given = req.has_header("Authorization") || !other_key(req).empty();
  if (req.path == "/dashboard") {
    // A person in a browser: a page that says how to pass the key, not an error object.
    res.status = 401;
    res.set_content(dashboard_key_page(key_given), "text/html; charset=utf-8");
    return true;
  }
  ApiError e;
  e.status = 401;
  e.type = "authentication_error";
  e.code = "invalid_api_key";
  e.message = key_given ? "Incorrect API key provided."
                        : "You didn't provide an API key: send \"Authorization: Bearer <key>\" "
                          "(or \"x-api-key: <key>\").";
  send_error(res, e);
  return true;
}

// What the transport refuses itself (no route, a slow or oversized request, the
// connection cap), as an OpenAI error object; the refusals that are limits are counted.
ApiError HttpServer::Impl::transport_error(int status, const std::string& message) {
  ApiError e;
  e.status = status;
  e.message = message;
  switch (status) {
    case 404:
      e.code = "not_found";
      break;
    case 408:
      e.code = "request_timeout";
      break;
    case 413:
      e.code = "payload_too_large";
      metrics.add_rejected("body_too_large");
      break;
    case 431:
      e.code = "headers_too_large";
      metrics.add_rejected("headers_too_large");
      break;
    case 503:
      e.type = "service_unavailable";
      e.code = "too_many_connections";
      break;
    default:
      if (status >= 500) e.type = "server_error";
  }
  if (status == 503 && stopping) e.code = "";
  return e;
}

void HttpServer::Impl::log_http(const HttpRequest& req, int status) {
  metrics.add_http_status(status);
  log_line({{"event", "http"},
            {"method", req.method},
            {"path", req.path},
            {"status", status},
            {"remote", req.remote_addr},
            {"owner", owner_of(req)}});
}

void HttpServer::Impl::add_openai_routes(HttpTransport& t) {
  // Inline: answered on the io thread, whatever the engine and the workers are doing.
  t.route(
      "GET", "/health",
      [this](const HttpRequest&, HttpResponse& res) {
        if (stopping)
          send_json(res, 503, {{"status", "stopping"}});
        else
          send_json(res, 200, {{"status", "ok"}});
      },
      /*run_inline=*/true);
  t.route("GET", "/v1/models", [this](const HttpRequest&, HttpResponse& res) {
    send_json(res, 200, {{"object", "list"}, {"data", json::array({model_json()})}});
  });
  t.route("GET", "/v1/models/(.+)", [this](const HttpRequest& req, HttpResponse& res) {
    if (req.matches[1] != model_name)
      return send_error(
          res, not_found("The model '" + req.matches[1] + "' does not exist.", "model_not_found"));
    send_json(res, 200, model_json());
  });
  t.route("POST", "/v1/chat/completions",
          [this](const HttpRequest& req, HttpResponse& res) { handle_chat(req, res); });
  t.route("POST", "/v1/completions",
          [this](const HttpRequest& req, HttpResponse& res) { handle_completion(req, res); });
  t.route("POST", "/v1/responses",
          [this](const HttpRequest& req, HttpResponse& res) { handle_responses(req, res); });
  t.route("POST", "/v1/messages",
          [this](const HttpRequest& req, HttpResponse& res) { handle_messages(req, res); });
  t.route("POST", "/v1/messages/count_tokens",
          [this](const HttpRequest& req, HttpResponse& res) { handle_count_tokens(req, res); });
  t.route("GET", "/v1/responses/([^/]+)",
          [this](const HttpRequest& req, HttpResponse& res) { handle_response_get(req, res); });
  t.route("DELETE", "/v1/responses/([^/]+)",
          [this](const HttpRequest& req, HttpResponse& res) { handle_response_delete(req, res); });
}

json HttpServer::Impl::model_json() const {
  return {{"id", model_name},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "infercept"},
          {"max_model_len", context_limit}};
}

void HttpServer::Impl::add_interception_routes(HttpTransport& t) {
  t.route("GET", "/v1/interceptions", [this](const HttpRequest& req, HttpResponse& res) {
    handle_interception_list(req, res);
  });
  t.route("GET", "/v1/interceptions/([^/]+)",
          [this](const HttpRequest& req, HttpResponse& res) { handle_interception_get(req, res); });
  t.route("DELETE", "/v1/interceptions/([^/]+)", [this](const HttpRequest& req, HttpResponse& res) {
    handle_interception_delete(req, res);
  });
  t.route(
      "POST", "/v1/interceptions/([^/]+)/resume",
      [this](const HttpRequest& req, HttpResponse& res) { handle_interception_resume(req, res); });
  t.route(
      "POST", "/v1/interceptions/([^/]+)/hint",
      [this](const HttpRequest& req, HttpResponse& res) { handle_interception_hint(req, res); });
}

void HttpServer::Impl::add_observability_routes(HttpTransport& t) {
  t.route("GET", "/metrics",
          [this](const HttpRequest& req, HttpResponse& res) { handle_metrics(req, res); });
  t.route("GET", "/dashboard", [](const HttpRequest&, HttpResponse& res) {
    res.status = 200;
    res.set_content(dashboard_html(), "text/html; charset=utf-8");
  });
  t.route("GET", "/dashboard/data",
          [this](const HttpRequest& req, HttpResponse& res) { handle_dashboard_data(req, res); });
}

void HttpServer::Impl::handle_metrics(const HttpRequest& req, HttpResponse& res) {
  auto snap = snapshot(*engine, std::chrono::seconds(10));
  if (!snap) return send_error(res, server_error("the engine did not answer in time", 503));
  res.status = 200;
  res.set_content(metrics.prometheus(*snap, (int64_t)registry->size(), viewer_of(req)),
                  "text/plain; version=0.0.4; charset=utf-8");
}

void HttpServer::Impl::handle_dashboard_data(const HttpRequest& req, HttpResponse& res) {
  auto snap = snapshot(*engine, std::chrono::seconds(10));
  if (!snap) return send_error(res, server_error("the engine did not answer in time", 503));
  // The paused requests the caller may see: its own (all for an admin).
  const Viewer v = viewer_of(req);
  std::set<uint64_t> visible;
  for (const PausedRequest& p : registry->list(v.owner, v.all)) visible.insert(p.engine_id);
  json j = metrics.dashboard_json(*snap, (int64_t)visible.size(), v, visible);
  j["model"] = model_name;
  j["time"] = unix_now();
  send_json(res, 200, j);
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

}  // namespace infercept::server
