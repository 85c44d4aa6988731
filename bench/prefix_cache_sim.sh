#!/usr/bin/env bash
# The prefix cache on the shared-prefix agent workload, simulated for the H200 profiles:
# minwaste with the cache against minwaste and discard without it, a rate sweep each, the
# paper experiment's settings (bench/h200_paper.sh) plus one system prompt in front of every
# prompt. Prints one line per point and writes each point's JSON under OUT.
#
#   bash bench/prefix_cache_sim.sh [OUT]        (default docs/bench/prefix-cache-sim)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/bench/prefix-cache-sim}
BIN=${BIN:-build/infercept}
mkdir -p "$OUT"
COMMON=(--workload mixed --duration 25 --drain 13 --seed 7 --time-scale 0.1 --context-scale 1
        --kv-cache-tokens 16384 --swap-space-gb 16 --max-batch-tokens 512 --max-seqs 64 --quiet)
point() {  # SHAPE PREFIX EXTRA POLICY CACHE RATE
  local f="$OUT/$1-$4-cache$5-r$6.json"
  # shellcheck disable=SC2086
  "$BIN" simulate --profile "h200-$1" "${COMMON[@]}" --shared-prefix "$2" $3 --policy "$4" \
    --prefix-cache "$5" --rate "$6" --json "$f"
  python3 - "$f" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s, pc = j["summary"], j["prefix_cache"]
nl, tt = s["normalized_latency_s_per_token"], s["ttft_s"]
print(f"{sys.argv[1].split('/')[-1]:42s} norm lat mean {nl['mean']*1e3:6.2f} p90 {nl['p90']*1e3:6.2f} ms/tok"
      f"  TTFT mean {tt['mean']*1e3:7.1f} ms  done {s['completed']}/{s['submitted']}"
      f"  hit {pc['hit_rate']*100:5.1f}%")
PY
}
# llama2-7b (4,096-token context): a 1,024-token system prompt, drawn requests clamped to 3,000.
for r in 1 1.5 2 2.5 3 3.5 4 4.5 5; do point llama2-7b 1024 "--max-context 3000" minwaste on $r; done
for r in 1 1.5 2 2.25 2.5 2.75 3 4; do point llama2-7b 1024 "--max-context 3000" minwaste off $r; done
for r in 1 1.5 2 2.5; do point llama2-7b 1024 "--max-context 3000" discard off $r; done
# llama3-8b: a 2,048-token system prompt.
for r in 2 3 4 4.5 5 6; do point llama3-8b 2048 "" minwaste on $r; done
for r in 1.5 2 2.25 2.5 3 4; do point llama3-8b 2048 "" minwaste off $r; done
for r in 1 1.5 2 3; do point llama3-8b 2048 "" discard off $r; done
