#!/usr/bin/env bash
# Runs libFuzzer targets one after another, each for SECONDS, from its checked-in seeds:
#   fuzz/run.sh BUILD_DIR SECONDS TARGET...
# Each target grows its own corpus in BUILD_DIR/corpus/<target> (kept between runs, not
# checked in) from fuzz/corpus/<target>/ (the file parsers: the flat files of fuzz/corpus/).
# A crash, a sanitizer report, a leak, a timeout (10 s on one input) or running out of
# memory fails the target; its input is saved as BUILD_DIR/artifacts/<target>/crash-...
# All targets run even when one fails; the exit status is 1 when any did.
set -uo pipefail
cd "$(dirname "$0")/.."
build=$1
seconds=$2
shift 2
failed=()
for target in "$@"; do
  bin=$build/fuzz/$target
  work=$build/corpus/$target
  artifacts=$build/artifacts/$target
  mkdir -p "$work" "$artifacts"
  if [ -d "fuzz/corpus/$target" ]; then
    seeds=fuzz/corpus/$target
  else
    # libFuzzer walks folders recursively: the flat seeds get a folder of their own.
    seeds=$build/seeds-flat
    mkdir -p "$seeds"
    find fuzz/corpus -maxdepth 1 -type f -exec cp -t "$seeds" {} +
  fi
  dict=()
  case $target in
    fuzz_openai_request | fuzz_chat_template) dict=(-dict=fuzz/request.dict) ;;
  esac
  echo "== $target: ${seconds}s from $seeds"
  # -max_len 16 KB: enough for bodies with tools and for GGUF headers; UBSan and ASan
  # findings end the run (the build uses -fno-sanitize-recover).
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:print_stacktrace=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    "$bin" "$work" "$seeds" "${dict[@]}" -max_total_time="$seconds" -max_len=16384 \
    -timeout=10 -rss_limit_mb=4096 -artifact_prefix="$artifacts/" -print_final_stats=1 \
    >"$build/$target.log" 2>&1
  rc=$?
  grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::(number_of_executed_units|peak_rss_mb)" \
    "$build/$target.log" || true
  if [ "$rc" -ne 0 ]; then
    echo "== $target FAILED (exit $rc): full log $build/$target.log, input in $artifacts/"
    tail -n 60 "$build/$target.log"
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: all targets ran ${seconds}s without a finding: $*"
