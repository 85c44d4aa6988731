// The HTTP/1.1 transport (see http_transport.h for why it is shaped this way).
#include "server/http_transport.h"

#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <thread>

#include "core/check.h"

namespace infercept::server {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoded; '+' as a space in a query.
std::string url_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += (char)(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

void split_target(HttpRequest& r) {
  const size_t q = r.target.find('?');
  r.path = url_decode(std::string_view(r.target).substr(0, q), false);
  if (q == std::string::npos) return;
  std::string_view query = std::string_view(r.target).substr(q + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    const size_t eq = kv.find('=');
    if (!kv.empty())
      r.params.emplace_back(
          url_decode(kv.substr(0, eq), true),
          eq == std::string_view::npos ? std::string() : url_decode(kv.substr(eq + 1), true));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
}

std::string reason(int status) {
  const auto r = http::obsolete_reason(static_cast<http::status>(status));
  return r.empty() ? std::string("Unknown") : std::string(r);
}

}  // namespace

bool HttpRequest::has_header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (beast::iequals(k, name)) return true;
  return false;
}

std::string HttpRequest::get_header_value(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (beast::iequals(k, name)) return v;
  return {};
}

bool HttpRequest::has_param(const std::string& name) const {
  for (const auto& [k, v] : params)
    if (k == name) return true;
  return false;
}

std::string HttpRequest::get_param_value(const std::string& name) const {
  for (const auto& [k, v] : params)
    if (k == name) return v;
  return {};
}

class Session;

struct Route {
  std::string method;
  std::regex pattern;
  HttpHandler handler;
  bool run_inline = false;
};

struct HttpTransport::Impl {
  TransportOptions opt;
  TransportHooks hooks;
  std::vector<Route> routes;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor{ioc};
  std::unique_ptr<net::thread_pool> workers;
  std::vector<std::thread> io_threads;
  std::atomic<int> connections{0};
  std::atomic<bool> stopped{false};
  bool started = false;
  // Every live session, so stop() can close them.
  std::mutex sessions_mu;
  std::map<Session*, std::weak_ptr<Session>> sessions;

  Impl(TransportOptions o, TransportHooks h) : opt(std::move(o)), hooks(std::move(h)) {}
  void do_accept();
  void reject(tcp::socket socket);
  void answer_error(const HttpRequest& req, int status, const std::string& message,
                    HttpResponse& res) const {
    res = HttpResponse();
    res.status = status;
    if (hooks.error)
      hooks.error(req, status, message, res);
    else
      res.set_content(message, "text/plain");
  }
};

// Drives one ResponseProducer: wakes from any thread become pumps on the worker pool, one at a
// time; what a pump produced goes to the session's strand to be written. It keeps its session
// alive until the answer is complete or cancelled: while the producer waits for the engine,
// no socket operation of the session may be pending to do it.
class ProducerDriver : public std::enable_shared_from_this<ProducerDriver> {
 public:
  ProducerDriver(HttpTransport::Impl& t, std::shared_ptr<ResponseProducer> p,
                 std::shared_ptr<HttpResponse> res, std::shared_ptr<Session> session)
      : t_(t), producer_(std::move(p)), res_(std::move(res)), session_(std::move(session)) {}

  void start();
  void wake() {
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      if (finished_ || cancelled_) return;
      if (scheduled_) {
        again_ = true;
        return;
      }
      scheduled_ = true;
    }
    net::post(*t_.workers, [self = shared_from_this()] { self->run(); });
  }
  // From the session (client gone, write timed out, server stopping).
  void cancel() {
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      if (finished_ || cancel_requested_) return;
      cancel_requested_ = true;
    }
    net::post(*t_.workers, [self = shared_from_this()] {
      std::lock_guard<std::mutex> pump_lock(self->pump_mu_);
      {
        std::lock_guard<std::mutex> lock(self->state_mu_);
        if (self->finished_ || self->cancelled_) return;
        self->cancelled_ = true;
      }
      self->producer_->cancel();
      self->session_.reset();
    });
  }

 private:
  void run();

  HttpTransport::Impl& t_;
  std::shared_ptr<ResponseProducer> producer_;
  std::shared_ptr<HttpResponse> res_;
  std::shared_ptr<Session> session_;  // until finished or cancelled (touched under pump_mu_)
  std::mutex pump_mu_;                // one pump (or the cancel) at a time
  std::mutex state_mu_;               // the flags below; never held while pumping
  bool scheduled_ = false, again_ = false, finished_ = false, cancelled_ = false;
  bool cancel_requested_ = false;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpTransport::Impl& t, tcp::socket socket)
      : t_(t), stream_(std::move(socket)), read_deadline_(stream_.get_executor()) {
    beast::error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string();
  }
  ~Session() { t_.connections--; }

  void run() {
    {
      std::lock_guard<std::mutex> lock(t_.sessions_mu);
      t_.sessions[this] = weak_from_this();
    }
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

  // From stop(), on the strand: a connection with an answer still to go out (a cancelled
  // stream's last event, a handler's 503) may finish it; any other closes at once. `force`:
  // now.
  void shutdown(bool force) {
    net::post(stream_.get_executor(), [self = shared_from_this(), force] {
      const bool answering =
          self->writing_ || !self->outq_.empty() || self->pending_ || self->producing_;
      if (force || !answering) return self->close();
      self->draining_ = true;
    });
  }

  net::any_io_executor get_executor_for_driver() { return stream_.get_executor(); }

  // What a pump produced, on the strand.
  void on_produced(std::string data, bool finished, std::shared_ptr<HttpResponse> full) {
    if (closed_) return;
    if (!chunked_) {
      if (finished) {
        stop_watching();
        send_full(std::move(*full));
      }
      return;
    }
    if (!data.empty()) {
      char size[32];
      std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
      outq_.push_back(std::string(size) + data + "\r\n");
    }
    if (finished) {
      outq_.push_back("0\r\n\r\n");
      producing_ = false;
      driver_.reset();
    }
    write_queued();
  }

 private:
  void do_read() {
    if (closed_) return;
    chunked_ = producing_ = pending_ = false;
    status_ = 200;
    parser_.emplace();
    parser_->header_limit((std::uint32_t)std::min<size_t>(t_.opt.max_header_bytes, UINT32_MAX));
    parser_->body_limit(t_.opt.max_body_bytes);
    req_ = HttpRequest();
    arm_read_deadline(t_.opt.header_timeout_s);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  // Reads get a deadline of their own rather than the stream's (which closes the socket when
  // it fires): past it the read is cancelled and the client still gets its 408.
  void arm_read_deadline(double seconds) {
    stream_.expires_never();
    read_timed_out_ = false;
    read_deadline_.expires_after(std::chrono::milliseconds((int64_t)(seconds * 1000)));
    const uint64_t gen = ++read_gen_;
    read_deadline_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      // Cancelled (the read finished in time), or a deadline of an earlier read.
      if (ec || self->closed_ || gen != self->read_gen_) return;
      self->read_timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
  }

  void cancel_read_deadline() {
    ++read_gen_;
    read_deadline_.cancel();
  }

  // The status a read error deserves (0: just close: the client went away or sent nothing).
  int status_of(const beast::error_code& ec, bool got_bytes) const {
    if (read_timed_out_) return got_bytes ? 408 : 0;
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted)
      return 0;
    if (ec == http::error::header_limit) return 431;
    if (ec == http::error::body_limit) return 413;
    return 400;
  }

  void fail_read(beast::error_code ec, bool got_bytes) {
    cancel_read_deadline();
    const int status = status_of(ec, got_bytes);
    if (status == 0 || closed_) return close();
    req_.remote_addr = remote_;
    std::string message;
    switch (status) {
      case 408:
        message = "the request did not arrive in time";
        break;
      case 413:
        message = "the request body is larger than this server accepts (" +
                  std::to_string(t_.opt.max_body_bytes) + " bytes)";
        break;
      case 431:
        message = "the request head is larger than this server accepts (" +
                  std::to_string(t_.opt.max_header_bytes) + " bytes)";
        break;
      default:
        message = "malformed HTTP request: " + ec.message();
    }
    HttpResponse res;
    t_.answer_error(req_, status, message, res);
    keep_alive_ = false;
    send_full(std::move(res));
  }

  void on_header(beast::error_code ec) {
    if (ec) return fail_read(ec, buffer_.size() > 0 || parser_->got_some());
    auto& h = parser_->get();
    req_.method = std::string(h.method_string());
    req_.target = std::string(h.target());
    req_.remote_addr = remote_;
    for (const auto& f : h)
      req_.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    split_target(req_);
    keep_alive_ = h.keep_alive();
    cancel_read_deadline();
    if (parser_->is_done()) return on_body({});
    // curl and others wait for this before they send a body of more than 1 KB.
    if (beast::iequals(h[http::field::expect], "100-continue")) {
      auto msg = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      stream_.expires_after(std::chrono::milliseconds((int64_t)(t_.opt.write_timeout_s * 1000)));
      net::async_write(stream_, net::buffer(*msg),
                       [self = shared_from_this(), msg](beast::error_code ec, size_t) {
                         if (ec) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    arm_read_deadline(t_.opt.body_timeout_s);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(beast::error_code ec) {
    if (ec) return fail_read(ec, true);
    cancel_read_deadline();
    req_.body = std::move(parser_->get().body());
    parser_.reset();
    dispatch();
  }

  void dispatch() {
    auto res = std::make_shared<HttpResponse>();
    if (t_.stopped) {
      t_.answer_error(req_, 503, "the server is shutting down", *res);
      keep_alive_ = false;
      return send_full(std::move(*res));
    }
    if (t_.hooks.pre_routing && t_.hooks.pre_routing(req_, *res)) return send_full(std::move(*res));
    const Route* route = nullptr;
    bool path_known = false;
    for (const Route& r : t_.routes) {
      std::smatch m;
      if (!std::regex_match(req_.path, m, r.pattern)) continue;
      path_known = true;
      if (r.method != req_.method) continue;
      route = &r;
      req_.matches.clear();
      for (const auto& g : m) req_.matches.push_back(g.str());
      break;
    }
    if (route == nullptr) {
      if (path_known)
        t_.answer_error(req_, 405, "method " + req_.method + " is not allowed on " + req_.path,
                        *res);
      else
        t_.answer_error(req_, 404, "no route " + req_.method + " " + req_.path, *res);
      return send_full(std::move(*res));
    }
    if (route->run_inline) {
      run_handler(*route, *res);
      return on_handled(res);
    }
    // The handler may take a while (it parses, tokenizes, waits for the engine): a worker
    // runs it; meanwhile the socket is watched for the client hanging up.
    pending_ = true;
    watch_client();
    auto req = std::make_shared<HttpRequest>(req_);
    net::post(*t_.workers, [self = shared_from_this(), route, req, res] {
      self->run_handler(*route, *res, req.get());
      net::post(self->stream_.get_executor(), [self, res] { self->on_handled(res); });
    });
  }

  void run_handler(const Route& route, HttpResponse& res, const HttpRequest* req = nullptr) {
    const HttpRequest& r = req != nullptr ? *req : req_;
    try {
      route.handler(r, res);
    } catch (const std::exception& e) {
      t_.answer_error(r, 500, std::string("internal error: ") + e.what(), res);
    } catch (...) {
      t_.answer_error(r, 500, "internal error", res);
    }
  }

  void on_handled(std::shared_ptr<HttpResponse> res) {
    if (closed_) {
      // The client hung up while the handler ran: its producer, if any, never starts.
      if (res->producer) {
        auto p = res->producer;
        net::post(*t_.workers, [p] { p->cancel(); });
      }
      return;
    }
    if (!res->producer) {
      pending_ = false;
      stop_watching();
      return send_full(std::move(*res));
    }
    chunked_ = res->chunked;
    producing_ = true;
    status_ = res->status;
    driver_ = std::make_shared<ProducerDriver>(t_, res->producer, res, shared_from_this());
    if (chunked_) {
      // Status and headers now; the body as it is produced.
      std::string head = "HTTP/1.1 " + std::to_string(res->status) + " " + reason(res->status) +
                         "\r\nTransfer-Encoding: chunked\r\n";
      if (!res->content_type.empty()) head += "Content-Type: " + res->content_type + "\r\n";
      for (const auto& [k, v] : res->headers) head += k + ": " + v + "\r\n";
      head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
      outq_.push_back(std::move(head));
      res->body.clear();
      write_queued();
    }
    driver_->start();
  }

  void write_queued() {
    if (writing_ || closed_) return;
    if (outq_.empty()) {
      if (draining_ && !producing_) return close();
      if (chunked_ && !producing_) finish_response(status_);
      return;
    }
    writing_ = true;
    auto data = std::make_shared<std::string>();
    for (std::string& s : outq_) *data += s;
    outq_.clear();
    stream_.expires_after(std::chrono::milliseconds((int64_t)(t_.opt.write_timeout_s * 1000)));
    net::async_write(stream_, net::buffer(*data),
                     [self = shared_from_this(), data](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       if (ec) return self->close();  // gone, or not reading: give up
                       self->stream_.expires_never();
                       self->write_queued();
                     });
  }

  void send_full(HttpResponse res) {
    if (closed_) return;
    auto msg = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(res.status), 11);
    if (!res.content_type.empty()) msg->set(http::field::content_type, res.content_type);
    for (const auto& [k, v] : res.headers) msg->insert(k, v);
    msg->body() = std::move(res.body);
    msg->keep_alive(keep_alive_ && !t_.stopped);
    msg->prepare_payload();
    const int status = res.status;
    writing_ = true;
    stream_.expires_after(std::chrono::milliseconds((int64_t)(t_.opt.write_timeout_s * 1000)));
    http::async_write(stream_, *msg,
                      [self = shared_from_this(), msg, status](beast::error_code ec, size_t) {
                        self->writing_ = false;
                        if (ec) return self->close();
                        self->finish_response(status);
                      });
  }

  void finish_response(int status) {
    pending_ = false;
    stop_watching();
    if (t_.hooks.logger) t_.hooks.logger(req_, status);
    logged_ = true;
    if (!keep_alive_ || t_.stopped) return close();
    logged_ = false;
    do_read();
  }

  // While an answer is pending, a readable socket is either the client hanging up (end of
  // stream) or a pipelined request (left for later).
  void watch_client() {
    if (watching_ || closed_) return;
    watching_ = true;
    const uint64_t gen = ++watch_gen_;
    stream_.socket().async_wait(
        tcp::socket::wait_read, [self = shared_from_this(), gen](beast::error_code ec) {
          if (gen != self->watch_gen_ || !self->watching_) return;
          self->watching_ = false;
          if (ec || self->closed_) return;
          char c;
          const ssize_t n =
              ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            self->close();  // hung up
          else if (n < 0)
            self->watch_client();  // woken without data (an earlier edge): watch on
        });
  }

  void stop_watching() {
    if (!watching_) return;
    watching_ = false;
    ++watch_gen_;
    beast::error_code ec;
    stream_.socket().cancel(ec);
  }

  // Closes the connection; a pending answer is cancelled (its engine request released).
  void close() {
    if (closed_) return;
    closed_ = true;
    watching_ = false;
    cancel_read_deadline();
    if (driver_) {
      driver_->cancel();
      driver_.reset();
    }
    if ((pending_ || producing_) && !logged_ && t_.hooks.logger) {
      t_.hooks.logger(req_, 499);
      logged_ = true;
    }
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    std::lock_guard<std::mutex> lock(t_.sessions_mu);
    t_.sessions.erase(this);
  }

  HttpTransport::Impl& t_;
  beast::tcp_stream stream_;
  net::steady_timer read_deadline_;
  bool read_timed_out_ = false;
  uint64_t read_gen_ = 0;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest req_;
  std::string remote_;
  std::shared_ptr<ProducerDriver> driver_;
  std::deque<std::string> outq_;
  int status_ = 200;
  uint64_t watch_gen_ = 0;
  bool keep_alive_ = true, chunked_ = false, producing_ = false, writing_ = false;
  bool pending_ = false, watching_ = false, closed_ = false, logged_ = false;
  bool draining_ = false;
};

void ProducerDriver::start() {
  auto self = shared_from_this();
  net::post(*t_.workers, [self] {
    {
      std::lock_guard<std::mutex> pump_lock(self->pump_mu_);
      {
        std::lock_guard<std::mutex> lock(self->state_mu_);
        if (self->cancelled_) return;
      }
      std::weak_ptr<ProducerDriver> weak = self;
      self->producer_->start([weak] {
        if (auto d = weak.lock()) d->wake();
      });
    }
    self->wake();
  });
}

void ProducerDriver::run() {
  std::lock_guard<std::mutex> pump_lock(pump_mu_);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      if (cancelled_) {
        scheduled_ = false;
        return;
      }
      again_ = false;
    }
    bool finished = false;
    try {
      finished = producer_->pump(*res_);
    } catch (const std::exception& e) {
      // A producer should not throw; if one does the response ends here.
      if (!res_->chunked) {
        *res_ = HttpResponse();
        t_.answer_error(HttpRequest(), 500, std::string("internal error: ") + e.what(), *res_);
      }
      finished = true;
    }
    std::string data;
    std::shared_ptr<HttpResponse> full;
    if (res_->chunked) {
      data = std::move(res_->body);
      res_->body.clear();
    } else if (finished) {
      full = res_;
    }
    if ((!data.empty() || finished) && session_) {
      auto s = session_;
      net::post(s->get_executor_for_driver(), [s, data = std::move(data), finished, full] {
        s->on_produced(std::move(data), finished, full);
      });
    }
    if (finished) session_.reset();
    std::lock_guard<std::mutex> lock(state_mu_);
    if (finished) {
      finished_ = true;
      scheduled_ = false;
      return;
    }
    if (!again_) {
      scheduled_ = false;
      return;
    }
  }
}

void HttpTransport::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (stopped || ec == net::error::operation_aborted) return;
      // Out of file descriptors and the like: try again shortly rather than spin.
      auto timer = std::make_shared<net::steady_timer>(ioc, std::chrono::milliseconds(50));
      timer->async_wait([this, timer](beast::error_code) {
        if (!stopped) do_accept();
      });
      return;
    }
    if (stopped) return;
    if (connections.load() >= opt.max_connections) {
      reject(std::move(socket));
    } else {
      connections++;
      std::make_shared<Session>(*this, std::move(socket))->run();
    }
    do_accept();
  });
}

// Over the connection cap: a 503 the client can read, then closed. The response is one small
// write into an empty socket buffer, so it goes out at once; the socket is not kept.
void HttpTransport::Impl::reject(tcp::socket socket) {
  HttpResponse res;
  answer_error(HttpRequest(), 503,
               "the server has too many open connections (" + std::to_string(opt.max_connections) +
                   "); try again later",
               res);
  std::string msg = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n";
  if (!res.content_type.empty()) msg += "Content-Type: " + res.content_type + "\r\n";
  msg += "Content-Length: " + std::to_string(res.body.size()) + "\r\n\r\n" + res.body;
  (void)::send(socket.native_handle(), msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  beast::error_code ec;
  socket.shutdown(tcp::socket::shutdown_send, ec);
  socket.close(ec);
  if (hooks.logger) hooks.logger(HttpRequest(), 503);
}

HttpTransport::HttpTransport(TransportOptions options, TransportHooks hooks)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(hooks))) {}

HttpTransport::~HttpTransport() {
  stop();
}

void HttpTransport::route(const std::string& method, const std::string& pattern,
                          HttpHandler handler, bool run_inline) {
  impl_->routes.push_back({method, std::regex(pattern), std::move(handler), run_inline});
}

Result<int> HttpTransport::bind() {
  Impl& t = *impl_;
  beast::error_code ec;
  auto address = net::ip::make_address(t.opt.host == "localhost" ? "127.0.0.1" : t.opt.host, ec);
  if (ec)
    return make_error("cannot bind to ", t.opt.host, ": not an IP address (", ec.message(), ")");
  tcp::endpoint ep(address, (unsigned short)t.opt.port);
  t.acceptor.open(ep.protocol(), ec);
  if (!ec) t.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) t.acceptor.bind(ep, ec);
  if (!ec) t.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    t.acceptor.close(ignored);
    return make_error("cannot bind to ", t.opt.host, ":", std::to_string(t.opt.port), " (",
                      ec.message(), ")");
  }
  return (int)t.acceptor.local_endpoint().port();
}

void HttpTransport::start() {
  Impl& t = *impl_;
  if (t.started) return;
  t.started = true;
  t.workers = std::make_unique<net::thread_pool>((size_t)std::max(1, t.opt.worker_threads));
  t.work.emplace(net::make_work_guard(t.ioc));
  t.do_accept();
  for (int i = 0; i < std::max(1, t.opt.io_threads); ++i)
    t.io_threads.emplace_back([&t] { t.ioc.run(); });
}

void HttpTransport::stop(double drain_s) {
  Impl& t = *impl_;
  if (t.stopped.exchange(true)) return;
  if (!t.started) {
    beast::error_code ec;
    t.acceptor.close(ec);
    return;
  }
  net::post(t.ioc, [&t] {
    beast::error_code ec;
    t.acceptor.close(ec);
  });
  auto live_sessions = [&t] {
    std::vector<std::shared_ptr<Session>> live;
    std::lock_guard<std::mutex> lock(t.sessions_mu);
    for (auto& [p, w] : t.sessions)
      if (auto s = w.lock()) live.push_back(std::move(s));
    return live;
  };
  // Idle and reading connections close now; one still answering gets until the drain ends.
  for (auto& s : live_sessions()) s->shutdown(false);
  const auto drain_end = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds((int64_t)(std::max(0.0, drain_s) * 1000));
  while (std::chrono::steady_clock::now() < drain_end) {
    {
      std::lock_guard<std::mutex> lock(t.sessions_mu);
      if (t.sessions.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& s : live_sessions()) s->shutdown(true);
  // The cancels the closes posted run on the workers; then nothing is left to do.
  t.workers->join();
  t.work.reset();
  // Every socket is closed, so the io threads run out of work at once; a straggler (a timer
  // of a connection accepted during the stop) is cut short.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!t.ioc.stopped() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  t.ioc.stop();
  for (std::thread& th : t.io_threads)
    if (th.joinable()) th.join();
}

int HttpTransport::open_connections() const {
  return impl_->connections.load();
}

}  // namespace infercept::server
