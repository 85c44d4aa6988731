#!/usr/bin/env python3
"""API fuzzer for `infercept serve`: random and mutated requests to every endpoint.

For --duration seconds (default 600), from --threads threads, sends requests built from
valid seeds (chat with tools, tool calls and streams, completions, the Responses API with
tool round trips, chaining and its stored responses, Anthropic's Messages API and its
count_tokens, the interception API with
real and made-up ids, models, metrics, health, dashboard data) and mutated: a random field
replaced by a random JSON value of a random type, fields removed or added, huge and negative
numbers, numbers JSON cannot hold, unicode, invalid UTF-8, truncated bodies, random bytes,
random headers, methods and paths, and a few framing faults on raw sockets. max_tokens stays
small so that the engine is not the bottleneck.

Counts the statuses; a 5xx (other than 503 while stopping, which does not happen here), a
request no answer came to, or a crash fails the run. At the end the server must be alive,
every open interception deletable and the KV blocks in use back to 0 on both tiers. The
requests that got a 5xx or were in flight at a crash are written (JSON lines, replayable
with --replay) to --failures.

    python3 bench/api_fuzz.py --binary build/infercept --duration 600
    python3 bench/api_fuzz.py --url 127.0.0.1:8000 --key KEY --duration 60
    python3 bench/api_fuzz.py --binary build/infercept --replay api_fuzz_failures.jsonl

Standard library only; starts the server itself with --binary (two API keys, a small KV
cache), else talks to --url.
"""
import argparse
import base64
import copy
import http.client
import json
import os
import random
import re
import socket
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import hostile_clients as hc  # noqa: E402  (the server launcher and helpers)

HOST = "127.0.0.1"
TOOLS = [hc.tool_def("get_weather"),
         {"type": "function", "function": {"name": "search", "description": "Search the web",
                                           "parameters": {"type": "object", "properties": {
                                               "q": {"type": "string"},
                                               "n": {"type": "integer"}}, "required": ["q"]}}}]
WORDS = ["hello", "weather", "Paris", "tool", "<|im_start|>", "<|im_end|>", "\u00e9t\u00e9",
         "\u4f60\u597d", "\U0001f600", "\u202e", "\x00", "\ud800", "{", "}", "\"", "\\", "\n",
         "<tool_call>", "</tool_call>", "<|eot_id|>", "{{", "{%", "%}", "A" * 300]
FAKE_IDS = ["icpt_nonexistent", "icpt_", "", "..", "%2e%2e", "icpt_" + "9" * 40,
            "\u00e9", "icpt_%00", "a/b", "icpt_" + "x" * 5000]


class Fuzzer:
    def __init__(self, args, port, keys, model):
        self.args = args
        self.port = port
        self.keys = keys
        self.model = model
        self.lock = threading.Lock()
        self.counts = {}
        self.by_endpoint = {}
        self.failures = []  # requests that got a 5xx or no answer
        self.ids = []       # (key, interception id) seen in answers
        self.response_ids = []  # (key, Responses API id) seen in answers
        self.inflight = {}  # thread -> request
        self.total = 0
        self.client_errors = 0

    # --- random values ---------------------------------------------------------------------

    def rand_string(self, r):
        k = r.random()
        if k < 0.5:
            return " ".join(r.choice(WORDS) for _ in range(r.randint(0, 8)))
        if k < 0.7:
            return "".join(chr(r.randint(0, 0x10FFFF)) for _ in range(r.randint(0, 20)))
        if k < 0.8:
            return "x" * r.choice([0, 1, 1000, 100000])
        return r.choice(["", "auto", "none", "required", "function", "tool", "user", "system",
                         "assistant", "developer", "text", "json_object", "stop", self.model,
                         "get_weather", "search", "call_1", "null", "NaN", "-1", "1e400"])

    def rand_number(self, r):
        return r.choice([0, -1, 1, 2, 7, 16, -2**31, 2**31, 2**53 + 1, 2**63, -2**63 - 1,
                         2**64, 10**30, 0.5, -0.0, 1e308, -1e308, 1e-320, 3.14,
                         r.randint(-100, 100), r.random() * 4 - 2])

    def rand_value(self, r, depth=0):
        k = r.randrange(8 if depth < 4 else 5)
        if k == 0:
            return None
        if k == 1:
            return r.random() < 0.5
        if k == 2:
            return self.rand_number(r)
        if k in (3, 4):
            return self.rand_string(r)
        if k == 5:
            return [self.rand_value(r, depth + 1) for _ in range(r.randint(0, 4))]
        if k == 6:
            return {self.rand_string(r)[:20]: self.rand_value(r, depth + 1)
                    for _ in range(r.randint(0, 4))}
        d = r.choice([10, 100, 127, 128, 129, 200, 500])  # around the depth limit
        v = 1
        for _ in range(d):
            v = [v] if r.random() < 0.5 else {"a": v}
        return v

    # --- seeds -----------------------------------------------------------------------------

    def seed_chat(self, r):
        msgs = [{"role": "user", "content": self.rand_string(r) or "Hi"}]
        if r.random() < 0.3:
            msgs.insert(0, {"role": "system", "content": "You are helpful."})
        body = {"model": self.model, "messages": msgs, "max_tokens": r.randint(1, 8),
                "temperature": r.choice([0, 0.7, 1.0])}
        k = r.random()
        if k < 0.5:
            body["tools"] = copy.deepcopy(TOOLS)  # mutations must not reach TOOLS
            if r.random() < 0.5:
                body["intercept_after_tokens"] = r.randint(1, 4)
                body["intercept_tool"] = r.choice(["get_weather", "search"])
                body["max_tokens"] = body["intercept_after_tokens"] + r.randint(0, 3)
            if r.random() < 0.3:
                body["tool_choice"] = r.choice(["auto", "none", "required", {
                    "type": "function", "function": {"name": "get_weather"}}])
        if k > 0.7:  # a history with a tool call and its result
            body["tools"] = copy.deepcopy(TOOLS)  # mutations must not reach TOOLS
            msgs += [{"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": json.dumps({"city": self.rand_string(r)})}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": self.rand_string(r)}]
        if r.random() < 0.3:
            body["stream"] = True
            if r.random() < 0.5:
                body["stream_options"] = {"include_usage": True}
        for f, v in (("logprobs", True), ("top_logprobs", 3), ("seed", 7), ("stop", ["\n"]),
                     ("top_p", 0.9), ("presence_penalty", 0.5), ("n", 1),
                     ("response_format", {"type": "text"}), ("return_token_ids", True),
                     ("intercept", False), ("top_k", 5), ("min_p", 0.1),
                     ("repetition_penalty", 1.1), ("parallel_tool_calls", True)):
            if r.random() < 0.1:
                body[f] = v
        return body

    def seed_responses(self, r):
        """A Responses API body: a string or items (a tool round trip among them), flat tools,
        sometimes streamed or chained to a stored response."""
        body = {"model": self.model, "max_output_tokens": r.randint(1, 8), "temperature": 0}
        if r.random() < 0.4:
            body["input"] = self.rand_string(r) or "Hi"
        else:
            items = [{"role": "user", "content": self.rand_string(r) or "Hi"}]
            if r.random() < 0.5:
                items += [{"type": "function_call", "call_id": "call_1", "name": "get_weather",
                           "arguments": json.dumps({"city": self.rand_string(r)})},
                          {"type": "function_call_output", "call_id": "call_1",
                           "output": self.rand_string(r)}]
            body["input"] = items
        if r.random() < 0.3:
            body["instructions"] = "You are helpful."
        if r.random() < 0.5:
            body["tools"] = [dict(copy.deepcopy(t["function"]), type="function") for t in TOOLS]
            if r.random() < 0.3:
                body["tool_choice"] = r.choice(["auto", "none", "required",
                                                {"type": "function", "name": "get_weather"}])
        with self.lock:
            if self.response_ids and r.random() < 0.3:
                key, rid = r.choice(self.response_ids)
                body["previous_response_id"] = rid
        for f, v in (("stream", True), ("store", False), ("text", {"format": {"type": "json_object"}}),
                     ("parallel_tool_calls", False), ("include", ["reasoning.encrypted_content"])):
            if r.random() < 0.15:
                body[f] = v
        return body

    def seed_messages(self, r):
        """An Anthropic Messages body: text or blocks (a tool_use / tool_result round trip among
        them), tools with input_schema, a tool_choice, sometimes streamed."""
        body = {"model": self.model, "max_tokens": r.randint(1, 8), "temperature": 0,
                "messages": [{"role": "user", "content": self.rand_string(r) or "Hi"}]}
        if r.random() < 0.4:
            body["messages"] += [
                {"role": "assistant", "content": [
                    {"type": "text", "text": self.rand_string(r)},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                     "input": {"city": self.rand_string(r)}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                              "content": self.rand_string(r)}]}]
        if r.random() < 0.3:
            body["system"] = r.choice(["You are helpful.", [{"type": "text", "text": "Be brief."}]])
        if r.random() < 0.5:
            body["tools"] = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
                              "input_schema": copy.deepcopy(t["function"]["parameters"])} for t in TOOLS]
            if r.random() < 0.3:
                body["tool_choice"] = r.choice([{"type": "auto"}, {"type": "any"}, {"type": "none"},
                                                {"type": "tool", "name": "get_weather"}])
        if r.random() < 0.2:
            body["stream"] = True
        return body

    def seed_completion(self, r):
        body = {"model": self.model, "prompt": self.rand_string(r) or "Once",
                "max_tokens": r.randint(1, 8), "temperature": 0}
        if r.random() < 0.2:
            body["prompt"] = [r.randint(0, 49151) for _ in range(r.randint(1, 20))]
        if r.random() < 0.3:
            body["stream"] = True
        if r.random() < 0.2:
            body["logprobs"] = r.randint(0, 5)
        return body

    def pick_id(self, r):
        with self.lock:
            if self.ids and r.random() < 0.6:
                return r.choice(self.ids)
        return (r.choice(self.keys), r.choice(FAKE_IDS))

    def build(self, r):
        """Returns (method, path, headers, body bytes or None, key)."""
        key = r.choice(self.keys)
        k = r.random()
        body = None
        if k < 0.3:
            method, path, body = "POST", "/v1/chat/completions", self.seed_chat(r)
        elif k < 0.4:
            method, path, body = "POST", "/v1/responses", self.seed_responses(r)
        elif k < 0.47:
            method, path, body = "POST", r.choice(["/v1/messages"] * 4 + ["/v1/messages/count_tokens"]), \
                self.seed_messages(r)
        elif k < 0.55:
            method, path, body = "POST", "/v1/completions", self.seed_completion(r)
        elif k < 0.8:
            key, icpt = self.pick_id(r)
            path = "/v1/interceptions/" + icpt
            j = r.random()
            if j < 0.35:
                method = "POST"
                path += "/resume"
                body = {"tool_results": [{"tool_call_id": "call_1", "content": self.rand_string(r)}],
                        "max_tokens": r.randint(1, 6)}
                if r.random() < 0.3:
                    body = {"messages": [{"role": "tool", "tool_call_id": "call_1",
                                          "content": self.rand_string(r)}], "max_tokens": 3}
                if r.random() < 0.3:
                    body["stream"] = True
                if r.random() < 0.3:
                    body["intercept_after_tokens"] = 2
            elif j < 0.55:
                method, path = "POST", path + "/hint"
                body = {"expected_duration_ms": self.rand_number(r)}
            elif j < 0.75:
                method = "DELETE"
            elif j < 0.9:
                method = "GET"
            else:
                method, path = "GET", "/v1/interceptions"
        else:
            method = "GET"
            with self.lock:
                rid = r.choice(self.response_ids)[1] if self.response_ids else "resp_nope"
            if r.random() < 0.2:
                method = r.choice(["GET", "DELETE"])
                path = "/v1/responses/" + r.choice([rid, "resp_nope", self.rand_string(r)[:30]])
            else:
                path = r.choice(["/v1/models", "/v1/models/" + self.model, "/v1/models/nope",
                                 "/metrics", "/health", "/dashboard", "/dashboard/data",
                                 "/v1/interceptions", "/", "/v1", "/v1/chat/completions",
                                 "/nope/" + self.rand_string(r)[:30]])
        # mutations
        if body is not None and r.random() < 0.6:
            for _ in range(r.randint(1, 3)):
                self.mutate(r, body)
        self.clamp(body)
        headers = {"Authorization": "Bearer " + key}
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=r.random() < 0.5).encode("utf-8", "surrogatepass")
            m = r.random()
            if m < 0.05:
                data = data[:r.randrange(len(data) + 1)]  # truncated
            elif m < 0.08:
                i = r.randrange(len(data) + 1)
                data = data[:i] + r.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xf8\x88\x80\x80\x80"]) + data[i:]
            elif m < 0.10:
                data = bytes(r.randrange(256) for _ in range(r.randint(0, 200)))
            elif m < 0.13:
                data = re.sub(rb"\b(\d+)\b", lambda mm: r.choice(
                    [b"1e400", b"-1e400", b"99999999999999999999999", b"-0", b"1E-400", b"0x10",
                     b"NaN", b"Infinity", b"01"]), data, count=1)
            headers["Content-Type"] = r.choice(["application/json"] * 8 + [
                "text/plain", "application/json; charset=latin-1", "multipart/form-data", ""])
        if r.random() < 0.08:
            headers["Authorization"] = r.choice(["", "Bearer", "Bearer ", "Basic eA==",
                                                 "Bearer " + "k" * 5000, "bearer " + key,
                                                 "Bearer " + key + "\t"])
        if r.random() < 0.05:
            del headers["Authorization"]
        if r.random() < 0.05:
            headers["X-" + "".join(r.choice("abcXYZ-_") for _ in range(8))] = self.rand_string(r)[:200]
        if r.random() < 0.03:
            headers["Accept"] = "text/event-stream"
        if r.random() < 0.04:
            method = r.choice(["PUT", "PATCH", "OPTIONS", "HEAD", "DELETE", "GET", "POST", "TRACE"])
        if r.random() < 0.03:
            path += r.choice(["?", "?api_key=" + key, "?a=%ff%fe", "#x", "//", "/.."])
        return method, path, headers, data, key

    def mutate(self, r, body):
        # a random container and key in the body
        conts = []

        def walk(v, depth):
            if depth > 6:
                return
            if isinstance(v, dict):
                conts.append(v)
                for x in v.values():
                    walk(x, depth + 1)
            elif isinstance(v, list):
                conts.append(v)
                for x in v:
                    walk(x, depth + 1)
        walk(body, 0)
        c = r.choice(conts)
        k = r.random()
        if isinstance(c, dict):
            if c and k < 0.6:
                c[r.choice(list(c))] = self.rand_value(r)
            elif c and k < 0.8:
                del c[r.choice(list(c))]
            else:
                c[r.choice(["model", "messages", "tools", "max_tokens", "stream", "content",
                            "role", "tool_calls", "x", self.rand_string(r)[:10]])] = self.rand_value(r)
        else:
            if c and k < 0.5:
                c[r.randrange(len(c))] = self.rand_value(r)
            elif c and k < 0.7:
                c.pop(r.randrange(len(c)))
            else:
                c.append(self.rand_value(r))

    def clamp(self, body):
        """Valid but large token counts would make the engine the bottleneck."""
        if not isinstance(body, dict):
            return
        for f in ("max_tokens", "max_completion_tokens", "intercept_after_tokens"):
            v = body.get(f)
            if isinstance(v, int) and not isinstance(v, bool) and 16 < v < 100000:
                body[f] = 16

    # --- sending ---------------------------------------------------------------------------

    def send(self, method, path, headers, data, timeout):
        # http.client sends ASCII request lines only: the rest is percent-encoded (raw bytes
        # in the request line are the framing cases' business)
        path = urllib.parse.quote(path, safe="/?=&%#:;,+@!$'()*[]~", errors="surrogatepass")
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            try:
                conn.putrequest(method, path, skip_accept_encoding=True)
                for k, v in headers.items():
                    conn.putheader(k, v.encode("utf-8", "surrogatepass"))
            except (ValueError, UnicodeError) as e:  # http.client would not send it
                return -1, b"", str(e)
            if data is not None:
                conn.putheader("Content-Length", str(len(data)))
            conn.endheaders(data)
            resp = conn.getresponse()
            body = resp.read() if method != "HEAD" else b""
            return resp.status, body, None
        except (OSError, http.client.HTTPException, UnicodeError) as e:
            return None, b"", "%s: %s" % (type(e).__name__, e)
        finally:
            conn.close()

    def framing(self, r, key):
        """A framing fault on a raw socket; only a status counts (no answer is allowed)."""
        body = json.dumps(self.seed_chat(r)).encode()
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                key.encode() + b"\r\nContent-Type: application/json\r\n")
        case = r.choice(["short", "long", "neg", "huge", "chunked-bad", "two-lengths", "garbage",
                         "http10", "nul"])
        if case == "short":
            data = head + b"Content-Length: %d\r\n\r\n" % (len(body) // 2) + body
        elif case == "long":
            data = head + b"Content-Length: %d\r\n\r\n" % (len(body) + 10) + body
        elif case == "neg":
            data = head + b"Content-Length: -5\r\n\r\n" + body
        elif case == "huge":
            data = head + b"Content-Length: 99999999999999999999999\r\n\r\n" + body
        elif case == "chunked-bad":
            data = head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body + b"\r\n0\r\n\r\n"
        elif case == "two-lengths":
            data = head + b"Content-Length: 2\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        elif case == "garbage":
            data = bytes(r.randrange(256) for _ in range(r.randint(1, 300))) + b"\r\n\r\n"
        elif case == "http10":
            data = b"GET /health HTTP/1.0\r\n\r\n"
        else:
            data = b"GET /he\x00alth HTTP/1.1\r\nHost: x\r\n\r\n"
        status, _, _ = hc.raw_exchange(self.port, data, timeout=3.0)
        return "framing:" + case, status

    def record(self, endpoint, status, framing=False):
        if status is None:
            cls = "closed" if framing else "no answer"  # a framing fault may get no answer
        else:
            cls = "%dxx" % (status // 100)
        with self.lock:
            self.total += 1
            self.counts[cls] = self.counts.get(cls, 0) + 1
            e = self.by_endpoint.setdefault(endpoint, {})
            e[cls] = e.get(cls, 0) + 1

    def worker(self, seed, deadline, server):
        r = random.Random(seed)
        while time.monotonic() < deadline and not self.stop.is_set():
            try:
                if not self.one(r, server):
                    return
            except Exception as e:  # the fuzzer's own bug: counted, never a server failure
                with self.lock:
                    self.client_errors += 1
                    if self.client_errors <= 3:
                        print("fuzzer error: %s: %s" % (type(e).__name__, e), flush=True)

    def one(self, r, server):
        """One request; False when the server is gone."""
        me = threading.get_ident()
        if server is not None and not server.alive():
            return False
        if r.random() < 0.03:
            name, status = self.framing(r, r.choice(self.keys))
            self.record(name, status, framing=True)
            if status is not None and status >= 500:
                with self.lock:
                    self.failures.append({"framing": name, "status": status})
            return True
        method, path, headers, data, key = self.build(r)
        req = {"method": method, "path": path, "headers": headers,
               "body_b64": base64.b64encode(data).decode() if data is not None else None}
        with self.lock:
            self.inflight[me] = req
        status, body, err = self.send(method, path, headers, data, self.args.timeout)
        with self.lock:
            self.inflight.pop(me, None)
        if status == -1:
            self.record("(not sent: refused by http.client)", None, framing=True)
            return True
        self.record(endpoint_name(method, path), status)
        if status is None or status >= 500:
            if server is not None and not server.alive():
                return False  # the crash is recorded by the main thread
            with self.lock:
                self.failures.append(dict(req, status=status, error=err,
                                          answer=body[:300].decode("utf-8", "replace")))
        elif status == 200 and b'"interception"' in body:
            ids = re.findall(rb'"id":\s*"(icpt_[A-Za-z0-9_]+)"', body)
            with self.lock:
                for i in ids[:1]:
                    self.ids.append((key, i.decode()))
                if len(self.ids) > 200:
                    self.ids = self.ids[-200:]
        if status == 200 and path == "/v1/responses":  # a stored response to chain to
            m = re.search(rb'"id":\s*"(resp_[A-Za-z0-9_]+)"', body)
            with self.lock:
                if m:
                    self.response_ids.append((key, m.group(1).decode()))
                self.response_ids = self.response_ids[-200:]
        return True


KNOWN = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
         "/v1/messages/count_tokens", "/v1/models", "/metrics", "/health", "/dashboard",
         "/dashboard/data", "/v1/interceptions")


def endpoint_name(method, path):
    p = path.split("?")[0].split("#")[0]
    p = re.sub(r"^/v1/interceptions/[^/]+", "/v1/interceptions/{id}", p)
    p = re.sub(r"^/v1/models/.+", "/v1/models/{id}", p)
    p = re.sub(r"^/v1/responses/.+", "/v1/responses/{id}", p, flags=re.S)
    if p not in KNOWN and not p.startswith(("/v1/interceptions/{id}", "/v1/models/{id}",
                                            "/v1/responses/{id}")):
        p = "(other paths)"
    return method + " " + p


def cleanup_and_check(port, keys, settle=10.0):
    """Deletes every open interception (each owner's list) and waits for KV 0."""
    problems = []
    for k in keys:
        lr = hc.request(port, "GET", "/v1/interceptions", key=k, timeout=30)
        if lr.status != 200:
            problems.append("list: " + lr.describe())
            continue
        for item in (lr.json() or {}).get("data", []):
            dr = hc.request(port, "DELETE", "/v1/interceptions/" + item["id"], key=k, timeout=30)
            if dr.status != 200:
                problems.append("DELETE %s: %s" % (item["id"], dr.describe()))
    deadline = time.monotonic() + settle
    used = None
    while time.monotonic() < deadline:
        r = hc.request(port, "GET", "/metrics", key=keys[0], timeout=10)
        v = hc.metrics_values(r.body.decode("utf-8", "replace")) if r.status == 200 else {}
        used = (v.get('infercept:kv_cache_blocks{tier="device",state="used"}'),
                v.get('infercept:kv_cache_blocks{tier="host",state="used"}'))
        if used == (0, 0):
            break
        time.sleep(0.5)
    if used != (0, 0):
        problems.append("KV blocks used (device, host) = %s" % (used,))
    return problems


def replay(args, port, keys):
    bad = 0
    with open(args.replay) as f:
        for line in f:
            req = json.loads(line)
            if "method" not in req:
                continue
            data = base64.b64decode(req["body_b64"]) if req.get("body_b64") else None
            fz = Fuzzer(args, port, keys, "")
            status, body, err = fz.send(req["method"], req["path"], req["headers"], data, args.timeout)
            print("%s %s -> %s %s" % (req["method"], req["path"][:80], status,
                                      err or body[:200].decode("utf-8", "replace")))
            bad += status is None or status >= 500
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--binary", help="start this infercept binary")
    ap.add_argument("--model", default=os.path.join(here, "..", "models",
                                                    "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--url", help="host:port of a running server instead of --binary")
    ap.add_argument("--key", action="append", default=[], help="API key(s) for --url")
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a request may take")
    ap.add_argument("--failures", default="api_fuzz_failures.jsonl",
                    help="where requests that got a 5xx or no answer are written")
    ap.add_argument("--replay", help="send the requests of a failures file once")
    args = ap.parse_args()
    if not args.binary and not args.url:
        ap.error("--binary or --url")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    server = None
    keys_file = None
    if args.binary:
        if not os.path.exists(args.model):
            print("skipped: no model at %s" % args.model)
            return 77
        with tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False) as f:
            f.write("%s\n%s\n" % (hc.KEY_A, hc.KEY_B))
            keys_file = f.name
        keys = [hc.KEY_A, hc.KEY_B]
        server = hc.Server(args.binary, args.model, keys_file, ["--max-paused", "64"])
        err = server.start()
        if err:
            print("the server did not start: " + err)
            return 1
        port, model = server.port, server.model
    else:
        host, port = args.url.rsplit(":", 1)
        global HOST
        HOST = hc.HOST = host
        port = int(port)
        keys = args.key or ["none"]
        j = hc.request(port, "GET", "/v1/models", key=keys[0]).json() or {}
        model = ((j.get("data") or [{}])[0]).get("id", "model")
    try:
        if args.replay:
            return replay(args, port, keys)
        fz = Fuzzer(args, port, keys, model)
        fz.stop = threading.Event()
        print("fuzzing %s:%d for %.0f s from %d threads, seed %d" % (
            HOST, port, args.duration, args.threads, seed), flush=True)
        t0 = time.monotonic()
        deadline = t0 + args.duration
        threads = [threading.Thread(target=fz.worker, args=(seed * 1000 + i, deadline, server),
                                    daemon=True) for i in range(args.threads)]
        for t in threads:
            t.start()
        crashes = 0
        last = t0
        while any(t.is_alive() for t in threads):
            time.sleep(0.5)
            if server is not None and not server.alive():
                crashes += 1
                with fz.lock:
                    for req in fz.inflight.values():
                        fz.failures.append(dict(req, status=None, error="crash: " + server.exit_text()))
                print("CRASH: %s; last log: %s" % (server.exit_text(), "".join(server.log[-3:]).strip()),
                      flush=True)
                fz.stop.set()
                break
            if time.monotonic() - last > 30:
                last = time.monotonic()
                print("  %.0f s: %d requests %s" % (last - t0, fz.total, dict(sorted(fz.counts.items()))),
                      flush=True)
        for t in threads:
            t.join(args.timeout + 5)
        elapsed = time.monotonic() - t0
        problems = []
        if server is not None and not server.alive():
            problems.append("server not alive: " + server.exit_text())
        else:
            problems += cleanup_and_check(port, keys)
        if fz.failures:
            with open(args.failures, "w") as f:
                for req in fz.failures:
                    f.write(json.dumps(req) + "\n")
        five = sum(v for k, v in fz.counts.items() if k == "5xx")
        none = fz.counts.get("no answer", 0)
        print()
        print("| requests | 2xx | 3xx | 4xx | 5xx | no answer | crashes | req/s |")
        print("|---|---|---|---|---|---|---|---|")
        print("| %d | %d | %d | %d | %d | %d | %d | %.1f |" % (
            fz.total, fz.counts.get("2xx", 0), fz.counts.get("3xx", 0), fz.counts.get("4xx", 0),
            five, none, crashes, fz.total / max(elapsed, 1e-9)))
        print()
        print("| endpoint | " + " | ".join(["2xx", "4xx", "5xx", "other"]) + " |")
        print("|---|---|---|---|---|")
        for ep, c in sorted(fz.by_endpoint.items()):
            other = sum(v for k, v in c.items() if k not in ("2xx", "4xx", "5xx"))
            print("| %s | %d | %d | %d | %d |" % (ep, c.get("2xx", 0), c.get("4xx", 0),
                                                  c.get("5xx", 0), other))
        print()
        for p in problems:
            print("problem:", p)
        if fz.failures:
            print("%d failing requests written to %s (replay: --replay %s)" % (
                len(fz.failures), args.failures, args.failures))
        ok = five == 0 and none == 0 and crashes == 0 and not problems
        print("%s: seed %d, %.0f s" % ("PASS" if ok else "FAIL", seed, elapsed))
        return 0 if ok else 1
    finally:
        if server is not None:
            server.kill()
        if keys_file:
            os.unlink(keys_file)


if __name__ == "__main__":
    sys.exit(main())
