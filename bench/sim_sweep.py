#!/usr/bin/env python3
"""Policies x arrival rates through `infercept simulate` (virtual time), as a Markdown table.

The simulator (src/engine/simulator.h) runs the real scheduler and policies against a cost
model, so a whole sweep of an hour-long workload per point takes seconds to minutes here.
Runs two simulations at a time; results go to --out (JSON, one object per point) and the
table to stdout: normalized latency mean/p50/p90/p99, TTFT, completed requests/s, recomputed
and swapped tokens, waste by cause, and the sustainable rate of each policy (the highest rate
whose mean normalized latency stays under --slo ms/token).

Example (the simulated H200 table in docs/BENCHMARKS.md):
  python3 bench/sim_sweep.py --profile h200-llama2-7b --rates 1 2 3 4 5 6 7 8 \\
      --duration 1800 --out build/sim_sweep.json
Arguments after `--` go to every `infercept simulate` call.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

POLICIES = ["discard", "improved-discard", "preserve", "swap", "ttl", "minwaste"]


def run_point(cmd, out):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(root, "build", "infercept"))
    ap.add_argument("--profile", default="h200-llama2-7b")
    ap.add_argument("--workload", default="mixed")
    ap.add_argument("--rates", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    ap.add_argument("--duration", type=float, default=1800.0)
    ap.add_argument("--drain", default="inf")
    ap.add_argument("--policies", nargs="+", default=POLICIES)
    ap.add_argument("--estimator", default="learned")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--slo", type=float, default=50.0,
                    help="mean normalized latency (ms/token) that counts as sustained")
    ap.add_argument("--out", default=os.path.join(root, "build", "sim_sweep.json"))
    ap.add_argument("--render", default=None,
                    help="print the table of an earlier --out file instead of running")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            render(json.load(f), args.slo)
        return

    tmp = tempfile.mkdtemp(prefix="infercept-simsweep-")
    jobs = []
    for rate in args.rates:
        for policy in args.policies:
            out = os.path.join(tmp, f"{policy}-{rate}.json")
            cmd = [args.bin, "simulate", "--profile", args.profile, "--workload", args.workload,
                   "--policy", policy, "--estimator", args.estimator, "--rate", str(rate),
                   "--duration", str(args.duration), "--drain", str(args.drain), "--seed",
                   str(args.seed), "--json", out, "--quiet"] + args.extra
            jobs.append((rate, cmd, out))
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = []
        for rate, cmd, out in jobs:
            print("+", " ".join(cmd), file=sys.stderr, flush=True)
            futures.append((rate, pool.submit(run_point, cmd, out)))
        for rate, fut in futures:
            r = fut.result()
            r["rate_requested"] = rate
            results.append(r)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    render(results, args.slo)


def render(results, slo):
    print("| rate | policy | norm. latency mean / p50 / p90 / p99 (ms/token) | TTFT mean (s) "
          "| completed/s | recomputed tok | swapped out tok | waste GB*s recompute / "
          "preserve / swap stall | sim wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        s = r["summary"]
        nl = s["normalized_latency_s_per_token"]
        w = r["waste_byte_seconds"]
        print(f"| {r['rate_requested']:g} | {r['policy']} | {nl['mean']*1e3:.1f} / "
              f"{nl['p50']*1e3:.1f} / {nl['p90']*1e3:.1f} / {nl['p99']*1e3:.1f} | "
              f"{s['ttft_s']['mean']:.2f} | {s['throughput_rps']:.2f} | "
              f"{r['recomputed_tokens']} | {r['swapped_out_tokens']} | "
              f"{w['recompute']/1e9:.0f} / {w['preserve']/1e9:.0f} / {w['swap_stall']/1e9:.1f} | "
              f"{r['engine']['wall_s']:.1f} |")
    # Sustainable rate: the highest swept rate whose mean stays under the SLO (all lower rates
    # too), per policy.
    print()
    print(f"| policy | sustained rate (mean normalized latency <= {slo:g} ms/token) |")
    print("|---|---|")
    policies = []
    for r in results:
        if r["policy"] not in policies:
            policies.append(r["policy"])
    for p in policies:
        pts = sorted((r["rate_requested"], r["summary"]["normalized_latency_s_per_token"]["mean"] * 1e3)
                     for r in results if r["policy"] == p)
        best = None
        for rate, ms in pts:
            if ms > slo:
                break
            best = rate
        print(f"| {p} | {'< ' + format(pts[0][0], 'g') if best is None else format(best, 'g')} req/s |")


if __name__ == "__main__":
    main()
