#!/usr/bin/env python3
"""Load check for `infercept serve` (not a timed test): N concurrent streaming clients run
tool loops against it for a bounded time, then the KV accounting must be back to empty.

Each client, in a loop until the deadline: a streamed chat completion that calls a tool
(tool_choice named, so even a small model calls it), then the follow-up with the tool result,
streamed too, resuming the paused request by the call ids it carries; when a follow-up calls a tool
again, the client answers once more and finally DELETEs what is still paused. Every HTTP
error, malformed stream or missing [DONE] counts as an error.

    build/infercept serve --port 8000 --http-threads 160 --quiet &
    python3 scripts/server_load.py --url http://127.0.0.1:8000 --clients 64 --duration 120
Standard library only. Exit status 0 when there were no errors and the KV is back to empty.
"""
import argparse
import json
import re
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    "expected_duration_ms": 200}]
CITIES = ["Paris", "Rome", "Oslo", "Lima", "Cairo", "Tokyo", "Quito", "Delhi"]


def history(city):
    return [
        {"role": "user", "content": "What is the weather in London?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": "{\"city\": \"London\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 12, \"sky\": \"rain\"}"},
        {"role": "assistant", "content": "It is 12 degrees and raining in London."},
        {"role": "user", "content": f"What is the weather in {city}?"},
    ]


def request(url, method, body=None, timeout=600):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode()


def stream_chat(base, body):
    """Returns (assistant message, interception, usage, ttft) of a streamed chat completion."""
    t0 = time.time()
    status, text = request(base + "/v1/chat/completions", "POST", dict(body, stream=True,
                                                                    stream_options={"include_usage": True}))
    if status != 200:
        raise RuntimeError(f"HTTP {status}")
    events = re.findall(r"^data: (.*)$", text, re.M)
    if not events or events[-1] != "[DONE]":
        raise RuntimeError("stream without [DONE]")
    content, calls, interception, usage, finish = "", [], None, None, None
    for e in events[:-1]:
        j = json.loads(e)
        if "error" in j:
            raise RuntimeError("stream error: " + j["error"]["message"])
        if not j["choices"]:
            usage = j["usage"]
            continue
        d = j["choices"][0]["delta"]
        content += d.get("content") or ""
        calls += d.get("tool_calls") or []
        if j["choices"][0]["finish_reason"]:
            finish = j["choices"][0]["finish_reason"]
            interception = j.get("interception")
    if finish is None or usage is None:
        raise RuntimeError("stream without finish_reason or usage")
    msg = {"role": "assistant", "content": content or None}
    if calls:
        msg["tool_calls"] = [{"id": c["id"], "type": "function", "function": c["function"]} for c in calls]
    return msg, interception, usage, time.time() - t0


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.turns = 0
        self.resumed = 0
        self.cached = 0
        self.errors = []
        self.latency = []

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                if k == "latency":
                    self.latency.append(v)
                elif k == "error":
                    self.errors.append(v)
                else:
                    setattr(self, k, getattr(self, k) + v)


def client(base, model, i, deadline, stats, max_tokens):
    n = 0
    while time.time() < deadline:
        city = CITIES[(i + n) % len(CITIES)]
        n += 1
        body = {"model": model, "messages": history(city), "tools": TOOLS, "temperature": 0,
                "max_tokens": max_tokens, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
        try:
            msg, icpt, usage, dt = stream_chat(base, body)
            stats.add(turns=1, latency=dt)
            messages = history(city)
            body.pop("tool_choice")
            for _ in range(3):
                if not msg.get("tool_calls"):
                    break
                messages = messages + [msg] + [{"role": "tool", "tool_call_id": c["id"],
                                                "content": "{\"temperature\": 20, \"sky\": \"clear\"}"}
                                               for c in msg["tool_calls"]]
                time.sleep(0.2)  # the tool runs
                msg, icpt2, usage, dt = stream_chat(base, dict(body, messages=messages))
                cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
                stats.add(turns=1, latency=dt, resumed=1 if cached > 0 else 0, cached=cached)
                icpt = icpt2
            if icpt:  # still paused after the last answer: let it go
                request(base + "/v1/interceptions/" + icpt["id"], "DELETE")
        except (urllib.error.URLError, RuntimeError, ValueError, KeyError, OSError) as e:
            stats.add(error=f"client {i}: {type(e).__name__}: {e}")


def metric(base, name):
    _, text = request(base + "/metrics", "GET")
    m = re.search("^" + re.escape(name) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--max-tokens", type=int, default=24)
    a = ap.parse_args()
    base = a.url.rstrip("/")
    model = json.loads(request(base + "/v1/models", "GET")[1])["data"][0]["id"]
    stats = Stats()
    deadline = time.time() + a.duration
    t0 = time.time()
    threads = [threading.Thread(target=client, args=(base, model, i, deadline, stats, a.max_tokens))
               for i in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    time.sleep(1.0)
    used_dev = metric(base, 'infercept:kv_cache_blocks{tier="device",state="used"}')
    used_host = metric(base, 'infercept:kv_cache_blocks{tier="host",state="used"}')
    open_icpt = metric(base, "infercept:num_interceptions_open")
    lat = sorted(stats.latency)
    print(f"clients {a.clients}, wall {wall:.1f} s, turns {stats.turns} ({stats.turns / wall:.2f}/s), "
          f"resumed by prefix {stats.resumed}, cached prompt tokens {stats.cached}, errors {len(stats.errors)}")
    if lat:
        print(f"turn latency (streamed, whole turn): p50 {statistics.median(lat):.2f} s, "
              f"p95 {lat[int(0.95 * (len(lat) - 1))]:.2f} s, max {lat[-1]:.2f} s")
    print(f"after: device blocks used {used_dev}, host blocks used {used_host}, open interceptions {open_icpt}")
    for e in stats.errors[:10]:
        print("error:", e)
    ok = not stats.errors and used_dev == 0 and used_host == 0 and open_icpt == 0
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
