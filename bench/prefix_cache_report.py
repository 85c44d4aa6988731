#!/usr/bin/env python3
"""The prefix cache's experiment on the card (bench/h200_paper.sh with SHARED_PREFIX), as one table.

Reads the points of one or more result folders or archives (paper-NAME/ or paper-NAME.tgz:
manifest.jsonl plus one `bench --json` file per point) and prints, per shape, configuration and
rate: requests done of submitted, mean normalized latency, mean TTFT, the prefix hit rate, the
resumed turns' first-token time (mean, p90) against the mean decode step. A rate is sustained
while the mean normalized latency is at most --sustain-ms (as in the simulated table of
docs/BENCHMARKS.md; requests that arrive near the end may still be running when the drain ends). Then each
configuration's highest sustained rate and the ratio of the cache's to minwaste's without it.

    python3 bench/prefix_cache_report.py docs/bench/prefix-cache-h200/*.tgz [--markdown]
"""
import argparse
import json
import os
import sys
import tarfile
import tempfile


def load_points(path):
    """Yields (manifest entry, bench json) for every point that ran in a folder or archive."""
    if path.endswith(".tgz"):
        tmp = tempfile.mkdtemp()
        with tarfile.open(path) as t:
            t.extractall(tmp, filter="data")
        (folder,) = [os.path.join(tmp, d) for d in os.listdir(tmp)]
    else:
        folder = path
    with open(os.path.join(folder, "manifest.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if not m.get("json"):
                continue
            with open(os.path.join(folder, m["json"])) as jf:
                yield m, json.load(jf)


def config_name(m):
    cache = "cache off" if m.get("variant") == "nocache" else "cache on"
    return f"{m['policy']}, {cache}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="paper-NAME folders or paper-NAME.tgz archives")
    ap.add_argument("--sustain-ms", type=float, default=20.0,
                    help="mean normalized latency (ms/token) at or under which a rate is sustained")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()

    rows = []
    for p in a.results:
        for m, j in load_points(p):
            s = j["summary"]
            pc = j.get("prefix_cache", {})
            rt = j.get("resume_ttft_s", {})
            norm_ms = s["normalized_latency_s_per_token"]["mean"] * 1e3
            rows.append({
                "shape": m["shape"], "config": config_name(m), "rate": float(m["rate"]),
                "done": f"{s['completed']}/{s['submitted']}",
                "norm_ms": norm_ms, "ttft_ms": s["ttft_s"]["mean"] * 1e3,
                "hit": 100.0 * pc.get("hit_rate", 0.0),
                "resume_ms": rt.get("mean", 0.0) * 1e3, "resume_p90_ms": rt.get("p90", 0.0) * 1e3,
                "step_ms": j.get("decode_step_s", 0.0) * 1e3,
            })
    rows.sort(key=lambda r: (r["shape"], r["config"], r["rate"]))
    head = ["shape", "configuration", "rate", "done", "norm. latency ms/token", "TTFT ms",
            "hit %", "resumed first token ms (mean / p90)", "decode step ms", "resumed / step"]
    out = []
    for r in rows:
        ratio = r["resume_ms"] / r["step_ms"] if r["step_ms"] > 0 else float("nan")
        out.append([r["shape"], r["config"], f"{r['rate']:g}", r["done"], f"{r['norm_ms']:.2f}",
                    f"{r['ttft_ms']:.0f}", f"{r['hit']:.1f}",
                    f"{r['resume_ms']:.1f} / {r['resume_p90_ms']:.1f}", f"{r['step_ms']:.2f}",
                    f"{ratio:.2f}x"])
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for o in out:
            print("| " + " | ".join(o) + " |")
    else:
        w = [max(len(h), *(len(o[i]) for o in out)) if out else len(h) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
        for o in out:
            print("  ".join(c.ljust(w[i]) for i, c in enumerate(o)))

    # The highest rate each configuration sustains, with every lower rate it ran sustained too.
    print()
    best = {}
    for key in sorted({(r["shape"], r["config"]) for r in rows}):
        pts = [r for r in rows if (r["shape"], r["config"]) == key]
        sustained = None
        for r in pts:  # ascending rate
            if r["norm_ms"] <= a.sustain_ms:
                sustained = r["rate"]
            else:
                break
        best[key] = sustained
        print(f"{key[0]:10s} {key[1]:22s} sustains {sustained if sustained is not None else 'none of the rates run'}")
    for shape in sorted({k[0] for k in best}):
        on, off = best.get((shape, "minwaste, cache on")), best.get((shape, "minwaste, cache off"))
        if on and off:
            print(f"{shape}: the cache's sustained rate / minwaste's without it = {on:g} / {off:g} = {on / off:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
