#!/usr/bin/env python3
"""Sums Nsight Compute's per-kernel durations (bench/gpu_run.sh ncu-SHAPE) by kernel kind.

Reads `ncu --csv --metrics gpu__time_duration.sum` output and prints, per kernel name (the
template arguments dropped), how many launches there were, their total and mean time, and
the share of the total; kernels ran one at a time under the profiler, so the total is the
step's kernel time without overlap (an upper bound of the real, overlapped step)."""
import csv
import re
import sys
from collections import defaultdict


def short(name: str) -> str:
    # Anonymous namespaces: "(anonymous namespace)::" or, in newer Nsight Compute, "<unnamed>::".
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    name = re.sub(r"<.*", "", name)  # template arguments
    name = re.sub(r"\(.*", "", name)  # parameters
    return name.split("::")[-1].split()[-1] if name.strip() else "?"


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: ncu_summary.py NCU.csv", file=sys.stderr)
        return 2
    rows = []
    with open(sys.argv[1], newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu prints its own log lines too
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1e-3)
        rows.append((short(r["Kernel Name"]), value * scale, r.get("Grid Size", ""), r.get("Block Size", "")))
    if not rows:
        print("no kernel rows found")
        return 1
    by = defaultdict(list)
    for name, us, grid, block in rows:
        by[(name, grid)].append(us)
    total = sum(us for _, us, _, _ in rows)
    print(f"{len(rows)} kernels, {total:.1f} us in all")
    print("| kernel | grid | launches | total us | mean us | share |")
    print("|---|---|---:|---:|---:|---:|")
    for (name, grid), v in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        print(f"| {name} | {grid} | {len(v)} | {sum(v):.1f} | {sum(v) / len(v):.2f} | {100 * sum(v) / total:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
