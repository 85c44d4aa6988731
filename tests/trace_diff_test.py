#!/usr/bin/env python3
"""bench/trace_diff.py on step traces written by `infercept simulate --step-trace`.

- Two simulations of the same workload with the same cost model: totals equal, no parting.
- The same workload (preserve) with the KV pool cut to a quarter: preemptions and dropped
  tokens where the roomy run has none, and the report marks the window where the two part,
  the one with the tight run's first preemption (or the next).
- The same trace gzipped (as docs/bench keeps them): the same report.
- A file that is not a step trace: a clear error, non-zero exit.
Prints 'N passed, N failed'; exits non-zero on a failure.
"""
import argparse
import csv
import gzip
import os
import subprocess
import sys
import tempfile

from checks import check, finish

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIFF = os.path.join(ROOT, "bench", "trace_diff.py")


def simulate(binary, kv_tokens, out):
    cmd = [binary, "simulate", "--profile", "h200-llama2-7b", "--workload", "mixed", "--policy",
           "preserve", "--rate", "3", "--duration", "20", "--drain", "10", "--seed", "3",
           "--kv-cache-tokens", str(kv_tokens), "--swap-space-gb", "1", "--quiet",
           "--step-trace", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def diff(a, b):
    return subprocess.run([sys.executable, DIFF, a, b], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="trace-diff-test-")
    a, b, tight = (os.path.join(tmp, n) for n in ("a.csv", "b.csv", "tight.csv"))
    simulate(args.binary, 200000, a)  # room for every context: nothing preempted
    simulate(args.binary, 200000, b)
    simulate(args.binary, 4096, tight)

    same = diff(a, b)
    check(same.returncode == 0, "two identical simulations: exit 0")
    check("do not part" in same.stdout, "two identical simulations: no parting marked")
    check("| steps | " in same.stdout and "Mean step ms by shape" in same.stdout,
          "totals and the by-shape table are printed")
    # The simulated side on the engine's clock: same totals, the conversion said.
    exact = subprocess.run([sys.executable, DIFF, a, b, "--sim-clock", "exact"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    def fwd(out):  # (measured, simulated) forward seconds of the totals table
        line = next(ln for ln in out.splitlines() if ln.startswith("| forward s |"))
        return [float(x) for x in line.strip("|").split("|")[1:]]
    check("engine's clock" in same.stdout and "engine's clock" not in exact.stdout,
          "the simulated times are put on the engine's clock unless --sim-clock exact")
    m_s, s_s = fwd(same.stdout)
    check(fwd(exact.stdout)[1] == m_s and abs(s_s - m_s) <= 0.01 * m_s,
          f"the engine's clock keeps the forward seconds within 1% ({s_s:.2f} against {m_s:.2f})")

    with open(tight, newline="") as f:
        rows = list(csv.DictReader(f))
    first_pre = next((float(r["t"]) for r in rows
                      if int(r["preempted"]) > 0 or int(r["dropped_tokens"]) > 0), None)
    check(first_pre is not None, "the tight pool preempts or drops KV")
    parted = diff(a, tight)
    check(parted.returncode == 0, "against the tight run: exit 0")
    line = next((ln for ln in parted.stdout.splitlines() if "part here" in ln), None)
    check(line is not None, "against the tight run: the parting window is marked")
    if line is not None and first_pre is not None:
        start = float(line.split("|")[1])
        # Preserve drops nothing while the pool has room: the runs cannot part before the
        # tight one's first preemption, and the rule must see it within a window or two.
        check(first_pre - 2.0 < start <= first_pre + 2.0,
              f"the parting window ({start:.0f} s) holds the first drop ({first_pre:.1f} s)")

    # Traces kept gzipped (docs/bench) read the same as plain ones.
    with open(tight, "rb") as f, gzip.open(tight + ".gz", "wb") as g:
        g.write(f.read())
    zipped = diff(a, tight + ".gz")
    check(zipped.returncode == 0 and zipped.stdout == parted.stdout,
          "a gzipped trace gives the same report as the plain file")

    bad = diff(os.path.join(ROOT, "README.md"), a)
    check(bad.returncode != 0 and "not a step trace" in bad.stdout, "a non-trace file: clear error")

    finish()


if __name__ == "__main__":
    main()
