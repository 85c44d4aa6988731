// What hostile and slow clients do to the server, at the socket: heads and bodies that never
// end or never stop, connections beyond the cap, clients that stop reading or hang up, deep
// JSON, and a stop while they do it. The server must answer each with a clear status (or a
// close), keep serving everyone else, and give every KV block back.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "server_harness.h"

namespace infercept::testing {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// A raw TCP connection to the server.
class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, (sockaddr*)&a, sizeof(a)) == 0;
  }
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  // False once the server closed its side (or reset it).
  bool send(const std::string& s) {
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == (ssize_t)s.size();
  }
  // Reads until the server closes or `timeout_s` passes; returns what came.
  std::string read_all(double timeout_s) {
    std::string out;
    const auto t0 = clock_type::now();
    char buf[65536];
    while (seconds_since(t0) < timeout_s) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      out.append(buf, (size_t)n);
    }
    return out;
  }
  bool closed() const { return closed_; }
  void close() {
    ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
};

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::atoi(response.c_str() + 9);
}

std::string chat_body(const std::string& model, const std::string& content, int max_tokens,
                      bool stream = false) {
  return json{{"model", model},
              {"messages", json::array({{{"role", "user"}, {"content", content}}})},
              {"max_tokens", max_tokens},
              {"stream", stream}}
      .dump();
}

std::string post_head(const std::string& path, size_t length) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(length) + "\r\n\r\n";
}

TEST(ServerHardening, HeadsAndBodiesHaveWholeDeadlinesAndLimits) {
  server::ServerOptions o = server_test_options();
  o.header_timeout_s = 1.0;
  o.body_timeout_s = 1.0;
  o.max_body_bytes = 1 << 20;
  o.max_header_bytes = 16 << 10;
  TestServer s(o);
  ASSERT_TRUE(s.ok());
  {
    // A head sent a byte every 200 ms never completes: 408 when its deadline passes, not
    // a new deadline per byte.
    RawConn c(s.port());
    const std::string head = "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    const auto t0 = clock_type::now();
    for (size_t i = 0; i < head.size() && seconds_since(t0) < 4.0; ++i) {
      if (!c.send(head.substr(i, 1))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    const std::string got = c.read_all(3.0);
    EXPECT_EQ(status_of(got), 408) << got;
    EXPECT_LT(seconds_since(t0), 4.0);
  }
  {
    // A body that stalls half way: 408 after the body deadline.
    RawConn c(s.port());
    c.send(post_head("/v1/chat/completions", 100) + "{\"model\": ");
    const std::string got = c.read_all(3.0);
    EXPECT_EQ(status_of(got), 408) << got;
  }
  {
    // A chunked body past --max-body-mb: 413 before it is all sent.
    RawConn c(s.port());
    c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    const std::string piece(64 << 10, 'a');
    char size[16];
    std::snprintf(size, sizeof(size), "%zx\r\n", piece.size());
    size_t sent = 0;
    while (sent < (8u << 20) && c.send(size + piece + "\r\n")) sent += piece.size();
    const std::string got = c.read_all(3.0);
    EXPECT_EQ(status_of(got), 413) << got.substr(0, 200);
    EXPECT_LT(sent, 8u << 20);
  }
  {
    // Headers without end: 431 at the head limit.
    RawConn c(s.port());
    std::string head = "GET /health HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 100; ++i)
      head += "X-" + std::to_string(i) + ": " + std::string(1000, 'v') + "\r\n";
    c.send(head);
    const std::string got = c.read_all(3.0);
    EXPECT_EQ(status_of(got), 431) << got.substr(0, 200);
  }
  for (const char* length : {"-1", "18446744073709551616", "abc"}) {
    RawConn c(s.port());
    c.send(std::string("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ") +
           length + "\r\n\r\n{}");
    const auto t0 = clock_type::now();
    const std::string got = c.read_all(3.0);
    EXPECT_EQ(status_of(got), 400) << length << ": " << got;
    EXPECT_LT(seconds_since(t0), 2.0);
  }
  // A body of a declared size over the limit is refused from its head.
  {
    RawConn c(s.port());
    c.send(post_head("/v1/chat/completions", 5u << 20));
    EXPECT_EQ(status_of(c.read_all(3.0)), 413);
  }
  EXPECT_EQ(s.get("/health").status, 200);
}

TEST(ServerHardening, DeepJsonIsRefusedEverywhere) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const char* path : {"/v1/chat/completions", "/v1/completions",
                           "/v1/interceptions/icpt_none/resume", "/v1/interceptions/x/hint"}) {
    Reply r = s.request("POST", path, "{\"a\": " + deep + "}");
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_EQ(r.body["error"]["code"], "invalid_json") << path;
  }
  // Inside a tool call's arguments (a string the template parses) and a tool's schema.
  json msgs = json::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "f", "arguments": ""}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "ok"}])");
  msgs[1]["tool_calls"][0]["function"]["arguments"] = std::string(30000, '[');
  Reply args =
      s.post("/v1/chat/completions", {{"model", s.model()}, {"messages", msgs}, {"max_tokens", 2}});
  EXPECT_EQ(args.status, 400) << args.raw.substr(0, 300);
  std::string schema = "{\"type\": \"object\", \"properties\": " + std::string(200, '[') +
                       std::string(200, ']') + "}";
  Reply tools = s.request(
      "POST", "/v1/chat/completions",
      "{\"model\": \"" + s.model() +
          "\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": [{\"type\": "
          "\"function\", \"function\": {\"name\": \"f\", \"parameters\": " +
          schema + "}}]}");
  EXPECT_EQ(tools.status, 400) << tools.raw.substr(0, 300);
  Reply overflow = s.request("POST", "/v1/chat/completions", "{\"x\": 1e400}");
  EXPECT_EQ(overflow.status, 400);
  EXPECT_EQ(s.get("/health").status, 200);
  EXPECT_TRUE(s.kv_empty_within(5.0));
}

// Slow and non-reading clients hold sockets, not threads: with a single worker thread, 40
// trickling heads and 3 streams nobody reads, /health and a chat are still answered.
TEST(ServerHardening, SlowAndNonReadingClientsHoldNoThread) {
  server::ServerOptions o = server_test_options();
  o.http_threads = 1;
  TestServer s(o);
  ASSERT_TRUE(s.ok());
  std::vector<std::unique_ptr<RawConn>> slow;
  for (int i = 0; i < 40; ++i) {
    slow.push_back(std::make_unique<RawConn>(s.port()));
    slow.back()->send("POST /v1/chat/completions HTTP/1.1\r\nHo");
  }
  std::vector<std::unique_ptr<RawConn>> deaf;
  for (int i = 0; i < 3; ++i) {
    deaf.push_back(std::make_unique<RawConn>(s.port()));
    const std::string body = chat_body(s.model(), "Write a long story.", 64, true);
    deaf.back()->send(post_head("/v1/chat/completions", body.size()) + body);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(s.get("/health").status, 200);
  Reply models = s.get("/v1/models");  // a worker route
  EXPECT_EQ(models.status, 200);
  Reply chat = s.request("POST", "/v1/chat/completions", chat_body(s.model(), "Hi", 4));
  EXPECT_EQ(chat.status, 200) << chat.raw;
  deaf.clear();
  slow.clear();
  EXPECT_TRUE(s.kv_empty_within(10.0));
}

TEST(ServerHardening, ConnectionsBeyondTheCapGet503) {
  server::ServerOptions o = server_test_options();
  o.max_connections = 4;
  TestServer s(o);
  ASSERT_TRUE(s.ok());
  std::vector<std::unique_ptr<RawConn>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawConn>(s.port()));
    held.back()->send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(status_of(held.back()->read_all(0.3)), 200);  // kept alive: still counted
  }
  RawConn over(s.port());
  over.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = over.read_all(2.0);
  EXPECT_EQ(status_of(got), 503) << got;
  EXPECT_NE(got.find("too_many_connections"), std::string::npos) << got;
  held.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(s.get("/health").status, 200);
}

// A client that hangs up while its non-streamed answer generates: the request is cancelled
// at once, not run to its end.
TEST(ServerHardening, HangUpCancelsANonStreamedGeneration) {
  TestServer s;
  ASSERT_TRUE(s.ok());
  {
    RawConn c(s.port());
    const std::string body = chat_body(s.model(), "Write a very long story.", 3000);
    c.send(post_head("/v1/chat/completions", body.size()) + body);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_EQ(s.metric("infercept:num_requests_running"), 1);
  }  // closed
  const auto t0 = clock_type::now();
  EXPECT_TRUE(s.kv_empty_within(5.0));
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_EQ(s.metric("infercept:num_requests_running"), 0);
}

// stop() closes connections whatever their clients do: a trickling head, a stalled body and
// a stream nobody reads do not hold it past the grace.
TEST(ServerHardening, StopFinishesWithinItsGraceWhateverClientsDo) {
  server::ServerOptions o = server_test_options();
  o.shutdown_grace_s = 0.5;
  auto s = std::make_unique<TestServer>(o);
  ASSERT_TRUE(s->ok());
  RawConn trickle(s->port());
  trickle.send("POST /v1/chat/completions HTTP/1.1\r\nHo");
  RawConn stalled(s->port());
  stalled.send(post_head("/v1/chat/completions", 1000) + "{\"mo");
  RawConn deaf(s->port());
  const std::string body = chat_body(s->model(), "Write a very long story.", 3000, true);
  deaf.send(post_head("/v1/chat/completions", body.size()) + body);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t0 = clock_type::now();
  s->server().stop();
  EXPECT_LT(seconds_since(t0), o.shutdown_grace_s + 1.0);
  EXPECT_TRUE(trickle.read_all(1.0).empty() || trickle.closed());
  s.reset();
}

}  // namespace
}  // namespace infercept::testing
