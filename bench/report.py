#!/usr/bin/env python3
"""Plots of load-generator and bench results (PNG, matplotlib).

Reads result JSON files (bench/loadgen.py --json, bench/sweep_server.py's folder, or
`infercept bench --json` / bench/policy_sweep.py --out, which hold one result or a list) and
writes into --out-dir:
  norm_latency_vs_rate.png  mean normalized latency (ms/token) against arrival rate, one line
                            per policy/server (the paper's main figure); p90 dashed
  ttft_vs_rate.png          mean TTFT against arrival rate
  throughput_vs_rate.png    completed requests/s against arrival rate (the diagonal: all served)
  waste_by_cause.png        memory waste (GB*s) by cause (recompute, preserve, swap stall),
                            stacked, one bar per policy/server, one panel per rate
A line is a result's `label` (loadgen --label; else policy, plus the client mode when it is
not standard). Also prints a Markdown table of every point.

  python3 bench/report.py build/sweep --out-dir docs/bench --title "mixed, CPU smoke run"
Needs matplotlib (Debian python3-matplotlib); when the running interpreter lacks it, the
script re-runs itself with /usr/bin/python3.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _ensure(module):
    try:
        __import__(module)
        return
    except ImportError:
        pass
    if os.environ.get("REPORT_REEXEC") != "1":
        for py in ("/usr/bin/python3", os.path.join(os.path.dirname(HERE), "build", "venv", "bin", "python3")):
            if os.path.exists(py) and os.path.realpath(py) != os.path.realpath(sys.executable):
                os.environ["REPORT_REEXEC"] = "1"
                os.execv(py, [py] + sys.argv)
    sys.stderr.write("report.py: needs matplotlib (apt-get install python3-matplotlib)\n")
    sys.exit(3)


if __name__ == "__main__":
    _ensure("matplotlib")

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402

CAUSES = [("recompute", "recompute", "#d62728"), ("preserve", "preserve", "#1f77b4"),
          ("swap_stall", "swap stall", "#ff7f0e")]


def load(paths):
    """Every result in the given files and folders (a folder: its *.json)."""
    out = []
    for p in paths:
        files = sorted(glob.glob(os.path.join(p, "*.json"))) if os.path.isdir(p) else [p]
        for f in files:
            with open(f) as fh:
                j = json.load(fh)
            for r in (j if isinstance(j, list) else [j]):
                if isinstance(r, dict) and "summary" in r:
                    r.setdefault("_file", f)
                    out.append(r)
    return out


def label_of(r):
    if r.get("label"):
        return r["label"]
    lab = r.get("policy") or "server"
    if r.get("mode") and r["mode"] != "standard":
        lab += f" ({r['mode']})"
    return lab


def rate_of(r):
    return r.get("rate_requested") or r.get("rate") or 0.0


def series(results):
    """{label: [results sorted by rate]} in first-seen label order."""
    s = {}
    for r in results:
        s.setdefault(label_of(r), []).append(r)
    for v in s.values():
        v.sort(key=rate_of)
    return s


def plot_vs_rate(results, key, ylabel, path, title, scale=1e3, p90=False):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for i, (lab, rs) in enumerate(series(results).items()):
        color = f"C{i % 10}"
        xs = [rate_of(r) for r in rs]
        ax.plot(xs, [r["summary"][key]["mean"] * scale for r in rs], "o-", color=color, label=f"{lab} mean")
        if p90:
            ax.plot(xs, [r["summary"][key]["p90"] * scale for r in rs], "s--", color=color, alpha=0.6,
                    markersize=4, label=f"{lab} p90")
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_throughput(results, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    top = 0.0
    for i, (lab, rs) in enumerate(series(results).items()):
        xs = [rate_of(r) for r in rs]
        ys = [r["summary"]["throughput_rps"] for r in rs]
        top = max([top] + xs + ys)
        ax.plot(xs, ys, "o-", color=f"C{i % 10}", label=lab)
    ax.plot([0, top], [0, top], ":", color="grey", linewidth=1, label="= arrival rate")
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel("completed requests/s")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_waste(results, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rates = sorted({rate_of(r) for r in results})
    labels = list(series(results).keys())
    fig, axes = plt.subplots(1, len(rates), figsize=(max(4.0, 2.2 + 1.1 * len(labels)) * len(rates) ** 0.8, 4.2),
                             dpi=120, squeeze=False, sharey=True)
    for ax, rate in zip(axes[0], rates):
        bottoms = [0.0] * len(labels)
        for key, name, color in CAUSES:
            vals = []
            for lab in labels:
                r = next((x for x in results if label_of(x) == lab and rate_of(x) == rate), None)
                w = (r or {}).get("waste_byte_seconds") or {}
                vals.append((w.get(key) or 0.0) / 1e9)
            ax.bar(range(len(labels)), vals, bottom=bottoms, color=color, label=name, width=0.6)
            bottoms = [b + v for b, v in zip(bottoms, vals)]
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{rate:g} req/s", fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("memory waste (GB*s)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def table(results):
    sys.path.insert(0, HERE)
    from sweep_server import render
    return render(sorted(results, key=lambda r: (label_of(r), rate_of(r))))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="result JSON files or folders of them")
    ap.add_argument("--out-dir", default=".", help="where the PNGs go")
    ap.add_argument("--title", default="", help="added to each plot's title")
    a = ap.parse_args(argv)
    results = load(a.inputs)
    if not results:
        sys.exit("report.py: no results in " + " ".join(a.inputs))
    for r in results:
        r.setdefault("label", label_of(r))
    os.makedirs(a.out_dir, exist_ok=True)
    t = (" - " + a.title) if a.title else ""
    paths = [os.path.join(a.out_dir, n) for n in ("norm_latency_vs_rate.png", "ttft_vs_rate.png",
                                                  "waste_by_cause.png", "throughput_vs_rate.png")]
    plot_vs_rate(results, "normalized_latency_s_per_token", "normalized latency (ms/token)", paths[0],
                 "Normalized latency vs arrival rate" + t, p90=True)
    plot_vs_rate(results, "ttft_s", "TTFT, mean (ms)", paths[1], "Time to first token vs arrival rate" + t)
    plot_waste(results, paths[2], "Memory waste by cause" + t)
    plot_throughput(results, paths[3], "Throughput vs arrival rate" + t)
    print(table(results))
    print()
    for p in paths:
        print("wrote", p)
    return paths


if __name__ == "__main__":
    main()
