#!/usr/bin/env bash
# Builds llama.cpp's OpenAI-compatible server (`llama-server`) from the llama.cpp sources
# vendored in the PyPI llama-cpp-python sdist: the peer of issue 6 item 4, driven by
# bench/loadgen.py next to `infercept serve` (bench/sweep_server.py --peer-llama-server).
#
#   bash bench/peer_llama_cpp.sh          # prints the path of the llama-server binary
#   bash bench/peer_llama_cpp.sh --source-only   # steps 1-2 only; prints the llama.cpp tree
#
# Steps, each skipped when its output is already there:
#   1. pip download --no-deps --no-binary :all: llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION
#      into $PEER_DIR (the sdist; the only network access; PyPI)
#   2. unpack it
#   3. CMake, CPU only, Release, built for this CPU (GGML_NATIVE, like infercept's
#      -march=native), no curl/OpenSSL (no model downloads), no web UI (neither npm nor
#      the prebuilt-UI download from Hugging Face), static libraries; builds only the
#      llama-server target, -j $(nproc)
# Nothing is committed: $PEER_DIR is under scratch/ (git-ignored).
#
# Environment:
#   PEER_DIR                   scratch folder (default: <repo>/scratch/peer)
#   LLAMA_CPP_PYTHON_VERSION   sdist version (default 0.3.36, the one bench/cpu_bench.sh uses;
#                              "latest" takes whatever PyPI has)
#   JOBS                       build parallelism (default: nproc)
#   NICE                       niceness of the download and the build (default 19)
#   CMAKE_EXTRA                more -D options for llama.cpp's CMake
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEER_DIR="${PEER_DIR:-$ROOT/scratch/peer}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
JOBS="${JOBS:-$(nproc)}"
NICE="${NICE:-19}"
mkdir -p "$PEER_DIR"
cd "$PEER_DIR"

log() { echo "peer_llama_cpp: $*" >&2; }

# 1. the sdist
if [ "$VERSION" = latest ]; then
  SDIST="$(ls -1 llama_cpp_python-*.tar.gz 2>/dev/null | sort -V | tail -n 1 || true)"
  SPEC=llama-cpp-python
else
  SDIST="llama_cpp_python-$VERSION.tar.gz"
  [ -f "$SDIST" ] || SDIST=""
  SPEC="llama-cpp-python==$VERSION"
fi
if [ -z "$SDIST" ]; then
  log "downloading the $SPEC sdist into $PEER_DIR"
  nice -n "$NICE" python3 -m pip download --no-deps --no-binary :all: "$SPEC" -d "$PEER_DIR" >&2
  SDIST="$(ls -1 llama_cpp_python-*.tar.gz | sort -V | tail -n 1)"
  [ "$VERSION" = latest ] || SDIST="llama_cpp_python-$VERSION.tar.gz"
fi
SRC="$PEER_DIR/${SDIST%.tar.gz}"

# 2. unpacked
if [ ! -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ]; then
  log "unpacking $SDIST"
  tar xzf "$SDIST"
fi
LLAMA="$SRC/vendor/llama.cpp"
if [ "${1:-}" = --source-only ]; then
  echo "$LLAMA"
  exit 0
fi
BUILD="$SRC/build-server"
BIN="$BUILD/bin/llama-server"

# 3. llama-server
if [ ! -x "$BIN" ]; then
  log "building llama-server in $BUILD (-j $JOBS, nice $NICE; several minutes on 2 cores)"
  start=$(date +%s)
  # shellcheck disable=SC2086
  nice -n "$NICE" cmake -S "$LLAMA" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    ${CMAKE_EXTRA:-} > "$PEER_DIR/cmake-configure.log" 2>&1 \
    || { tail -n 40 "$PEER_DIR/cmake-configure.log" >&2; exit 1; }
  nice -n "$NICE" cmake --build "$BUILD" --target llama-server -j "$JOBS" \
    > "$PEER_DIR/cmake-build.log" 2>&1 \
    || { tail -n 40 "$PEER_DIR/cmake-build.log" >&2; exit 1; }
  log "built $BIN in $(( $(date +%s) - start )) s"
fi
"$BIN" --version >&2 2>&1 || true
echo "$BIN"
