// The OpenAI-compatible HTTP server (docs/SERVER.md). HTTP worker threads parse, validate
// and enqueue (the transport, http_transport.h, owns connections and deadlines); the engine thread
// (Engine) owns the model and the KV cache. A chat completion that ends in tool calls leaves its
// request paused in the engine; the client's follow-up (the same conversation plus the tool
// results) is recognized by the tool call ids it carries and resumes it, or the client resumes
// it explicitly through /v1/interceptions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "engine/engine.h"

namespace infercept::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;         // 0 = any free port (tests)
  std::string model_name;  // served name; empty = the model file's name without extension
  std::vector<std::string> api_keys;
  std::string api_key_file;
  std::vector<std::string> admin_api_keys;  // see every owner in /dashboard/data and /metrics
  size_t max_body_bytes = 8u << 20;
  int64_t max_tokens_limit = 0;  // per request; 0 = the context
  int64_t max_paused_per_key = 256;
  double interception_expiry_s = 1800.0;  // a paused request nobody resumed is dropped
  bool interception = true;               // keep requests that end in tool calls paused
  // The HTTP transport (http_transport.h): worker threads run handlers (a connection or a
  // stream holds none); deadlines are for a whole request head / body, and for each write.
  int http_threads = 16;
  int max_connections = 1024;  // beyond: 503
  double header_timeout_s = 10.0;
  double body_timeout_s = 60.0;
  double write_timeout_s = 30.0;
  size_t max_header_bytes = 64u << 10;
  SamplingParams defaults;        // for what a request leaves out (max_tokens: the default length)
  bool log_requests = false;      // one JSON line per request on stderr
  double shutdown_grace_s = 5.0;  // in-flight requests may finish this long after stop()
  // Then the rest are aborted, and their last answers (a stream's error event) get this long
  // to be produced and written before the connections close: the stop stays within grace +
  // shutdown_drain_s (and the engine's current step).
  double shutdown_drain_s = 0.8;
  std::string tools_config;        // HTTP server-side tools (server_tools.h); "" = calculator only
  int max_server_tool_rounds = 8;  // server-side tool calls per response
  // The Responses API's stored responses (previous_response_id, GET /v1/responses/{id}): at
  // most this many bytes of their JSON, the oldest dropped first; 0 stores none.
  size_t responses_store_bytes = 128u << 20;
  // Special tokens written in message content, tool names, arguments or definitions count
  // as such (off: they are text, and only the chat template's structure has control tokens).
  bool allow_special_tokens_in_content = false;
};

class HttpServer {
 public:
  // Takes the engine; nothing listens until bind().
  static Result<std::unique_ptr<HttpServer>> create(std::unique_ptr<EngineCore> core,
                                                    ServerOptions options);
  ~HttpServer();  // stop()

  // Binds the listening socket (port 0: a free one). Returns the port.
  Result<int> bind();
  // Serves until stop(); call after bind().
  void run();
  // run() on a background thread.
  void start();
  // Graceful: stops accepting, lets in-flight requests finish for the grace period, cancels
  // the rest, drops paused requests (their KV goes back), and returns when all is quiet.
  // Safe to call twice and from any thread but a handler's.
  void stop();

  int port() const;
  const std::string& model_name() const;

  struct Impl;  // the internals (http_server_impl.h), shared by the server's own files

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace infercept::server
