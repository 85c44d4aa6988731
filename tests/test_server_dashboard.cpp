// The dashboard in headless Chromium (Debian's `chromium`): the page loads, its charts have
// axes, units and legends, and it shows a running request while one is generating and an
// intercepted one while a tool call is pending.
// Skipped when no chromium is installed.
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <thread>

#include "server_harness.h"

namespace infercept::testing {
namespace {

std::string find_chromium() {
  for (const char* c : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string cmd = std::string("command -v ") + c + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return c;
  }
  return {};
}

// The page's DOM after its scripts ran for a few (virtual) seconds.
std::string dump_dom(const std::string& chromium, const std::string& url) {
  const std::string cmd = chromium +
                          " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage"
                          " --no-first-run --virtual-time-budget=4000 --dump-dom '" +
                          url + "' 2>/dev/null";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

// The text of the element with this id (`<... id="x">text<`), or "" when absent.
std::string element_text(const std::string& dom, const std::string& id) {
  std::smatch m;
  if (std::regex_search(dom, m, std::regex("id=\"" + id + "\"[^>]*>([^<]*)<"))) return m[1];
  return {};
}

TEST(ServerDashboard, ShowsRunningAndInterceptedRequestsInChromium) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "no chromium installed";
  server::ServerOptions o = server_test_options();
  o.api_keys = {"dash-key"};
  TestServer s(o);
  ASSERT_TRUE(s.ok());
  const std::string page =
      "http://127.0.0.1:" + std::to_string(s.port()) + "/dashboard?api_key=dash-key";

  // A request generating: the page shows it running.
  json req = {
      {"model", s.model()},
      {"messages", json::array({{{"role", "user"}, {"content", "Tell me a very long story."}}})},
      {"max_tokens", 3000},
      {"temperature", 0},
      {"stream", true}};
  std::atomic<bool> stop_reading{false};
  std::thread gen([&] {
    httplib::Client c = s.client("dash-key");
    httplib::Request r;
    r.method = "POST";
    r.path = "/v1/chat/completions";
    r.body = req.dump();
    r.set_header("Content-Type", "application/json");
    r.set_header("Authorization", "Bearer dash-key");
    r.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      return !stop_reading.load();
    };
    (void)c.send(r);
  });
  for (int i = 0; i < 100 && s.metric("infercept:num_requests_running", "dash-key") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::string dom = dump_dom(chromium, page);
  ASSERT_NE(dom.find("infercept"), std::string::npos) << "the page did not load";
  EXPECT_EQ(element_text(dom, "model"), s.model()) << dom.substr(0, 2000);
  EXPECT_EQ(element_text(dom, "running"), "1");
  EXPECT_EQ(element_text(dom, "err"), "");
  // The charts have a y axis in their unit, a time axis and a legend.
  for (const char* text :
       {">% of blocks in use<", ">decisions/s<", ">MB·s of KV per s<", ">now<", ">device<",
        ">host<", ">preserve<", ">swap<", ">discard<", ">recompute<", ">swap stall<", ">100<"})
    EXPECT_NE(dom.find(text), std::string::npos) << text;
  EXPECT_TRUE(std::regex_search(dom, std::regex(">-[0-9.]+ s<"))) << "no time axis";
  // The prefix cache: its hit rate as a figure and over time, its cached blocks per tier.
  for (const char* text : {">hit rate<", ">% of prompt tokens looked up<"})
    EXPECT_NE(dom.find(text), std::string::npos) << text;
  EXPECT_TRUE(std::regex_match(element_text(dom, "pc_rate"), std::regex("-|[0-9.]+%")))
      << element_text(dom, "pc_rate");
  EXPECT_TRUE(std::regex_match(element_text(dom, "pc_hits"), std::regex("[0-9]+ / [0-9]+")))
      << element_text(dom, "pc_hits");
  EXPECT_TRUE(std::regex_match(element_text(dom, "pc_blocks"), std::regex("[0-9]+ / [0-9]+")))
      << element_text(dom, "pc_blocks");
  stop_reading = true;  // the client goes away; the request is cancelled
  gen.join();
  ASSERT_TRUE(s.kv_empty_within(10.0, "dash-key"));

  // A tool call pending: the page shows the intercepted request and its tool.
  Reply paused = s.post("/v1/chat/completions", weather_request(s.model()), "dash-key");
  ASSERT_TRUE(paused.body.contains("interception")) << paused.raw;
  dom = dump_dom(chromium, page);
  EXPECT_EQ(element_text(dom, "int_device"), "1");
  EXPECT_EQ(element_text(dom, "running"), "0");
  EXPECT_NE(dom.find("paused-row"), std::string::npos);
  EXPECT_NE(dom.find("get_weather"), std::string::npos);
  // Waits with their unit; the tool's bucket edges named.
  EXPECT_TRUE(std::regex_search(dom, std::regex("<td>[0-9.]+ (ms|s)</td></tr>"))) << "waited";
}

}  // namespace
}  // namespace infercept::testing
