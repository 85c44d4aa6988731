// Chat and completion requests: from the HTTP body to an engine request, and its turn
// answered as one response or a stream (tool calls, interceptions, server-side tool rounds).
#include "server/http_server_impl.h"
#include "tokenizer/chat_encoding.h"

namespace infercept::server {

void HttpServer::Impl::handle_chat(const HttpRequest& req, HttpResponse& res) {
  Guard guard(this);
  json body;
  if (auto e = parse_body(req.body, body)) return send_error(res, *e);
  ChatRequest cr;
  if (auto e = parse_chat_request(body, limits, cr)) return send_error(res, *e);
  if (auto e = check_served_model(cr.model)) return send_error(res, *e);
  run_chat(std::move(cr), owner_of(req), PausedLease(), res);
}

// The Responses API: its body as a chat body (responses_api.h), after the conversation of the
// stored response it names in previous_response_id, then a chat turn answered as a Response.
// Errors of the chat parser name the chat parameter; the ones a Responses client knows by
// another name are renamed.
void HttpServer::Impl::handle_responses(const HttpRequest& req, HttpResponse& res) {
  Guard guard(this);
  json body, chat_body;
  if (auto e = parse_body(req.body, body)) return send_error(res, *e);
  const std::string owner = owner_of(req);
  std::optional<ResponseStore::Stored> prior;
  if (auto it = body.find("previous_response_id"); it != body.end() && !it->is_null()) {
    if (!it->is_string())
      return send_error(res, invalid_request("'previous_response_id' must be a string",
                                             "previous_response_id", "invalid_type"));
    prior = responses->get(owner, it->get<std::string>());
    if (!prior) {
      ApiError e = not_found("Previous response with id '" + it->get<std::string>() +
                                 "' not found (never stored, deleted, or dropped for room; "
                                 "--responses-store-mb)",
                             "previous_response_not_found");
      e.param = "previous_response_id";
      return send_error(res, e);
    }
  }
  if (auto e = responses_to_chat_body(body, prior ? &prior->messages : nullptr, chat_body))
    return send_error(res, *e);
  ChatRequest cr;
  if (auto e = parse_chat_request(chat_body, limits, cr)) {
    if (e->param == "max_completion_tokens" || e->param == "max_tokens")
      e->param = "max_output_tokens";
    else if (e->param.starts_with("response_format"))
      e->param = "text.format";
    else if (e->param.starts_with("messages"))
      e->param = "input";
    return send_error(res, *e);
  }
  if (auto e = check_served_model(cr.model)) return send_error(res, *e);
  run_chat(std::move(cr), owner, PausedLease(), res, Endpoint::responses, std::move(body));
}

std::optional<ApiError> HttpServer::Impl::check_served_model(const std::string& model) const {
  if (model == model_name) return std::nullopt;
  return not_found("The model '" + model + "' does not exist.", "model_not_found");
}

// Anthropic's Messages API: its body as a chat body (anthropic_api.h), the chat parser's
// errors renamed where a Messages client knows the parameter by another name.
std::optional<ApiError> HttpServer::Impl::parse_messages_api(const std::string& text,
                                                             bool count_only,
                                                             ChatRequest& cr) const {
  json body, chat_body;
  if (auto e = parse_body(text, body)) return e;
  if (count_only && !body.contains("max_tokens")) body["max_tokens"] = 1;  // not asked there
  if (auto e = messages_to_chat_body(body, chat_body)) return e;
  if (auto e = parse_chat_request(chat_body, limits, cr)) {
    if (e->param == "stop") e->param = "stop_sequences";
    return e;
  }
  return check_served_model(cr.model);
}

// A chat turn answered as a Message; every error in Anthropic's shape.
void HttpServer::Impl::handle_messages(const HttpRequest& req, HttpResponse& res) {
  Guard guard(this);
  ChatRequest cr;
  if (auto e = parse_messages_api(req.body, /*count_only=*/false, cr))
    return send_error_for(Endpoint::messages, res, *e);
  run_chat(std::move(cr), owner_of(req), PausedLease(), res, Endpoint::messages);
}

// POST /v1/messages/count_tokens: the prompt the request would run, counted.
void HttpServer::Impl::handle_count_tokens(const HttpRequest& req, HttpResponse& res) {
  Guard guard(this);
  auto fail = [&](const ApiError& e) { send_error_for(Endpoint::messages, res, e); };
  ChatRequest cr;
  if (auto e = parse_messages_api(req.body, /*count_only=*/true, cr)) return fail(*e);
  if (!has_template) return fail(invalid_request("the model has no chat template"));
  auto g = new_generation(Endpoint::messages, owner_of(req));
  g->format = core->turn_format();
  if (auto e = check_tool_choice(cr)) return fail(*e);
  if (auto e = render_chat_prompt(cr, *g)) return fail(*e);
  send_json(res, 200, {{"input_tokens", g->prompt.size()}});
}

void HttpServer::Impl::handle_response_get(const HttpRequest& req, HttpResponse& res) {
  auto stored = responses->get(owner_of(req), req.matches[1]);
  if (!stored)
    return send_error(res, not_found("Response with id '" + req.matches[1] + "' not found."));
  send_json(res, 200, stored->response);
}

void HttpServer::Impl::handle_response_delete(const HttpRequest& req, HttpResponse& res) {
  if (!responses->erase(owner_of(req), req.matches[1]))
    return send_error(res, not_found("Response with id '" + req.matches[1] + "' not found."));
  send_json(res, 200, {{"id", req.matches[1]}, {"object", "response"}, {"deleted", true}});
}

// A chat turn: the request's tools settled, its prompt rendered and measured, the paused
// request it follows up looked for, then the engine request started and answered.
void HttpServer::Impl::run_chat(ChatRequest cr, const std::string& owner, PausedLease entry,
                                HttpResponse& res, Endpoint endpoint, json responses_request) {
  if (!has_template)
    return send_error_for(
        endpoint, res,
        invalid_request("the model has no chat template; start the server with "
                        "--chat-template chatml|llama3|llama2 or use /v1/completions"));
  auto g = new_generation(endpoint, owner);
  g->responses_request = std::move(responses_request);
  g->kind = core->chat_template().kind;
  g->format = core->turn_format();
  g->cache_namespace = cache_namespace(owner, cr.cache);
  if (auto e = add_server_tools(cr, /*resume=*/(bool)entry, *g))
    return send_error_for(endpoint, res, *e);
  if (auto e = check_tool_choice(cr)) return send_error_for(endpoint, res, *e);
  if (auto e = render_chat_prompt(cr, *g)) return send_error_for(endpoint, res, *e);
  GenerateRequest gr = chat_engine_request(cr, *g);
  const bool explicit_resume = (bool)entry;
  if (!entry && opt.interception) {
    // The follow-up of a paused turn carries one of its call ids (the assistant's
    // tool_calls sent back, or a tool result's tool_call_id). A request that carries none (a
    // repeated first turn, another conversation with the same start) continues nothing: its
    // reuse comes from the engine's prefix cache.
    std::vector<PausedLease> superseded;
    entry = registry->take_followup(owner, g->cache_namespace, call_ids_of(cr), &superseded);
    release_superseded(superseded);
  }
  if (entry && restore_reasoning(cr.messages, *entry)) {
    // The prompt changes where the template renders reasoning: rendered again, so that it is
    // the paused request's tokens and its KV is reused.
    if (auto e = render_chat_prompt(cr, *g)) return send_error_for(endpoint, res, *e);
    gr = chat_engine_request(cr, *g);
  }
  g->chat = std::move(cr);
  if (auto e = start(*g, std::move(gr), std::move(entry), explicit_resume))
    return send_error_for(endpoint, res, *e);
  respond(g, res);
}

// The tool call ids a chat request's messages carry: its assistant messages' calls and its
// tool results.
std::set<std::string> HttpServer::Impl::call_ids_of(const ChatRequest& cr) {
  std::set<std::string> ids;
  for (const ChatMessage& m : cr.messages) {
    for (const ToolCall& c : m.tool_calls)
      if (!c.id.empty()) ids.insert(c.id);
    if (!m.tool_call_id.empty()) ids.insert(m.tool_call_id);
  }
  return ids;
}

// Paused requests a follow-up passed over for a newer one of the same conversation: their
// engine requests are released as the leases end (the KV of their full blocks stays in the
// engine's prefix cache).
void HttpServer::Impl::release_superseded(std::vector<PausedLease>& leases) {
  for (const PausedLease& p : leases)
    log_line({{"event", "interception_superseded"}, {"id", p->id}, {"owner", p->owner}});
  if (!leases.empty()) metrics.add_superseded((int64_t)leases.size());
  leases.clear();
}

std::shared_ptr<Generation> HttpServer::Impl::new_generation(Endpoint endpoint,
                                                             const std::string& owner) const {
  auto g = std::make_shared<Generation>();
  g->endpoint = endpoint;
  g->t_received = steady_now();
  g->response_id = random_id(endpoint_info(endpoint).id_prefix);
  g->created = unix_now();
  g->model = model_name;
  g->owner = owner;
  return g;
}

// Server-side tools the request names join its tools in the prompt.
std::optional<ApiError> HttpServer::Impl::add_server_tools(ChatRequest& cr, bool resume,
                                                           Generation& g) const {
  const std::vector<std::string> names = cr.all_server_tools ? tools.names() : cr.server_tools;
  for (const std::string& name : names) {
    const ServerTool* t = tools.find(name);
    if (t == nullptr) {
      std::string have;
      for (const std::string& n : tools.names()) have += (have.empty() ? "" : ", ") + n;
      return invalid_request("no server-side tool '" + name + "' (this server has: " + have + ")",
                             "server_tools");
    }
    if (g.server_tool_names.count(name) != 0) continue;
    for (const ToolDefinition& d : cr.tools)
      if (d.name == name && !resume)
        return invalid_request("tool '" + name + "' is both a client and a server-side tool",
                               "tools");
    g.server_tool_names.insert(name);
    bool listed = false;
    for (const ToolDefinition& d : cr.tools) listed = listed || d.name == name;
    if (!listed) cr.tools.push_back(t->def);
  }
  return std::nullopt;
}

// A named tool_choice must name one of the tools.
std::optional<ApiError> HttpServer::Impl::check_tool_choice(const ChatRequest& cr) const {
  if (cr.tool_choice != ToolChoice::named) return std::nullopt;
  for (const ToolDefinition& d : cr.tools)
    if (d.name == cr.tool_choice_name) return std::nullopt;
  return invalid_request("tool_choice names '" + cr.tool_choice_name + "', which is not in tools",
                         "tool_choice.function.name");
}

// The prompt (with the request's tools whatever tool_choice says, and a forced call's
// opening), and how the turn is read: fills g's prompt, tool settings and stream filter; cuts
// max_tokens to the context. tool_choice none keeps the tools in the prompt (vLLM's default),
// so that a conversation's last turn shares its prefix, tools included, with the turns
// before it; the turn is then read as text: no calls parsed, no pause.
// The rendered prompt's tail says where the template left the turn (think_start_of_prompt):
// a reasoning block it opened is closed before a forced call (the grammar writes the call,
// not reasoning), as Qwen3's enable_thinking false closes it.
std::optional<ApiError> HttpServer::Impl::render_chat_prompt(ChatRequest& cr, Generation& g) {
  const std::vector<ToolDefinition>& prompt_tools = cr.tools;
  g.tools_active = !cr.tools.empty() && cr.tool_choice != ToolChoice::none;
  // Message content is text (special tokens only from the template); rendering stops past
  // what the context could hold (each token stands for max_token_bytes() at most).
  ChatEncodeOptions eo;
  eo.allow_special_in_content = opt.allow_special_tokens_in_content;
  eo.max_rendered_bytes = (size_t)context_limit * core->tokenizer().max_token_bytes();
  eo.template_vars_json = cr.chat_template_kwargs_json;
  auto rendered = render_chat_for_encoding(core->chat_template(), cr.messages, prompt_tools, eo);
  if (!rendered.ok()) {
    const bool vars = rendered.error().message.find("template variable") != std::string::npos;
    return invalid_request(rendered.error().message, vars ? "chat_template_kwargs" : "messages");
  }
  g.format.think = think_start_of_prompt(rendered->text, rendered->literal);
  const bool forced = g.tools_active && (cr.tool_choice == ToolChoice::required ||
                                         cr.tool_choice == ToolChoice::named);
  std::string close_think;
  if (forced && g.format.think == ThinkStart::inside) {
    close_think = rendered->text.ends_with('\n') ? "\n</think>\n\n" : "\n\n</think>\n\n";
    g.format.think = ThinkStart::after;
  }
  const grammar::ToolCallSyntax syntax = tool_call_syntax(core->chat_template(), g.format);
  g.forced_prefix = forced_tool_prefix(syntax, cr.tool_choice, cr.tool_choice_name);
  if (auto e = constraints.build(cr, syntax, g.tools_active, g.constraint)) return e;
  g.keep_paused = opt.interception && cr.intercept && g.tools_active;
  g.stream = cr.stream;
  g.include_usage = cr.include_usage;
  g.logprobs = cr.logprobs;
  g.return_token_ids = cr.return_token_ids;
  g.streamer = ChatTurnStreamer(g.format, g.tools_active, g.server_tool_names);
  g.stream_ahead = g.streamer.push(g.forced_prefix);
  eo.suffix = close_think + g.forced_prefix;
  g.prompt = encode_rendered_chat(core->tokenizer(), core->chat_template(), cr.messages,
                                  prompt_tools, std::move(*rendered), eo);
  if (auto e = check_lengths(g.prompt, cr.params, cr.max_tokens_given, "messages")) {
    metrics.add_rejected("context_length");
    return e;
  }
  return std::nullopt;
}

// What the engine runs for a chat turn: it pauses at a turn with tool calls when the
// request is kept for its client or has server-side tools; intercept_after_tokens scripts
// the pause.
GenerateRequest HttpServer::Impl::chat_engine_request(const ChatRequest& cr, Generation& g) const {
  GenerateRequest gr;
  gr.prompt = g.prompt;
  gr.params = cr.params;
  gr.pause_at_tool_turn_end = g.keep_paused || (g.tools_active && !g.server_tool_names.empty());
  gr.turn_prefix = g.forced_prefix;
  gr.think_start = g.format.think;
  gr.tool_call_text = g.tools_active;
  gr.tool_duration_hints = cr.tool_hints_s;
  gr.logprobs = cr.logprobs;
  gr.cache_namespace = g.cache_namespace;
  gr.constraint = g.constraint;
  if (cr.intercept_after_tokens > 0) {
    ScriptedInterception si;
    si.after_generated = cr.intercept_after_tokens;
    si.tool = cr.intercept_tool;
    if (auto h = cr.tool_hints_s.find(si.tool); h != cr.tool_hints_s.end()) si.hint = h->second;
    gr.script.push_back(std::move(si));
    gr.params.ignore_eos = true;
    // The engine ends a request at max_tokens before it looks for a pause: with N equal to
    // max_tokens the call must still win, so leave one token of room (never generated).
    if (gr.params.max_tokens == cr.intercept_after_tokens) gr.params.max_tokens += 1;
    g.scripted_tool = cr.intercept_tool;
  }
  return gr;
}

void HttpServer::Impl::handle_completion(const HttpRequest& req, HttpResponse& res) {
  Guard guard(this);
  json body;
  if (auto e = parse_body(req.body, body)) return send_error(res, *e);
  CompletionRequest cr;
  if (auto e = parse_completion_request(body, limits, cr)) return send_error(res, *e);
  if (auto e = check_served_model(cr.model)) return send_error(res, *e);
  auto g = new_generation(Endpoint::completion, owner_of(req));
  g->cache_namespace = cache_namespace(g->owner, cr.cache);
  g->stream = cr.stream;
  g->include_usage = cr.include_usage;
  g->logprobs = cr.logprobs;
  g->return_token_ids = cr.return_token_ids;
  if (!cr.prompt_tokens.empty()) {
    const int32_t vocab = core->tokenizer().vocab_size();
    for (int32_t t : cr.prompt_tokens)
      if (t >= vocab)
        return send_error(
            res, invalid_request("prompt token id " + std::to_string(t) +
                                     " is outside the vocabulary (" + std::to_string(vocab) + ")",
                                 "prompt"));
    g->prompt = cr.prompt_tokens;
  } else {
    g->prompt = core->tokenizer().encode(cr.prompt_text, /*add_bos=*/true, /*parse_special=*/false);
  }
  if (g->prompt.empty()) return send_error(res, invalid_request("the prompt is empty", "prompt"));
  if (auto e = check_lengths(g->prompt, cr.params, cr.max_tokens_given, "prompt")) {
    metrics.add_rejected("context_length");
    return send_error(res, *e);
  }
  GenerateRequest gr;
  gr.prompt = g->prompt;
  gr.params = cr.params;
  gr.logprobs = cr.logprobs;
  gr.cache_namespace = g->cache_namespace;
  // A raw prompt carries no call ids: it continues a paused request of its owner only when it
  // extends all of that request's tokens (prompt and generated), exactly.
  PausedLease entry;
  if (opt.interception) {
    std::vector<PausedLease> superseded;
    entry = registry->take_extended(g->owner, g->cache_namespace, g->prompt, &superseded);
    release_superseded(superseded);
  }
  if (auto e = start(*g, std::move(gr), std::move(entry), false)) return send_error(res, *e);
  respond(g, res);
}

std::optional<ApiError> HttpServer::Impl::start(Generation& g, GenerateRequest gr,
                                                PausedLease entry, bool explicit_resume) {
  if (stopping) return server_error("the server is shutting down", 503);
  g.ch = std::make_shared<Channel>();
  auto cb = [ch = g.ch](const RequestOutput& o) { ch->push(o); };
  if (entry) {
    const double waited = steady_now() - entry->paused_at;
    // From here the engine request is touched: a failure releases it (the lease's end).
    entry.put_back_on_drop(false);
    KvPlace place = KvPlace::recompute;
    auto r = engine->continue_paused(entry->engine_id, gr, cb, &place);
    if (r.ok()) {
      g.engine_id = entry->engine_id;
      g.cached_tokens = *r;
      g.resumed_from = entry->id;
      g.resume_kv = place;
      track(g.engine_id);
      metrics.observe_interception(g.owner, tool_label(*entry), waited);
      metrics.add_resume(!explicit_resume);
      entry.commit();
      return std::nullopt;
    }
    // The paused request is gone or cannot take this prompt: answer from scratch.
    LOG_INFO("resume of %s failed (%s); prefilling from scratch", entry->id.c_str(),
             r.error().message.c_str());
    entry = PausedLease();  // released
  }
  auto id = engine->submit(std::move(gr), cb);
  if (!id.ok()) return invalid_request(id.error().message);
  g.engine_id = *id;
  track(g.engine_id);
  return std::nullopt;
}

TokenInfo HttpServer::Impl::token_info(const RequestOutput& o, size_t i) const {
  TokenInfo t;
  t.text = core->tokenizer().token_to_bytes(o.new_tokens[i], /*render_special=*/true);
  t.logprob = i < o.logprobs.size() ? o.logprobs[i] : 0.0f;
  if (i < o.top_logprobs.size())
    for (const TokenLogprob& tl : o.top_logprobs[i])
      t.top.emplace_back(core->tokenizer().token_to_bytes(tl.id, true), tl.logprob);
  return t;
}

void HttpServer::Impl::consume(Generation& g, const Channel::Item& item) {
  const RequestOutput& o = item.out;
  if (!o.new_tokens.empty()) {
    if (g.tokens.empty()) {
      g.t_first = item.t;
      metrics.observe_ttft(item.t - g.t_received);
      if (g.resume_kv) metrics.observe_resume_ttft(*g.resume_kv, item.t - g.t_received);
    } else {
      metrics.observe_itl(item.t - g.t_last);
    }
    g.t_last = item.t;
    for (size_t i = 0; i < o.new_tokens.size(); ++i) {
      g.tokens.push_back(o.new_tokens[i]);
      if (g.logprobs >= 0) g.lps.push_back(token_info(o, i));
    }
  }
  g.text += o.text;
  // The engine says how much of the prompt it found cached once the prompt is scheduled; a
  // continued paused request's kept KV was counted when it was taken over (start()).
  g.cached_tokens = std::max(g.cached_tokens, o.cached_tokens);
  if (o.intercepted) {
    g.intercepted = true;
    g.done = true;
  }
  if (o.finished()) {
    g.finish = o.finish;
    g.done = true;
  }
}

// The end of a turn: what it said (content and calls), whether the server runs the calls
// itself, else whether the request stays paused for its client, and the turn counted.
FinalTurn HttpServer::Impl::finalize(Generation& g) {
  FinalTurn f;
  g.finalized = true;
  const double t_end = steady_now();
  if (g.finish == FinishReason::abort) {
    untrack(g.engine_id);
    f.error =
        server_error(stopping ? "the server is shutting down" : "the request was cancelled", 503);
    f.finish_reason = "abort";
    return f;
  }
  read_turn(g, f);
  if (server_round_due(g, f)) {
    f.server_round = true;
    return f;
  }
  untrack(g.engine_id);
  if (g.intercepted) {
    if (!f.calls.empty() && g.keep_paused && !stopping)
      f.interception = keep_paused(g, f, t_end);
    else
      engine->abort(g.engine_id);  // nobody will resume it
    f.finish_reason = f.calls.empty() ? "stop" : "tool_calls";
  } else if (g.finish == FinishReason::length) {
    f.finish_reason = "length";
  } else {
    f.finish_reason = f.calls.empty() ? "stop" : "tool_calls";
  }
  record_finished(g, f, t_end);
  return f;
}

// The turn's content, reasoning and calls (parse_assistant_turn: a malformed call is
// content; a streamed call keeps the id it went out with), or the call
// intercept_after_tokens scripted.
void HttpServer::Impl::read_turn(const Generation& g, FinalTurn& f) const {
  AssistantTurn turn;
  if (g.chat_turn()) {
    turn = parse_assistant_turn(g.forced_prefix + g.text, g.format, g.tools_active);
    if (g.stream) g.streamer.assign_ids(turn.calls);
  } else {
    turn.content = g.text;
  }
  f.content = turn.content;
  f.reasoning = turn.reasoning;
  f.calls = turn.calls;
  if (g.intercepted && f.calls.empty() && !g.scripted_tool.empty()) {
    // intercept_after_tokens: the turn's tokens were generated; it ends in the scripted call.
    ToolCall c;
    c.id = tool_call_id(g.format.calls);
    c.name = g.scripted_tool;
    c.arguments_json = "{}";
    f.calls.push_back(std::move(c));
  }
}

// Every call is to a server-side tool (and rounds are left): the server runs them.
bool HttpServer::Impl::server_round_due(const Generation& g, const FinalTurn& f) const {
  if (!g.intercepted || f.calls.empty() || g.server_tool_names.empty() || stopping ||
      g.server_rounds >= opt.max_server_tool_rounds)
    return false;
  for (const ToolCall& c : f.calls)
    if (g.server_tool_names.count(c.name) == 0) return false;
  return true;
}

// The paused request registered for its client's follow-up; the response's "interception".
json HttpServer::Impl::keep_paused(const Generation& g, const FinalTurn& f, double t_end) {
  PausedRequest p;
  p.owner = g.owner;
  p.cache_namespace = g.cache_namespace;
  p.engine_id = g.engine_id;
  p.tokens = g.prompt;
  p.tokens.insert(p.tokens.end(), g.tokens.begin(), g.tokens.end());
  p.request = g.chat;
  p.request.messages.push_back(f.message());
  for (const ToolCall& c : f.calls) {
    p.tool_names.push_back(c.name);
    p.call_ids.push_back(c.id);
  }
  p.paused_at = t_end;
  // At --max-paused the owner's oldest paused request makes room (a client that dropped
  // conversations without resuming them must not be refused new turns); its KV goes back to
  // the engine, the full blocks staying in the prefix cache.
  std::vector<PausedLease> evicted;
  const std::string id = registry->add(std::move(p), t_end, &evicted);
  for (const PausedLease& e : evicted)
    log_line({{"event", "interception_evicted"}, {"id", e->id}, {"owner", e->owner}});
  if (!evicted.empty()) metrics.add_evicted((int64_t)evicted.size());
  evicted.clear();  // released
  auto stored = registry->get(g.owner, id);
  metrics.add_pause();
  return {{"id", id},
          {"expires_at", stored ? stored->expires_at_unix : unix_now()},
          {"resume_url", "/v1/interceptions/" + id + "/resume"}};
}

void HttpServer::Impl::record_finished(const Generation& g, const FinalTurn& f, double t_end) {
  metrics.observe_e2e(t_end - g.t_received);
  metrics.add_request(endpoint_info(g.endpoint).name, f.finish_reason, (int64_t)g.prompt.size(),
                      g.completion_tokens(), g.cached_tokens);
  log_line({{"event", "generation"},
            {"id", g.response_id},
            {"owner", g.owner},
            {"prompt_tokens", g.prompt.size()},
            {"completion_tokens", g.completion_tokens()},
            {"server_tool_calls", g.server_calls.size()},
            {"cached_tokens", g.cached_tokens},
            {"finish_reason", f.finish_reason},
            {"resumed_from", g.resumed_from},
            {"interception", f.interception.is_null() ? json(nullptr) : f.interception["id"]},
            {"ttft_ms", g.t_first > 0 ? (g.t_first - g.t_received) * 1000.0 : 0.0},
            {"e2e_ms", (t_end - g.t_received) * 1000.0}});
}

std::optional<ApiError> HttpServer::Impl::server_tool_round(Generation& g, const FinalTurn& f) {
  ChatRequest& cr = g.chat;
  cr.messages.push_back(f.message());
  // The request stays paused in the engine while the tools run: a real interception.
  for (const ToolCall& c : f.calls) {
    const double t0 = steady_now();
    const std::string result = tools.run(*tools.find(c.name), c.arguments_json);
    const double dt = steady_now() - t0;
    ChatMessage m;
    m.role = "tool";
    m.tool_call_id = c.id;
    m.name = c.name;
    m.content = result;
    cr.messages.push_back(std::move(m));
    g.server_calls.push_back({{"id", c.id},
                              {"name", c.name},
                              {"arguments", c.arguments_json},
                              {"result", result},
                              {"duration_ms", dt * 1000.0}});
  }
  if (cr.tool_choice == ToolChoice::required || cr.tool_choice == ToolChoice::named)
    cr.tool_choice = ToolChoice::automatic;
  const double waited = steady_now() - g.t_last;
  ChatEncodeOptions eo;
  eo.allow_special_in_content = opt.allow_special_tokens_in_content;
  eo.max_rendered_bytes = (size_t)context_limit * core->tokenizer().max_token_bytes();
  eo.template_vars_json = cr.chat_template_kwargs_json;
  auto rendered = render_chat_for_encoding(core->chat_template(), cr.messages, cr.tools, eo);
  if (!rendered.ok()) {
    engine->abort(g.engine_id);
    untrack(g.engine_id);
    return invalid_request(rendered.error().message, "messages");
  }
  g.format.think = think_start_of_prompt(rendered->text, rendered->literal);
  std::vector<int32_t> prompt = encode_rendered_chat(
      core->tokenizer(), core->chat_template(), cr.messages, cr.tools, std::move(*rendered), eo);
  SamplingParams params = cr.params;
  const int64_t left = (int64_t)params.max_tokens - g.completion_tokens();
  if (auto e = check_lengths(prompt, params, false, "messages"); e || left <= 0) {
    engine->abort(g.engine_id);
    untrack(g.engine_id);
    if (e) return e;
    return invalid_request("max_tokens was used up by the server-side tool rounds", "max_tokens");
  }
  params.max_tokens = (int32_t)std::min<int64_t>(params.max_tokens, left);
  GenerateRequest gr;
  gr.prompt = prompt;
  gr.params = params;
  gr.pause_at_tool_turn_end = true;
  gr.think_start = g.format.think;
  gr.tool_duration_hints = cr.tool_hints_s;
  gr.logprobs = g.logprobs;
  gr.cache_namespace = g.cache_namespace;
  auto cb = [ch = g.ch](const RequestOutput& o) { ch->push(o); };
  auto r = engine->continue_paused(g.engine_id, std::move(gr), cb);
  if (!r.ok()) {
    engine->abort(g.engine_id);
    untrack(g.engine_id);
    return server_error("the paused request could not continue: " + r.error().message);
  }
  metrics.observe_interception(g.owner, f.calls[0].name, waited);  // a server tool: declared
  // The next turn starts; what the response reports is the last turn's, tokens summed.
  g.completion_before += (int64_t)g.tokens.size();
  g.prompt = std::move(prompt);
  g.cached_tokens = *r;
  g.text.clear();
  g.tokens.clear();
  g.lps.clear();
  g.finish = FinishReason::none;
  g.intercepted = false;
  g.done = false;
  g.finalized = false;
  g.forced_prefix.clear();
  g.streamer = ChatTurnStreamer(g.format, true, g.server_tool_names);
  g.server_rounds++;
  return std::nullopt;
}

json HttpServer::Impl::chat_response(const Generation& g, const FinalTurn& f) const {
  json choice = {{"index", 0},
                 {"message", chat_message_json(f.message())},
                 {"finish_reason", f.finish_reason}};
  choice["logprobs"] = g.logprobs >= 0 ? chat_logprobs_json(g.lps) : json(nullptr);
  if (g.return_token_ids) choice["token_ids"] = g.tokens;
  json r = {
      {"id", g.response_id},
      {"object", "chat.completion"},
      {"created", g.created},
      {"model", g.model},
      {"choices", json::array({choice})},
      {"usage", usage_json((int64_t)g.prompt.size(), g.completion_tokens(), g.cached_tokens)}};
  if (g.return_token_ids) r["prompt_token_ids"] = g.prompt;
  r.update(answer_extras(g, f));
  return r;
}

json HttpServer::Impl::completion_response(const Generation& g, const FinalTurn& f) const {
  json choice = {{"index", 0}, {"text", f.content}, {"finish_reason", f.finish_reason}};
  choice["logprobs"] = g.logprobs >= 0 ? completion_logprobs_json(g.lps, 0) : json(nullptr);
  if (g.return_token_ids) {
    choice["prompt_token_ids"] = g.prompt;
    choice["token_ids"] = g.tokens;
  }
  return {
      {"id", g.response_id},
      {"object", "text_completion"},
      {"created", g.created},
      {"model", g.model},
      {"choices", json::array({choice})},
      {"usage", usage_json((int64_t)g.prompt.size(), (int64_t)g.tokens.size(), g.cached_tokens)}};
}

json HttpServer::Impl::anthropic_response(const Generation& g, const FinalTurn& f) const {
  json r = anthropic_message(
      g.response_id, g.model, anthropic_content(f.content, f.reasoning, f.calls),
      anthropic_stop_reason(f.finish_reason),
      anthropic_usage((int64_t)g.prompt.size(), g.completion_tokens(), g.cached_tokens));
  r.update(answer_extras(g, f));
  return r;
}

json HttpServer::Impl::answer_json(const Generation& g, const FinalTurn& f) const {
  switch (g.endpoint) {
    case Endpoint::chat:
      return chat_response(g, f);
    case Endpoint::completion:
      return completion_response(g, f);
    case Endpoint::responses:
      return responses_response(g, f);
    case Endpoint::messages:
      return anthropic_response(g, f);
  }
  return chat_response(g, f);
}

json HttpServer::Impl::answer_extras(const Generation& g, const FinalTurn& f) {
  json extra = json::object();
  if (!f.interception.is_null()) extra["interception"] = f.interception;
  if (!g.server_calls.empty()) extra["server_tool_calls"] = g.server_calls;
  return extra;
}

void HttpServer::Impl::send_error_for(Endpoint endpoint, HttpResponse& res, const ApiError& e) {
  if (endpoint == Endpoint::messages)
    send_json(res, e.status, anthropic_error_body(e));
  else
    send_error(res, e);
}

ResponseHeader HttpServer::Impl::responses_header(const Generation& g) {
  return {g.response_id, g.created, g.model, g.responses_request};
}

json HttpServer::Impl::responses_response(const Generation& g, const FinalTurn& f) const {
  json r = response_object(
      responses_header(g), responses_status(f.finish_reason),
      response_output_items(f.content, f.reasoning, f.calls),
      responses_usage((int64_t)g.prompt.size(), g.completion_tokens(), g.cached_tokens));
  r.update(answer_extras(g, f));
  return r;
}

void HttpServer::Impl::store_response(const Generation& g, const FinalTurn& f,
                                      const json& response) const {
  if (g.endpoint != Endpoint::responses || !responses_store_requested(g.responses_request)) return;
  ResponseStore::Stored s;
  s.messages = json::array();
  const std::vector<ChatMessage>& ran = g.chat.messages;
  for (size_t i = instruction_messages(g.responses_request); i < ran.size(); ++i)
    s.messages.push_back(chat_message_json(ran[i]));
  s.messages.push_back(chat_message_json(f.message()));
  s.response = response;
  responses->put(g.owner, g.response_id, std::move(s));
}

}  // namespace infercept::server
