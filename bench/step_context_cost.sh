#!/usr/bin/env bash
# One device call that measures what a step costs beyond T_fwd(x) (issue 6, simulator
# validation): decode steps of 1..64 sequences at several context lengths, so that the cost
# per context token read by attention and the cost per sequence can be told apart (at one
# context length they are proportional and cannot be), then optionally end-to-end points of
# the paper experiment whose bench JSON now carries the engine's step statistics.
#
#   bash bench/step_context_cost.sh [POINT...]     carry [".carry/bin"] (a CUDA build of infercept)
#     POINTs as bench/h200_paper.sh takes them, e.g. mixed:minwaste:2 mixed:discard:2
#   Environment: SHAPE=llama2-7b  CONTEXTS="256 1024 2048 3072"  BATCHES=1,2,4,8,16,32,64
#                BUDGET_S (for the points, whole call) 520
#
# Out: $OUT/ctx-SHAPE.tgz (bench-forward text and JSON per context), and the points' archive
# from bench/h200_paper.sh. bench/fit_step_cost.py fits the terms from the JSON files.
set -u
T0=$SECONDS
SHAPE=${SHAPE:-llama2-7b}
CONTEXTS=${CONTEXTS:-256 1024 2048 3072}
BATCHES=${BATCHES:-1,2,4,8,16,32,64}
BIN=${BIN:-.carry/bin/infercept}
MODEL=models/$SHAPE
FINAL_OUT=${OUT:-/tmp/out}
RES=/tmp/infercept-ctx/ctx-$SHAPE
mkdir -p "$RES" "$FINAL_OUT" models
export LD_LIBRARY_PATH=$PWD/.carry/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
pack() { tar czf "$FINAL_OUT/ctx-$SHAPE.tgz" -C "$(dirname "$RES")" "ctx-$SHAPE"; }
trap pack EXIT

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv >"$RES/gpu.txt" 2>&1
if [ ! -e "$MODEL/.complete" ]; then
  rm -rf "$MODEL"
  "$BIN" make-model --shape "$SHAPE" --out "$MODEL" --tokenizer byte >"$RES/make-model.log" 2>&1 &&
    touch "$MODEL/.complete"
fi
for c in $CONTEXTS; do
  echo "[$((SECONDS - T0))s] bench-forward context $c" | tee -a "$RES/summary.txt"
  # T_fwd samples in the same process, so that every decode step has its no-context
  # counterpart measured on the same card state; a short prefill and one swap block keep
  # the call short (those figures are not what this measures).
  timeout 150 "$BIN" bench-forward --device cuda --kv-dtype bf16 --model "$MODEL" \
    --batches "$BATCHES" --context "$c" --prefill 1024 --tfwd 1,2,4,8,16,32,64,128 \
    --swap-blocks 1 --swap-batch 1 --repeats 10 --json-out "$RES/fwd-$SHAPE-ctx$c.json" \
    >"$RES/fwd-$SHAPE-ctx$c.txt" 2>&1
  echo "rc $?" >>"$RES/fwd-$SHAPE-ctx$c.txt"
done
pack
if [ $# -gt 0 ]; then
  left=$((${BUDGET_S:-520} - (SECONDS - T0)))
  BUDGET_S=$left START_S=13 bash bench/h200_paper.sh "$@"
fi
