#!/bin/bash
# A/B of two infercept binaries on decode throughput, alternating so that a slow moment of a
# shared machine hits both: per round, `bench-decode --batch 32` then `--batch 1` on A, then B.
# Prints one line per run with the 1-minute load average taken just before it, then the
# median and best of each (binary, batch).
#   usage: bench/ab_decode.sh BIN_A BIN_B [ROUNDS=3] [extra bench-decode flags...]
set -euo pipefail
a=$1 b=$2 rounds=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
out=$(mktemp)
# The host CPU: the shared machine has been an Intel Xeon and an AMD EPYC on different days
# (docs/PERF.md, "CPU: decode and prefill against llama.cpp"), and batch 1 differs most between them.
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs) (family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2- | xargs), model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2- | xargs))"
for r in $(seq 1 "$rounds"); do
  for batch in 32 1; do
    for bin in "$a" "$b"; do
      load=$(cut -d' ' -f1 /proc/loadavg)
      tok=$("$bin" bench-decode --batch "$batch" "$@" | sed -E 's/.*decode ([0-9.]+) tok.*/\1/')
      echo "round $r batch $batch bin $bin load $load decode $tok" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    runs[(f[5], int(f[3]))].append(float(f[-1]))
for (bin_, batch), v in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"batch {batch:2d} {bin_}: median {statistics.median(v):.1f} best {max(v):.1f} tok/s over {len(v)} runs")
# Batch 32 over batch 1 per round and binary (the two runs of a round are seconds apart, so a
# slow stretch of the shared machine hits both): the issue's ratio, paired.
for bin_ in dict.fromkeys(b for b, _ in runs):
    r = [a / b for a, b in zip(runs[(bin_, 32)], runs[(bin_, 1)])]
    if r:
        print(f"batch 32 / batch 1 {bin_}: per round median {statistics.median(r):.2f}x "
              f"(min {min(r):.2f}x, max {max(r):.2f}x); medians {statistics.median(runs[(bin_, 32)]) / statistics.median(runs[(bin_, 1)]):.2f}x, "
              f"best {max(runs[(bin_, 32)]) / max(runs[(bin_, 1)]):.2f}x")
PY
rm -f "$out"
