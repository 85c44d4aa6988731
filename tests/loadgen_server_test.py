#!/usr/bin/env python3
"""End to end: bench/loadgen.py against `infercept serve` (the default model, small limits).

Starts the server on a free port, runs the load generator for ~10 s of QA-agent arrivals
(tool waits scaled down) in standard mode and then in native mode, and checks the JSON:
requests completed, sane metrics (normalized latency > 0, arrival <= first token <= end,
interception time inside the request), every tool turn answered, the server's /metrics
deltas read; standard mode's follow-ups resumed paused requests by prefix and native mode's
went through POST /v1/interceptions/{id}/resume (the server's explicit-resume counter and
cached prompt tokens). Then bench/report.py turns both results into PNGs (skipped without
matplotlib). First, without a server: loadgen reads llama.cpp's llama-server /metrics (the peer
of bench/sweep_server.py --llama-server). Exits 77 (skipped) when no interpreter here has httpx.
Prints 'N passed, N failed'.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from sweep_server import Server  # noqa: E402
from checks import check, finish  # noqa: E402


def python_with(module, extra=()):
    for py in [sys.executable, *extra, "/usr/bin/python3"]:
        if py and os.path.exists(py) and subprocess.run([py, "-c", f"import {module}"],
                                                        capture_output=True).returncode == 0:
            return py
    return None


def run_loadgen(py, server, mode, out):
    cmd = [py, os.path.join(ROOT, "bench", "loadgen.py"), "--base-url", server.base_url,
           "--workload", "qa", "--rate", "0.25", "--duration", "10", "--seed", "2",
           "--time-scale", "0.05", "--context-scale", "0.15", "--drain", "150",
           "--mode", mode, "--json", out]
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    print(p.stdout + p.stderr[-3000:], flush=True)
    check(p.returncode == 0, f"loadgen --mode {mode} exits 0 ({time.time() - t:.0f} s)")
    with open(out) as f:
        return json.load(f)


def check_common(res, mode):
    s = res["summary"]
    check(s["submitted"] == 3 and s["completed"] > 0,
          f"{mode}: completed {s['completed']} of {s['submitted']} requests")
    check(res["client"]["errors"] == 0, f"{mode}: no errors ({res['client']['error_kinds']})")
    done = [r for r in res["requests"] if r["completed"]]
    ok = all(r["output_tokens"] > 0 and 0 <= r["interception_s"] < r["end_s"] - r["arrival_s"] and
             r["arrival_s"] <= r["first_token_s"] <= r["end_s"] for r in done)
    check(ok, f"{mode}: per request arrival <= first token <= end, pauses inside the request")
    nl = s["normalized_latency_s_per_token"]
    check(0 < nl["p50"] <= nl["p99"] and nl["mean"] > 0 and s["ttft_s"]["mean"] > 0 and
          s["throughput_rps"] > 0, f"{mode}: normalized latency {nl['mean'] * 1e3:.1f} ms/token, "
          f"TTFT {s['ttft_s']['mean'] * 1e3:.0f} ms, {s['throughput_rps']:.3f} req/s")
    want_turns = sum(r["segments"] for r in done)
    check(sum(len(r["turns"]) for r in done) == want_turns,
          f"{mode}: one turn per segment ({want_turns})")
    check(res["server"] is not None and res["policy"] == "minwaste" and
          res["server"]["interceptions"] > 0,
          f"{mode}: /metrics read, the engine paused {res['server'] and res['server']['interceptions']} times")
    check(res["client"]["server_interceptions"] > 0,
          f"{mode}: the model's tool calls left requests paused "
          f"({res['client']['server_interceptions']} of {res['client']['segments']} turns; "
          f"{res['client']['synthesized_calls']} calls made up by the client)")


def check_peer_metrics():
    """Another server's /metrics (llama.cpp's llama-server, Prometheus text): no infercept keys,
    so no policy or waste, its prompt and generated token counters, and the table prints."""
    import loadgen
    text = ("# HELP llamacpp:prompt_tokens_total x\n# TYPE llamacpp:prompt_tokens_total counter\n"
            "llamacpp:prompt_tokens_total {}\nllamacpp:prompt_tokens_cached_total {}\n"
            "llamacpp:tokens_predicted_total {}\nllamacpp:requests_processing 0\n")
    rep = loadgen.metrics_report(loadgen.parse_metrics(text.format(10, 0, 5)),
                                 loadgen.parse_metrics(text.format(110, 40, 25)))
    check(rep is not None and rep["prompt_tokens_computed"] == 100 and rep["cached_prompt_tokens"] == 40 and
          rep["generated_tokens"] == 20 and "policy" not in rep and "waste_byte_seconds" not in rep,
          f"llama-server /metrics: prompt tokens computed / cached, generated ({rep})")
    res = {"workload": "qa", "rate": 0.1, "duration_s": 10, "mode": "standard", "base_url": "x", "wall_s": 1,
           "summary": loadgen.summarize([], 10), "by_augmentation": {}, "server": rep,
           "client": {k: 0 for k in ("segments", "server_tool_calls", "server_interceptions", "synthesized_calls",
                                     "native_resumes", "native_fallbacks", "cached_prompt_tokens",
                                     "generated_tokens_actual", "generated_tokens_scripted",
                                     "prompt_tokens_actual", "prompt_tokens_scripted", "errors")}}
    res["client"]["error_kinds"] = {}
    check("server (llama.cpp): prompt tokens computed 100" in loadgen.format_table(res),
          "loadgen's table reads another server's counters")


def main():
    check_peer_metrics()
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--venv-python", default="")
    a = ap.parse_args()
    py = python_with("httpx", [a.venv_python])
    if py is None:
        print("skipped: no Python interpreter with httpx (apt-get install python3-httpx)")
        sys.exit(77)
    server = Server(a.binary, ["--model", a.model, "--kv-cache-tokens", "4096", "--max-batch-tokens", "256",
                               "--swap-space-mb", "32", "--max-tokens-limit", "512", "--quiet"])
    try:
        with tempfile.TemporaryDirectory() as d:
            std = run_loadgen(py, server, "standard", os.path.join(d, "standard.json"))
            check_common(std, "standard")
            check(std["server"]["resumes"]["prefix"] > 0 and std["client"]["cached_prompt_tokens"] > 0,
                  f"standard: follow-ups resumed paused requests by prefix "
                  f"({std['server']['resumes']['prefix']}, {std['client']['cached_prompt_tokens']} cached tokens)")
            nat = run_loadgen(py, server, "native", os.path.join(d, "native.json"))
            check_common(nat, "native")
            check(nat["client"]["native_resumes"] > 0 and nat["server"]["resumes"]["explicit"] > 0 and
                  nat["server"]["resumes"]["explicit"] >= nat["client"]["native_resumes"] and
                  nat["client"]["cached_prompt_tokens"] > 0,
                  f"native: {nat['client']['native_resumes']} resumes through /v1/interceptions/{{id}}/resume, "
                  f"server counted {nat['server']['resumes']['explicit']} explicit resumes, "
                  f"{nat['client']['cached_prompt_tokens']} cached tokens")
            check(std["rate_requested"] == 0.25 and std["mode"] == "standard" and nat["mode"] == "native" and
                  set(std["by_augmentation"]) == {"qa"}, "result JSON names its workload, rate and mode")
            rpy = python_with("matplotlib", [a.venv_python])
            if rpy is None:
                print("report.py part skipped: no matplotlib")
            else:
                out = os.path.join(d, "plots")
                p = subprocess.run([rpy, os.path.join(ROOT, "bench", "report.py"), os.path.join(d, "standard.json"),
                                    os.path.join(d, "native.json"), "--out-dir", out], capture_output=True, text=True)
                print(p.stdout + p.stderr[-2000:])
                pngs = ["norm_latency_vs_rate.png", "ttft_vs_rate.png", "waste_by_cause.png",
                        "throughput_vs_rate.png"]
                check(p.returncode == 0 and all(os.path.getsize(os.path.join(out, f)) > 1000 for f in pngs),
                      "report.py writes the four plots")
                check("minwaste (native)" in p.stdout, "report.py's table has a line per label")
    finally:
        rc = server.stop()
        check(rc == 0, f"server stopped cleanly (exit {rc})")
    finish()


if __name__ == "__main__":
    main()
