#!/usr/bin/env python3
"""Fit the step terms of the cost model (CostModel::step_seconds) from bench-forward runs.

A decode step of B sequences, each reading c cached tokens, is modelled as
    step(B, c) = T_fwd(B) + a * B * c + b * (B - 1)
(T_fwd(B): one sequence of B query tokens and no context, measured in the same process).
At one context length B * c and B - 1 are proportional and a, b cannot be told apart, so
bench/step_context_cost.sh measures several. This prints the least-squares fit (relative
errors, so that small steps count as much as big ones), each point's residual, and the
per-context-token cost each batch size implies on its own (to see where the linear model
fails: attention at small batch cannot fill the device).

  python3 bench/fit_step_cost.py fwd-llama2-7b-ctx*.json [--column ms_greedy_on_device]

--per-batch BASE.json --out PROFILE.json: instead, one straight line in the context per batch
size B, step(B, c) = D(B) + a(B) * B * c (the decode-only step the engine replays from a CUDA
graph, and its price per context token), written into a copy of BASE as decode_seconds and
context_seconds_per_token: the decode terms that bench/step_fit.py --hold-decode keeps.
"""
import argparse
import json
import sys


def load(paths, column):
    rows = []
    for p in paths:
        j = json.load(open(p))
        tf = {r["x"]: r["ms"] for r in j.get("t_fwd", [])}
        for d in j.get("decode", []):
            b, c = d["batch"], d["context"]
            if b not in tf:
                print(f"{p}: no T_fwd({b}) in the same run, batch {b} left out", file=sys.stderr)
                continue
            rows.append({"batch": b, "context": c, "step": d[column], "tfwd": tf[b]})
    return rows


def fit(rows, use_seq=True):
    # Weighted least squares on (step - T_fwd) = a * B * c + b * (B - 1), weight 1 / step.
    s11 = s12 = s22 = t1 = t2 = 0.0
    for r in rows:
        w = 1.0 / r["step"] ** 2
        x1 = r["batch"] * r["context"]
        x2 = (r["batch"] - 1) if use_seq else 0.0
        y = r["step"] - r["tfwd"]
        s11 += w * x1 * x1
        s12 += w * x1 * x2
        s22 += w * x2 * x2
        t1 += w * x1 * y
        t2 += w * x2 * y
    if not use_seq or s22 == 0:
        return t1 / s11, 0.0
    det = s11 * s22 - s12 * s12
    a = (t1 * s22 - t2 * s12) / det
    b = (s11 * t2 - s12 * t1) / det
    return a, b


def per_batch(args):
    by = {}
    for p in args.files:
        with open(p) as f:
            for d in json.load(f).get("decode", []):
                by.setdefault(d["batch"], []).append((d["context"], d[args.column] * 1e-3))
    dec, ctx = [], []
    print("| batch | contexts | D(B) ms | a(B) us per token | worst error |")
    print("|---:|---|---:|---:|---:|")
    for b in sorted(by):
        pts = by[b]
        if len(pts) < 2:
            print(f"batch {b}: one context only, left out", file=sys.stderr)
            continue
        # Least squares of seconds = D + a * (B c).
        xs = [b * c for c, _ in pts]
        ys = [t for _, t in pts]
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        d = my - a * mx
        worst = max(abs((d + a * x) / y - 1) for x, y in zip(xs, ys)) * 100
        print(f"| {b} | {','.join(str(c) for c, _ in sorted(pts))} | {d * 1e3:.3f} | {a * 1e6:.3f} | {worst:.1f}% |")
        dec.append([b, d])
        ctx.append([b, max(a, 0.0)])
    with open(args.per_batch) as f:
        prof = json.load(f)
    prof["decode_seconds"] = dec
    prof["context_seconds_per_token"] = ctx
    if args.out:
        with open(args.out, "w") as f:
            json.dump(prof, f, indent=1)
        print(f"wrote {args.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--column", default="ms_greedy_on_device",
                    help="decode column: ms (no logits), ms_greedy_on_device (the engine's path for greedy "
                         "batches), ms_with_logits")
    ap.add_argument("--min-batch", type=int, default=1, help="fit only batches at least this large")
    ap.add_argument("--per-batch", metavar="BASE", help="fit D(B) and a(B) per batch size into a copy of BASE")
    ap.add_argument("--out", help="with --per-batch: the profile to write")
    args = ap.parse_args()
    if args.per_batch:
        return per_batch(args)
    rows = load(args.files, args.column)
    if not rows:
        sys.exit("no decode rows")
    used = [r for r in rows if r["batch"] >= args.min_batch]
    for label, use_seq in (("context only", False), ("context + per sequence", True)):
        a, b = fit(used, use_seq)
        errs = [((r["tfwd"] + a * r["batch"] * r["context"] + b * (r["batch"] - 1)) / r["step"] - 1) * 100
                for r in rows]
        worst = max(abs(e) for e in errs)
        print(f"{label}: a = {a * 1e3:.4f} us per context token, b = {b * 1e3:.2f} us per sequence; "
              f"worst error {worst:.1f}% over all {len(rows)} steps (fitted on batch >= {args.min_batch})")
    a, b = fit(used, True)
    print("\n| batch | context | step ms | T_fwd(B) ms | (step - T_fwd) / (B c) us | model ms | error |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in sorted(rows, key=lambda r: (r["batch"], r["context"])):
        model = r["tfwd"] + a * r["batch"] * r["context"] + b * (r["batch"] - 1)
        per = (r["step"] - r["tfwd"]) / (r["batch"] * r["context"]) * 1e3
        print(f"| {r['batch']} | {r['context']} | {r['step']:.3f} | {r['tfwd']:.3f} | {per:.3f} | "
              f"{model:.3f} | {(model / r['step'] - 1) * 100:+.1f}% |")


if __name__ == "__main__":
    main()
