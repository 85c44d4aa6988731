#!/usr/bin/env python3
"""Fair prefill on `infercept serve`: a short chat's time to first token (TTFT) while a long
prompt prefills, with the fair scheduler (decode rows first, partial prefills sharing the
step budget) and with FCFS (`--max-partial-prefills 1`), side by side in one run.

For each scheduler a fresh server is started (loopback, any free port), then:
  1. idle TTFT: short streamed chats one after another (median of --idle-runs), the time
     from sending to the first content chunk;
  2. a ~--long-tokens-token /v1/completions request (max_tokens 1) is sent, and while it
     prefills, short streamed chats one after another (each with different text, so nothing
     is cached) and /health probes; chats sent after the long request ended are not counted.
Prints a markdown table: TTFT median and max under load, their ratio to the idle median,
the long request's time, and the /health latency. Every request has a timeout; the whole
run is bounded (a few minutes on a 2-core CPU).

    python3 bench/prefill_fairness.py build/infercept
    python3 bench/prefill_fairness.py build/infercept --extra='--long-prefill-tokens 32'
    python3 bench/prefill_fairness.py build/infercept --variants-only \
        --variant "fair, --long-prefill-tokens 16=--long-prefill-tokens 16"
Standard library only.
"""
import argparse
import json
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

FILLER = ("The quick brown fox jumps over the lazy dog near the river bank while the "
          "old farmer counts his sheep and the wind blows across the green hills. ")


def post(base, path, body, timeout):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


MODEL = {"id": "default"}  # the served model's name, read from /v1/models


def chat_ttft(base, i, timeout):
    """Seconds from sending a short streamed chat to its first content chunk."""
    body = {"model": MODEL["id"], "stream": True, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": f"Say hello to guest number {i}."}]}
    t0 = time.monotonic()
    ttft = None
    events = []
    with post(base, "/v1/chat/completions", body, timeout) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            events.append(ev)
            if "error" in ev:
                raise RuntimeError(f"stream error: {ev['error']}")
            for ch in ev.get("choices", []):
                # The first token: its content, or the finish of a turn that had none (the
                # model's first token ended it).
                if ttft is None and (ch.get("delta", {}).get("content") or ch.get("finish_reason")):
                    ttft = time.monotonic() - t0
    if ttft is None:
        raise RuntimeError(f"stream without a token: {json.dumps(events)[:500]}")
    return ttft


def completion_tokens_of(base, prompt, timeout):
    body = {"model": MODEL["id"], "prompt": prompt, "max_tokens": 1, "temperature": 0}
    with post(base, "/v1/completions", body, timeout) as r:
        return json.loads(r.read())["usage"]["prompt_tokens"]


def health_ms(base, timeout):
    t0 = time.monotonic()
    with urllib.request.urlopen(base + "/health", timeout=timeout) as r:
        r.read()
    return (time.monotonic() - t0) * 1e3


def start_server(binary, args, startup_s):
    cmd = [binary, "serve", "--port", "0", "--quiet"] + args
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + startup_s
    found = []

    def read():
        for line in proc.stdout:
            m = re.search(r"on http://([\d.]+):(\d+)", line)
            if m and not found:
                found.append(f"http://{m.group(1)}:{m.group(2)}")
    threading.Thread(target=read, daemon=True).start()
    while time.monotonic() < deadline and not found and proc.poll() is None:
        time.sleep(0.1)
    if not found:
        proc.kill()
        raise RuntimeError(f"server did not start: {' '.join(cmd)}")
    base = found[0]
    while time.monotonic() < deadline:
        try:
            health_ms(base, 5)
            with urllib.request.urlopen(base + "/v1/models", timeout=5) as r:
                MODEL["id"] = json.loads(r.read())["data"][0]["id"]
            return proc, base
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server never answered /health")


def stop_server(proc):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(binary, server_args, opt):
    proc, base = start_server(binary, server_args, opt.startup_timeout)
    try:
        chat_ttft(base, 0, opt.timeout)  # warm-up
        idle = [chat_ttft(base, 1 + i, opt.timeout) for i in range(opt.idle_runs)]
        # The long prompt: the filler repeated to about --long-tokens tokens (its tokens per
        # repetition measured on a short one first).
        per = completion_tokens_of(base, FILLER * 20, opt.timeout) / 20.0
        prompt = FILLER * max(1, int(opt.long_tokens / per))
        long_result = {}

        def run_long():
            t0 = time.monotonic()
            try:
                long_result["prompt_tokens"] = completion_tokens_of(base, prompt, opt.timeout)
            except Exception as e:  # noqa: BLE001 - reported below
                long_result["error"] = repr(e)
            long_result["seconds"] = time.monotonic() - t0
            long_result["end"] = time.monotonic()

        health = []
        stop = threading.Event()

        def probe():
            while not stop.is_set():
                try:
                    health.append(health_ms(base, opt.timeout))
                except OSError:
                    health.append(float("nan"))
                stop.wait(0.5)

        t_long = threading.Thread(target=run_long, daemon=True)
        t_start = time.monotonic()
        t_long.start()
        time.sleep(opt.lead)  # the long request is admitted and prefilling
        t_probe = threading.Thread(target=probe, daemon=True)
        t_probe.start()
        loaded, sent_at = [], []
        i = 100
        while t_long.is_alive():
            sent = time.monotonic()
            ttft = chat_ttft(base, i, opt.timeout)
            i += 1
            if "end" not in long_result or sent < long_result["end"]:
                loaded.append(ttft)
                sent_at.append(sent - t_start)
        t_long.join()
        stop.set()
        t_probe.join()
        if "error" in long_result:
            raise RuntimeError("long request failed: " + long_result["error"])
        return {"idle": idle, "loaded": loaded, "sent_at": sent_at, "long": long_result,
                "health": health, "flags": server_args}
    finally:
        stop_server(proc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", help="the infercept binary")
    ap.add_argument("--kv-cache-tokens", type=int, default=12000)
    ap.add_argument("--long-tokens", type=int, default=8000)
    ap.add_argument("--idle-runs", type=int, default=5)
    ap.add_argument("--lead", type=float, default=1.0,
                    help="seconds between sending the long request and the first short chat")
    ap.add_argument("--timeout", type=float, default=300.0, help="per request, seconds")
    ap.add_argument("--startup-timeout", type=float, default=300.0)
    ap.add_argument("--extra", default="", help="more server flags, for both schedulers")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                    help="one more server to measure, with these flags added (repeatable)")
    ap.add_argument("--variants-only", action="store_true",
                    help="measure the --variant servers only (not fair and FCFS first)")
    ap.add_argument("--json", help="also write the raw figures here")
    opt = ap.parse_args()
    common = ["--kv-cache-tokens", str(opt.kv_cache_tokens)] + shlex.split(opt.extra)
    runs = [("fair (default)", common), ("FCFS (--max-partial-prefills 1)",
                                         common + ["--max-partial-prefills", "1"])]
    if opt.variants_only:
        runs = []
    for v in opt.variant:
        name, _, flags = v.partition("=")
        runs.append((name, common + shlex.split(flags)))
    results = {}
    for name, args in runs:
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        results[name] = measure(opt.binary, args, opt)
        if opt.json:  # after each server, so an interrupted run keeps what it measured
            with open(opt.json, "w") as f:
                json.dump(results, f, indent=1)
    print("| scheduler | idle TTFT (median) | TTFT during the long prefill: median / max (n) "
          "| ratio to idle (median / max) | long request | /health median / max |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        idle = statistics.median(r["idle"])
        ld = r["loaded"]
        h = [x for x in r["health"] if x == x]
        med, mx = (statistics.median(ld), max(ld)) if ld else (float("nan"), float("nan"))
        hs = f"{statistics.median(h):.1f} / {max(h):.1f} ms" if h else "-"
        print(f"| {name} | {idle * 1e3:.0f} ms | {med * 1e3:.0f} / {mx * 1e3:.0f} ms ({len(ld)}) "
              f"| {med / idle:.1f}x / {mx / idle:.1f}x "
              f"| {r['long']['prompt_tokens']} tokens, {r['long']['seconds']:.1f} s | {hs} |")


if __name__ == "__main__":
    main()
