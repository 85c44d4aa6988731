#!/usr/bin/env python3
"""End to end: `infercept serve` under real agent clients, the official `openai` SDK and
LangChain (`langchain-openai`), and what they send back between turns: the text around a
call as the assistant's content, tool_choice named / required / auto / none, streamed turns
and whole ones, a last turn with the tools left out, a repeated first turn, two conversations
that share their system prompt.

Every request goes through a recording proxy in this script, which adds return_token_ids
(and include_usage to streams), so each turn's prompt ids, generated ids and cached_tokens
are known whatever the client shows. The rule checked for each turn that follows another
(the next turn of a conversation, a repeat, a conversation sharing another's start):
cached_tokens >= the tokens the earlier turn held (prompt and generated) that the new
prompt repeats from the start, up to the first that differs, floored to the KV block size.
A follow-up must also be the one that continued its paused request (X-Infercept-Resumed),
and a request that carries none of a paused request's call ids must continue nothing. At the
end the interceptions left open are exactly those the clients left, and no 429 was seen.

Reuse by a request that continues no paused request (a repeat, another conversation) comes
from the engine's prefix cache; those checks are labelled "prefix cache" in the output.

Run by ctest; exits 77 (skipped) when the packages are missing (make installs them in
build/venv).
"""
import argparse
import http.client
import http.server
import json
import re
import signal
import sys
import threading

import checks  # tests/checks.py: the shared tally

try:
    import openai
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_openai import ChatOpenAI
except ImportError as e:
    print(f"skipped: {e.name} is not installed (make sets up openai and langchain-openai in build/venv)")
    sys.exit(77)

BLOCK = 16  # the server's KV block size (--block-size default)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TOOLS = [WEATHER]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
SYSTEM = ("You are a weather assistant for travellers. Answer briefly. When someone asks about the weather in "
          "a city, call the get_weather tool with the city's name, then answer from its result in one sentence "
          "that gives the temperature in degrees and the sky. Never guess the weather without the tool.")
# One earlier exchange shows the model the call format (SmolLM2-135M needs it).
EXAMPLE = [
    {"role": "user", "content": "What is the weather in London?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": "{\"city\": \"London\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 12, \"sky\": \"rain\"}"},
    {"role": "assistant", "content": "It is 12 degrees and raining in London."},
]


def weather_result(city):
    return json.dumps({"city": city, "temperature": 20 + len(city) % 7, "sky": "sunny"})


# --- the recording proxy -----------------------------------------------------------------------

class Turn:
    """One chat completion as it went over the wire."""

    def __init__(self, request, status, headers, body):
        self.request = request
        self.status = status
        self.resumed_from = headers.get("x-infercept-resumed", "")
        self.prompt_ids, self.token_ids, self.usage = [], [], None
        self.interception, self.finish, self.calls = None, None, []
        if headers.get("content-type", "").startswith("text/event-stream"):
            for ev in re.findall(r"^data: (.*)$", body.decode(), re.M):
                if ev == "[DONE]":
                    continue
                j = json.loads(ev)
                self.prompt_ids = j.get("prompt_token_ids") or self.prompt_ids
                if j.get("usage"):
                    self.usage = j["usage"]
                if j.get("interception"):
                    self.interception = j["interception"]
                for c in j.get("choices") or []:
                    self.token_ids = c.get("token_ids") or self.token_ids
                    self.finish = c.get("finish_reason") or self.finish
                    self.calls += (c.get("delta") or {}).get("tool_calls") or []
        else:
            j = json.loads(body or b"{}")
            self.prompt_ids = j.get("prompt_token_ids") or []
            self.usage = j.get("usage")
            self.interception = j.get("interception")
            for c in j.get("choices") or []:
                self.token_ids = c.get("token_ids") or []
                self.finish = c.get("finish_reason")
                self.calls = (c.get("message") or {}).get("tool_calls") or []

    @property
    def cached(self):
        return ((self.usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)

    @property
    def interception_id(self):
        return (self.interception or {}).get("id")

    def held(self):
        return self.prompt_ids + self.token_ids


class Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream_port):
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.upstream_port = upstream_port
        self.turns, self.statuses, self.lock = [], [], threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self):
        return self.server_address[1]

    def last(self):
        with self.lock:
            return self.turns[-1]


class ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.forward("GET")

    def do_POST(self):
        self.forward("POST")

    def do_DELETE(self):
        self.forward("DELETE")

    def forward(self, method):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        chat = method == "POST" and self.path.endswith("/chat/completions")
        request = None
        if chat:
            request = json.loads(body)
            request["return_token_ids"] = True
            if request.get("stream"):
                request.setdefault("stream_options", {})["include_usage"] = True
            body = json.dumps(request).encode()
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "content-length", "accept-encoding", "connection")}
        if body:
            headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=300)
        conn.request(method, self.path, body=body or None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        got = {k.lower(): v for k, v in resp.getheaders()}
        conn.close()
        with self.server.lock:
            self.server.statuses.append((method, self.path, resp.status))
            if chat:
                self.server.turns.append(Turn(request, resp.status, got, data))
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# --- the server ------------------------------------------------------------------------------

class Server:
    def __init__(self, binary, model):
        # preserve: a paused request keeps its KV however slow the machine (minwaste may drop
        # a long pause's KV, rightly, which would make the reuse checks flaky).
        cmd = [binary, "serve", "--model", model, "--port", "0", "--temperature", "0", "--max-tokens", "48",
               "--kv-cache-tokens", "8192", "--swap-space-mb", "32", "--max-batch-tokens", "256",
               "--policy", "preserve"]
        self.proc, self.port, self.log = checks.start_server(cmd)

    def get(self, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()

    def metric(self, sample):
        _, text = self.get("/metrics")
        m = re.search("^" + re.escape(sample) + r" (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


# --- checks ----------------------------------------------------------------------------------

FAILURES = []


def check(cond, what):
    if not checks.check(cond, what):
        FAILURES.append(what)
    return cond


def expected_reuse(prev, cur):
    """What `cur` must find in place after `prev`: the tokens prev held that cur's prompt
    repeats from the start, short of prev's last (sampled, never computed) and of cur's last
    prompt token (computed again to sample from), in whole blocks."""
    a, b = prev.held(), cur.prompt_ids
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return max(0, min(n, len(a) - 1, len(b) - 1)) // BLOCK * BLOCK


def check_reuse(prev, cur, what, at_least=0):
    """cur's cached_tokens against what it shares with prev; `at_least`: the shared part the
    scenario is built to have (so that the check means something)."""
    want = expected_reuse(prev, cur)
    label = "prefix cache" if not cur.resumed_from else "continued"
    check(cur.prompt_ids and prev.prompt_ids, f"{what}: the prompt token ids came back")
    if at_least:
        check(want >= at_least, f"{what}: shares {want} tokens with the earlier turn (>= {at_least})")
    check(cur.cached >= want, f"{what} [{label}]: cached_tokens {cur.cached} >= {want} "
                              f"(of {len(cur.prompt_ids)} prompt tokens)")


def check_continued(prev, cur, what):
    check(prev.interception_id is not None, f"{what}: the earlier turn was paused")
    check(cur.resumed_from == prev.interception_id,
          f"{what}: continued {prev.interception_id} (X-Infercept-Resumed: {cur.resumed_from!r})")


def check_fresh(cur, what):
    check(cur.resumed_from == "", f"{what}: continued no paused request ({cur.resumed_from!r})")


def tool_results(calls):
    """Tool messages answering calls given as OpenAI dicts or SDK objects."""
    out = []
    for c in calls:
        c = c if isinstance(c, dict) else c.model_dump()
        args = json.loads(c["function"]["arguments"] or "{}")
        city = args.get("city") if isinstance(args, dict) else None
        out.append({"role": "tool", "tool_call_id": c["id"], "content": weather_result(str(city or "?"))})
    return out


def stream_chat(client, **kw):
    """A streamed chat turn read the way SDK users do: content and calls from the deltas."""
    content, calls = "", {}
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
            c["id"] = tc.id or c["id"]
            if tc.function:
                c["function"]["name"] += tc.function.name or ""
                c["function"]["arguments"] += tc.function.arguments or ""
    return content, [calls[i] for i in sorted(calls)]


# --- the scenarios ---------------------------------------------------------------------------

def openai_conversation(proxy, srv, model):
    """The openai SDK: a first turn sent twice (a retry), the conversation going on from the
    second answer with the text around calls sent back, tool_choice required, a streamed
    turn with auto (the model answers in text), a new question asked with a streamed named
    call, and a last turn with tool_choice none. Returns the interceptions the client left
    open, and its first turn."""
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{proxy.port}/v1", api_key="none", max_retries=0, timeout=300)
    msgs = [{"role": "system", "content": SYSTEM}] + EXAMPLE + [
        {"role": "user", "content": "What is the weather in Paris?"}]
    first = c.chat.completions.create(model=model, messages=msgs, tools=TOOLS, tool_choice=NAMED,
                                      temperature=0, max_tokens=40)
    t1 = proxy.last()
    check(first.choices[0].finish_reason == "tool_calls" and t1.interception_id, "openai: a named call pauses")
    # The client retries the same turn (a timeout on its side): a repeat continues nothing.
    again = c.chat.completions.create(model=model, messages=msgs, tools=TOOLS, tool_choice=NAMED,
                                      temperature=0, max_tokens=40)
    t1b = proxy.last()
    check_fresh(t1b, "openai: the repeated first turn")
    check(t1b.interception_id and t1b.interception_id != t1.interception_id,
          "openai: the repeat pauses on its own; the first stays open")
    check_reuse(t1, t1b, "openai: the repeated first turn", at_least=len(t1.prompt_ids) // 2)

    # It goes on from the answer it got last, sending back text around the calls.
    msg = again.choices[0].message.model_dump(exclude_none=True)
    msg["content"] = "Let me check the weather in Paris for you."
    msgs += [msg] + tool_results(again.choices[0].message.tool_calls)
    second = c.chat.completions.create(model=model, messages=msgs, tools=TOOLS, tool_choice="required",
                                       temperature=0, max_tokens=40)
    t2 = proxy.last()
    check_continued(t1b, t2, "openai: content around the calls, tool_choice required")
    check_reuse(t1b, t2, "openai: content around the calls, tool_choice required",
                at_least=len(t1b.prompt_ids) // 2)

    msgs += [second.choices[0].message.model_dump(exclude_none=True)] + tool_results(
        second.choices[0].message.tool_calls or [])
    content, calls = stream_chat(c, model=model, messages=msgs, tools=TOOLS, tool_choice="auto", temperature=0,
                                 max_tokens=40)
    t3 = proxy.last()
    check_continued(t2, t3, "openai: streamed, tool_choice auto")
    check_reuse(t2, t3, "openai: streamed, tool_choice auto", at_least=len(t2.prompt_ids) // 2)
    assistant = {"role": "assistant", "content": content or None}
    if calls:
        assistant["tool_calls"] = calls
    msgs += [assistant] + tool_results(calls)
    if not calls:  # the model answered in text: the user asks on
        msgs.append({"role": "user", "content": "And what is the weather in Rome?"})
    content, calls = stream_chat(c, model=model, messages=msgs, tools=TOOLS, tool_choice=NAMED, temperature=0,
                                 max_tokens=40)
    t4 = proxy.last()
    if t3.interception_id:
        check_continued(t3, t4, "openai: streamed, named")
    else:
        check_fresh(t4, "openai: a new question (streamed, named)")
    check(bool(calls) and t4.interception_id, "openai: a streamed named call pauses")
    check_reuse(t3, t4, "openai: " + ("streamed, named" if t3.interception_id else "a new question"),
                at_least=len(t3.prompt_ids) // 2)

    msgs += [{"role": "assistant", "content": content or None, "tool_calls": calls}] + tool_results(calls)
    final = c.chat.completions.create(model=model, messages=msgs, tools=TOOLS, tool_choice="none",
                                      temperature=0, max_tokens=24)
    t5 = proxy.last()
    check_continued(t4, t5, "openai: last turn, tool_choice none")
    check(not final.choices[0].message.tool_calls and t5.interception_id is None,
          "openai: tool_choice none: no calls, nothing paused")
    check_reuse(t4, t5, "openai: last turn, tool_choice none (the tools stay in the prompt)",
                at_least=len(t4.prompt_ids) // 2)
    return {t1.interception_id}, t1


def langchain_conversation(proxy, srv, model, shared_with):
    """LangChain's ChatOpenAI: a named call, a streamed required one, a last turn without
    tools. Its first turn shares the system prompt and the example with `shared_with`, the
    openai conversation's first turn."""
    llm = ChatOpenAI(model=model, base_url=f"http://127.0.0.1:{proxy.port}/v1", api_key="none", temperature=0,
                     max_tokens=40, max_retries=0, timeout=300)
    history = [SystemMessage(SYSTEM), HumanMessage(EXAMPLE[0]["content"]),
               AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "London"}, "id": "call_1"}]),
               ToolMessage(EXAMPLE[2]["content"], tool_call_id="call_1"), AIMessage(EXAMPLE[3]["content"]),
               HumanMessage("What is the weather in Tokyo?")]
    first = llm.bind_tools(TOOLS, tool_choice="get_weather").invoke(history)
    t1 = proxy.last()
    check(bool(first.tool_calls) and t1.interception_id, "langchain: a named call pauses")
    check_fresh(t1, "langchain: another conversation with the same start")
    check_reuse(shared_with, t1, "langchain: another conversation with the same system prompt",
                at_least=len(shared_with.prompt_ids) // 2)
    details = (first.usage_metadata or {}).get("input_token_details") or {}
    if "cache_read" in details:
        check(details["cache_read"] == t1.cached, "langchain: usage_metadata shows cached_tokens")

    def run_tools(ai):
        return [ToolMessage(weather_result(str(tc["args"].get("city", "?"))), tool_call_id=tc["id"])
                for tc in ai.tool_calls]

    history += [first] + run_tools(first)
    acc = None
    for chunk in llm.bind_tools(TOOLS, tool_choice="required").stream(history, stream_usage=True):
        acc = chunk if acc is None else acc + chunk
    t2 = proxy.last()
    check_continued(t1, t2, "langchain: streamed, tool_choice required")
    check_reuse(t1, t2, "langchain: streamed, tool_choice required", at_least=len(t1.prompt_ids) // 2)
    second = AIMessage(content=acc.content, tool_calls=acc.tool_calls)
    history += [second] + run_tools(second)
    final = llm.invoke(history)  # the final answer: the tools left out
    t3 = proxy.last()
    if t2.interception_id:
        check_continued(t2, t3, "langchain: last turn without tools")
    check_reuse(t2, t3, "langchain: last turn without tools")
    check(isinstance(final.content, str) and t3.interception_id is None, "langchain: the last turn answers")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    srv = Server(args.binary, args.model)
    proxy = Proxy(srv.port)
    try:
        model = json.loads(srv.get("/v1/models")[1])["data"][0]["id"]
        left_open, openai_first = openai_conversation(proxy, srv, model)
        langchain_conversation(proxy, srv, model, openai_first)

        _, listing = srv.get("/v1/interceptions")
        still = {i["id"] for i in json.loads(listing)["data"]}
        check(still == left_open, f"open interceptions are those the clients left: {sorted(still)}")
        for iid in still:
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
            conn.request("DELETE", f"/v1/interceptions/{iid}")
            check(conn.getresponse().status == 200, f"{iid} deleted")
        check(json.loads(srv.get("/v1/interceptions")[1])["data"] == [], "nothing open in the end")
        statuses = [s for _, _, s in proxy.statuses]
        check(429 not in statuses and all(s == 200 for s in statuses), f"every answer 200, no 429: {statuses}")
        check(srv.metric("infercept:interceptions_evicted_total") in (None, 0.0), "nothing evicted")
        hits = srv.metric("infercept:prefix_cache_hits_total")
        check(hits is not None and hits > 0, f"prefix cache hits counted ({hits}) [prefix cache]")
    finally:
        proxy.shutdown()
        code = srv.stop()
    check(code == 0, "SIGTERM: graceful stop, exit 0")
    if FAILURES:
        print(f"{len(FAILURES)} checks failed:\n  " + "\n  ".join(FAILURES))
    checks.finish()

if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - report and fail
        import traceback
        traceback.print_exc()
        print("FAILED:", type(e).__name__, e)
        sys.exit(1)
