#!/usr/bin/env python3
"""bench/sim_check.py on the CPU with the default model: the profile measured by the script
itself (a short one), one point through the engine and the simulator.

- The report has the point's row: the same requests done both ways (every request of a light
  point finishes), the error as (simulated - measured) / measured of the two JSONs' means.
- The profile it measured is one `simulate --profile` reads (the row exists).
- A malformed point: a clear error, non-zero exit, nothing run.
Prints 'N passed, N failed'; exits non-zero on a failure.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from checks import check, finish

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "sim_check.py")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    args = ap.parse_args()
    if not os.path.exists(MODEL):
        print(f"skipped: {MODEL} is missing (make fetches it)")
        sys.exit(77)
    out = tempfile.mkdtemp(prefix="sim-check-test-")
    # --drain is a ceiling, not a wait: the run ends when its last request does. Under ASan on
    # two busy cores a step costs ~4x a release build's, so the light point needs minutes.
    cmd = [sys.executable, SCRIPT, "--out", out, "--bin", args.binary,
           "--engine", f"--device cpu --threads 2 --model {MODEL}",
           "--profile-args", "--max-tokens-profiled 64 --probe-context 256 --kv-cache-tokens 2048",
           "--shared", "--duration 4 --drain 240 --seed 2 --time-scale 0.05 --context-scale 0.05 "
           "--kv-cache-tokens 2048",
           "mixed:minwaste:1"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(r.returncode == 0, "one point: exit 0" + ("" if r.returncode == 0 else "\n" + r.stdout))
    check(os.path.exists(os.path.join(out, "profile.json")), "the profile it measured is written")
    bj, sj = (os.path.join(out, f"{k}-mixed-minwaste-1.json") for k in ("bench", "sim"))
    if check(os.path.exists(bj) and os.path.exists(sj), "both runs' JSON files"):
        b, s = json.load(open(bj)), json.load(open(sj))
        check(b["summary"]["submitted"] == s["summary"]["submitted"] > 0,
              "the engine and the simulator drew the same requests")
        check(b["summary"]["completed"] == b["summary"]["submitted"],
              "every request of the light point finished in the engine")
        mb = b["summary"]["normalized_latency_s_per_token"]["mean"] * 1e3
        ms = s["summary"]["normalized_latency_s_per_token"]["mean"] * 1e3
        row = [ln for ln in r.stdout.splitlines() if ln.startswith("| mixed | minwaste | 1 |")]
        if check(len(row) == 1, "the report has the point's row"):
            cells = [c.strip() for c in row[0].strip("|").split("|")]
            check(cells[4] == f"{mb:.2f}" and cells[5] == f"{ms:.2f}",
                  f"measured and simulated means from the JSON files ({cells[4]}, {cells[5]})")
            check(cells[6] == f"{(ms - mb) / mb * 100:+.1f}%", f"the error is (sim - meas) / meas ({cells[6]})")
        check(os.path.exists(os.path.join(out, "report.md")), "report.md is written")
    bad = subprocess.run([sys.executable, SCRIPT, "--out", out, "--bin", args.binary, "mixed:minwaste"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(bad.returncode != 0 and "WORKLOAD:POLICY:RATE" in bad.stdout,
          "a malformed point: a clear error")
    finish()


if __name__ == "__main__":
    main()
