#!/usr/bin/env python3
"""Compares two [n_sequences, vocab] float32 .npy files of last-position logits (ours from
`infercept logits`, the reference from bench/hf_reference.py --logits-npy): per sequence the
relative error ||a - b|| / ||b||, max |a - b|, and whether the argmax agrees. Prints a table
and a JSON summary line; exits 1 if any relative error exceeds --tol (bf16: 2e-2)."""
import argparse
import json
import sys

import numpy as np

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("ours")
ap.add_argument("reference")
ap.add_argument("--tol", type=float, default=2e-2)
ap.add_argument("--label", default="")
a = ap.parse_args()
x = np.load(a.ours).astype(np.float64)
y = np.load(a.reference).astype(np.float64)
if x.shape != y.shape:
    sys.exit(f"shape mismatch: {x.shape} vs {y.shape}")
rows = []
for i in range(x.shape[0]):
    d = x[i] - y[i]
    rel = float(np.linalg.norm(d) / max(np.linalg.norm(y[i]), 1e-30))
    top2 = np.sort(y[i])[-2:]
    rows.append({"seq": i, "rel_err": rel, "max_abs": float(np.abs(d).max()),
                 "argmax_same": bool(x[i].argmax() == y[i].argmax()),
                 "ref_top2_gap": float(top2[1] - top2[0]), "nan": bool(np.isnan(x[i]).any())})
print(f"| {a.label} seq | rel err | max abs diff | argmax same | ref top-2 gap |")
print("|---:|---:|---:|---|---:|")
for r in rows:
    print(f"| {r['seq']} | {r['rel_err']:.2e} | {r['max_abs']:.3f} | {r['argmax_same']} | {r['ref_top2_gap']:.3f} |")
summary = {"label": a.label, "n": len(rows), "max_rel_err": max(r["rel_err"] for r in rows),
           "mean_rel_err": sum(r["rel_err"] for r in rows) / len(rows),
           "argmax_agree": sum(r["argmax_same"] for r in rows), "any_nan": any(r["nan"] for r in rows)}
print(json.dumps(summary))
sys.exit(0 if summary["max_rel_err"] <= a.tol and not summary["any_nan"] else 1)
