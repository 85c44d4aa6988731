// The explicit interception API: list, get, hint, delete and resume paused requests.
#include "server/http_server_impl.h"

namespace infercept::server {

json HttpServer::Impl::interception_json(const PausedRequest& p, const PausedSeqInfo* seq) const {
  const double now = steady_now();
  json calls = json::array();
  for (size_t i = 0; i < p.tool_names.size(); ++i)
    calls.push_back(
        {{"id", i < p.call_ids.size() ? p.call_ids[i] : ""}, {"name", p.tool_names[i]}});
  json j = {{"id", p.id},
            {"object", "interception"},
            {"model", model_name},
            {"tool_calls", calls},
            {"waiting_ms", (int64_t)((now - p.paused_at) * 1000.0)},
            {"expires_at", p.expires_at_unix},
            {"tokens", p.tokens.size()}};
  if (seq != nullptr) {
    j["tier"] = seq->tier();
    j["kv_tokens"] = {{"device", seq->device_tokens}, {"host", seq->host_tokens}};
  } else {
    j["tier"] = "released";
    j["kv_tokens"] = {{"device", 0}, {"host", 0}};
  }
  return j;
}

ApiError HttpServer::Impl::take_error(const std::string& id, TakeError why) const {
  ApiError e;
  switch (why) {
    case TakeError::resumed:
      e.status = 409;
      e.code = "interception_already_resumed";
      e.message = "interception " + id + " was already resumed";
      break;
    case TakeError::expired:
      e.status = 410;
      e.code = "interception_expired";
      e.message =
          "interception " + id + " expired; send the whole conversation to /v1/chat/completions";
      break;
    case TakeError::superseded:
      e.status = 409;
      e.code = "interception_superseded";
      e.message = "interception " + id +
                  " was released: a later turn of its conversation continued a newer one";
      break;
    case TakeError::evicted:
      e.status = 410;
      e.code = "interception_evicted";
      e.message = "interception " + id +
                  " was released to make room for a newer one (this key reached --max-paused); "
                  "send the whole conversation to /v1/chat/completions";
      break;
    case TakeError::deleted:
      e.status = 404;
      e.code = "interception_not_found";
      e.message = "interception " + id + " was deleted";
      break;
    case TakeError::unknown:
      e.status = 404;
      e.code = "interception_not_found";
      e.message = "no interception " + id;
      break;
  }
  return e;
}

void HttpServer::Impl::handle_interception_list(const HttpRequest& req, HttpResponse& res) {
  Guard guard(this);
  const std::string owner = owner_of(req);
  auto snap = snapshot(*engine, std::chrono::seconds(10));
  json data = json::array();
  for (const PausedRequest& p : registry->list(owner)) {
    const PausedSeqInfo* seq = nullptr;
    if (snap)
      for (const PausedSeqInfo& s : snap->paused_seqs)
        if (s.id == p.engine_id) seq = &s;
    data.push_back(interception_json(p, seq));
  }
  send_json(res, 200, {{"object", "list"}, {"data", data}});
}

void HttpServer::Impl::handle_interception_get(const HttpRequest& req, HttpResponse& res) {
  Guard guard(this);
  const std::string id = req.matches[1];
  const std::string owner = owner_of(req);
  auto p = registry->get(owner, id);
  if (!p) return send_error(res, take_error(id, registry->gone_reason(owner, id)));
  auto snap = snapshot(*engine, std::chrono::seconds(10));
  const PausedSeqInfo* seq = nullptr;
  if (snap)
    for (const PausedSeqInfo& s : snap->paused_seqs)
      if (s.id == p->engine_id) seq = &s;
  send_json(res, 200, interception_json(*p, seq));
}

void HttpServer::Impl::handle_interception_delete(const HttpRequest& req, HttpResponse& res) {
  Guard guard(this);
  const std::string id = req.matches[1];
  TakeError why = TakeError::unknown;
  PausedLease p = registry->take(owner_of(req), id, /*is_delete=*/true, &why);
  if (!p) return send_error(res, take_error(id, why));
  p = PausedLease();  // its engine request is released now, before the answer
  send_json(res, 200, {{"id", id}, {"object", "interception.deleted"}, {"deleted", true}});
}

void HttpServer::Impl::handle_interception_hint(const HttpRequest& req, HttpResponse& res) {
  Guard guard(this);
  const std::string id = req.matches[1];
  json body;
  if (auto e = parse_body(req.body, body)) return send_error(res, *e);
  auto ms = body.find("expected_duration_ms");
  if (ms == body.end() || !ms->is_number() || ms->get<double>() < 0)
    return send_error(res, invalid_request("'expected_duration_ms' must be a number >= 0",
                                           "expected_duration_ms"));
  auto p = registry->get(owner_of(req), id);
  if (!p) return send_error(res, take_error(id, TakeError::unknown));
  const double seconds = ms->get<double>() / 1000.0;
  const uint64_t engine_id = p->engine_id;
  engine->post([engine_id, seconds](EngineCore& core) {
    (void)core.set_interception_hint(engine_id, seconds);
  });
  send_json(res, 200,
            {{"id", id}, {"object", "interception"}, {"expected_duration_ms", ms->get<double>()}});
}

void HttpServer::Impl::handle_interception_resume(const HttpRequest& req, HttpResponse& res) {
  Guard guard(this);
  const std::string id = req.matches[1];
  const std::string owner = owner_of(req);
  json body;
  if (auto e = parse_body(req.body, body)) return send_error(res, *e);
  // The tool results: "messages" (tool messages, possibly more) or the shorthand
  // "tool_results": [{"tool_call_id", "content"}].
  std::vector<ChatMessage> added;
  if (auto m = body.find("messages"); m != body.end() && !m->is_null()) {
    if (auto e = parse_messages(*m, "messages", added)) return send_error(res, *e);
  } else if (auto t = body.find("tool_results"); t != body.end() && !t->is_null()) {
    if (!t->is_array())
      return send_error(res, invalid_request("'tool_results' must be an array", "tool_results"));
    json msgs = json::array();
    for (const json& r : *t) {
      if (!r.is_object())
        return send_error(res,
                          invalid_request("'tool_results' items must be objects", "tool_results"));
      json m = r;
      m["role"] = "tool";
      msgs.push_back(m);
    }
    if (auto e = parse_messages(msgs, "tool_results", added)) return send_error(res, *e);
  }
  if (added.empty())
    return send_error(res, invalid_request("give the tool results as 'messages' or 'tool_results'",
                                           "messages", "missing_required_parameter"));
  auto peek = registry->get(owner, id);
  if (!peek) return send_error(res, take_error(id, registry->gone_reason(owner, id)));
  ChatRequest cr = peek->request;
  cr.messages.insert(cr.messages.end(), added.begin(), added.end());
  RequestLimits l = limits;
  l.defaults = cr.params;
  if (auto e = parse_sampling(body, l, /*chat=*/true, cr.params, cr.max_tokens_given))
    return send_error(res, *e);
  bool stream = false, include_usage = false;
  {
    json sb = json::object();
    if (body.contains("stream")) sb["stream"] = body["stream"];
    if (body.contains("stream_options")) sb["stream_options"] = body["stream_options"];
    sb["model"] = model_name;
    sb["messages"] = json::array({{{"role", "user"}, {"content", ""}}});
    ChatRequest tmp;
    if (auto e = parse_chat_request(sb, limits, tmp)) return send_error(res, *e);
    stream = tmp.stream;
    include_usage = tmp.include_usage;
  }
  cr.stream = stream;
  cr.include_usage = include_usage;
  // A scripted call is per turn: the resume names its own or none.
  if (auto e = parse_scripted_call(body, cr)) return send_error(res, *e);
  // A forced tool call was for the first turn; the continuation chooses freely.
  if (cr.tool_choice == ToolChoice::required || cr.tool_choice == ToolChoice::named)
    cr.tool_choice = ToolChoice::automatic;
  TakeError why = TakeError::unknown;
  PausedLease entry = registry->take(owner, id, /*is_delete=*/false, &why);
  if (!entry) return send_error(res, take_error(id, why));
  // A resume refused before the engine is touched (a prompt past the context, a bad tool
  // choice) leaves the interception as it was: the client may fix it and resume, or delete.
  entry.put_back_on_drop(true);
  run_chat(std::move(cr), owner, std::move(entry), res);
}

}  // namespace infercept::server
