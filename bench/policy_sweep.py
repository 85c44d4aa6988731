#!/usr/bin/env python3
"""Every interception policy on one workload at several rates, with the KV cache kept tight.

Runs `infercept bench` once per (rate, policy), one after the other (fair timing on a small
machine), and prints a Markdown table: normalized latency mean/p50/p90/p99, TTFT, completed
requests/s, recomputed and swapped tokens, waste by cause. Results also go to --out (JSON).

Example (the CPU table in docs/PERF.md):
  python3 bench/policy_sweep.py --rates 1 2 3 --duration 30 -- \
      --time-scale 0.1 --context-scale 0.25 --kv-cache-tokens 1024 --swap-space-mb 32
Arguments after `--` go to every `infercept bench` call.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

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
    ap.add_argument("--out", default=os.path.join(root, "build", "policy_sweep.json"))
    ap.add_argument("--render", default=None,
                    help="print the table of an earlier --out file instead of running")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            render(json.load(f))
        return

    results = []
    tmp = tempfile.mkdtemp(prefix="infercept-sweep-")
    for rate in args.rates:
        for policy in args.policies:
            out = os.path.join(tmp, f"{policy}-{rate}.json")
            cmd = [args.bin, "bench", "--workload", args.workload, "--policy", policy,
                   "--estimator", args.estimator, "--rate", str(rate), "--duration",
                   str(args.duration), "--drain", str(args.drain), "--seed", str(args.seed),
                   "--json", out, "--quiet"] + args.extra
            print("+", " ".join(cmd), file=sys.stderr, flush=True)
            subprocess.run(cmd, check=True)
            with open(out) as f:
                r = json.load(f)
            r["rate_requested"] = rate
            results.append(r)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    render(results)


def render(results):
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
