#!/usr/bin/env python3
"""The paper's experiment on the H200: table, plots, and the simulator's prediction of every point.

Reads the result folders of bench/h200_paper.sh (paper-a/, paper-b/, ... each with a
manifest.jsonl and one `infercept bench --json` file per point; a .tgz as it came back from
the device works too), then
  1. prints the measured table: per workload, policy, estimator and rate: requests done /
     submitted, completed req/s, normalized latency mean/p50/p90/p99 (ms/token), TTFT, the
     recomputed and swapped tokens, waste by cause (GB*s), wall time of the point;
  2. reruns every point through `infercept simulate --profile h200-SHAPE` with exactly the
     flags the point ran with (same workload, seed, rate, scales, pools, step sizes) and prints
     simulated against measured with the error in %, marking the points below saturation
     (issue 6, item 5 asks for the mean within 15% there);
  3. checks the issue's targets that the points allow (minwaste against discard, ttl, swap;
     the estimators);
  4. draws into --out-dir, per workload: norm_latency_vs_rate_W.png (measured solid, simulated
     dotted, one colour per policy; the paper's main figure), ttft_vs_rate_W.png,
     waste_by_cause_W.png (stacked bars per policy, one panel per rate), and
     sim_vs_measured.png (every point, with the +-15% band).

  python3 bench/paper_report.py RESULTS... [--out-dir DIR] [--bin build/infercept]
      [--sim-profile PROFILE] [--sim-args FLAGS] [--no-sim] [--markdown FILE]
RESULTS: folders (searched for manifest.jsonl) or .tgz archives. A point that appears in
several folders is taken from the last one given that has its result.
Needs matplotlib for the plots (Debian python3-matplotlib); when the running interpreter
lacks it, the script re-runs itself with /usr/bin/python3 (--no-plots to skip them).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _ensure_matplotlib():
    if "--no-plots" in sys.argv or "--out-dir" not in sys.argv:
        return
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("REPORT_REEXEC") != "1":
        for py in ("/usr/bin/python3", os.path.join(ROOT, "build", "venv", "bin", "python3")):
            if os.path.exists(py) and os.path.realpath(py) != os.path.realpath(sys.executable):
                os.environ["REPORT_REEXEC"] = "1"
                os.execv(py, [py] + sys.argv)
    sys.stderr.write("paper_report.py: needs matplotlib for the plots "
                     "(apt-get install python3-matplotlib), or pass --no-plots\n")
    sys.exit(3)


if __name__ == "__main__":
    _ensure_matplotlib()

import argparse  # noqa: E402
import concurrent.futures  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402

POLICIES = ["discard", "improved-discard", "preserve", "swap", "ttl", "minwaste"]
COLORS = {"discard": "#d62728", "improved-discard": "#ff7f0e", "preserve": "#1f77b4",
          "swap": "#9467bd", "ttl": "#2ca02c", "minwaste": "#000000"}
ESTIMATOR_STYLE = {"learned": "o", "oracle": "s", "elapsed": "^"}
CAUSES = [("recompute", "recompute", "#d62728"), ("preserve", "preserve", "#1f77b4"),
          ("swap_stall", "swap stall", "#ff7f0e")]
WORKLOAD_ORDER = ["mixed", "qa", "chat", "math", "ve", "image", "tts"]


# ---------------------------------------------------------------------------------- loading

def find_manifests(path, tmp):
    """manifest.jsonl files under a folder, or inside a .tgz (unpacked into tmp)."""
    if os.path.isfile(path) and (path.endswith(".tgz") or path.endswith(".tar.gz")):
        dest = tempfile.mkdtemp(prefix="paper-", dir=tmp)
        with tarfile.open(path) as t:
            try:
                t.extractall(dest, filter="data")
            except TypeError:  # Python without extraction filters
                t.extractall(dest)
        path = dest
    if os.path.isfile(path) and os.path.basename(path) == "manifest.jsonl":
        return [path]
    out = []
    for d, _, files in sorted(os.walk(path)):
        if "manifest.jsonl" in files:
            out.append(os.path.join(d, "manifest.jsonl"))
    return sorted(out)


def load_points(paths, tmp):
    """Points by name, in order of first appearance; a later result replaces an earlier one."""
    points, order = {}, []
    for p in paths:
        manifests = find_manifests(p, tmp)
        if not manifests:
            sys.stderr.write(f"paper_report.py: no manifest.jsonl under {p}\n")
        for m in manifests:
            folder = os.path.dirname(m)
            with open(m) as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    e = json.loads(line)
                    e["_folder"] = folder
                    e["result"] = None
                    if e.get("json"):
                        jp = os.path.join(folder, e["json"])
                        if os.path.exists(jp):
                            with open(jp) as jf:
                                e["result"] = json.load(jf)
                    old = points.get(e["name"])
                    if old is None:
                        order.append(e["name"])
                    if old is None or e["result"] is not None or old["result"] is None:
                        points[e["name"]] = e
    return [points[n] for n in order]


# ------------------------------------------------------------------------------- simulation

def sim_profile_for(point, override):
    if override:
        return override
    return "h200-" + point.get("shape", "llama2-7b")


def simulate(points, binary, profile_override, extra, jobs, tmp):
    def one(e):
        out = os.path.join(tmp, "sim-" + e["name"] + ".json")
        cmd = [binary, "simulate", "--profile", sim_profile_for(e, profile_override),
               "--workload", e["workload"], "--policy", e["policy"], "--estimator", e["estimator"],
               "--rate", str(e["rate"])] + list(e["shared_args"]) + extra + ["--json", out, "--quiet"]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            sys.stderr.write(f"simulate failed for {e['name']}: {p.stderr.strip()}\n  {' '.join(cmd)}\n")
            return None
        with open(out) as f:
            r = json.load(f)
        r["_cmd"] = cmd
        return r

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for e, r in zip(points, pool.map(one, points)):
            e["sim"] = r


# ---------------------------------------------------------------------------------- metrics

def nl(r, q="mean"):
    """Normalized latency in ms/token."""
    return r["summary"]["normalized_latency_s_per_token"][q] * 1e3


def ttft(r, q="mean"):
    return r["summary"]["ttft_s"][q] * 1e3


def has_lat(r):
    """Whether a result has latencies at all (at least one request completed)."""
    return r is not None and r["summary"]["completed"] > 0


def done_frac(r):
    s = r["summary"]
    return s["completed"] / s["submitted"] if s["submitted"] else 0.0


def gbs(r, cause):
    return r.get("waste_byte_seconds", {}).get(cause, 0.0) / 1e9


def err_pct(sim, meas):
    if meas <= 0:
        return float("nan")
    return 100.0 * (sim - meas) / meas


def fmt(x, nd=1):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{nd}f}"


def pct(x):
    return "-" if math.isnan(x) else f"{x:+.0f}%"


def fmt_rate(x):
    return f"{x:g}"


def below_saturation(e, min_done, max_ttft_ms):
    """Below saturation: no queue of arrivals built up (mean TTFT small) and most requests
    finished by the hard stop. Judged on the measurement. (With short points the done share
    is below 1 even at light load: requests that arrive late and pause long are still out at
    duration + drain, so TTFT is the sharper sign.)"""
    r = e["result"]
    return done_frac(r) >= min_done and ttft(r) <= max_ttft_ms


def label(e):
    lab = e["policy"]
    if e["estimator"] != "learned":
        lab += f" ({e['estimator']})"
    return lab


def sort_key(e):
    w = e["workload"]
    return (WORKLOAD_ORDER.index(w) if w in WORKLOAD_ORDER else 99, w,
            POLICIES.index(e["policy"]) if e["policy"] in POLICIES else 99,
            e["estimator"] != "learned", e["estimator"], float(e["rate"]))


# ----------------------------------------------------------------------------------- tables

def run_seconds(e):
    """The engine's run time of a point as bench printed it ("(NN s run)"), else None."""
    log = os.path.join(e["_folder"], e["name"] + ".log")
    try:
        with open(log, errors="replace") as f:
            m = re.search(r"\((\d+) s run\)", f.read())
        return int(m.group(1)) if m else None
    except OSError:
        return None


def timing_summary(points):
    """Wall time of the points and what each cost beyond its run (start-up: load, pools, profile)."""
    by_folder = {}
    for e in points:
        by_folder.setdefault(e["_folder"], []).append(e)
    out = []
    for folder, es in by_folder.items():
        ran = [e for e in es if e["rc"] != "skipped"]
        over = [e.get("wall_s", 0) - run_seconds(e) for e in ran if run_seconds(e) is not None]
        skipped = len(es) - len(ran)
        out.append(f"{os.path.basename(folder)}: {len(ran)} points ran in {sum(e.get('wall_s', 0) for e in ran)} s"
                   + (f", start-up per point {min(over)}-{max(over)} s (mean {sum(over) / len(over):.1f})"
                      if over else "") + (f", {skipped} skipped for time" if skipped else "")
                   + (f", {sum(1 for e in ran if e['result'] is None)} without a result" if any(
                       e["result"] is None for e in ran) else ""))
    return "\n".join(out)


def measured_table(points):
    lines = ["| workload | policy | estimator | rate req/s (drawn) | done/submitted | completed/s | "
             "norm. latency mean / p50 / p90 / p99 (ms/token) | TTFT mean / p99 (ms) | recomputed tok | "
             "swapped out tok | waste GB*s recompute / preserve / swap stall | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in points:
        r = e["result"]
        if r is None:
            lines.append(f"| {e['workload']} | {e['policy']} | {e['estimator']} | {fmt_rate(e['rate'])} | "
                         f"no result (rc {e['rc']}) | | | | | | | {e.get('wall_s', 0)} |")
            continue
        s = r["summary"]
        lat = (f"{nl(r):.1f} / {nl(r, 'p50'):.1f} / {nl(r, 'p90'):.1f} / {nl(r, 'p99'):.1f} | "
               f"{ttft(r):.0f} / {ttft(r, 'p99'):.0f}") if has_lat(r) else "- | -"
        lines.append(
            f"| {e['workload']} | {e['policy']} | {e['estimator']} | {fmt_rate(e['rate'])} ({r['rate']:.2f}) | "
            f"{s['completed']}/{s['submitted']} | {s['throughput_rps']:.2f} | "
            f"{lat} | {r.get('recomputed_tokens', 0)} | "
            f"{r.get('swapped_out_tokens', 0)} | {gbs(r, 'recompute'):.1f} / {gbs(r, 'preserve'):.1f} / "
            f"{gbs(r, 'swap_stall'):.2f} | {e.get('wall_s', 0)} |")
    return "\n".join(lines)


def sim_table(points, min_done, max_ttft_ms, tol):
    lines = ["| workload | policy | estimator | rate | regime | done meas / SIM | "
             "measured mean / p50 / p90 / p99 | SIMULATED mean / p50 / p90 / p99 | "
             "error mean / p90 | TTFT meas / SIM (ms) | SIM run s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    below = within = 0
    worst = None
    for e in points:
        r, s = e["result"], e.get("sim")
        if s is None:
            continue
        sim_part = (f"{nl(s):.1f} / {nl(s, 'p50'):.1f} / {nl(s, 'p90'):.1f} / {nl(s, 'p99'):.1f}"
                    if has_lat(s) else "-")
        if r is None:
            lines.append(f"| {e['workload']} | {e['policy']} | {e['estimator']} | {fmt_rate(e['rate'])} | "
                         f"not measured | - / {s['summary']['completed']}/{s['summary']['submitted']} | - | "
                         f"{sim_part} | - | - / {ttft(s):.0f} | {s['engine']['simulated_s']:.0f} |")
            continue
        both = has_lat(r) and has_lat(s)
        em = err_pct(nl(s), nl(r)) if both else float("nan")
        e90 = err_pct(nl(s, "p90"), nl(r, "p90")) if both else float("nan")
        b = both and below_saturation(e, min_done, max_ttft_ms)
        ok = ""
        if b:
            below += 1
            if abs(em) <= tol:
                within += 1
                ok = " ok"
            else:
                ok = " MISS"
            if worst is None or abs(em) > abs(worst[0]):
                worst = (em, e["name"])
        meas_part = (f"{nl(r):.1f} / {nl(r, 'p50'):.1f} / {nl(r, 'p90'):.1f} / {nl(r, 'p99'):.1f}"
                     if has_lat(r) else "-")
        lines.append(
            f"| {e['workload']} | {e['policy']} | {e['estimator']} | {fmt_rate(e['rate'])} | "
            f"{'below' if b else 'saturated'} | {r['summary']['completed']}/{r['summary']['submitted']} / "
            f"{s['summary']['completed']}/{s['summary']['submitted']} | "
            f"{meas_part} | {sim_part} | "
            f"{pct(em)}{ok} / {pct(e90)} | {ttft(r):.0f} / {ttft(s):.0f} | "
            f"{s['engine']['simulated_s']:.0f} |")
    summary = (f"Below saturation (measured: >= {min_done:.0%} of the requests done, mean TTFT <= "
               f"{max_ttft_ms:.0f} ms): {below} points, simulated mean normalized latency within "
               f"{tol:.0f}% of measured at {within}")
    if worst:
        summary += f"; largest error {worst[0]:+.1f}% ({worst[1]})"
    return "\n".join(lines), summary + "."


def interp_rate(curve, y):
    """The rate at which a (rate, latency) curve, sorted by rate, first reaches latency y
    (linear between measured points); None if it never does within the points."""
    for (r0, y0), (r1, y1) in zip(curve, curve[1:]):
        if y0 <= y <= y1 and y1 > y0:
            return r0 + (r1 - r0) * (y - y0) / (y1 - y0)
    return None


def targets(points, slo, min_done):
    """The issue's targets, as far as these points go (mixed workload, learned estimator)."""
    out = []
    for wl in sorted({e["workload"] for e in points}, key=lambda w: WORKLOAD_ORDER.index(w)
                     if w in WORKLOAD_ORDER else 99):
        by = {}
        for e in points:
            if e["workload"] == wl and has_lat(e["result"]):
                by.setdefault((e["policy"], e["estimator"]), {})[float(e["rate"])] = e["result"]
        mw, dc = by.get(("minwaste", "learned"), {}), by.get(("discard", "learned"), {})
        if not mw and not dc:
            continue
        out.append(f"{wl}:")

        def sustained(curve):
            ok = [rate for rate, r in sorted(curve.items()) if nl(r) <= slo and done_frac(r) >= min_done]
            return max(ok) if ok else None

        for (pol, est), curve in sorted(by.items(), key=lambda kv: (POLICIES.index(kv[0][0])
                                                                     if kv[0][0] in POLICIES else 99, kv[0][1])):
            s = sustained(curve)
            out.append(f"  sustained rate (mean <= {slo:g} ms/token, >= {min_done:.0%} done), "
                       f"{pol} ({est}): {fmt_rate(s) if s is not None else '< ' + fmt_rate(min(curve))} req/s "
                       f"of {', '.join(fmt_rate(x) for x in sorted(curve))}")
        if mw and dc:
            mcurve = sorted((rate, nl(r)) for rate, r in mw.items())
            for rate, r in sorted(dc.items()):
                m = interp_rate(mcurve, nl(r))
                if m is not None:
                    out.append(f"  equal latency: discard at {fmt_rate(rate)} req/s has {nl(r):.1f} ms/token; "
                               f"minwaste reaches it at {m:.2f} req/s ({m / rate:.2f}x; target >= 2x)")
            for rate in sorted(set(mw) & set(dc)):
                a, b = dc[rate], mw[rate]
                rw = gbs(b, "recompute") / gbs(a, "recompute") if gbs(a, "recompute") > 0 else float("nan")
                out.append(f"  at {fmt_rate(rate)} req/s: discard/minwaste latency {nl(a) / max(nl(b), 1e-9):.2f}x "
                           f"(target >= 2x where discard is loaded); recompute waste {100 * (rw - 1):+.0f}% "
                           f"(target <= -60%)")
        sw = by.get(("swap", "learned"), {})
        for rate in sorted(set(mw) & set(sw)):
            a, b = gbs(sw[rate], "swap_stall"), gbs(mw[rate], "swap_stall")
            out.append(f"  at {fmt_rate(rate)} req/s: swap-stall waste minwaste {b:.2f} against swap {a:.2f} GB*s "
                       f"({100 * b / a:.1f}%; target <= 5%)" if a > 0 else
                       f"  at {fmt_rate(rate)} req/s: swap-stall waste minwaste {b:.2f}, swap 0 GB*s")
        tt = by.get(("ttl", "learned"), {})
        for rate in sorted(set(mw) & set(tt)):
            d = 100.0 * (nl(mw[rate]) / nl(tt[rate]) - 1.0)
            out.append(f"  at {fmt_rate(rate)} req/s: minwaste {nl(mw[rate]):.1f} against ttl {nl(tt[rate]):.1f} "
                       f"ms/token ({d:+.1f}%: " + ("better" if d < -2.0 else "equal within 2%" if d <= 2.0
                                                   else "WORSE") + ")")
        ests = {est: c for (pol, est), c in by.items() if pol == "minwaste"}
        common = sorted(set.intersection(*(set(c) for c in ests.values()))) if len(ests) > 1 else []
        for rate in common:
            out.append(f"  minwaste at {fmt_rate(rate)} req/s by estimator: " + ", ".join(
                f"{est} {nl(c[rate]):.1f}" for est, c in sorted(ests.items())) + " ms/token (mean)")
    return "\n".join(out)


# ------------------------------------------------------------------------------------ plots

def log_axis(axis):
    """Log scale with plain numbers at 1, 2, 5 x 10^k."""
    from matplotlib.ticker import FuncFormatter, LogLocator
    axis.axes.set_xscale("log") if axis is axis.axes.xaxis else axis.axes.set_yscale("log")
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def plots(points, out_dir, title, tol):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    written = []
    workloads = sorted({e["workload"] for e in points},
                       key=lambda w: WORKLOAD_ORDER.index(w) if w in WORKLOAD_ORDER else 99)
    for wl in workloads:
        pts = [e for e in points if e["workload"] == wl]
        lines = {}
        for e in pts:
            lines.setdefault((e["policy"], e["estimator"]), []).append(e)
        for metric, fname, ylab in ((nl, "norm_latency_vs_rate", "mean normalized latency (ms/token)"),
                                    (ttft, "ttft_vs_rate", "mean TTFT (ms)")):
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for (pol, est), es in sorted(lines.items(), key=lambda kv: (POLICIES.index(kv[0][0])
                                                                         if kv[0][0] in POLICIES else 99,
                                                                         kv[0][1] != "learned", kv[0][1])):
                es = sorted(es, key=lambda e: float(e["rate"]))
                c = COLORS.get(pol, "#7f7f7f")
                mk = ESTIMATOR_STYLE.get(est, "x")
                lab = pol if est == "learned" else f"{pol} ({est})"
                m = [(float(e["rate"]), metric(e["result"])) for e in es if has_lat(e["result"])]
                s = [(float(e["rate"]), metric(e["sim"])) for e in es if has_lat(e.get("sim"))]
                if m:
                    ax.plot(*zip(*m), marker=mk, color=c, label=lab, linewidth=1.6)
                if s:
                    ax.plot(*zip(*s), marker=mk, color=c, linestyle=":", linewidth=1.0, alpha=0.6,
                            markerfacecolor="none", label=None if m else lab + " (SIM only)")
            ax.set_xlabel("arrival rate (req/s)")
            ax.set_ylabel(ylab)
            log_axis(ax.yaxis)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(f"{title}: {wl} (solid measured, dotted SIMULATED)", fontsize=10)
            ax.legend(fontsize=8)
            fig.tight_layout()
            p = os.path.join(out_dir, f"{fname}_{wl}.png")
            fig.savefig(p, dpi=120)
            plt.close(fig)
            written.append(p)

        # Waste by cause: one panel per rate, a stacked bar per policy (and estimator).
        rates = sorted({float(e["rate"]) for e in pts if e["result"] is not None})
        if rates:
            fig, axes = plt.subplots(1, len(rates), figsize=(3.2 * len(rates) + 1, 4.2), squeeze=False)
            for ax, rate in zip(axes[0], rates):
                es = sorted([e for e in pts if float(e["rate"]) == rate and e["result"] is not None],
                            key=sort_key)
                x = list(range(len(es)))
                bottom = [0.0] * len(es)
                for key, name, color in CAUSES:
                    v = [gbs(e["result"], key) for e in es]
                    ax.bar(x, v, bottom=bottom, color=color, label=name)
                    bottom = [b + y for b, y in zip(bottom, v)]
                ax.set_xticks(x)
                ax.set_xticklabels([label(e) for e in es], rotation=60, ha="right", fontsize=7)
                ax.set_title(f"{fmt_rate(rate)} req/s", fontsize=9)
                ax.grid(True, axis="y", alpha=0.3)
            axes[0][0].set_ylabel("waste (GB*s)")
            axes[0][-1].legend(fontsize=7)
            fig.suptitle(f"{title}: {wl}, memory waste by cause (measured)", fontsize=10)
            fig.tight_layout()
            p = os.path.join(out_dir, f"waste_by_cause_{wl}.png")
            fig.savefig(p, dpi=120)
            plt.close(fig)
            written.append(p)

    both = [e for e in points if has_lat(e["result"]) and has_lat(e.get("sim"))]
    if both:
        fig, ax = plt.subplots(figsize=(5.5, 5))
        lo = min(min(nl(e["result"]), nl(e["sim"])) for e in both) / 1.5
        hi = max(max(nl(e["result"]), nl(e["sim"])) for e in both) * 1.5
        ax.plot([lo, hi], [lo, hi], color="#7f7f7f", linewidth=0.8)
        ax.fill_between([lo, hi], [lo * (1 - tol / 100), hi * (1 - tol / 100)],
                        [lo * (1 + tol / 100), hi * (1 + tol / 100)], color="#7f7f7f", alpha=0.15,
                        label=f"+-{tol:.0f}%")
        seen = set()
        for e in both:
            pol = e["policy"]
            ax.scatter(nl(e["result"]), nl(e["sim"]), color=COLORS.get(pol, "#7f7f7f"),
                       marker={"mixed": "o", "qa": "s", "chat": "^"}.get(e["workload"], "x"),
                       label=None if pol in seen else pol, s=22)
            seen.add(pol)
        log_axis(ax.xaxis)
        log_axis(ax.yaxis)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured mean normalized latency (ms/token)")
        ax.set_ylabel("SIMULATED (ms/token)")
        ax.set_title(f"{title}: simulator against measurement\n(o mixed, square QA, triangle chat)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = os.path.join(out_dir, "sim_vs_measured.png")
        fig.savefig(p, dpi=120)
        plt.close(fig)
        written.append(p)
    return written


# ------------------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+", help="result folders or .tgz archives of bench/h200_paper.sh")
    ap.add_argument("--out-dir", default=None, help="where the PNGs go (default: no plots)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "infercept"),
                    help="infercept binary that runs `simulate` (a CPU build is fine)")
    ap.add_argument("--sim-profile", default=None,
                    help="simulate with this profile instead of h200-SHAPE (a built-in name or a profile cache)")
    ap.add_argument("--sim-args", default="",
                    help="more flags for every simulate call, e.g. with the engine's own profile cache from "
                         "the results: --sim-profile paper-a/llama2-7b.profile-cuda-16t.json "
                         "--sim-args '--context-cost-us 0.204 --sample-cost-us 19.5'")
    ap.add_argument("--no-sim", action="store_true")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--title", default="llama2-7b, one H200")
    ap.add_argument("--tolerance", type=float, default=15.0, help="%% allowed below saturation")
    ap.add_argument("--min-done", type=float, default=0.8,
                    help="below saturation: at least this share of the requests done")
    ap.add_argument("--max-ttft-ms", type=float, default=250.0,
                    help="below saturation: mean TTFT at most this")
    ap.add_argument("--slo", type=float, default=20.0,
                    help="mean normalized latency (ms/token) that counts as sustained")
    ap.add_argument("--markdown", default=None, help="also write the tables here")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="infercept-paper-report-")
    points = load_points(args.results, tmp)
    if not points:
        sys.exit("paper_report.py: no points found")
    points.sort(key=sort_key)
    if not args.no_sim:
        simulate(points, args.bin, args.sim_profile, args.sim_args.split(), args.jobs, tmp)

    text = []
    n_ok = sum(e["result"] is not None for e in points)
    shapes = sorted({e.get("shape", "?") for e in points})
    sa = points[0]["shared_args"]
    text.append(f"## Measured ({n_ok} of {len(points)} points; shape {', '.join(shapes)}; "
                f"flags of every point: {' '.join(sa)})\n")
    if any(e["shared_args"] != sa for e in points):
        text.append("(points differ in their flags: see manifest.jsonl)\n")
    text.append(measured_table(points))
    text.append("\n" + timing_summary(points))
    if not args.no_sim:
        prof = args.sim_profile or ", ".join(sorted({sim_profile_for(e, None) for e in points}))
        t, s = sim_table(points, args.min_done, args.max_ttft_ms, args.tolerance)
        text.append(f"\n## SIMULATED (`infercept simulate --profile {prof}{' ' + args.sim_args if args.sim_args else ''}`"
                    ", same flags) against measured\n")
        text.append(t)
        text.append("\n" + s)
    tg = targets(points, args.slo, args.min_done)
    if tg:
        text.append("\n## The issue's targets, as far as these points go\n")
        text.append(tg)
    report = "\n".join(text)
    print(report)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(report + "\n")
    if args.out_dir and not args.no_plots:
        for p in plots(points, args.out_dir, args.title, args.tolerance):
            print("wrote", p)


if __name__ == "__main__":
    main()
