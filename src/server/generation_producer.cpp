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
          HttpServer::Impl::send_error_for(g.endpoint, res, *e);
          return true;
        }
        continue;  // the next turn's outputs wake this again
      }
      if (f.error) {
        HttpServer::Impl::send_error_for(g.endpoint, res, *f.error);
      } else {
        const json answer = s_.answer_json(g, f);
        s_.store_response(g, f, answer);
        send_json(res, 200, answer);
      }
      if (!g.resumed_from.empty()) res.set_header("X-Infercept-Resumed", g.resumed_from);
      return true;
    }
  }

  StreamHeader header() const {
    const Generation& g = *g_;
    return {g.response_id, g.endpoint == Endpoint::chat, g.created, g.model, g.include_usage};
  }
  json chat_logprobs(const std::vector<TokenInfo>& lps) const {
    return g_->logprobs >= 0 ? chat_logprobs_json(lps) : json(nullptr);
  }
  json completion_logprobs(const std::vector<TokenInfo>& lps) const {
    return g_->logprobs >= 0 ? completion_logprobs_json(lps, text_offset_) : json(nullptr);
  }

  // Server-sent events: what is ready goes out, content that may be (the start of) a tool
  // call is held back, and the end of the turn brings the calls, the finish and the usage.
  bool pump_stream(HttpResponse& res) {
    Generation& g = *g_;
    if (!started_) {
      started_ = true;
      if (g.endpoint == Endpoint::responses) {
        responses_.emplace(HttpServer::Impl::responses_header(g));
        res.body += responses_->start();
      } else if (g.endpoint == Endpoint::messages) {
        anthropic_.emplace(g.response_id, g.model);
        res.body +=
            anthropic_->start(anthropic_usage((int64_t)g.prompt.size(), 0, g.cached_tokens));
      } else if (g.endpoint == Endpoint::chat) {
        json first = stream_chunk(header(), chat_chunk_choice(chat_first_delta()));
        if (g.return_token_ids) first["prompt_token_ids"] = g.prompt;  // vLLM: the first chunk
        res.body += sse_event(first);
      }
    }
    for (;;) {
      auto item = g.ch->try_pop();
      if (!item) return false;
      const size_t lp_before = g.lps.size();
      s_.consume(g, *item);
      const std::vector<TokenInfo> new_lps(g.lps.begin() + (ptrdiff_t)lp_before, g.lps.end());
      if (!g.done) {
        res.body += progress_event(item->out.text, new_lps);
        continue;
      }
      // The turn is over: the rest of its deltas are decided before it is read whole, so
      // that the calls it reports carry the ids they were streamed with.
      std::vector<json> last;
      if (g.chat_turn() && g.finish != FinishReason::abort) {
        last = turn_deltas(item->out.text);
        for (json& d : g.streamer.finish()) last.push_back(std::move(d));
      }
      FinalTurn f = s_.finalize(g);
      if (f.server_round) {
        // Every call is the server's: the turn's text goes out, the calls run here (none
        // was streamed), the next turn streams on.
        res.body += delta_events(last, new_lps);
        if (auto e = s_.server_tool_round(g, f))
          f.error = e;
        else
          continue;
      }
      if (responses_)
        res.body += f.error ? responses_->error(*f.error) : responses_final_events(f, last);
      else if (anthropic_)
        res.body += f.error ? anthropic_->error(*f.error) : anthropic_final_events(f, last);
      else
        res.body += f.error ? sse_event(error_body(*f.error)) + sse_done()
                            : final_events(f, last, item->out.text, new_lps);
      return true;
    }
  }

  // A chat turn's deltas for new text (with the forced prefix's, the first time).
  std::vector<json> turn_deltas(const std::string& text) {
    Generation& g = *g_;
    std::vector<json> d = std::move(g.stream_ahead);
    g.stream_ahead.clear();
    for (json& x : g.streamer.push(text)) d.push_back(std::move(x));
    return d;
  }

  // Chat chunks for deltas; the new tokens' logprobs ride on the first (on a content chunk
  // of their own when there is no delta).
  std::string delta_events(const std::vector<json>& deltas, const std::vector<TokenInfo>& new_lps) {
    std::string out;
    if (responses_) {
      for (const json& d : deltas) out += responses_->delta(d);
      return out;
    }
    if (anthropic_) {
      for (const json& d : deltas) out += anthropic_->delta(d);
      return out;
    }
    json lps = g_->logprobs >= 0 && !new_lps.empty() ? chat_logprobs(new_lps) : json(nullptr);
    if (deltas.empty() && !lps.is_null())
      return sse_event(stream_chunk(header(), chat_chunk_choice({{"content", ""}}, lps)));
    for (const json& d : deltas) {
      out += sse_event(stream_chunk(header(), chat_chunk_choice(d, lps)));
      lps = nullptr;
    }
    return out;
  }

  // The events for new text (and logprobs) while the turn goes on; "" when there is nothing
  // to send yet (text held back as a possible call marker, a call's head).
  std::string progress_event(const std::string& text, const std::vector<TokenInfo>& new_lps) {
    Generation& g = *g_;
    if (g.chat_turn()) return delta_events(turn_deltas(text), new_lps);
    if (text.empty() && new_lps.empty()) return {};
    json choice = completion_chunk_choice(text, completion_logprobs(new_lps));
    with_prompt_ids(choice);
    std::string ev = sse_event(stream_chunk(header(), choice));
    text_offset_ += text.size();
    return ev;
  }

  // The end of the stream: the rest of the turn, the finish, the usage when asked, [DONE].
  std::string final_events(const FinalTurn& f, const std::vector<json>& last_deltas,
                           const std::string& last_text, const std::vector<TokenInfo>& new_lps) {
    const Generation& g = *g_;
    std::string out = g.endpoint == Endpoint::chat ? chat_final_events(f, last_deltas, new_lps)
                                                   : completion_final_event(f, last_text, new_lps);
    if (g.include_usage)
      out += sse_event(usage_chunk(
          header(), usage_json((int64_t)g.prompt.size(), g.completion_tokens(), g.cached_tokens)));
    return out + sse_done();
  }

  // Chat: the turn's last deltas (what was held back to its end), the calls that were not
  // streamed (those after a server-side tool's, or a scripted call), the finish.
  std::string chat_final_events(const FinalTurn& f, const std::vector<json>& last_deltas,
                                const std::vector<TokenInfo>& new_lps) {
    const Generation& g = *g_;
    std::string out = delta_events(last_deltas, new_lps);
    size_t first_index = 0;
    const std::vector<ToolCall> held = g.streamer.held_calls(f.calls, &first_index);
    if (!held.empty())
      out +=
          sse_event(stream_chunk(header(), chat_chunk_choice(tool_calls_delta(held, first_index))));
    json last = stream_chunk(header(), chat_chunk_choice(json::object(), nullptr, f.finish_reason));
    last.update(HttpServer::Impl::answer_extras(g, f));
    if (g.return_token_ids) last["choices"][0]["token_ids"] = g.tokens;
    return out + sse_event(last);
  }

  // The Responses and Messages streams' last events before their end: the turn's last deltas
  // and the calls that were not streamed (one more delta).
  std::string closing_deltas(const FinalTurn& f, std::vector<json> deltas) {
    size_t first_index = 0;
    const std::vector<ToolCall> held = g_->streamer.held_calls(f.calls, &first_index);
    if (!held.empty()) deltas.push_back(tool_calls_delta(held, first_index));
    return delta_events(deltas, {});
  }
  // Responses: the Response last (kept for previous_response_id when its request stores it).
  std::string responses_final_events(const FinalTurn& f, const std::vector<json>& last_deltas) {
    const Generation& g = *g_;
    std::string out = closing_deltas(f, last_deltas);
    out += responses_->finish(
        responses_status(f.finish_reason),
        responses_usage((int64_t)g.prompt.size(), g.completion_tokens(), g.cached_tokens),
        HttpServer::Impl::answer_extras(g, f));
    s_.store_response(g, f, responses_->final_response());
    return out;
  }

  // Messages: the stop reason and usage last.
  std::string anthropic_final_events(const FinalTurn& f, const std::vector<json>& last_deltas) {
    const Generation& g = *g_;
    return closing_deltas(f, last_deltas) +
           anthropic_->finish(
               anthropic_stop_reason(f.finish_reason),
               anthropic_usage((int64_t)g.prompt.size(), g.completion_tokens(), g.cached_tokens),
               HttpServer::Impl::answer_extras(g, f));
  }

  std::string completion_final_event(const FinalTurn& f, const std::string& last_text,
                                     const std::vector<TokenInfo>& new_lps) {
    const Generation& g = *g_;
    json choice = completion_chunk_choice(last_text, completion_logprobs(new_lps), f.finish_reason);
    with_prompt_ids(choice);
    if (g.return_token_ids) choice["token_ids"] = g.tokens;
    return sse_event(stream_chunk(header(), choice));
  }

  // return_token_ids: a completion stream's first chunk carries the prompt's ids in its
  // choice (vLLM's place for them).
  void with_prompt_ids(json& choice) {
    if (!g_->return_token_ids || prompt_ids_sent_) return;
    prompt_ids_sent_ = true;
    choice["prompt_token_ids"] = g_->prompt;
  }

  HttpServer::Impl& s_;
  std::shared_ptr<Generation> g_;
  std::unique_ptr<HttpServer::Impl::Guard> guard_;
  std::optional<ResponsesStream> responses_;  // Endpoint::responses: its events
  std::optional<AnthropicStream> anthropic_;  // Endpoint::messages: its events
  bool started_ = false;
  bool prompt_ids_sent_ = false;
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
