#!/usr/bin/env bash
# CPU throughput of infercept next to llama.cpp on this machine: same model file, same
# thread count. Prints prompt tokens/s (512-token prompt), decode tokens/s at batch 1, 8, 32,
# and peak RSS for each. `make bench` runs this; so does `bash bench/cpu_bench.sh [options]`
# (options go to bench/cpu_bench.py; --help lists them).
#
# The llama.cpp side is llama-cpp-python 0.3.36 (llama.cpp built from its sdist's vendored
# sources by pip, for this CPU) in a scratch virtualenv outside the repo. It is set up on
# the first run and reused afterwards:
#   LLAMA_VENV            the virtualenv to use/create (default: /tmp/refvenv if it already
#                         has llama_cpp, else $INFERCEPT_BENCH_DIR/venv)
#   INFERCEPT_BENCH_DIR   scratch dir for the venv and prompt files (/tmp/infercept-bench)
#   BIN, MODEL, THREADS   infercept binary, model file, threads (build/infercept, the default
#                         model, 2)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LLAMA_CPP_PYTHON_VERSION=0.3.36
export INFERCEPT_BENCH_DIR="${INFERCEPT_BENCH_DIR:-/tmp/infercept-bench}"
BIN="${BIN:-$ROOT/build/infercept}"
MODEL="${MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${THREADS:-2}"

has_llama_cpp() {
  [ -x "$1/bin/python" ] && "$1/bin/python" - "$LLAMA_CPP_PYTHON_VERSION" <<'PY' 2>/dev/null
import sys, llama_cpp, numpy
sys.exit(0 if llama_cpp.__version__ == sys.argv[1] else 1)
PY
}

if [ -z "${LLAMA_VENV:-}" ]; then
  if has_llama_cpp /tmp/refvenv; then
    LLAMA_VENV=/tmp/refvenv
  else
    LLAMA_VENV="$INFERCEPT_BENCH_DIR/venv"
  fi
fi

if ! has_llama_cpp "$LLAMA_VENV"; then
  echo "setting up llama-cpp-python $LLAMA_CPP_PYTHON_VERSION in $LLAMA_VENV" \
       "(compiles llama.cpp; takes several minutes once)" >&2
  mkdir -p "$INFERCEPT_BENCH_DIR"
  python3 -m venv "$LLAMA_VENV"
  "$LLAMA_VENV/bin/pip" install -q --upgrade pip
  # Build for this CPU, like infercept's -march=native build.
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON}" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$LLAMA_VENV/bin/pip" install --no-cache-dir "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" numpy \
    > "$INFERCEPT_BENCH_DIR/pip_install.log" 2>&1 \
    || { tail -n 30 "$INFERCEPT_BENCH_DIR/pip_install.log" >&2; exit 1; }
  has_llama_cpp "$LLAMA_VENV" || { echo "llama_cpp import failed in $LLAMA_VENV" >&2; exit 1; }
fi

if [ ! -f "$MODEL" ]; then
  echo "model $MODEL missing: run \`make model\`" >&2
  exit 1
fi

exec "$LLAMA_VENV/bin/python" "$ROOT/bench/cpu_bench.py" --bin "$BIN" --model "$MODEL" \
  --threads "$THREADS" "$@"
