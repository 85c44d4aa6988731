// The HTTP/1.1 transport under the server: Boost.Beast's parser over Boost.Asio sockets.
//
// Why not a thread per connection (cpp-httplib 0.11, used before): a client that sends its
// head a byte a second, or that stops reading a stream, held a worker thread for as long as it
// liked, so 64 such clients left none for /health or a chat; read deadlines were per read,
// not per request; chunked bodies escaped the size limit and SO_REUSEPORT let a second server
// share the port. Here a connection costs a socket and a few buffers, never a thread:
// - a few io threads run every connection's reads and writes (each connection on its own
//   strand); every request head must arrive within header_timeout_s and its body within
//   body_timeout_s in total (not per read), heads are bounded in bytes (which bounds the number
//   of headers) and bodies in bytes whether sized or chunked;
// - handlers run on a pool of worker threads (they parse, render, tokenize, wait for engine
//   snapshots); a handler marked inline (/health) runs on the io thread and never waits;
// - an answer that comes later (a generation) is a ResponseProducer: the engine wakes it,
//   a worker pumps it, the io thread writes what it produced, each write within
//   write_timeout_s; a client that stops reading loses its connection, not a thread;
// - beyond max_connections a new connection gets a 503 and is closed;
// - a client that hangs up while its answer is pending is noticed (the socket turns readable
//   at end of stream) and its producer cancelled;
// - stop() closes every connection at once, whatever the clients are doing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"

namespace infercept::server {

// A request as the handlers see it (accessor names after cpp-httplib's, which the handlers
// were first written for).
struct HttpRequest {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // decoded, without the query
  std::string body;
  std::string remote_addr;
  std::vector<std::pair<std::string, std::string>> headers;  // as sent
  std::vector<std::pair<std::string, std::string>> params;   // the query, decoded
  std::vector<std::string> matches;                          // the route's regex groups; [0] whole

  bool has_header(const std::string& name) const;               // case-insensitive
  std::string get_header_value(const std::string& name) const;  // "" when absent
  bool has_param(const std::string& name) const;
  std::string get_param_value(const std::string& name) const;  // "" when absent
};

class ResponseProducer;

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string content_type;
  std::string body;
  // An answer that comes later. Without `chunked` the producer fills status, headers and body
  // when it finishes; with it, status and headers go out now and the body in chunks, as the
  // producer appends to `body`.
  std::shared_ptr<ResponseProducer> producer;
  bool chunked = false;

  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

// The body of an answer produced over time (a generation). The transport serializes the calls
// for one response: start, then pumps, then possibly cancel; never two at once.
class ResponseProducer {
 public:
  virtual ~ResponseProducer() = default;
  // Once, on a worker thread, before any pump. `wake` may be called from any thread (the
  // engine thread included) whenever pump has something new to do; it never blocks.
  virtual void start(std::function<void()> wake) = 0;
  // On a worker thread after a wake. Chunked: appends what is ready to res.body (the transport
  // sends it and clears it). Otherwise: fills res when it returns true. True when complete.
  virtual bool pump(struct HttpResponse& res) = 0;
  // The client hung up, a write timed out, or the server stops before the answer is complete:
  // release what it holds (an engine request). No pump follows.
  virtual void cancel() = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  int io_threads = 2;
  int worker_threads = 16;
  int max_connections = 1024;      // beyond: 503 and closed
  double header_timeout_s = 10.0;  // the whole request head (and a kept-alive idle connection)
  double body_timeout_s = 60.0;    // the whole body
  double write_timeout_s = 30.0;   // each write of a response
  size_t max_header_bytes = 64u << 10;
  size_t max_body_bytes = 8u << 20;
};

struct TransportHooks {
  // Before routing, on the io thread: cheap, never blocks. True when it answered.
  std::function<bool(const HttpRequest&, HttpResponse&)> pre_routing;
  // Fills the answer to an error the transport found itself (no route, 405, 408, 413, 431,
  // a malformed request, a handler that threw: 500).
  std::function<void(const HttpRequest&, int status, const std::string& message, HttpResponse&)>
      error;
  // After each response went out (or was abandoned: status 499 when the client hung up).
  std::function<void(const HttpRequest&, int status)> logger;
};

class HttpTransport {
 public:
  HttpTransport(TransportOptions options, TransportHooks hooks);
  ~HttpTransport();  // stop()
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // A route: method and a regex the whole path must match (groups go to matches). `inline`
  // handlers run on the io thread: only for answers that need nothing (/health).
  void route(const std::string& method, const std::string& pattern, HttpHandler handler,
             bool run_inline = false);
  // Binds and listens (port 0: a free one; no SO_REUSEPORT, so a taken port is an error).
  Result<int> bind();
  // Starts the io threads and the worker pool; returns at once.
  void start();
  // Closes the listener and every connection, and joins all threads. A connection still
  // answering (its answer being produced or written) gets up to `drain_s` to finish; then
  // pending answers are cancelled. Safe to call twice.
  void stop(double drain_s = 0.0);
  int open_connections() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace infercept::server
