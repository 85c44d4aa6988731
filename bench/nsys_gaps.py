#!/usr/bin/env python3
"""Kernel durations and the gaps between them, from an Nsight Systems GPU trace (issue 4).

`ncu` times each kernel alone with its own ramp-up and drain (docs/DESIGN.md, "The CUDA backend"), so its
sum overstates a replayed CUDA graph and cannot show the time *between* kernels, which is
what a persistent kernel or programmatic launch would win back at batch 1. This reads
`nsys stats --report cuda_gpu_trace --format csv` (kernels inside graphs traced with
`--cuda-graph-trace=node`) and, over the last --kernels kernels (the replayed decode steps
at the end of a `bench-forward --batches 1` run), prints the span, the busy time, the idle
gaps and the overlap (a kernel starting before the previous one ended: PDL), then per
kernel name: count, mean duration, mean gap before it.

  python3 bench/nsys_gaps.py TRACE.csv [--kernels 2000]
"""
import argparse
import collections
import csv
import re
import sys


def short(name):
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"<.*>", "<>", name)         # template arguments
    name = re.sub(r"\([^()]*\)$", "", name)    # argument list
    return name.split(" ")[-1].split("::")[-1][:48]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--kernels", type=int, default=2000)
    args = ap.parse_args()
    with open(args.trace, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{args.trace}: empty")
    cols = rows[0].keys()
    start = next((c for c in cols if c.startswith("Start")), None)
    dur = next((c for c in cols if c.startswith("Duration")), None)
    name = next((c for c in cols if c == "Name"), None)
    if not (start and dur and name):
        sys.exit(f"{args.trace}: no Start/Duration/Name columns ({list(cols)})")
    ks = [(float(r[start]), float(r[dur]), r[name]) for r in rows
          if r[name] and not r[name].startswith("[CUDA")]
    ks.sort()
    ks = ks[-args.kernels:]
    if len(ks) < 2:
        sys.exit("fewer than two kernels")
    span = ks[-1][0] + ks[-1][1] - ks[0][0]
    busy = gaps = overlap = 0.0
    per = collections.defaultdict(lambda: [0, 0.0, 0.0])
    end = ks[0][0]
    for i, (s, d, n) in enumerate(ks):
        g = s - end if i else 0.0
        if g >= 0:
            gaps += g
        else:
            overlap -= g
        busy += d
        p = per[short(n)]
        p[0] += 1
        p[1] += d
        p[2] += g
        end = max(end, s + d)
    us = 1e-3
    print(f"last {len(ks)} kernels: span {span * us:.1f} us, kernel time {busy * us:.1f} us, "
          f"idle gaps {gaps * us:.1f} us ({100 * gaps / span:.1f}%), overlap {overlap * us:.1f} us")
    print("| kernel | count | mean us | mean gap before, us |\n|---|---:|---:|---:|")
    for n, (c, d, g) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"| {n} | {c} | {d / c * us:.2f} | {g / c * us:.2f} |")


if __name__ == "__main__":
    main()
