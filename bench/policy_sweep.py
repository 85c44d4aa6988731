#!/usr/bin/env python3
"""Every interception policy on one workload at several rates, with the KV cache kept tight.

Runs `infercept bench` once per (rate, policy), one after the other (fair timing on a small
machine), and prints a Markdown table: normalized latency mean/p50/p90/p99, TTFT, completed
requests/s, recomputed and swapped tokens, waste by cause. Results also go to --out (JSON),
rewritten after every run, so an interrupted sweep keeps what it measured.

--repeat N runs the whole sweep N times. Every run uses the same workload seed (--seed), so
all policies, and all repetitions, see the same arrivals, prompts and tool durations: what
differs between repetitions is the machine's timing (on a loaded 2-core machine runs near
saturation spread widely), and the comparison between policies stays paired. (--vary-seed
gives repetition k the seed --seed + k instead, to see how much one arrival trace matters.)
Repetitions are the outer loop, so a burst of background load hits one run of many policies
rather than every run of one policy. With N > 1 each cell of the table is the median over
the repetitions, with the range [min, max] of the mean normalized latency, completions and
recomputed tokens beside it; a run that completed nothing has no latency and counts as
infinitely slow in the median.

Example (the CPU table in docs/PERF.md):
  python3 bench/policy_sweep.py --rates 1 2 3 --duration 30 -- \\
      --time-scale 0.1 --context-scale 0.25 --kv-cache-tokens 1024 --swap-space-mb 32
Arguments after `--` go to every `infercept bench` call.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

POLICIES = ["discard", "improved-discard", "preserve", "swap", "ttl", "minwaste"]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(root, "build", "infercept"))
    ap.add_argument("--workload", default="mixed")
    ap.add_argument("--rates", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--drain", type=float, default=30.0)
    ap.add_argument("--policies", nargs="+", default=POLICIES)
    ap.add_argument("--estimator", default="learned")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every (rate, policy) this many times; the table shows medians")
    ap.add_argument("--vary-seed", action="store_true",
                    help="repetition k uses seed --seed + k (default: the same seed for all)")
    ap.add_argument("--out", default=os.path.join(root, "build", "policy_sweep.json"))
    ap.add_argument("--render", default=None,
                    help="print the table of an earlier --out file instead of running")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            render(json.load(f))
        return
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    results = []
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="infercept-sweep-")
    for rep in range(args.repeat):
        seed = args.seed + rep if args.vary_seed else args.seed
        for rate in args.rates:
            for policy in args.policies:
                out = os.path.join(tmp, f"{policy}-{rate}-{rep}.json")
                cmd = [args.bin, "bench", "--workload", args.workload, "--policy", policy,
                       "--estimator", args.estimator, "--rate", str(rate), "--duration",
                       str(args.duration), "--drain", str(args.drain), "--seed", str(seed),
                       "--json", out, "--quiet"] + args.extra
                print(f"+ [{rep + 1}/{args.repeat}]", " ".join(cmd), file=sys.stderr, flush=True)
                load_before = os.getloadavg()[0]
                t0 = time.time()
                subprocess.run(cmd, check=True)
                with open(out) as f:
                    r = json.load(f)
                r["rate_requested"] = rate
                r["repetition"] = rep
                r["seed"] = seed
                r["started"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0))
                r["wall_s"] = time.time() - t0
                r["loadavg_1m"] = [load_before, os.getloadavg()[0]]  # before, after
                results.append(r)
                with open(args.out, "w") as f:
                    json.dump(results, f, indent=1)
    render(results)


def _ms(x):
    return x * 1e3


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def _fmt(x, spec):
    return "-" if math.isinf(x) or math.isnan(x) else format(x, spec)


def render(results):
    # Cells in first-seen (rate, policy) order.
    cells = {}
    for r in results:
        cells.setdefault((r["rate_requested"], r["policy"]), []).append(r)
    repeated = any(len(rs) > 1 for rs in cells.values())
    if not repeated:
        render_single(results)
        return
    n = max(len(rs) for rs in cells.values())
    print(f"Median of {n} runs per cell; [min, max] over the runs where shown.")
    print()
    print("| rate | policy | norm. latency mean [min, max] (ms/token) | p50 / p90 / p99 (ms/token) "
          "| TTFT mean (ms) | done [min, max] | recomputed tok [min, max] | swapped out tok "
          "| waste GB*s recompute / preserve / swap stall |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (rate, policy), rs in cells.items():
        def lat(r, key):
            s = r["summary"]
            return _ms(s["normalized_latency_s_per_token"][key]) if s["completed"] else math.inf
        means = [lat(r, "mean") for r in rs]
        done = [r["summary"]["completed"] for r in rs]
        rec = [r["recomputed_tokens"] for r in rs]
        sub = rs[0]["summary"]["submitted"]
        w = {k: _median([r["waste_byte_seconds"][k] / 1e9 for r in rs])
             for k in ("recompute", "preserve", "swap_stall")}
        ttft = _median([_ms(r["summary"]["ttft_s"]["mean"]) if r["summary"]["completed"]
                        else math.inf for r in rs])
        pct = " / ".join(_fmt(_median([lat(r, k) for r in rs]), ".1f") for k in ("p50", "p90", "p99"))
        print(f"| {rate:g} | {policy} | {_fmt(_median(means), '.1f')} "
              f"[{_fmt(min(means), '.1f')}, {_fmt(max(means), '.1f')}] | {pct} | "
              f"{_fmt(ttft, '.0f')} | {_median(done):g}/{sub} [{min(done)}, {max(done)}] | "
              f"{_median(rec):.0f} [{min(rec)}, {max(rec)}] | "
              f"{_median([r['swapped_out_tokens'] for r in rs]):.0f} | "
              f"{w['recompute']:.3f} / {w['preserve']:.3f} / {w['swap_stall']:.3f} |")


def render_single(results):
    print("| rate | policy | norm. latency mean / p50 / p90 / p99 (ms/token) | TTFT mean (ms) "
          "| completed/s | done | recomputed tok | swapped out tok | waste GB*s recompute / "
          "preserve / swap stall |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        s = r["summary"]
        nl = s["normalized_latency_s_per_token"]
        w = r["waste_byte_seconds"]
        print(f"| {r['rate_requested']:g} | {r['policy']} | {nl['mean']*1e3:.1f} / "
              f"{nl['p50']*1e3:.1f} / {nl['p90']*1e3:.1f} / {nl['p99']*1e3:.1f} | "
              f"{s['ttft_s']['mean']*1e3:.0f} | {s['throughput_rps']:.2f} | "
              f"{s['completed']}/{s['submitted']} | {r['recomputed_tokens']} | "
              f"{r['swapped_out_tokens']} | {w['recompute']/1e9:.3f} / {w['preserve']/1e9:.3f} / "
              f"{w['swap_stall']/1e9:.3f} |")


if __name__ == "__main__":
    main()
