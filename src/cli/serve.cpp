// `infercept serve`: the OpenAI-compatible HTTP server on one model (docs/SERVER.md).
// SIGINT/SIGTERM stop it gracefully: no new requests, in-flight ones get a grace period,
// then the rest are cancelled and every paused request's KV is released.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstring>

#include "cli/common.h"
#ifdef INFERCEPT_HAVE_SERVER
#include "server/http_server.h"
#endif

namespace infercept::cli {

#ifdef INFERCEPT_HAVE_SERVER
namespace {

// The server's flags, bound to ServerOptions' fields (whose values are the defaults) where
// the units match.
struct ServeFlags {
  EngineFlags engine;
  SamplingFlags sampling;
  server::ServerOptions server;
  double max_body_mb = 0.0;
  double responses_store_mb = 0.0;
  bool no_interception = false, quiet = false;
};

void add_serve_flags(CLI::App& app, ServeFlags& f) {
  server::ServerOptions& so = f.server;
  f.max_body_mb = (double)so.max_body_bytes / 1048576.0;
  const std::string g = "Server";
  app.add_option("--host", so.host, "address to listen on")->group(g);
  app.add_option("-p,--port", so.port, "port to listen on (0: any free port)")->group(g);
  app.add_option("--served-model-name", so.model_name,
                 "the model's name in the API (default: the file name without extension)")
      ->group(g);
  add_repeated(app, "--api-key", so.api_keys, "accept this API key")->group(g);
  app.add_option("--api-key-file", so.api_key_file, "file of API keys, one a line")->group(g);
  add_repeated(app, "--admin-api-key", so.admin_api_keys,
               "an API key that sees every owner's requests in /dashboard and /metrics")
      ->group(g);
  app.add_flag("--no-interception", f.no_interception,
               "do not keep requests that end in tool calls paused")
      ->group(g);
  app.add_option("--max-paused", so.max_paused_per_key,
                 "paused requests per API key at most; a new pause past it releases the key's "
                 "oldest (0: no limit)")
      ->group(g);
  app.add_option("--interception-expiry", so.interception_expiry_s,
                 "seconds before a paused request nobody resumed is dropped")
      ->group(g);
  app.add_option("--max-tokens-limit", so.max_tokens_limit,
                 "max_tokens a request may ask for (0: the context)")
      ->group(g);
  app.add_option("--max-body-mb", f.max_body_mb, "largest request body, MiB")->group(g);
  f.responses_store_mb = (double)so.responses_store_bytes / 1048576.0;
  app.add_option("--responses-store-mb", f.responses_store_mb,
                 "MiB of Responses API responses kept for previous_response_id, the oldest "
                 "dropped first (0: none kept)")
      ->group(g);
  app.add_option("--http-threads", so.http_threads, "threads serving connections")->group(g);
  app.add_option("--max-connections", so.max_connections, "open connections at most (then 503)")
      ->group(g);
  app.add_option("--header-timeout", so.header_timeout_s, "seconds to receive a request head")
      ->group(g);
  app.add_option("--body-timeout", so.body_timeout_s, "seconds to receive a request body")
      ->group(g);
  app.add_option("--write-timeout", so.write_timeout_s, "seconds for each write")->group(g);
  app.add_option("--shutdown-grace", so.shutdown_grace_s,
                 "seconds in-flight requests may finish after SIGINT/SIGTERM")
      ->group(g);
  app.add_option("--tools-config", so.tools_config,
                 "server-side HTTP tools, JSON (default: the calculator only)")
      ->group(g);
  app.add_flag("--allow-special-tokens-in-content", so.allow_special_tokens_in_content,
               "let message content spell control tokens")
      ->group(g);
  app.add_flag("--quiet", f.quiet, "no JSON line per request on stderr")->group(g);
  add_engine_flags(app, f.engine);
  // OpenAI's default temperature; the sampling flags are the defaults of what a request
  // leaves out.
  add_sampling_flags(app, f.sampling, /*default_temperature=*/1.0f);
}

Result<server::ServerOptions> server_options_from(const ServeFlags& f,
                                                  const SamplingParams& defaults) {
  server::ServerOptions so = f.server;
  if (so.port < 0 || so.port > 65535) return make_error("--port must be in [0, 65535]");
  if (so.max_connections < 1 || so.max_connections > 1000000 || so.header_timeout_s <= 0 ||
      so.body_timeout_s <= 0 || so.write_timeout_s <= 0)
    return make_error(
        "--max-connections, --header-timeout, --body-timeout and --write-timeout must be > 0");
  if (!(f.responses_store_mb >= 0 && f.responses_store_mb <= 1048576))
    return make_error("--responses-store-mb must be in [0, 1048576]");
  so.responses_store_bytes = (size_t)(f.responses_store_mb * 1048576.0);
  if (f.max_body_mb <= 0 || so.max_tokens_limit < 0 || so.max_paused_per_key < 0 ||
      so.interception_expiry_s <= 0 || so.http_threads < 1 || so.http_threads > 4096 ||
      so.shutdown_grace_s < 0)
    return make_error(
        "--max-body-mb, --interception-expiry and --http-threads must be > 0; "
        "--max-tokens-limit, --max-paused and --shutdown-grace >= 0");
  so.max_body_bytes = (size_t)(f.max_body_mb * 1048576.0);
  so.interception = !f.no_interception;
  so.defaults = defaults;
  so.log_requests = !f.quiet;
  return so;
}

// SIGINT and SIGTERM, blocked in the calling thread and so in every thread it starts (threads
// inherit the mask): only the thread that waits for them with sigwait sees them.
sigset_t block_stop_signals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

// Loads the model, binds, serves until SIGINT/SIGTERM, then stops gracefully.
Status serve_until_stopped(const EngineConfig& cfg, const server::ServerOptions& so) {
  const sigset_t stop_signals = block_stop_signals();
  std::fprintf(stderr, "infercept: loading %s\n", cfg.model_path.c_str());
  TRY_ASSIGN(auto core, EngineCore::create(cfg));
  TRY_ASSIGN(auto srv, server::HttpServer::create(std::move(core), so));
  TRY_ASSIGN(const int port, srv->bind());
  std::fprintf(stderr,
               "infercept: serving '%s' on http://%s:%d (OpenAI API under /v1, /metrics, "
               "/dashboard, /health)%s\n",
               srv->model_name().c_str(), so.host.c_str(), port,
               so.api_keys.empty() && so.api_key_file.empty() && so.admin_api_keys.empty()
                   ? ""
                   : "; API keys required");
  srv->start();
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "infercept: %s received, shutting down\n", strsignal(sig));
  srv->stop();
  std::fprintf(stderr, "infercept: stopped\n");
  return ok_status();
}

}  // namespace
#endif

int run_serve(int argc, char** argv) {
#ifndef INFERCEPT_HAVE_SERVER
  (void)argc;
  (void)argv;
  std::fprintf(stderr,
               "error: this build has no HTTP server: Boost or cpp-httplib was not found when it "
               "was configured (apt-get install libboost-dev libcpp-httplib-dev, then build "
               "again)\n");
  return 1;
#else
  CLI::App app{
      "The OpenAI-compatible HTTP server on one model (docs/SERVER.md). SIGINT/SIGTERM "
      "stop it gracefully.",
      "infercept serve"};
  set_up_app(app, "infercept serve --port 8000 --api-key-file keys.txt");
  ServeFlags f;
  add_serve_flags(app, f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto cfg = engine_config_from(f.engine);
  if (!cfg.ok()) return fail(cfg.error());
  auto params = sampling_params_from(f.sampling);
  if (!params.ok()) return fail(params.error());
  auto opts = server_options_from(f, *params);
  if (!opts.ok()) return fail(opts.error());
  if (Status st = serve_until_stopped(*cfg, *opts); !st.ok()) return fail(st.error());
  return 0;
#endif
}

}  // namespace infercept::cli
