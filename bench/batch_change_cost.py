#!/usr/bin/env python3
"""What a decode-only step costs over D(n) + a(n) x context, by its place after a batch change.

The CUDA engine replays a decode step from a CUDA graph found by the step's launch signature
(src/backend/cuda/cuda_backend.cu): a new signature is probed and run eagerly, its second
sight is captured and instantiated, and only then replayed. The sequence count is part of the
signature, so in an agent workload whose batch changes every few steps the steps right after
a change pay for it. This groups the decode-only steps of engine step traces (`bench
--step-trace`) by k, their place in a run of decode-only steps of one sequence count (k = 0:
the count differs from the decode-only step before; only steps whose predecessor was
decode-only too are timed exactly, as the engine's host clock times them) and prints each
group's mean time over the profile's D(n) + a(n) x context (docs/DESIGN.md, "The CUDA backend":
CUDA graphs).

    python3 bench/batch_change_cost.py PROFILE.json TRACE.csv[.gz]...
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_fit  # noqa: E402  (interp, Base: the cost model's reading of a profile)
from trace_diff import load  # noqa: E402  (a step trace, any binary's columns)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    with open(sys.argv[1]) as f:
        base = step_fit.Base(json.load(f))
    if not base.dec:
        sys.exit(f"{sys.argv[1]}: no decode_seconds (bench/fit_step_cost.py --per-batch makes them)")
    print("| trace | k = 0 (new batch) | k = 1 | k = 2 | k >= 3 |")
    print("|---|---|---|---|---|")
    for path in sys.argv[2:]:
        trace = load(path)
        groups = {}
        prev, k = None, 0
        for i, r in enumerate(trace):
            decode = r["prompt_rows"] == 0 and r["decode_rows"] > 0
            prev_decode = prev is not None and prev["prompt_rows"] == 0 and prev["decode_rows"] > 0
            if decode:
                k = 0 if not prev_decode or prev["sequences"] != r["sequences"] else k + 1
                if prev_decode and i > 20:  # past the process's first steps
                    n = r["sequences"]
                    model = step_fit.interp(base.dec, n, True) + base.a(n) * r["context_tokens"]
                    groups.setdefault(min(k, 3), []).append(r["seconds"] - model)
            prev = r
        cells = []
        for g in range(4):
            v = groups.get(g, [])
            cells.append(f"{len(v)} steps, {sum(v) / len(v) * 1e3:+.2f} ms" if v else "-")
        print(f"| {os.path.basename(path)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
