#!/usr/bin/env python3
"""A measured run and its simulation, step by step (issue 6, item 5).

Both `infercept bench --step-trace M.csv` and `infercept simulate --step-trace S.csv` (same
workload flags) write one row per step (src/sched/step_trace.h). The end-of-run means only
say that a simulation is off; this says where the two first part and which step shapes the
cost model prices wrong:

  1. totals of both runs;
  2. per window of time: steps, mean step ms, decode and prompt rows per step, the fewest
     free KV blocks, the most paused / waiting requests, and preemptions and dropped tokens
     so far; the first window where the dropped tokens (or preemptions) part is marked;
  3. the mean step time by step shape (decode rows x prompt rows, and the context held), so
     a shape that costs more in the engine than in the model stands out whatever the two
     runs' schedules did. The engine times a step on the host, and a step that samples
     nothing (a prefill chunk alone) returns before the GPU has run it, so its time lands on
     the steps after it (the prefill probe: 3 ms, 20-26, then 82 at the sampling step). The
     simulated steps are put on the same clock (on_engine_clock, when the trace has
     sampled_rows), so the two read alike; totals and windows are exact either way.

  python3 bench/trace_diff.py MEASURED.csv SIMULATED.csv [--window 2] [--part-tokens 2000]

On the H200: `STEP_TRACE=1 bash bench/h200_paper.sh POINT...` writes NAME.trace.csv beside
each point's JSON (docs/bench keeps them as NAME.trace.csv.gz, read the same way);
`bench/paper_report.py` then simulates such a point with a trace too and
prints this comparison under the point's name.
"""
import argparse
import csv
import gzip
import sys

FIELDS = ["t", "seconds", "sequences", "decode_rows", "prompt_rows", "chunks", "context_tokens",
          "free_blocks", "running", "paused", "waiting", "preempted", "dropped_tokens", "discards",
          "swap_in_blocks", "swap_out_blocks"]


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        r = csv.DictReader(f)
        if r.fieldnames is None or r.fieldnames[:len(FIELDS)] != FIELDS:
            sys.exit(f"{path}: not a step trace (header {r.fieldnames})")
        has_sampled = "sampled_rows" in r.fieldnames
        rows = []
        for i, row in enumerate(r, start=2):
            try:
                d = {k: float(row[k]) for k in FIELDS}
                if has_sampled:
                    d["sampled_rows"] = float(row["sampled_rows"])
                rows.append(d)
            except (TypeError, ValueError):
                sys.exit(f"{path}:{i}: malformed row {row}")
    return rows


def on_engine_clock(rows):
    """The simulation's step times as the engine's host clock reads them. The engine times
    `forward` on the host: a step whose rows sample waits for the GPU to finish it; one that
    samples nothing returns once launched, after `begin_step` has waited for the staging
    buffer, i.e. for the step before the previous one to finish on the GPU (its uploads ran
    behind that step). Steps of one run are replayed through that pipeline (host prep between
    steps taken as 0), so a chunk-only step reads as a wait and the later steps carry its time,
    as in a measured trace (the prefill probe: 3 ms, then 20-26, then 82 at the sampling step).
    The forward total stays within a fraction of a percent (a step that samples nothing and
    is followed by idleness is never waited for, by the engine's clock either); the by-shape
    table then compares like with like. Rows without a sampled_rows column (traces of older
    binaries) are returned as they are."""
    if not rows or "sampled_rows" not in rows[0]:
        return rows, False
    out = []
    host = 0.0           # the engine thread's clock
    finish = [0.0, 0.0]  # GPU finish times of the last two steps launched
    sim_free = None      # when the simulated engine finished its previous step
    for r in rows:
        r = dict(r)
        if r["sequences"] > 0:
            if sim_free is not None and r["t"] > sim_free:
                # The simulation sat idle (nothing to run until an arrival or a tool return):
                # so did the engine, after its last step had finished.
                host = max(host, finish[1]) + (r["t"] - sim_free)
            sim_free = r["t"] + r["seconds"]
            start = host
            host = max(host, finish[0])            # begin_step: the staging buffer is free
            gpu_start = max(finish[1], host)
            done = gpu_start + r["seconds"]
            finish = [finish[1], done]
            if r["sampled_rows"] > 0:
                host = done
            r["seconds"] = host - start
        out.append(r)
    return out, True


def totals(rows):
    fwd = [r for r in rows if r["sequences"] > 0]
    return {
        "steps": len(fwd),
        "forward s": sum(r["seconds"] for r in fwd),
        "mean step ms": 1e3 * sum(r["seconds"] for r in fwd) / max(1, len(fwd)),
        "decode rows": sum(r["decode_rows"] for r in rows),
        "prompt rows": sum(r["prompt_rows"] for r in rows),
        "preempted": sum(r["preempted"] for r in rows),
        "dropped tokens": sum(r["dropped_tokens"] for r in rows),
        "discards": sum(r["discards"] for r in rows),
        "swap in blocks": sum(r["swap_in_blocks"] for r in rows),
        "swap out blocks": sum(r["swap_out_blocks"] for r in rows),
        "fewest free blocks": min((r["free_blocks"] for r in rows), default=0),
    }


def windows(rows, width, end):
    out = []
    cum_pre = cum_drop = 0.0
    i = 0
    n_win = int(end // width) + 1
    for w in range(n_win):
        lo, hi = w * width, (w + 1) * width
        sel = []
        while i < len(rows) and rows[i]["t"] < hi:
            sel.append(rows[i])
            i += 1
        fwd = [r for r in sel if r["sequences"] > 0]
        cum_pre += sum(r["preempted"] for r in sel)
        cum_drop += sum(r["dropped_tokens"] for r in sel)
        out.append({
            "from": lo,
            "steps": len(fwd),
            "ms": 1e3 * sum(r["seconds"] for r in fwd) / len(fwd) if fwd else 0.0,
            "dec": sum(r["decode_rows"] for r in fwd) / len(fwd) if fwd else 0.0,
            "pro": sum(r["prompt_rows"] for r in fwd) / len(fwd) if fwd else 0.0,
            "free": min((r["free_blocks"] for r in sel), default=float("nan")),
            "paused": max((r["paused"] for r in sel), default=0),
            "waiting": max((r["waiting"] for r in sel), default=0),
            "pre": cum_pre,
            "drop": cum_drop,
        })
    return out


def bucket(v, edges):
    for e in edges:
        if v <= e:
            return e
    return float("inf")


DEC_EDGES = [0, 1, 4, 8, 16, 32, 64]
PRO_EDGES = [0, 8, 63, 255, 511]
CTX_EDGES = [2048, 8192, 32768]


def label(edges, e):
    i = edges.index(e) if e in edges else len(edges)
    lo = 0 if i == 0 else edges[i - 1] + 1
    if e == float("inf"):
        return f">{edges[-1]}"
    return f"{lo}-{int(e)}" if lo != e else f"{int(e)}"


def by_shape(rows):
    acc = {}
    for r in rows:
        if r["sequences"] <= 0:
            continue
        k = (bucket(r["decode_rows"], DEC_EDGES), bucket(r["prompt_rows"], PRO_EDGES),
             bucket(r["context_tokens"], CTX_EDGES))
        n, s = acc.get(k, (0, 0.0))
        acc[k] = (n + 1, s + r["seconds"])
    return acc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("measured")
    ap.add_argument("simulated")
    ap.add_argument("--window", type=float, default=2.0, help="seconds per window (2)")
    ap.add_argument("--part-tokens", type=float, default=2000.0,
                    help="dropped tokens so far that differ by this much mark the parting (2000)")
    ap.add_argument("--min-steps", type=int, default=20,
                    help="shape classes with fewer steps in either run are left out (20)")
    ap.add_argument("--sim-clock", choices=["engine", "exact"], default="engine",
                    help="the simulated steps' times as the engine's host clock would read them "
                         "(default), or each step's own")
    args = ap.parse_args()
    m, s = load(args.measured), load(args.simulated)
    converted = False
    if args.sim_clock == "engine":
        s, converted = on_engine_clock(s)
    tm, ts = totals(m), totals(s)
    if converted:
        print("(simulated step times on the engine's clock: a step that samples nothing returns "
              "once launched and later steps carry its time; --sim-clock exact for each step's own)\n")
    print("| total | measured | simulated |\n|---|---:|---:|")
    for k in tm:
        prec = 2 if k in ("forward s", "mean step ms") else 0
        print(f"| {k} | {tm[k]:.{prec}f} | {ts[k]:.{prec}f} |")

    end = max(m[-1]["t"] if m else 0.0, s[-1]["t"] if s else 0.0)
    wm, ws = windows(m, args.window, end), windows(s, args.window, end)
    print(f"\nPer {args.window:g} s window, measured / simulated (preempted and dropped: so far):\n")
    print("| from s | steps | step ms | decode rows | prompt rows | fewest free blocks | paused | "
          "waiting | preempted | dropped tokens |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    parted = None
    for a, b in zip(wm, ws):
        mark = ""
        if parted is None and (abs(a["drop"] - b["drop"]) > args.part_tokens or
                               (a["pre"] != b["pre"] and max(a["pre"], b["pre"]) >= 2)):
            parted = a["from"]
            mark = " **<- part here**"
        print(f"| {a['from']:.0f} | {a['steps']} / {b['steps']} | {a['ms']:.2f} / {b['ms']:.2f} | "
              f"{a['dec']:.1f} / {b['dec']:.1f} | {a['pro']:.1f} / {b['pro']:.1f} | "
              f"{a['free']:.0f} / {b['free']:.0f} | {a['paused']:.0f} / {b['paused']:.0f} | "
              f"{a['waiting']:.0f} / {b['waiting']:.0f} | {a['pre']:.0f} / {b['pre']:.0f} | "
              f"{a['drop']:.0f} / {b['drop']:.0f}{mark} |")
    print(f"\nThe runs part at {parted:.0f} s." if parted is not None else
          "\nThe runs do not part by these rules.")

    am, as_ = by_shape(m), by_shape(s)
    print("\nMean step ms by shape (decode rows, prompt rows, context tokens held), classes with "
          f"at least {args.min_steps} steps in both runs:\n")
    print("| decode rows | prompt rows | context | steps meas / SIM | ms meas / SIM | SIM error |")
    print("|---|---|---|---|---|---|")
    for k in sorted(set(am) & set(as_)):
        (nm, sm), (ns, ss) = am[k], as_[k]
        if nm < args.min_steps or ns < args.min_steps:
            continue
        mm, ms = 1e3 * sm / nm, 1e3 * ss / ns
        print(f"| {label(DEC_EDGES, k[0])} | {label(PRO_EDGES, k[1])} | {label(CTX_EDGES, k[2])} | "
              f"{nm} / {ns} | {mm:.2f} / {ms:.2f} | {100 * (ms / mm - 1):+.0f}% |")


if __name__ == "__main__":
    main()
