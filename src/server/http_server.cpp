// The HTTP server: creation, life cycle (bind, run, graceful stop), routes, the reaper.
#include "server/http_server_impl.h"

namespace infercept::server {

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

}  // namespace infercept::server
