#!/usr/bin/env python3
"""bench/step_fit.py recovers the step-cost terms a simulation was run with.

`infercept simulate --step-trace` with a known profile (T_fwd, D(n), a(n), chunk prices per
row bucket) writes the steps; step_fit.py, given a base whose T_fwd is 0.8x the truth, whose
D(n) is 0.9x, whose a(n) is 1.5x and which has no chunk prices, must find kT = 1.25,
kD = 1.11, ka = 2/3, the three prices and q (rows x context).
- --hold-decode with the true D(n) and a(n): those kept as given, the rest found the same.
- The engine's timing, emulated: every step that samples nothing hands its seconds to the
  next one that samples (what a host clock sees of an unsynchronized step). The fit is over
  sync groups, so it must not move.
- A trace without the sampled_rows / chunk_context_tokens columns: a clear error.
- --residuals: the profile's own price by step shape, +0.0% everywhere against its own traces;
  --first-sights the same for steps of a new row count and repeats.
- The copies' interference with the forward pass: found by --fit-artifacts, priced by
  --residuals; the naive swap policy's synchronous copies carry none.
Prints 'N passed, N failed'; exits non-zero on a failure.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

from checks import check, finish

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIT = os.path.join(ROOT, "bench", "step_fit.py")
TRUE = {
    "version": 1, "kv_bytes_per_token": 524288.0, "saturation_tokens": 128,
    "swap_bytes_per_second": 55e9,
    "t_fwd_samples": [[1, 0.0047], [16, 0.0058], [64, 0.0060], [128, 0.0065], [256, 0.0084],
                      [512, 0.0124]],
    "context_seconds_per_token": [[1, 4.0e-7], [32, 1.5e-7], [128, 1.7e-7]],
    "chunk_context_seconds_per_token": [[2, 0.4e-6], [9, 0.8e-6], [64, 1.3e-6]],
    # A chunk's rows x context (its attention FLOPs), on top of p(rows).
    "chunk_row_context_seconds": 1.5e-9,
    # Decode-only steps (replayed from CUDA graphs on the H200) cheaper than T_fwd(n).
    "decode_seconds": [[1, 0.0041], [4, 0.0046], [16, 0.0050], [64, 0.0056]],
}


def simulate(binary, profile, policy, out, extra=()):
    # The prefix cache off: the policies' own swaps (with it, a discarded pause comes back as
    # cache hits and demotions mix in, and the copy-heavy steps that pin the interference
    # prices are fewer than these tolerances were set on).
    cmd = [binary, "simulate", "--profile", profile, "--workload", "mixed", "--policy", policy,
           "--rate", "3", "--duration", "20", "--drain", "10", "--seed", "5", "--time-scale", "0.1",
           "--kv-cache-tokens", "12288", "--swap-space-gb", "4", "--max-batch-tokens", "512",
           "--prefix-cache", "off", "--quiet", "--step-trace", out] + list(extra)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def run_fit(traces, base, out):
    p = subprocess.run([sys.executable, FIT] + traces + ["--profile", base, "--out", out],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    fitted = None
    if p.returncode == 0:
        with open(out) as f:
            fitted = json.load(f)
    return p, fitted


def as_engine_clock(src, dst):
    """Each step that samples nothing passes its seconds on to the next step that samples."""
    with open(src, newline="") as f:
        r = csv.DictReader(f)
        fields, rows = r.fieldnames, list(r)
    carry = 0.0
    for row in rows:
        busy = int(row["decode_rows"]) + int(row["prompt_rows"]) > 0
        if not busy:
            continue
        if int(row["sampled_rows"]) == 0:
            carry += float(row["seconds"]) * 0.97
            row["seconds"] = "%.9f" % (float(row["seconds"]) * 0.03)  # the launch
        else:
            row["seconds"] = "%.9f" % (float(row["seconds"]) + carry)
            carry = 0.0
    with open(dst, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="step-fit-test-")
    true_path, base_path = os.path.join(tmp, "true.json"), os.path.join(tmp, "base.json")
    with open(true_path, "w") as f:
        json.dump(TRUE, f)
    base = dict(TRUE)
    base["t_fwd_samples"] = [[x, t * 0.8] for x, t in TRUE["t_fwd_samples"]]
    base["context_seconds_per_token"] = [[n, s * 1.5] for n, s in TRUE["context_seconds_per_token"]]
    base["decode_seconds"] = [[n, s * 0.9] for n, s in TRUE["decode_seconds"]]
    del base["chunk_context_seconds_per_token"]
    del base["chunk_row_context_seconds"]
    with open(base_path, "w") as f:
        json.dump(base, f)
    # discard recomputes whole contexts (64+-row chunks), minwaste resumes short ones.
    traces = [os.path.join(tmp, p + ".csv") for p in ("discard", "minwaste")]
    for pol, t in zip(("discard", "minwaste"), traces):
        simulate(args.binary, true_path, pol, t)

    p, fitted = run_fit(traces, base_path, os.path.join(tmp, "fit.json"))
    check(p.returncode == 0 and fitted is not None, "the fit runs and writes a profile")
    if fitted is None:
        print(p.stdout)
    else:
        kt = fitted.get("chunk_step_scale", 1.0)
        ka = fitted["context_seconds_per_token"][0][1] / base["context_seconds_per_token"][0][1]
        check(abs(kt - 1.25) < 0.0125, f"kT {kt:.4f} within 1% of 1.25 (as chunk_step_scale)")
        check(fitted["t_fwd_samples"] == base["t_fwd_samples"],
              "T_fwd kept as the base's (the scheduler's decisions read it)")
        check(abs(ka - 2 / 3) < 0.0067, f"ka {ka:.4f} within 1% of 0.667")
        kd = fitted["decode_seconds"][0][1] / base["decode_seconds"][0][1]
        check(abs(kd - 1 / 0.9) < 0.011, f"kD {kd:.4f} within 1% of 1.111 (decode-only steps apart)")
        for (r, want), (r2, got) in zip(TRUE["chunk_context_seconds_per_token"],
                                        fitted["chunk_context_seconds_per_token"]):
            check(r == r2 and abs(got / want - 1) < 0.02,
                  f"p({r}+ rows) {got * 1e6:.3f} within 2% of {want * 1e6:.3f} us")
        q = fitted.get("chunk_row_context_seconds", 0.0)
        check(abs(q / TRUE["chunk_row_context_seconds"] - 1) < 0.02,
              f"q {q * 1e9:.3f} within 2% of {TRUE['chunk_row_context_seconds'] * 1e9:.3f} ns")
        with open(true_path) as f:
            check(json.load(f)["kv_bytes_per_token"] == fitted["kv_bytes_per_token"],
                  "the rest of the profile is kept")

        held_base = dict(base)
        held_base["decode_seconds"] = TRUE["decode_seconds"]
        held_base["context_seconds_per_token"] = TRUE["context_seconds_per_token"]
        held_path = os.path.join(tmp, "held-base.json")
        with open(held_path, "w") as f:
            json.dump(held_base, f)
        hp = subprocess.run([sys.executable, FIT] + traces + ["--profile", held_path, "--hold-decode",
                                                              "--out", os.path.join(tmp, "held.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        held = json.load(open(os.path.join(tmp, "held.json"))) if hp.returncode == 0 else None
        check(held is not None and held["decode_seconds"] == TRUE["decode_seconds"]
              and held["context_seconds_per_token"] == TRUE["context_seconds_per_token"]
              and abs(held.get("chunk_step_scale", 1.0) - 1.25) < 0.0125
              and held["t_fwd_samples"] == base["t_fwd_samples"]
              and abs(held["chunk_row_context_seconds"] / TRUE["chunk_row_context_seconds"] - 1) < 0.02,
              "--hold-decode keeps D(n) and a(n) as given and finds kT and q the same")

        engine = [t + ".engine" for t in traces]
        for t, e in zip(traces, engine):
            as_engine_clock(t, e)
        _, refit = run_fit(engine, base_path, os.path.join(tmp, "fit-engine.json"))
        same = refit is not None and all(
            abs(a[1] - b[1]) <= 1e-9 + 1e-6 * abs(a[1])
            for key in ("decode_seconds", "context_seconds_per_token",
                        "chunk_context_seconds_per_token")
            for a, b in zip(fitted[key], refit[key])) and abs(
            fitted["chunk_row_context_seconds"] - refit["chunk_row_context_seconds"]) <= 1e-15 + 1e-6 * q and abs(
            fitted["chunk_step_scale"] - refit["chunk_step_scale"]) <= 1e-6
        check(same, "the engine's clock (unsynchronized steps' time on the next sampling step): same fit")

    # --residuals prices every sync group with the profile as it is: against traces simulated
    # with that very profile each shape's line is +0.0%; against a base 0.8x T_fwd without
    # chunk prices the steps with chunks come out under the traces.
    res = subprocess.run([sys.executable, FIT] + traces + ["--profile", true_path, "--residuals",
                                                           "--min-groups", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("| ") and ln.rstrip().endswith("% |")]
    errs = [float(ln.rstrip(" |").split("|")[-1].strip().rstrip("%")) for ln in lines]
    check(res.returncode == 0 and len(lines) >= 4 and all(abs(e) <= 0.05 for e in errs)
          and "decode only" in res.stdout,
          f"--residuals with the true profile: every shape at +0.0% ({len(lines)} shapes: {errs})")
    res = subprocess.run([sys.executable, FIT] + traces + ["--profile", base_path, "--residuals"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    total = [ln for ln in res.stdout.splitlines() if ln.startswith("all ")]
    check(res.returncode == 0 and total and "(-" in total[0],
          f"--residuals with a cheaper base: the model under the traces ({total})")

    # The engine artifacts priced apart (simulate --first-sight-ms, --graph-miss-ms): traces
    # simulated with them, fitted with the same flags, give the terms back (the simulator's
    # rules and step_fit.artifact_seconds agree); fitted without, kT absorbs them.
    art = ["--first-sight-ms", "3", "--graph-miss-ms", "0.5,1.5"]
    art_traces = [os.path.join(tmp, p + "-art.csv") for p in ("discard", "minwaste")]
    for pol, t in zip(("discard", "minwaste"), art_traces):
        simulate(args.binary, true_path, pol, t, art)
    ap_ = subprocess.run([sys.executable, FIT] + art_traces + ["--profile", base_path, "--out",
                                                               os.path.join(tmp, "fit-art.json")] + art,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    fa = json.load(open(os.path.join(tmp, "fit-art.json"))) if ap_.returncode == 0 else None
    check(fa is not None and abs(fa.get("chunk_step_scale", 1.0) - 1.25) < 0.0125
          and abs(fa["decode_seconds"][0][1] / base["decode_seconds"][0][1] - 1 / 0.9) < 0.011,
          "artifacts priced apart in simulation and fit: kT and kD found as without them"
          + ("" if fa else ": " + ap_.stdout[-500:]))
    _, fn = run_fit(art_traces, base_path, os.path.join(tmp, "fit-art-ignored.json"))
    check(fn is not None and fn.get("chunk_step_scale", 1.0) > 1.26,
          f"fitted without the artifact flags, kT absorbs the first sights "
          f"({fn.get('chunk_step_scale') if fn else None})")

    # The same with the graph cache model (simulate --graph-cache; step_fit.py replays the cache
    # on the trace's sequence counts and longest_blocks): its prices come back.
    cache_args = ["--first-sight-ms", "3", "--graph-miss-ms", "0.8,2.4", "--graph-cache", "64"]
    cache_traces = [os.path.join(tmp, p + "-cache.csv") for p in ("discard", "minwaste")]
    for pol, t in zip(("discard", "minwaste"), cache_traces):
        simulate(args.binary, true_path, pol, t, cache_args)
    cp = subprocess.run([sys.executable, FIT] + cache_traces + ["--profile", base_path, "--fit-artifacts",
                                                                "--graph-cache", "64", "--out",
                                                                os.path.join(tmp, "fit-cache.json")],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    fc = json.load(open(os.path.join(tmp, "fit-cache.json"))) if cp.returncode == 0 else None
    ok = fc is not None and abs(fc["first_sight_seconds"] - 0.003) < 1e-4 and all(
        abs(a - b) < 1e-4 for a, b in zip(fc["graph_miss_seconds"], (0.0008, 0.0024))) and \
        fc.get("graph_cache_entries") == 64 and abs(fc.get("chunk_step_scale", 1.0) - 1.25) < 0.0125
    check(ok, "--fit-artifacts --graph-cache 64 finds the cache model's prices the simulation ran with "
          f"({fc.get('first_sight_seconds') if fc else None}, {fc.get('graph_miss_seconds') if fc else cp.stdout[-400:]})")

    # The copies' interference with the forward pass (a profile's "copy_interference": seconds
    # of step per second of swap-in / swap-out queued with it): minwaste swaps asynchronously,
    # so its steps carry it and the fit gives both prices back; the naive swap policy's copies
    # are synchronous (the trace's name says "swap"), so its steps carry none and must not pull
    # the prices down; --residuals with the true profile prices both traces exactly.
    copy_true = dict(TRUE, copy_interference=[0.3, 0.45])
    copy_path = os.path.join(tmp, "copy-true.json")
    with open(copy_path, "w") as f:
        json.dump(copy_true, f)
    copy_traces = [os.path.join(tmp, "mixed-" + p + "-copies.csv") for p in ("minwaste", "swap")]
    for pol, t in zip(("minwaste", "swap"), copy_traces):
        simulate(args.binary, copy_path, pol, t)
    swapped = sum(int(r["swap_in_blocks"]) for r in csv.DictReader(open(copy_traces[0], newline="")))
    check(swapped > 100, f"minwaste at this load swaps ({swapped} blocks in)")
    cf = subprocess.run([sys.executable, FIT] + copy_traces + ["--profile", true_path, "--fit-artifacts",
                                                               "--out", os.path.join(tmp, "fit-copies.json")],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    fcopy = json.load(open(os.path.join(tmp, "fit-copies.json"))) if cf.returncode == 0 else None
    got = fcopy.get("copy_interference") if fcopy else None
    check(got is not None and abs(got[0] - 0.3) < 0.006 and abs(got[1] - 0.45) < 0.009,
          f"--fit-artifacts finds the copy interference the simulation ran with ({got}; want [0.3, 0.45])")
    cr = subprocess.run([sys.executable, FIT] + copy_traces + ["--profile", copy_path, "--residuals"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    total = [ln for ln in cr.stdout.splitlines() if ln.startswith("all ")]
    check(cr.returncode == 0 and bool(total) and ("(-0.0%)" in total[0] or "(+0.0%)" in total[0]),
          f"--residuals prices the profile's copy interference as simulate does ({total})")

    # --first-sights: a simulation has no first-sight cost, so both columns are +0.00 ms.
    fs = subprocess.run([sys.executable, FIT] + traces + ["--profile", true_path, "--first-sights"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rows = [ln.split("|")[1:-1] for ln in fs.stdout.splitlines() if ln.startswith("| ") and ".csv" in ln]
    check(fs.returncode == 0 and len(rows) == 2 and all(
        int(r[1]) > 0 and int(r[3]) > 0 and abs(float(r[2])) < 0.005 and abs(float(r[4])) < 0.005 for r in rows),
          f"--first-sights on the profile's own traces: no extra either way ({rows})")

    old = os.path.join(tmp, "old.csv")
    with open(traces[0], newline="") as f, open(old, "w", newline="") as g:
        for line in f:
            g.write(",".join(line.rstrip("\n").split(",")[:16]) + "\n")
    bad, _ = run_fit([old], base_path, os.path.join(tmp, "never.json"))
    check(bad.returncode != 0 and "sampled_rows" in bad.stdout, "a trace without the new columns: clear error")

    finish()


if __name__ == "__main__":
    main()
