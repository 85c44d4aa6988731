#!/usr/bin/env bash
# The InferCept paper's experiment on the lent H200 (issue 6, item 3), one chunk per device call.
#
# `infercept bench --device cuda` (tool calls scripted inside the engine, so random weights
# are fine) on a random-weight checkpoint made here by `make-model`, one process per point
# (a point = workload, policy, estimator, rate), every point with the same seed, so every
# policy at a rate replays the same requests. Settings and why: docs/BENCHMARKS.md, "The
# paper's experiment on the H200"; `infercept simulate --profile h200-llama2-7b` predicts each
# point and bench/paper_report.py puts the two side by side.
#
#   bash bench/h200_paper.sh CHUNK|POINT...
#     chunks: a  mixed, the headline: discard and minwaste at 2/4/6 req/s, all six policies at 4,
#                minwaste at 5                                                  (11 points)
#             b  mixed, the rest: discard at 3; improved-discard, preserve, swap, ttl at 2 and 6;
#                minwaste at 5 with the oracle and elapsed estimators           (11 points)
#             c  QA-only and chat-only at 6 req/s: discard, minwaste, preserve  (6 points)
#     a point: WORKLOAD:POLICY:RATE[:ESTIMATOR[:VARIANT]]   e.g. mixed:minwaste:5:oracle (learned
#                if left out); VARIANT nocache runs it with --prefix-cache off
#   device call:  bash bench/h200_paper.sh a     with carry [".carry/bin"] (a CUDA build of
#                 infercept, cmake -B build-cuda -DINFERCEPT_NATIVE=OFF, copied there)
#
# Out: $OUT/paper-NAME.tgz (NAME = the chunk, or "points"), a folder paper-NAME/ holding per
# point NAME.json (bench --json) and NAME.log, manifest.jsonl (one line per point: its exact
# flags, exit status, wall time), summary.txt, gpu.txt, the engine's measured cost-model
# cache. The archive is rewritten after every point, so what finished comes back even if the
# call is cut off; points that would not end within BUDGET_S seconds of the start are skipped
# (listed in the manifest with "rc": "skipped"; each chunk lists its points most valuable
# first). Whole call: at most BUDGET_S + 6 s.
#
# Environment (defaults = the plan in docs/BENCHMARKS.md; change them only for a new plan):
#   SHAPE=llama2-7b  DURATION=25 (s of arrivals)  DRAIN=13  SEED=7  TIME_SCALE=0.1
#   CONTEXT_SCALE=1  KV_TOKENS=16384  SWAP_GB=16  MAX_BATCH_TOKENS=512  MAX_SEQS=64
#   BUDGET_S=505 (whole call, make-model included)  BIN=.carry/bin/infercept  DEVICE=cuda
#   MODEL=models/$SHAPE (made if missing)  KV_DTYPE=bf16
#   DRY_RUN=1: print the commands only.
#   STEP_TRACE=1: each point also writes NAME.trace.csv (bench --step-trace: one row per step),
#     which bench/paper_report.py lays beside the simulation's (bench/trace_diff.py).
#   RUN_NAME=points: the NAME of a list of points, so one call can run the script several times
#     (e.g. once per SEED) without one archive overwriting the other.
#   SHARED_PREFIX=0: tokens of one system prompt in front of every prompt (bench --shared-prefix;
#     the prefix cache's workload). MAX_CONTEXT=0: the workload's clamp on a drawn request's
#     final context (--max-context; 0 none), so that prefix + request fit the model.
# Local check of the script itself (CPU, default model, seconds):
#   BIN=build/infercept DEVICE=cpu MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf KV_DTYPE=f16 \
#     DURATION=4 DRAIN=4 CONTEXT_SCALE=0.1 KV_TOKENS=2048 SWAP_GB=0.25 OUT=/tmp/p \
#     nice -n 19 bash bench/h200_paper.sh mixed:discard:1 mixed:minwaste:1
set -u
T0=$SECONDS
SHAPE=${SHAPE:-llama2-7b}
DURATION=${DURATION:-25}
DRAIN=${DRAIN:-13}
SEED=${SEED:-7}
TIME_SCALE=${TIME_SCALE:-0.1}
CONTEXT_SCALE=${CONTEXT_SCALE:-1}
KV_TOKENS=${KV_TOKENS:-16384}
SWAP_GB=${SWAP_GB:-16}
MAX_BATCH_TOKENS=${MAX_BATCH_TOKENS:-512}
MAX_SEQS=${MAX_SEQS:-64}
BUDGET_S=${BUDGET_S:-505}
BIN=${BIN:-.carry/bin/infercept}
DEVICE=${DEVICE:-cuda}
MODEL=${MODEL:-models/$SHAPE}
KV_DTYPE=${KV_DTYPE:-bf16}
DRY_RUN=${DRY_RUN:-0}
SHARED_PREFIX=${SHARED_PREFIX:-0}
MAX_CONTEXT=${MAX_CONTEXT:-0}
STEP_TRACE=${STEP_TRACE:-0}
# Time a point may take on top of DURATION + DRAIN: process start, model load (~3 s for the
# 7B from the page cache), pinned host pool, the cost-model profile on the first point.
START_S=${START_S:-13}    # expected (10-15 s measured on the H200, 2026-12-01)
GRACE_S=${GRACE_S:-35}    # allowed before `timeout` ends it
export LD_LIBRARY_PATH=$PWD/.carry/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

[ $# -ge 1 ] || { sed -n '2,40p' "$0"; exit 2; }
case $1 in
  a) NAME=a; POINTS="mixed:discard:2 mixed:minwaste:2 mixed:discard:4 mixed:minwaste:4
       mixed:discard:6 mixed:minwaste:6 mixed:preserve:4 mixed:ttl:4 mixed:swap:4
       mixed:minwaste:5 mixed:improved-discard:4" ;;
  b) NAME=b; POINTS="mixed:discard:3 mixed:preserve:6 mixed:ttl:6 mixed:swap:6
       mixed:minwaste:5:oracle mixed:minwaste:5:elapsed mixed:preserve:2 mixed:ttl:2 mixed:swap:2
       mixed:improved-discard:6 mixed:improved-discard:2" ;;
  c) NAME=c; POINTS="qa:discard:6 qa:minwaste:6 qa:preserve:6 chat:discard:6 chat:minwaste:6
       chat:preserve:6" ;;
  *:*) NAME=${RUN_NAME:-points}; POINTS="$*"; POINT_LIST=1 ;;
  *) echo "unknown chunk '$1' (a, b, c or WORKLOAD:POLICY:RATE[:ESTIMATOR]...)"; exit 2 ;;
esac
[ -n "${POINT_LIST:-}" ] || [ $# -eq 1 ] || { echo "one chunk per call"; exit 2; }

FINAL_OUT=${OUT:-/tmp/out}
TOP=/tmp/infercept-paper
RES=$TOP/paper-$NAME
mkdir -p "$FINAL_OUT" "$(dirname "$MODEL")"
rm -rf "$RES" && mkdir -p "$RES"
log() { echo "[$((SECONDS - T0))s] $*" | tee -a "$RES/summary.txt"; }
pack() {  # atomically, so a cut-off call still finds the last complete archive
  tar czf "$FINAL_OUT/.paper-$NAME.tgz.tmp" -C "$TOP" "paper-$NAME" &&
    mv -f "$FINAL_OUT/.paper-$NAME.tgz.tmp" "$FINAL_OUT/paper-$NAME.tgz"
}
trap pack EXIT
jarr() { local s="" x; for x in "$@"; do s+="${s:+,}\"$x\""; done; echo "[$s]"; }

# The flags bench and simulate share: paper_report.py reruns each point through
# `infercept simulate --profile h200-SHAPE` with exactly these.
SHARED=(--duration "$DURATION" --drain "$DRAIN" --seed "$SEED" --time-scale "$TIME_SCALE"
        --context-scale "$CONTEXT_SCALE" --kv-cache-tokens "$KV_TOKENS" --swap-space-gb "$SWAP_GB"
        --max-batch-tokens "$MAX_BATCH_TOKENS" --max-seqs "$MAX_SEQS")
[ "$MAX_CONTEXT" -gt 0 ] && SHARED+=(--max-context "$MAX_CONTEXT")
{ echo "chunk $NAME: $(echo $POINTS | wc -w) points: $(echo $POINTS)"
  echo "shape $SHAPE model $MODEL device $DEVICE kv-dtype $KV_DTYPE budget ${BUDGET_S}s"
  echo "shared flags: ${SHARED[*]}"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null) $(git status --short 2>/dev/null | wc -l) changed files"
  echo "binary: $(ls -l "$BIN" 2>&1) $(sha256sum "$BIN" 2>/dev/null | cut -c1-16)"
} | tee "$RES/summary.txt"
[ "$DRY_RUN" = 1 ] || nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version \
  --format=csv >"$RES/gpu.txt" 2>&1

# The checkpoint (random weights, byte-level tokenizer); .complete marks a finished one.
if [ "$DRY_RUN" != 1 ] && [[ "$MODEL" == models/* && "$MODEL" != *.gguf ]] && [ ! -e "$MODEL/.complete" ]; then
  log "make-model $SHAPE"
  rm -rf "$MODEL"
  t=$SECONDS
  if "$BIN" make-model --shape "$SHAPE" --out "$MODEL" --tokenizer byte >"$RES/make-model.log" 2>&1; then
    touch "$MODEL/.complete"; log "make-model done in $((SECONDS - t)) s"
  else
    log "make-model FAILED (rc $?):"; tail -5 "$RES/make-model.log" | tee -a "$RES/summary.txt"; exit 1
  fi
fi

n=0
for p in $POINTS; do
  IFS=: read -r wl pol rate est var <<<"$p"
  est=${est:-learned}
  n=$((n + 1))
  name="$wl-$pol-$est-r$rate${var:+-$var}"
  variant=()
  case ${var:-} in
    "") ;;
    nocache) variant=(--prefix-cache off) ;;
    *) log "point $n $name: unknown variant '$var'"; continue ;;
  esac
  [ "$SHARED_PREFIX" -gt 0 ] && variant+=(--shared-prefix "$SHARED_PREFIX")
  cmd=("$BIN" bench --device "$DEVICE" --model "$MODEL" --kv-dtype "$KV_DTYPE"
       --workload "$wl" --policy "$pol" --estimator "$est" --rate "$rate" "${SHARED[@]}"
       "${variant[@]}" --json "$RES/$name.json")
  [ "$STEP_TRACE" = 1 ] && cmd+=(--step-trace "$RES/$name.trace.csv")
  if [ "$DRY_RUN" = 1 ]; then echo "${cmd[*]}"; continue; fi
  used=$((SECONDS - T0))
  left=$((BUDGET_S - used))
  meta="\"name\":\"$name\",\"workload\":\"$wl\",\"policy\":\"$pol\",\"estimator\":\"$est\",\"variant\":\"${var:-}\",\"rate\":$rate,\"shape\":\"$SHAPE\",\"device\":\"$DEVICE\",\"kv_dtype\":\"$KV_DTYPE\",\"shared_prefix\":$SHARED_PREFIX,\"shared_args\":$(jarr "${SHARED[@]}")"
  if [ $((DURATION + DRAIN + START_S)) -gt "$left" ]; then
    log "point $n $name: skipped, ${left}s left of the budget"
    echo "{$meta,\"rc\":\"skipped\",\"wall_s\":0,\"json\":null}" >>"$RES/manifest.jsonl"
    continue
  fi
  limit=$((DURATION + DRAIN + GRACE_S))
  [ "$limit" -le "$left" ] || limit=$left
  log "point $n $name (timeout ${limit}s)"
  t=$SECONDS
  timeout -k 5 "$limit" "${cmd[@]}" >"$RES/$name.log" 2>&1
  rc=$?
  wall=$((SECONDS - t))
  [ -f "$RES/$name.json" ] && js="\"$name.json\"" || js=null
  echo "{$meta,\"rc\":$rc,\"wall_s\":$wall,\"started_s\":$((t - T0)),\"json\":$js}" >>"$RES/manifest.jsonl"
  log "  rc $rc, ${wall}s: $(grep -m1 -E '^all ' "$RES/$name.log" | tr -s ' ')"
  [ $rc -eq 0 ] || tail -3 "$RES/$name.log" | tee -a "$RES/summary.txt"
  # The engine's measured cost model (profiled by the first point, cached next to the model).
  [ -n "$(ls "$RES"/*.profile-* 2>/dev/null)" ] || cp "$MODEL".profile-* "$RES/" 2>/dev/null
  pack
done
log "done: $n points in $((SECONDS - T0)) s"
