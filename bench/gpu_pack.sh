#!/usr/bin/env bash
# Builds the CUDA binaries here and packs them for a device call (bench/gpu_run.sh unpacks them):
# the binaries together are over one call's carry limit unpacked, and the device lacks
# cpp-httplib's shared library, so it travels with them.
#
#   bash bench/gpu_pack.sh     then run(carry=[".carry/binpack"], command="bash bench/gpu_run.sh ...")
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
[ -f build-cuda/CMakeCache.txt ] ||
  cmake -S . -B build-cuda -DINFERCEPT_NATIVE=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-cuda -j"$(nproc)" --target infercept test_cuda_ops test_cuda_model floors gemv_lab kv_lab prefill_attn_test
rm -rf .carry/bin && mkdir -p .carry/bin .carry/binpack
cp build-cuda/infercept build-cuda/tests/test_cuda_ops build-cuda/tests/test_cuda_model .carry/bin/
find build-cuda -maxdepth 2 \( -name floors -o -name gemv_lab -o -name kv_lab -o -name prefill_attn_test \) -type f -executable -exec cp {} .carry/bin/ \;
strip .carry/bin/*
# Shared libraries outside the C/C++ runtime and CUDA that the device does not have.
ldd build-cuda/infercept | awk '/libcpp-httplib/ {print $3}' | xargs -r -I{} cp -L {} .carry/bin/
tar czf .carry/binpack/bin.tgz -C .carry bin
ls -la .carry/binpack/bin.tgz
