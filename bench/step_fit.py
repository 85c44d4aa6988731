#!/usr/bin/env python3
"""Fit the step-cost terms of a cost model to step traces (issue 6, item 5).

`infercept bench --step-trace F` writes one row per step with what it carried and how long it
took (src/sched/step_trace.h). The engine times a step on the host, and a step that samples
nothing (a prefill chunk alone) returns before the GPU has run it: its time lands on the steps
after it, at the latest on the next one that samples, which waits for the GPU. So the fit is
over *sync groups*, the steps from one sampling step to the next, whose summed time is exact,
never over single steps.

The model is CostModel::step_seconds with the shape of a base profile kept and its scale
fitted:

    step = kT * T_fwd(x)                  a step with a chunk (runs eagerly); kT is written
                                          as the profile's chunk_step_scale
         | kD * D(n)                      a decode-only step (the engine replays those from
                                          CUDA graphs); D(n) = T_fwd(n) when the base has none
         + ka * a(n) * (context the step's decode rows held)
         + p(rows) * (context its prompt chunks held)
         + q * (rows x context of each prompt chunk)

kT scales the base's T_fwd for steps with a chunk (written as chunk_step_scale, T_fwd itself
kept: the scheduler's decisions read it), kD and ka the base's D (written as decode_seconds
at n = 1, 2, 4, ..., 64 when the base had none) and a(n) samples; p has one value per
row bucket (least rows 2, 9, 64 by default, as CostModel::chunk_seconds_per_token reads
them); each chunk of a step (the trace's chunk_list) goes to its own bucket. q is the part of a
chunk's attention that grows with its rows too (its FLOPs: a 508-row chunk over 2,032 cached
tokens of the 13B took 7.4 ms more than over none), so one p per bucket does not price the
bucket's shorter chunks like its longest; it separates from p only where the traces hold
chunks of several sizes over cached context. Least squares over the groups,
parameters kept non-negative; a bucket with too little context in the traces keeps the
base's price and says so.

    python3 bench/step_fit.py TRACE.csv[.gz]... --profile BASE.json --out FIT.json [--rows 2,9,64]
    python3 bench/step_fit.py TRACE.csv[.gz]... --profile PROFILE.json --residuals
        (no fit: the profile's price of each sync group against the traces, by step shape)
    python3 bench/step_fit.py TRACE.csv[.gz]... --profile PROFILE.json --first-sights
        (no fit: steps with chunks over the profile's price, first sight of their row count or not)
    python3 bench/step_fit.py TRACE.csv[.gz]... --profile BASE.json --fit-artifacts [--graph-cache 64] --out FIT.json
        (the engine's first-sight and graph-miss prices fitted too: what the built-in H200
        profiles carry since the engine of 2026-12-02; --first-sight-ms / --graph-miss-ms take given ones off;
        and since the engine of 2026-12-03 the copy interference: seconds of forward pass per second of
        swap-in / swap-out copy queued with the step, where its layers wait for the copies)

Prints the fitted terms, how much each had to go on, and the fit's error per group and in
total. Fit on traces that the validation does not use (bench/step_probe.py's probes, or paper
runs at another seed: the built-in 7B since the engine of 2026-12-03), then check with
bench/paper_report.py --sim-profile FIT.json.
"""
import argparse
import csv
import gzip
import json
import os
import sys

NEED = ["seconds", "sequences", "decode_rows", "prompt_rows", "chunks", "context_tokens",
        "sampled_rows", "chunk_context_tokens", "chunk_list"]


def load_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        r = csv.DictReader(f)
        missing = [k for k in NEED if k not in (r.fieldnames or [])]
        if missing:
            sys.exit(f"{path}: no {', '.join(missing)} column (a step trace of an older binary?)")
        out = []
        for row in r:
            d = {k: float(row[k]) for k in NEED if k != "chunk_list"}
            d["chunk_list"] = [tuple(int(v) for v in c.split(":")) for c in row["chunk_list"].split(";") if c]
            # Since the engine of 2026-12-02 (older traces: 0, and the graph cache is keyed by the count alone).
            d["longest_blocks"] = int(row.get("longest_blocks") or 0)
            d["swap_in_blocks"] = int(row.get("swap_in_blocks") or 0)
            d["swap_out_blocks"] = int(row.get("swap_out_blocks") or 0)
            out.append(d)
        return out


def copies_synchronous(trace_path):
    """The naive `swap` policy's copies are synchronous (the engine waits for them before the
    step), so they do not slow its forward passes: read from the run's bench JSON beside the
    trace (NAME.json for NAME.trace.csv[.gz]), else from the name (WORKLOAD-POLICY-..., a part
    "swap")."""
    stem = os.path.basename(trace_path).split(".trace.csv")[0].split(".csv")[0]
    side = os.path.join(os.path.dirname(trace_path), stem + ".json")
    try:
        with open(side) as f:
            return json.load(f).get("policy") == "swap"
    except (OSError, ValueError):
        return "swap" in stem.split("-")


def copy_seconds(trace, trace_path, profile, block_size):
    """Per row, (seconds of swap-in copy, seconds of swap-out copy) queued with a step that runs
    a forward pass, at the profile's copy bandwidth; (0, 0) where the copies are synchronous."""
    bw = float(profile.get("swap_bytes_per_second", 0.0))
    per_block = block_size * float(profile.get("kv_bytes_per_token", 0.0)) / bw if bw > 0 else 0.0
    if copies_synchronous(trace_path):
        per_block = 0.0
    return [(row["swap_in_blocks"] * per_block, row["swap_out_blocks"] * per_block)
            if row["decode_rows"] + row["prompt_rows"] > 0 else (0.0, 0.0) for row in trace]


def interp(samples, x, flat_outside):
    """Linear between samples; outside: flat (a(n), D(n)) or extrapolated from the last two
    (T_fwd), as src/sched/cost_model.cpp does."""
    if len(samples) == 1:
        return samples[0][1]
    if x <= samples[0][0]:
        if flat_outside:
            return samples[0][1]
        (x0, y0), (x1, y1) = samples[0], samples[1]
        return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    for (x0, y0), (x1, y1) in zip(samples, samples[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    if flat_outside:
        return samples[-1][1]
    (x0, y0), (x1, y1) = samples[-2], samples[-1]
    return y1 + (y1 - y0) * (x - x1) / (x1 - x0)


class Base:
    def __init__(self, profile):
        self.p = profile
        self.tfwd = sorted((int(x), float(t)) for x, t in profile["t_fwd_samples"])
        self.chunk_scale = float(profile.get("chunk_step_scale", 1.0))
        c = profile.get("context_seconds_per_token", 0.0)
        self.ctx = sorted((int(n), float(s)) for n, s in c) if isinstance(c, list) else [(1, float(c))]
        self.dec = sorted((int(n), float(s)) for n, s in profile.get("decode_seconds", []))

    def t_base(self, row):
        q = row["decode_rows"] + row["prompt_rows"]
        if not row["chunk_list"] and self.dec:
            return interp(self.dec, row["sequences"], True)
        if not row["chunk_list"]:
            return interp(self.tfwd, q, False)
        return self.chunk_scale * interp(self.tfwd, q, False)

    def a(self, n):
        return interp(self.ctx, n, True)


def features(row, base, rows):
    """The step's terms: [T_fwd of a step with a chunk, D (or T_fwd) of a decode-only step,
    a(n) x decode context, chunk context per bucket...]; a chunk
    (more than one row) goes to the last bucket whose least rows it reaches, below the first
    it is priced at a(n), as CostModel::chunk_seconds_per_token does."""
    n = row["sequences"]
    t = base.t_base(row)
    decode_only = not row["chunk_list"]
    f = [0.0 if decode_only else t, t if decode_only else 0.0,
         base.a(n) * (row["context_tokens"] - row["chunk_context_tokens"]),
         float(sum(r * c for r, c in row["chunk_list"] if r > 1))]
    buckets = [0.0] * len(rows)
    for chunk_rows, context in row["chunk_list"]:
        b = max((i for i, r in enumerate(rows) if chunk_rows >= r), default=None)
        if b is None:
            f[2] += base.a(n) * context
        else:
            buckets[b] += context
    return f + buckets


def shape_class(row):
    """A step with chunks, by what its price turns on: decode rows beside it, how many chunks,
    the longest chunk's rows, the chunks' cached context. (--residuals)"""
    d = row["decode_rows"]
    cr = max(r for r, _ in row["chunk_list"])
    cc = sum(c for _, c in row["chunk_list"])
    return ("0" if d == 0 else "1-4" if d <= 4 else "5-8" if d <= 8 else "9+",
            min(len(row["chunk_list"]), 3),
            "2-63" if cr < 64 else "64-255" if cr < 256 else "256+",
            "0" if cc == 0 else "1-2047" if cc < 2048 else "2048+")




def table_width(blocks):
    """engine.h's block_table_width without its cap: 16 blocks times a power of two."""
    w = 16
    while w < blocks:
        w *= 2
    return w


def artifact_seconds(trace, first_sight_s=0.0, new_batch_s=0.0, second_batch_s=0.0, graph_cache=0):
    """Per row, what the simulator's engine-artifact terms charge it (Simulator: first_sight_seconds,
    new_batch_seconds, second_batch_seconds, graph_cache_entries; the same rules): a step with
    chunks whose query-token count the process has not run before pays first_sight_s; a
    decode-only step whose sequence count differs from the last decode-only step's pays
    new_batch_s, the next one second_batch_s; or with graph_cache > 0 the cache itself (keyed by
    the sequence count and the table width): a key's first sight new_batch_s, its second
    second_batch_s, a cached key nothing. No count counts as run before the trace (the engine
    loaded its cached profile: EngineArtifacts::seen_token_counts empty)."""
    out, seen = [], set()
    last, since = None, 0
    cached, sightings, step = {}, {}, 0
    for row in trace:
        extra = 0.0
        if row["decode_rows"] + row["prompt_rows"] > 0:
            if row["chunk_list"]:
                x = int(row["decode_rows"] + row["prompt_rows"])
                if x not in seen:
                    seen.add(x)
                    extra += first_sight_s
            elif graph_cache > 0:
                step += 1
                key = (int(row["sequences"]), table_width(row.get("longest_blocks", 0)))
                if key in cached:
                    cached[key] = step
                else:
                    sightings[key] = sightings.get(key, 0) + 1
                    if sightings[key] < 2:
                        extra += new_batch_s
                    else:
                        del sightings[key]
                        if len(cached) >= graph_cache:
                            del cached[min(cached, key=cached.get)]
                        cached[key] = step
                        extra += second_batch_s
            else:
                if row["sequences"] != last:
                    extra += new_batch_s
                    since = 0
                else:
                    since += 1
                    if since == 1:
                        extra += second_batch_s
                last = row["sequences"]
        out.append(extra)
    return out


def sync_groups(trace, base, rows, warmup_groups=0, with_shape=False, artifacts=None, extra=None):
    """(summed features, summed seconds) per group of steps closed by a sampling step; the
    base's per-sequence and per-sampled-row terms, which are not fitted, are taken off the
    seconds. The first `warmup_groups` groups are left out: a probe is a process of its own,
    and its first steps pay one-time costs (cuBLASLt's first call per shape, graph capture:
    a 512-row first chunk took 77-109 ms against 12-14 for the next ones), which a paper run's
    thousands of steps dilute but a probe's few dozen chunk steps do not. `artifacts` (per row,
    artifact_seconds()) are taken off the seconds too: the terms priced apart. `extra` (per row,
    a list of more features) is appended to each row's features: the terms fitted with them."""
    groups, acc, secs, shape = [], None, 0.0, None
    b = float(base.p.get("sequence_seconds", 0.0))
    r = float(base.p.get("sample_seconds_per_row", 0.0))
    for i, row in enumerate(trace):
        if row["decode_rows"] + row["prompt_rows"] == 0:
            continue  # copies only, or KV dropped: no forward pass
        f = features(row, base, rows) + (extra[i] if extra is not None else [])
        acc = f if acc is None else [x + y for x, y in zip(acc, f)]
        secs += row["seconds"] - b * max(0.0, row["sequences"] - 1) - r * max(0.0, row["sampled_rows"] - 1)
        if artifacts is not None:
            secs -= artifacts[i]
        if shape is None and row["chunk_list"]:
            shape = shape_class(row)  # a group is named by its first step with chunks
        if row["sampled_rows"] > 0:
            groups.append((acc, secs, shape or "decode only") if with_shape else (acc, secs))
            acc, secs, shape = None, 0.0, None
    return groups[warmup_groups:]  # a trailing group that never synchronized is left out


def solve(A, y):
    """Least squares by the normal equations (a handful of parameters), Gaussian elimination
    with partial pivoting. Returns None when singular."""
    n = len(A[0])
    M = [[sum(r[i] * r[j] for r in A) for j in range(n)] + [sum(r[i] * t for r, t in zip(A, y))]
         for i in range(n)]
    for c in range(n):
        piv = max(range(c, n), key=lambda r: abs(M[r][c]))
        if abs(M[piv][c]) < 1e-300:
            return None
        M[c], M[piv] = M[piv], M[c]
        for r in range(n):
            if r != c:
                k = M[r][c] / M[c][c]
                M[r] = [a - k * b for a, b in zip(M[r], M[c])]
    return [M[i][n] / M[i][i] for i in range(n)]


def fit(groups, n_params, fixed):
    """Non-negative least squares by elimination: parameters in `fixed` (index -> value) are
    held; a free one that comes out negative is held at 0 and the rest refitted."""
    fixed = dict(fixed)
    while True:
        free = [i for i in range(n_params) if i not in fixed]
        A = [[f[i] for i in free] for f, _ in groups]
        y = [s - sum(f[i] * v for i, v in fixed.items()) for f, s in groups]
        sol = solve(A, y) if free else []
        if sol is None:
            sys.exit("the traces do not determine the terms (singular system): more, varied steps needed")
        neg = [free[i] for i, v in enumerate(sol) if v < 0]
        if not neg:
            theta = [0.0] * n_params
            for i, v in fixed.items():
                theta[i] = v
            for i, v in zip(free, sol):
                theta[i] = v
            return theta
        for i in neg:
            fixed[i] = 0.0


def profile_terms(profile):
    """The profile's own terms as (row buckets, theta) for features(): every scale 1, q and the
    chunk prices as given (no chunk price: every chunk's context at a(n))."""
    chunk = sorted((int(r), float(p)) for r, p in profile.get("chunk_context_seconds_per_token", []))
    rows = [r for r, _ in chunk] or [1 << 30]
    theta = [1.0, 1.0, 1.0, float(profile.get("chunk_row_context_seconds", 0.0))]
    return rows, theta + ([p for _, p in chunk] or [0.0])


def residuals(args, profile, base):
    """The profile as it is (CostModel::step_seconds) against the traces' sync groups, summed by
    the shape of each group's step with chunks: where the model under- or overprices."""
    rows, theta = profile_terms(profile)
    # The profile's own price includes the artifacts it carries, as simulate prices them, unless
    # the flags give others.
    terms, (cin, cout) = args.artifact_terms, (0.0, 0.0)
    if terms == (0.0, 0.0, 0.0, 0):
        miss = profile.get("graph_miss_seconds", [0.0, 0.0])
        terms = (float(profile.get("first_sight_seconds", 0.0)), float(miss[0]), float(miss[1]),
                 int(profile.get("graph_cache_entries", 0)))
        cin, cout = (float(v) for v in profile.get("copy_interference", [0.0, 0.0]))
    by = {}
    for t in args.traces:
        trace = load_trace(t)
        art = artifact_seconds(trace, *terms)
        art = [a + cin * ci + cout * co for a, (ci, co) in zip(art, copy_seconds(trace, t, profile, args.block_size))]
        for f, secs, shape in sync_groups(trace, base, rows, args.warmup_groups, with_shape=True, artifacts=art):
            e = by.setdefault(shape, [0, 0.0, 0.0])
            e[0] += 1
            e[1] += secs
            e[2] += sum(a * b for a, b in zip(f, theta))
    print("| decode rows | chunks | longest chunk rows | chunk context | groups | measured ms | model ms | model error |")
    print("|---|---:|---|---|---:|---:|---:|---:|")
    order = sorted(by.items(), key=lambda kv: (kv[0] != "decode only", -kv[1][0]))
    for shape, (n, m, p) in order:
        if n < args.min_groups:
            continue
        cells = ["decode only", "", "", ""] if shape == "decode only" else [str(x) for x in shape]
        print(f"| {' | '.join(cells)} | {n} | {m / n * 1e3:.2f} | {p / n * 1e3:.2f} | {(p - m) / m * 100:+.1f}% |")
    m_all = sum(v[1] for v in by.values())
    p_all = sum(v[2] for v in by.values())
    print(f"all {sum(v[0] for v in by.values())} groups: measured {m_all:.2f} s, model {p_all:.2f} s "
          f"({(p_all - m_all) / m_all * 100:+.1f}%)")


def first_sights(args, profile, base):
    """Steps with chunks timed on their own (the step before sampled, so the engine's clock
    holds just this step) over the profile's price, by whether the step's query-token count
    occurred before in the trace: a new count meant new GEMM shapes for the engine (cuBLASLt's
    heuristic, a kernel's lazy load; docs/DESIGN.md, "The CUDA backend")."""
    rows, theta = profile_terms(profile)
    b = float(profile.get("sequence_seconds", 0.0))
    r = float(profile.get("sample_seconds_per_row", 0.0))
    print("| trace | first sights | mean extra ms | repeats | mean extra ms |")
    print("|---|---:|---:|---:|---:|")
    for t in args.traces:
        trace = load_trace(t)
        new_count = artifact_seconds(trace, first_sight_s=1.0)  # 1 at a count's first sight
        first, again = [], []
        for i, row in enumerate(trace):
            if not row["chunk_list"] or row["sampled_rows"] == 0 or i == 0 or trace[i - 1]["sampled_rows"] == 0:
                continue
            model = sum(a * c for a, c in zip(features(row, base, rows), theta))
            model += b * max(0.0, row["sequences"] - 1) + r * max(0.0, row["sampled_rows"] - 1)
            (first if new_count[i] else again).append(row["seconds"] - model)
        mean = lambda v: f"{sum(v) / len(v) * 1e3:+.2f}" if v else "-"  # noqa: E731
        print(f"| {os.path.basename(t)} | {len(first)} | {mean(first)} | {len(again)} | {mean(again)} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--profile", required=True, help="base cost-model JSON (T_fwd, a(n), D(n) shapes)")
    ap.add_argument("--out", help="write the fitted profile here")
    ap.add_argument("--rows", default="2,9,64", help="least rows of each chunk-price bucket")
    ap.add_argument("--hold-decode", action="store_true",
                    help="keep the base's decode_seconds and a(n) as they are (measured on their own, "
                         "e.g. by bench/step_context_cost.sh) and fit only the chunk steps' terms")
    ap.add_argument("--no-row-term", action="store_true",
                    help="fit no q (rows x context) term, as before it existed")
    ap.add_argument("--warmup-groups", type=int, default=2,
                    help="sync groups at the start of each trace left out (the process's one-time costs)")
    ap.add_argument("--min-context", type=float, default=3e4,
                    help="chunk context tokens a bucket needs in the traces to be fitted (else the base's)")
    ap.add_argument("--first-sight-ms", type=float, default=0.0,
                    help="a chunk step's first sight of its row count, priced apart (simulate --first-sight-ms): "
                         "taken off the traces before the fit / residuals")
    ap.add_argument("--graph-miss-ms", default="0,0",
                    help="NEW,SECOND: decode-only steps after a batch change, priced apart (simulate "
                         "--graph-miss-ms): taken off the traces before the fit / residuals")
    ap.add_argument("--graph-cache", type=int, default=0,
                    help="price the graph misses by a model of the engine's graph cache of N graphs "
                         "(simulate --graph-cache) instead of every change of the sequence count")
    ap.add_argument("--fit-artifacts", action="store_true",
                    help="fit the engine artifacts' prices too (first sight of a chunk step's row count, "
                         "the two decode-only steps after a batch change, the forward's share of the swap "
                         "copies queued with it), written as first_sight_seconds, graph_miss_seconds and "
                         "copy_interference")
    ap.add_argument("--residuals", action="store_true",
                    help="fit nothing: the profile's own price of every sync group against the traces, "
                         "by the shape of the group's chunk step")
    ap.add_argument("--min-groups", type=int, default=15, help="--residuals: least groups a line")
    ap.add_argument("--block-size", type=int, default=16, help="the engine's KV block (tokens) in the traces")
    ap.add_argument("--first-sights", action="store_true",
                    help="fit nothing: the steps with chunks over the profile's price, split by whether "
                         "their query-token count (the GEMMs' row count) occurred before in the trace")
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    try:
        new_ms, second_ms = (float(v) for v in args.graph_miss_ms.split(","))
    except ValueError:
        sys.exit(f"--graph-miss-ms wants NEW,SECOND in ms, got '{args.graph_miss_ms}'")
    args.artifact_terms = (args.first_sight_ms * 1e-3, new_ms * 1e-3, second_ms * 1e-3, args.graph_cache)
    with open(args.profile) as f:
        profile = json.load(f)
    base = Base(profile)
    if args.residuals:
        return residuals(args, profile, base)
    if args.first_sights:
        return first_sights(args, profile, base)
    groups = []
    for t in args.traces:
        trace = load_trace(t)
        extra = None
        if args.fit_artifacts:  # one indicator column per artifact, then the copies' seconds
            g = args.graph_cache
            cols = [artifact_seconds(trace, 1.0, 0.0, 0.0, g), artifact_seconds(trace, 0.0, 1.0, 0.0, g),
                    artifact_seconds(trace, 0.0, 0.0, 1.0, g)]
            extra = [list(v) + list(c) for v, c in zip(zip(*cols), copy_seconds(trace, t, profile, args.block_size))]
        groups += sync_groups(trace, base, rows, args.warmup_groups,
                              artifacts=None if args.fit_artifacts else artifact_seconds(trace, *args.artifact_terms),
                              extra=extra)
    n = 4 + len(rows) + (5 if args.fit_artifacts else 0)
    if len(groups) < n:
        sys.exit(f"only {len(groups)} sync groups in the traces: too few to fit")
    totals = [sum(f[i] for f, _ in groups) for i in range(n)]
    base_chunk = {int(r): float(s) for r, s in profile.get("chunk_context_seconds_per_token", [])}
    fixed = {}
    for b, r in enumerate(rows):
        if totals[4 + b] < args.min_context:
            fixed[4 + b] = base_chunk.get(r, base.a(1))
    if args.no_row_term:
        fixed[3] = 0.0
    if args.hold_decode:
        if not base.dec:
            sys.exit("--hold-decode needs decode_seconds in the base profile")
        fixed[1] = 1.0
        fixed[2] = 1.0
    # A kind of step the traces lack keeps the base's scale.
    if totals[0] <= 0:
        fixed[0] = 1.0
    if totals[1] <= 0:
        fixed[1] = 1.0
    if args.fit_artifacts:  # copies the traces lack (or only synchronous ones): no interference
        for i in (4 + len(rows) + 3, 4 + len(rows) + 4):
            if totals[i] < 1.0:
                fixed[i] = 0.0
    theta = fit(groups, n, fixed)
    pred = [sum(a * b for a, b in zip(f, theta)) for f, _ in groups]
    meas = [s for _, s in groups]
    err = [(p - m) / m for p, m in zip(pred, meas) if m > 0]
    err.sort()
    print(f"{len(groups)} sync groups from {len(args.traces)} trace(s), {sum(meas):.2f} s measured, "
          f"{sum(pred):.2f} s fitted ({(sum(pred) / sum(meas) - 1) * 100:+.1f}%)")
    print(f"per group: median error {err[len(err) // 2] * 100:+.1f}%, 10-90% "
          f"{err[len(err) // 10] * 100:+.1f}% .. {err[len(err) * 9 // 10] * 100:+.1f}%")
    print(f"kT = {theta[0] * base.chunk_scale:.4f} (chunk_step_scale: a step with a chunk lasts kT x T_fwd; steps with a chunk: {totals[0]:.2f} s at the base's)")
    print(f"kD = {theta[1]:.4f} (decode-only steps' D x kD; {totals[1]:.2f} s at the base's)")
    print(f"ka = {theta[2]:.4f} (a(n) samples x ka; the base's a(n) over the decode context: {totals[2]:.2f} s)")
    for b, r in enumerate(rows):
        how = "held at the base's" if 4 + b in fixed else "fitted"
        print(f"p({r}+ rows) = {theta[4 + b] * 1e6:.3f} us per cached token ({how}; "
              f"{totals[4 + b]:.3g} chunk-context tokens)")
    if args.fit_artifacts:
        a0 = 4 + len(rows)
        print(f"first sight = {theta[a0] * 1e3:.3f} ms ({totals[a0]:.0f} steps); graph miss: new batch "
              f"{theta[a0 + 1] * 1e3:.3f} ms ({totals[a0 + 1]:.0f} steps), second step "
              f"{theta[a0 + 2] * 1e3:.3f} ms ({totals[a0 + 2]:.0f} steps)")
        print(f"copy interference: {theta[a0 + 3]:.3f} s a second of swap-in, {theta[a0 + 4]:.3f} a second of "
              f"swap-out ({totals[a0 + 3]:.2f} s / {totals[a0 + 4]:.2f} s of copies queued with forward passes)")
    print(f"q = {theta[3] * 1e9:.3f} ns per chunk row and cached token "
          f"({'held at 0' if 3 in fixed else 'fitted'}; {totals[3]:.3g} row-tokens)")
    if args.out:
        out = dict(profile)
        # kT goes into chunk_step_scale, not into T_fwd: the scheduler's decisions read T_fwd,
        # and the engine's read its own profiled curve.
        out["chunk_step_scale"] = base.chunk_scale * theta[0]
        dec = base.dec or [(n_, interp(base.tfwd, n_, False)) for n_ in (1, 2, 4, 8, 16, 32, 64)]
        out["decode_seconds"] = [[n_, t * theta[1]] for n_, t in dec]
        out["context_seconds_per_token"] = [[n_, s * theta[2]] for n_, s in base.ctx]
        out["chunk_context_seconds_per_token"] = [[r, theta[4 + b]] for b, r in enumerate(rows)]
        out["chunk_row_context_seconds"] = theta[3]
        if args.fit_artifacts:
            a0 = 4 + len(rows)
            out["first_sight_seconds"] = theta[a0]
            out["graph_miss_seconds"] = [theta[a0 + 1], theta[a0 + 2]]
            out["copy_interference"] = [theta[a0 + 3], theta[a0 + 4]]
            if args.graph_cache > 0:
                out["graph_cache_entries"] = args.graph_cache
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
