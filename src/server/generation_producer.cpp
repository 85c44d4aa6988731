// A generation's answer, produced as the engine goes: one JSON response at the end, or a
// stream of server-sent events. It is a ResponseProducer (http_transport.h): the engine's
// outputs wake it, a worker thread pumps it without ever waiting, and the transport writes
// what it produced. No thread waits for a client or for the engine while a request generates.
#include "server/http_server_impl.h"

namespace infercept::server {

namespace {

class GenerationProducer : public ResponseProducer {
 public:
  GenerationProducer(HttpServer::Impl& s, std::shared_ptr<Generation> g)
      : s_(s), g_(std::move(g)), guard_(std::make_unique<HttpServer::Impl::Guard>(&s)) {}

  void start(std::function<void()> wake) override { g_->ch->set_waker(std::move(wake)); }

  bool pump(HttpResponse& res) override {
    const bool done = g_->stream ? pump_stream(res) : pump_whole(res);
    if (done) end();
    return done;
  }

  void cancel() override {
    Generation& g = *g_;
    if (!g.finalized) {
      // The client went away before its answer was complete: stop generating for it.
      s_.engine->abort(g.engine_id);
      s_.untrack(g.engine_id);
      s_.log_line({{"event", "client_disconnected"}, {"id", g.response_id}, {"owner", g.owner}});
    }
    end();
  }

 private:
  void end() {
    g_->ch->set_waker(nullptr);
    guard_.reset();
  }

  // One response at the end (server-side tool rounds run in between).
  bool pump_whole(HttpResponse& res) {
    Generation& g = *g_;
    for (;;) {
      while (!g.done) {
        auto item = g.ch->try_pop();
        if (!item) return false;
        s_.consume(g, *item);
      }
      FinalTurn f = s_.finalize(g);
      if (f.server_round) {
        if (auto e = s_.server_tool_round(g, f)) {
          send_error(res, *e);
          return true;
        }
        continue;  // the next turn's outputs wake this again
      }
      if (f.error) {
        send_error(res, *f.error);
      } else {
        send_json(
            res, 200,
            g.endpoint == Endpoint::chat ? s_.chat_response(g, f) : s_.completion_response(g, f));
      }
      if (!g.resumed_from.empty()) res.set_header("X-Infercept-Resumed", g.resumed_from);
      return true;
    }
  }

  json chat_logprobs(const std::vector<TokenInfo>& lps) const {
    if (g_->logprobs < 0) return nullptr;
    json content = json::array();
    for (const TokenInfo& t : lps) content.push_back(chat_logprob_entry(t));
    return {{"content", content}};
  }

  // Server-sent events: what is ready goes out, content that may be (the start of) a tool
  // call is held back, and the end of the turn brings the calls, the finish and the usage.
  bool pump_stream(HttpResponse& res) {
    Generation& g = *g_;
    const bool chat = g.endpoint == Endpoint::chat;
    if (!started_) {
      started_ = true;
      if (chat) {
        json choice = {{"index", 0},
                       {"delta", {{"role", "assistant"}, {"content", ""}}},
                       {"logprobs", nullptr},
                       {"finish_reason", nullptr}};
        res.body += sse(s_.chunk(g, choice));
      }
    }
    for (;;) {
      auto item = g.ch->try_pop();
      if (!item) return false;
      const size_t lp_before = g.lps.size();
      s_.consume(g, *item);
      std::vector<TokenInfo> new_lps(g.lps.begin() + (ptrdiff_t)lp_before, g.lps.end());
      if (!g.done) {
        const std::string piece = chat ? g.filter.push(item->out.text) : item->out.text;
        if (piece.empty() && new_lps.empty()) continue;
        json choice;
        if (chat) {
          choice = {{"index", 0},
                    {"delta", {{"content", piece}}},
                    {"logprobs", chat_logprobs(new_lps)},
                    {"finish_reason", nullptr}};
        } else {
          choice = {{"index", 0},
                    {"text", piece},
                    {"logprobs", g.logprobs >= 0 ? s_.completion_logprobs(new_lps, text_offset_)
                                                 : json(nullptr)},
                    {"finish_reason", nullptr}};
          text_offset_ += piece.size();
        }
        res.body += sse(s_.chunk(g, choice));
        continue;
      }
      // The turn is over.
      FinalTurn f = s_.finalize(g);
      if (f.server_round) {
        // The turn's content went out already; the calls run here, the next turn streams on.
        if (auto e = s_.server_tool_round(g, f))
          f.error = e;
        else
          continue;
      }
      if (f.error) {
        res.body += sse(error_body(*f.error));
        res.body += "data: [DONE]\n\n";
        return true;
      }
      finish_stream(res, f, *item, new_lps);
      return true;
    }
  }

  void finish_stream(HttpResponse& res, const FinalTurn& f, const Channel::Item& item,
                     const std::vector<TokenInfo>& new_lps) {
    Generation& g = *g_;
    const bool chat = g.endpoint == Endpoint::chat;
    std::string out;
    if (chat) {
      const size_t sent = g.filter.emitted();
      const std::string rest = f.content.size() > sent ? f.content.substr(sent) : std::string();
      if (!rest.empty() || (g.logprobs >= 0 && !new_lps.empty()))
        out += sse(s_.chunk(g, {{"index", 0},
                                {"delta", {{"content", rest}}},
                                {"logprobs", chat_logprobs(new_lps)},
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
        out += sse(s_.chunk(g, {{"index", 0},
                                {"delta", {{"tool_calls", calls}}},
                                {"logprobs", nullptr},
                                {"finish_reason", nullptr}}));
      }
      json last = s_.chunk(g, {{"index", 0},
                               {"delta", json::object()},
                               {"logprobs", nullptr},
                               {"finish_reason", f.finish_reason}});
      if (!f.interception.is_null()) last["interception"] = f.interception;
      if (!g.server_calls.empty()) last["server_tool_calls"] = g.server_calls;
      if (g.return_token_ids) last["choices"][0]["token_ids"] = g.tokens;
      out += sse(last);
    } else {
      json choice = {{"index", 0},
                     {"text", item.out.text},
                     {"logprobs", g.logprobs >= 0 ? s_.completion_logprobs(new_lps, text_offset_)
                                                  : json(nullptr)},
                     {"finish_reason", f.finish_reason}};
      if (g.return_token_ids) choice["token_ids"] = g.tokens;
      out += sse(s_.chunk(g, choice));
    }
    if (g.include_usage) {
      json u = {
          {"id", g.response_id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", g.created},
          {"model", g.model},
          {"choices", json::array()},
          {"usage", usage_json((int64_t)g.prompt.size(), g.completion_tokens(), g.cached_tokens)}};
      out += sse(u);
    }
    out += "data: [DONE]\n\n";
    res.body += out;
  }

  HttpServer::Impl& s_;
  std::shared_ptr<Generation> g_;
  std::unique_ptr<HttpServer::Impl::Guard> guard_;
  bool started_ = false;
  size_t text_offset_ = 0;  // completions: bytes of text sent
};

}  // namespace

void HttpServer::Impl::respond(std::shared_ptr<Generation> g, HttpResponse& res) {
  res.producer = std::make_shared<GenerationProducer>(*this, g);
  if (!g->stream) return;
  res.chunked = true;
  res.status = 200;
  res.content_type = "text/event-stream";
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  if (!g->resumed_from.empty()) res.set_header("X-Infercept-Resumed", g->resumed_from);
}

}  // namespace infercept::server
