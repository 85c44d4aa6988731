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
Result<server::ServerOptions> server_options_from(const Args& a, const SamplingParams& defaults) {
  server::ServerOptions so;
  so.host = a.get("host", so.host);
  TRY_ASSIGN(int64_t port, a.get_int("port", so.port));
  TRY_ASSIGN(double body_mb, a.get_double("max-body-mb", (double)so.max_body_bytes / 1048576.0));
  TRY_ASSIGN(so.max_tokens_limit, a.get_int("max-tokens-limit", 0));
  TRY_ASSIGN(so.max_paused_per_key, a.get_int("max-paused", so.max_paused_per_key));
  TRY_ASSIGN(so.interception_expiry_s,
             a.get_double("interception-expiry", so.interception_expiry_s));
  TRY_ASSIGN(int64_t threads, a.get_int("http-threads", so.http_threads));
  TRY_ASSIGN(so.shutdown_grace_s, a.get_double("shutdown-grace", so.shutdown_grace_s));
  TRY_ASSIGN(int64_t max_conns, a.get_int("max-connections", so.max_connections));
  TRY_ASSIGN(so.header_timeout_s, a.get_double("header-timeout", so.header_timeout_s));
  TRY_ASSIGN(so.body_timeout_s, a.get_double("body-timeout", so.body_timeout_s));
  TRY_ASSIGN(so.write_timeout_s, a.get_double("write-timeout", so.write_timeout_s));
  if (max_conns < 1 || max_conns > 1000000 || so.header_timeout_s <= 0 || so.body_timeout_s <= 0 ||
      so.write_timeout_s <= 0)
    return make_error(
        "--max-connections, --header-timeout, --body-timeout and --write-timeout must be > 0");
  so.max_connections = (int)max_conns;
  if (port < 0 || port > 65535) return make_error("--port must be in [0, 65535]");
  if (body_mb <= 0 || so.max_tokens_limit < 0 || so.max_paused_per_key < 0 ||
      so.interception_expiry_s <= 0 || threads < 1 || threads > 4096 || so.shutdown_grace_s < 0)
    return make_error(
        "--max-body-mb, --interception-expiry and --http-threads must be > 0; "
        "--max-tokens-limit, --max-paused and --shutdown-grace >= 0");
  so.port = (int)port;
  so.http_threads = (int)threads;
  so.max_body_bytes = (size_t)(body_mb * 1048576.0);
  so.model_name = a.get("served-model-name");
  so.api_keys = a.get_all("api-key");
  so.api_key_file = a.get("api-key-file");
  so.admin_api_keys = a.get_all("admin-api-key");
  so.interception = !a.flag("no-interception");
  so.defaults = defaults;
  so.log_requests = !a.flag("quiet");
  so.tools_config = a.get("tools-config");
  so.allow_special_tokens_in_content = a.flag("allow-special-tokens-in-content");
  return so;
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
  const std::set<std::string> server_flags = {"host",
                                              "port",
                                              "served-model-name",
                                              "api-key",
                                              "api-key-file",
                                              "admin-api-key",
                                              "max-body-mb",
                                              "max-tokens-limit",
                                              "max-paused",
                                              "interception-expiry",
                                              "http-threads",
                                              "shutdown-grace",
                                              "max-connections",
                                              "header-timeout",
                                              "body-timeout",
                                              "write-timeout",
                                              "tools-config"};
  auto args = Args::parse(argc, argv, merge({kEngineFlags, kSamplingFlags, server_flags}),
                          {"no-interception", "quiet", "allow-special-tokens-in-content"});
  if (!args.ok()) return fail(args.error());
  auto cfg = engine_config_from(*args);
  if (!cfg.ok()) return fail(cfg.error());
  auto params = sampling_params_from(*args, 1.0f);  // OpenAI's default temperature
  if (!params.ok()) return fail(params.error());
  auto opts = server_options_from(*args, *params);
  if (!opts.ok()) return fail(opts.error());
  const server::ServerOptions& so = *opts;

  // SIGINT/SIGTERM are blocked in every thread (threads inherit the mask); this thread
  // waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::fprintf(stderr, "infercept: loading %s\n", cfg->model_path.c_str());
  auto core = EngineCore::create(*cfg);
  if (!core.ok()) return fail(core.error());
  auto srv = server::HttpServer::create(std::move(*core), so);
  if (!srv.ok()) return fail(srv.error());
  auto bound = (*srv)->bind();
  if (!bound.ok()) return fail(bound.error());
  std::fprintf(stderr,
               "infercept: serving '%s' on http://%s:%d (OpenAI API under /v1, /metrics, "
               "/dashboard, /health)%s\n",
               (*srv)->model_name().c_str(), so.host.c_str(), *bound,
               so.api_keys.empty() && so.api_key_file.empty() && so.admin_api_keys.empty()
                   ? ""
                   : "; API keys required");
  (*srv)->start();
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "infercept: %s received, shutting down\n", strsignal(sig));
  (*srv)->stop();
  std::fprintf(stderr, "infercept: stopped\n");
  return 0;
#endif
}

}  // namespace infercept::cli
