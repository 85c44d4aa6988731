#!/usr/bin/env bash
# Packs the part of llama.cpp (vendored in the llama-cpp-python sdist that
# bench/peer_llama_cpp.sh fetches into scratch/) that building `llama-server` for CUDA and
# converting a make-model checkpoint to GGUF need, for a device call: the device cannot reach
# PyPI, and a call carries at most 64 MiB. `bench/gpu_run.sh peerbuild` unpacks and builds it
# there; `peer-SHAPE` converts and runs the comparison (docs/BENCHMARKS.md, "Peer: llama.cpp's
# server on the H200").
#
#   bash bench/peer_src_pack.sh        # writes .carry/peer/llama-src.tar.gz (git-ignored)
#
# Left out: the other GPU backends' sources, docs, example models and vocabularies, examples
# and tests; tools/ stays whole (CMake adds every tool's folder when the server is built).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LLAMA="$(bash "$ROOT/bench/peer_llama_cpp.sh" --source-only)"
OUT="$ROOT/.carry/peer/llama-src.tar.gz"
mkdir -p "$(dirname "$OUT")"
cd "$LLAMA"
skip=()
for b in cann et hexagon hip metal musa opencl openvino sycl virtgpu vulkan webgpu zdnn zendnn; do
  skip+=(--exclude "./ggml/src/ggml-$b")
done
tar czf "$OUT" "${skip[@]}" --exclude ./models --exclude ./docs --exclude ./media \
  --exclude ./examples --exclude ./tests --exclude ./build-server --exclude ./.git \
  --exclude '*.gguf' .
echo "$OUT ($(du -h "$OUT" | cut -f1)) from $LLAMA"
