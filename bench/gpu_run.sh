#!/usr/bin/env bash
# One device call: checks and times the CUDA backend on the lent GPU, everything under $OUT.
#
# Binaries are built on the development machine (bench/gpu_pack.sh: cmake -B build-cuda
# -DINFERCEPT_NATIVE=OFF, nvcc present) and carried packed in .carry/binpack (or as
# .carry/bin); the default model (98 MB) is over one call's carry limit, so it travels in
# two halves (.carry/m1 in a first call, .carry/m2 in the next while the machine is warm) and
# is put together here.
#
#   bench/gpu_run.sh STAGE...   stages: part1 model ops floors gemvlab kvlab ncukv chainlab tiny modeltest hf-SHAPE fwd-SHAPE long-SHAPE constrained-SHAPE ncu-SHAPE ncud-SHAPE ncug-SHAPE ncup-SHAPE nsys-SHAPE probe-SHAPE simprof-SHAPE prefill-attn peerbuild peer-SHAPE pack
#     set:NAME=VALUE   exports NAME for the stages after it and tags their result files with it:
#                      this script's knobs (e.g. set:FWD_ARGS="--cuda-graphs off",
#                      set:NCU_BATCH=32) and the log level (INFERCEPT_LOG). The engine and the
#                      backends read no other environment: the CUDA backend's
#                      choices are CudaBackendOptions (backend/cuda/cuda_backend.h); an A/B of
#                      another build goes through bin:DIR
#     unset:NAME       removes it again; bin:DIR  the stages after it run DIR's binaries;
#     keep: fwd-SHAPE keeps big checkpoints for later stages
# (run `pack` last, outside any timeout, so that what finished comes back)
set -u
# At most 8 files come back from a call: results go to $RES, packed into one archive at the end.
FINAL_OUT=${OUT:-/tmp/out}
RES=/tmp/infercept-results
OUT=$RES
mkdir -p "$OUT" "$FINAL_OUT" models
BIN=${BIN:-.carry/bin}  # another build for an A/B: BIN=.carry/old bash bench/gpu_run.sh set:OLD=1 ...
# bench/gpu_pack.sh's archive (carried as .carry/binpack), unpacked when it differs from the
# last one unpacked (a warm machine keeps ignored files between calls).
if [ -f .carry/binpack/bin.tgz ]; then
  sum=$(md5sum <.carry/binpack/bin.tgz)
  if [ "$(cat .carry/.unpacked 2>/dev/null)" != "$sum" ]; then
    tar xzf .carry/binpack/bin.tgz -C .carry && echo "$sum" >.carry/.unpacked
  fi
fi
export LD_LIBRARY_PATH=$PWD/.carry/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# NCCL (tensor parallelism opens libnccl.so.2 at run time): the device machines have it in
# PyTorch's nvidia-nccl wheel rather than on the system path.
nccl_lib=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0] + '/lib')" 2>/dev/null)
[ -n "$nccl_lib" ] && [ -d "$nccl_lib" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl_lib
export NCCL_NVLS_ENABLE=0
# Test binaries name the repository by the absolute path they were built in.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
# The checkpoint a model stage (PREFIX-SHAPE) runs on: sets shape and dir (models/SHAPE) and
# writes it with make-model when it is not there yet.
model_of() {
  shape=${1#*-}; dir=models/$shape
  [ -d "$dir" ] || { log "make-model $shape"; /usr/bin/time -f "make-model %e s" $BIN/infercept make-model --shape "$shape" --out "$dir" ${MM_ARGS:-} 2>&1 | tail -2; }
}
# The peer's llama.cpp sources (bench/peer_src_pack.sh) unpacked once into scratch/peer-cuda/src.
peer_src() { [ -f scratch/peer-cuda/src/CMakeLists.txt ] ||
  { mkdir -p scratch/peer-cuda/src && tar xzf .carry/peer/llama-src.tar.gz -C scratch/peer-cuda/src; }; }
# Result-file tag: the set: stages in force.
tag() { local t=${TAGS:-default}; echo "${t//[^A-Za-z0-9_,.-]/_}"; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv >"$OUT/gpu.txt" 2>&1
PROMPTS='[[1,504,3575,282,4649,314],[1,1489,28264,24,94,725],[1,5723,2056,253,655,28,281,253,1165,5945,28],[1,378,1751,3625,282],[1,20012,28,216,34,28,216,35,28,216,37],[1,2868,7160,5134,253]]'
for stage in "$@"; do
  case $stage in
    part1) cp .carry/m1/* models/.part.aa && log "model part 1 stored" ;;
    bin:*)  # bin:DIR runs the stages after it with the binaries in DIR (another build for an A/B)
      BIN=${stage#bin:}; TAGS=$(echo "${TAGS:-}" | tr , '\n' | grep -v '^bin_' | paste -sd, -)
      TAGS="${TAGS:-}${TAGS:+,}bin_${BIN#.carry/}"; log "binaries: $BIN" ;;
    model)
      cat models/.part.aa .carry/m2/* >"$MODEL"
      echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $MODEL" | sha256sum -c - | tee -a "$OUT/summary.txt" ;;
    ops) log "op tests"; $BIN/test_cuda_ops 2>&1 | tee "$OUT/ops.txt" | grep -E "OK|FAILED|error|Failure|PASSED" | tail -20 ;;
    gemvlab) log "gemv lab (docs/PERF.md 4.5k)"; $BIN/gemv_lab ${GEMVLAB_ARGS:-} 2>&1 | tee "$OUT/gemv_lab.txt" | tail -60 ;;
    kvlab) log "KV read lab (docs/PERF.md 4.5t) ${KVLAB_ARGS:-}"; $BIN/kv_lab ${KVLAB_ARGS:-} 2>&1 | tee "$OUT/kv_lab-$(tag).txt" | tail -20 ;;
    ncukv)  # Nsight Compute's L2 counters and shared-memory split of kv_lab's first case
      log "ncu counters: kv_lab ${KVLAB_ARGS:-}"
      timeout 120 ncu --clock-control none --section LaunchStats --section Occupancy \
        --metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,gpu__time_duration.sum \
        --kernel-name regex:chunk_read --launch-skip 1 --launch-count 1 $BIN/kv_lab ${KVLAB_ARGS:-} --reps 2 2>&1 |
        grep -vE "^\| |^#|^$" >"$OUT/ncukv-$(tag).txt"
      grep -E "Duration|Shared Memory Configuration|Dynamic Shared|Static Shared|Block Limit Shared|sector|dram__" "$OUT/ncukv-$(tag).txt" | tail -12 ;;
    chainlab) log "chain lab (docs/PERF.md 4.5n)"
      for m in 7b 13b; do $BIN/chain_lab --model $m 2>&1 | tee "$OUT/chain_lab-$m.txt" | tail -12; done ;;
    floors) log "floors"; $BIN/floors --json models/floors.json 2>&1 | tee "$OUT/floors.txt" | tail -40; cp models/floors.json "$OUT/" ;;
    tiny) log "make-model tiny"; $BIN/infercept make-model --shape tiny --out models/tiny ${MM_ARGS:-} 2>&1 | tail -2 ;;
    modeltest)  # the interception suite runs on the tiny checkpoint too unless told otherwise
      # (the default GGUF is not carried; the tests that need it are left out by default)
      log "model tests"
      INFERCEPT_GPU_TEST_MODEL=$PWD/models/tiny INFERCEPT_TEST_MODEL=${INFERCEPT_TEST_MODEL:-$PWD/models/tiny} \
        GTEST_FILTER=${GTEST_FILTER:--*DefaultModel*} $BIN/test_cuda_model 2>&1 | tee "$OUT/model.txt" |
        grep -E "OK|FAILED|identical for 32|segments identical|prefix cache on CUDA|Failure|PASSED|error" | tail -40 ;;
    hf-*)  # hf-SHAPE: logits ours vs transformers on one checkpoint, plus transformers timings
      model_of "$stage"
      echo "$PROMPTS" >models/prompts.json
      log "logits vs HF transformers: $shape"
      $BIN/infercept logits --device cuda --model "$dir" --tokens-file models/prompts.json --out models/ours-$shape.npy 2>&1 | tail -1
      # Timings beside ours (docs/PERF.md, "H200: prefill against the FLOP floor and HF
      # transformers") for the benchmark shapes; none for the tiny ones.
      timing="--prefill-len 4096 --decode-batches 1,32,128"; case $shape in *tiny) timing="--no-timing" ;; esac
      timeout 300 python3 bench/hf_reference.py --model "$dir" --tokens-file models/prompts.json --out "$OUT/hf-$shape.json" \
        --logits none --logits-npy models/hf-$shape.npy --greedy 0 $timing 2>&1 | tail -25
      # fp32 transformers as the higher-precision reference both bf16 engines are held to.
      timeout 300 python3 bench/hf_reference.py --model "$dir" --tokens-file models/prompts.json --out "$OUT/hf32-$shape.json" \
        --dtype fp32 --logits none --logits-npy models/hf32-$shape.npy --greedy 0 --no-timing 2>&1 | tail -3
      { python3 bench/compare_logits.py models/ours-$shape.npy models/hf-$shape.npy --label "$shape ours vs HF bf16"
        python3 bench/compare_logits.py models/ours-$shape.npy models/hf32-$shape.npy --label "$shape ours vs HF fp32"
        python3 bench/compare_logits.py models/hf-$shape.npy models/hf32-$shape.npy --label "$shape HF bf16 vs HF fp32"
      } 2>&1 | tee "$OUT/compare-$shape.txt" ;;
    constrained-*)  # constrained-SHAPE: decode at batch 32, every row constrained to tool calls
      # against the same batch free, in one run (bench-decode --constrained; docs/PERF.md)
      model_of "$stage"
      log "constrained decode: $shape batch 32"
      timeout 200 $BIN/infercept bench-decode --device cuda --model "$dir" --kv-dtype bf16 --kv-cache-gb 8 \
        --batch 32 --prompt-tokens 128 --decode-tokens 256 --constrained 2>&1 | tee "$OUT/constrained-$shape-$(tag).txt" | tail -6
      [ "$shape" = tiny ] || [ -n "${KEEP:-}" ] || rm -rf "$dir" ;;
    prefill-attn) log "prefill attention harness ${PREFILL_ATTN_ARGS:-}"; [ -x $BIN/prefill_attn_test ] && timeout 300 $BIN/prefill_attn_test ${PREFILL_ATTN_ARGS:-} 2>&1 | tee "$OUT/prefill_attn-$(tag).txt" | tail -50 ;;
    fwd-*)  # fwd-SHAPE: bench-forward on a make-model checkpoint (deleted afterwards if big)
      model_of "$stage"
      log "bench-forward $shape"
      timeout 400 $BIN/infercept bench-forward --device cuda --kv-dtype bf16 --model "$dir" --floors models/floors.json \
        --json-out "$OUT/fwd-$shape-$(tag).json" --swap-blocks 256 ${FWD_ARGS:-} 2>&1 | tee "$OUT/fwd-$shape-$(tag).txt" | tail -60
      [ "$shape" = tiny ] || [ -n "${KEEP:-}" ] || rm -rf "$dir" ;;
    long-*)  # long-SHAPE: the long-context regime (docs/PERF.md "H200: long contexts"): decode at
      # LONG_BATCHES (1) over LONG_CONTEXT (131,071: the decoded token at the last position of a
      # 128k window) cached tokens per row, a prefill of LONG_PREFILL (32,768) tokens from empty,
      # chunks of 512 and 2,048 rows over that context, KV in LONG_KV (bf16; fp8 for e4m3);
      # LONG_ARGS: more bench-forward flags (e.g. set:LONG_ARGS="--cuda-graphs off").
      model_of "$stage"
      log "long context: $shape kv ${LONG_KV:-bf16} batches ${LONG_BATCHES:-1} context ${LONG_CONTEXT:-131071}"
      timeout ${LONG_TIMEOUT:-500} $BIN/infercept bench-forward --device cuda --kv-dtype "${LONG_KV:-bf16}" --model "$dir" \
        --floors models/floors.json --batches "${LONG_BATCHES:-1}" --context "${LONG_CONTEXT:-131071}" \
        --prefill "${LONG_PREFILL:-32768}" --chunks "${LONG_CHUNKS:-512,2048}" --tfwd 1 --repeats 3 \
        --swap-blocks 1 --swap-batch 1 ${LONG_ARGS:-} --json-out "$OUT/long-$shape-${LONG_KV:-bf16}-$(tag).json" 2>&1 |
        tee "$OUT/long-$shape-${LONG_KV:-bf16}-$(tag).txt" | tail -40 ;;
    ncu-*)  # ncu-SHAPE: every kernel of decode steps at batch 1, context 1,024, timed by Nsight
      # Compute one at a time (serialized: each duration includes its own ramp-up and drain).
      # The context is filled in one 1,024-row step first: NCU_SKIP skips its matching kernels
      # (32 RoPE stores and 64 norms with the default NCU_KERNELS on a 32-layer model).
      # NCU_BATCH=B decodes B sequences instead; with NCU_PREFILL=B x 1,024 their context is
      # filled in one step too, whose kernels the summary lists apart (other grids).
      model_of "$stage"
      log "ncu kernel times: $shape decode batch ${NCU_BATCH:-1}"
      # NCU_CACHE=none keeps the caches warm between kernels (as a replayed step has them), so
      # the per-step sum against bench-forward's step is the share of gaps between kernels
      # (the device has no Nsight Systems); the default flushes them (each kernel's cold cost).
      timeout 300 ncu --clock-control none --cache-control ${NCU_CACHE:-all} --metrics gpu__time_duration.sum --csv \
        --kernel-name regex:"${NCU_KERNELS:-gemv|decode_kernel|combine_kernel|rope_store|attention_kernel|rmsnorm|silu|add}" \
        --launch-skip ${NCU_SKIP:-32} --launch-count ${NCU_COUNT:-300} \
        $BIN/infercept bench-forward --device cuda --kv-dtype bf16 --model "$dir" --batches ${NCU_BATCH:-1} --tfwd 1 \
        --prefill ${NCU_PREFILL:-1024} --repeats 3 --swap-blocks 1 --swap-batch 1 >"$OUT/ncu-$shape-$(tag).csv" 2>"$OUT/ncu-$shape-$(tag).err"
      python3 bench/ncu_summary.py "$OUT/ncu-$shape-$(tag).csv" 2>&1 | tee -a "$OUT/summary.txt" | tail -30
      [ -n "${KEEP:-}" ] || rm -rf "$dir" ;;
    ncud-*)  # ncud-SHAPE: Nsight Compute's sections and L2/DRAM counters for two launches of the decode
      # attention kernel at batch NCU_BATCH (32), context 1,024 (where its KV reads go;
      # docs/DESIGN.md, "The CUDA backend").
      model_of "$stage"
      log "ncu detail: $shape decode attention at batch ${NCU_BATCH:-32}"
      m=dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
      m=$m,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,smsp__inst_executed_op_ldgsts.sum,gpu__time_duration.sum
      timeout 300 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section Occupancy --section SchedulerStats --section LaunchStats --metrics "$m" \
        --kernel-name regex:decode_kernel --launch-skip 40 --launch-count 2 \
        $BIN/infercept bench-forward --device cuda --kv-dtype bf16 --model "$dir" --batches ${NCU_BATCH:-32} --tfwd 1 \
        --prefill 128 --repeats 1 --swap-blocks 1 --swap-batch 1 2>&1 | grep -vE "^\| |^#|^$" >"$OUT/ncud-$shape-$(tag).txt"
      grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L2 Hit|sector|dram__" "$OUT/ncud-$shape-$(tag).txt" | tail -16
      [ -n "${KEEP:-}" ] || rm -rf "$dir" ;;
    ncug-*)  # ncug-SHAPE: DRAM bytes and L2 sectors of NCU_COUNT (24) kernels of batch-1 decode steps
      # (context 1,024) matching NCU_KERNELS (the products and attend_project): does L2 serve
      # a kernel's bytes once (docs/DESIGN.md, "The CUDA backend")?
      model_of "$stage"
      log "ncu counters: $shape decode batch 1"
      timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_hit_rate.pct \
        --kernel-name regex:"${NCU_KERNELS:-gemv|attend}" --launch-skip ${NCU_SKIP:-400} --launch-count ${NCU_COUNT:-24} \
        $BIN/infercept bench-forward --device cuda --kv-dtype bf16 --model "$dir" --batches 1 --tfwd 1 \
        --prefill 1024 --repeats 1 --swap-blocks 1 --swap-batch 1 2>&1 | grep -vE "^\| |^#|^$" >"$OUT/ncug-$shape-$(tag).txt"
      grep -E "^  [a-z_].*\(|dram__|srcunit|duration" "$OUT/ncug-$shape-$(tag).txt" | head -40
      [ -n "${KEEP:-}" ] || rm -rf "$dir" ;;
    ncup-*)  # ncup-SHAPE: every kernel of a prefill of NCUP_TOKENS (4,096) tokens, timed by Nsight
      # Compute one at a time (bench-forward --prefill-only: three warm-up prefills and one
      # timed, so each kernel appears four times); where a prefill's time goes (docs/PERF.md,
      # "H200: prefill against the FLOP floor and HF transformers").
      model_of "$stage"
      log "ncu kernel times: $shape prefill of ${NCUP_TOKENS:-4096} tokens"
      timeout 400 ncu --clock-control none --cache-control ${NCU_CACHE:-none} --metrics gpu__time_duration.sum --csv \
        --launch-count ${NCU_COUNT:-3000} \
        $BIN/infercept bench-forward --device cuda --kv-dtype bf16 --model "$dir" --prefill-only --batches 1 \
        --tfwd 1 --prefill ${NCUP_TOKENS:-4096} --repeats 1 --swap-blocks 1 --swap-batch 1 \
        >"$OUT/ncup-$shape-$(tag).csv" 2>"$OUT/ncup-$shape-$(tag).err"
      python3 bench/ncu_summary.py "$OUT/ncup-$shape-$(tag).csv" 2>&1 | tee -a "$OUT/summary.txt" | tail -30
      [ -n "${KEEP:-}" ] || rm -rf "$dir" ;;
    nsys-*)  # nsys-SHAPE: a GPU timeline of decode at batch 1 (graphs traced per node): the gaps between kernels
      shape=${stage#nsys-}; dir=models/$shape
      NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
      if [ -z "$NSYS" ]; then log "nsys: not on this machine"; continue; fi
      model_of "$stage"
      log "nsys timeline: $shape decode batch 1 ($NSYS)"
      timeout 300 "$NSYS" profile -t cuda --cuda-graph-trace=node -f true -o "$OUT/nsys-$shape-$(tag)" \
        $BIN/infercept bench-forward --device cuda --kv-dtype bf16 --model "$dir" --batches 1 --tfwd 1 \
        --prefill 1024 --repeats 20 --swap-blocks 1 --swap-batch 1 >"$OUT/nsys-$shape-$(tag).log" 2>&1
      timeout 200 "$NSYS" stats -r cuda_gpu_trace -f csv -o "$OUT/nsys-$shape-$(tag)" "$OUT/nsys-$shape-$(tag).nsys-rep" >/dev/null 2>&1
      python3 bench/nsys_gaps.py "$OUT"/nsys-$shape-$(tag)*cuda_gpu_trace*.csv --kernels ${NSYS_KERNELS:-2000} 2>&1 | tee -a "$OUT/summary.txt" | head -30
      rm -f "$OUT"/nsys-$shape-$(tag).sqlite
      [ -n "${KEEP:-}" ] || rm -rf "$dir" ;;
    peerbuild)  # llama.cpp's llama-server for this GPU from .carry/peer/llama-src.tar.gz
      # (bench/peer_src_pack.sh: the sdist's sources; the device cannot reach PyPI). The build
      # resumes where a call cut it off: scratch/peer-cuda stays on a warm machine.
      P=scratch/peer-cuda
      peer_src
      log "llama-server (CUDA) build"
      [ -f $P/build/CMakeCache.txt ] || cmake -S $P/src -B $P/build -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF >"$OUT/peer-cmake.log" 2>&1 || tail -20 "$OUT/peer-cmake.log"
      t0=$SECONDS
      timeout "${PEER_BUILD_S:-500}" cmake --build $P/build --target llama-server -j "$(nproc)" >"$OUT/peer-build.log" 2>&1
      log "llama-server build: rc $? after $((SECONDS - t0)) s"; tail -3 "$OUT/peer-build.log"
      ls -la $P/build/bin/llama-server 2>&1 | tee -a "$OUT/summary.txt" ;;
    peer-*)  # peer-SHAPE: `infercept serve` against that llama-server on one make-model checkpoint
      # (a GGUF of it for the peer: bench/convert_to_gguf.py), one at a time on the whole GPU,
      # bench/sweep_server.py with loadgen in standard mode. Random weights write no calls, so
      # each turn's length comes from the script: infercept by its intercept_after_tokens
      # extension (--call-style scripted: the call is its own, the request pauses), llama.cpp,
      # which has no such field, with the calls made up by the client (--call-style synthetic:
      # the request ends, and its slot's prompt cache serves the next turn). Same tokens either
      # way. PEER_SERVER and PEER_DEVICE=cpu run it without a GPU. PEER_EXTRA: more llama-server
      # flags (e.g. "--cache-ram 0": docs/BENCHMARKS.md, "Peer: llama.cpp's server on the H200").
      shape=${stage#peer-}; dir=models/$shape; P=scratch/peer-cuda
      SERVER=${PEER_SERVER:-$P/build/bin/llama-server}
      # A llama-server built on the development machine (scratch/peer-cuda, the same cmake
      # flags) may travel gzipped in .carry/peer instead of being built here (~5 min a call).
      if [ ! -x "$SERVER" ] && [ -f .carry/peer/llama-server.gz ]; then
        mkdir -p "$(dirname "$SERVER")" && gunzip -c .carry/peer/llama-server.gz >"$SERVER" && chmod +x "$SERVER"
      fi
      [ -x "$SERVER" ] || { log "peer: no $SERVER (run peerbuild first)"; continue; }
      # A server left by an earlier sweep (cut off from outside) would hold the GPU's memory.
      pkill -f "$SERVER" 2>/dev/null && { log "peer: stopped a llama-server left running"; sleep 3; }
      # A library the carried build links and the loader does not find (NCCL ships with the
      # device's PyTorch, outside the loader's path): its folder on the search path.
      for lib in $(ldd "$SERVER" | awk '/not found/ {print $1}'); do
        found=$(find /usr /opt -name "$lib" 2>/dev/null | head -1)
        [ -n "$found" ] && export LD_LIBRARY_PATH=$(dirname "$found"):$LD_LIBRARY_PATH
        log "peer: $lib ${found:-not found anywhere}"
      done
      [ -n "${PEER_SRC:-}" ] || peer_src
      model_of "$stage"
      if [ ! -f "$dir.gguf" ]; then
        log "convert $shape to GGUF"
        python3 bench/convert_to_gguf.py --llama-cpp "${PEER_SRC:-$P/src}" --outtype "${PEER_OUTTYPE:-bf16}" \
          "$dir" "$dir.gguf" >"$OUT/peer-convert-$shape.log" 2>&1 || { tail -5 "$OUT/peer-convert-$shape.log"; continue; }
      fi
      log "peer comparison: $shape ${PEER_EXTRA:-}"
      # The GPU's use and memory every 2 s while the servers run (which buffers stayed on it).
      # PEER_TAG names a second comparison in the same call (its own result folder).
      pdir="$OUT/peer-$shape${PEER_TAG:+-$PEER_TAG}"
      mkdir -p "$pdir"
      nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 2 \
        >"$pdir/nvidia-smi.csv" 2>/dev/null &
      smi=$!
      dev=${PEER_DEVICE:-cuda}; ngl=""; [ "$dev" = cuda ] && ngl="-ngl 999"
      # Same KV room for both: PEER_KV tokens, the peer's split into PEER_SLOTS slots. Both cap a
      # request at the model's 4,096-token context (llama-server caps a larger slot to it), so
      # 32 slots of 4,096 use all of it; with 16 the peer would use half and run 16 at once.
      timeout "${PEER_RUN_S:-480}" python3 bench/sweep_server.py --bin "$BIN/infercept" --llama-server "$SERVER" \
        --model "$dir" --peer-model "$dir.gguf" --threads "${PEER_THREADS:-16}" \
        --policies ${PEER_POLICIES:-minwaste} --rates ${PEER_RATES:-1 2} --duration "${PEER_DURATION:-30}" \
        --peer-chat-template none --peer-loadgen-args "--call-style synthetic" --out-dir "$pdir" ${PEER_SWEEP_ARGS:-} \
        --peer-args "$ngl -np ${PEER_SLOTS:-32} -c ${PEER_KV:-131072} --cont-batching --metrics --no-webui ${PEER_EXTRA:-}" \
        -- --device "$dev" --kv-cache-tokens "${PEER_KV:-131072}" --quiet \
        -- --workload mixed --mode standard --call-style scripted ${PEER_LOADGEN:---time-scale 0.1 --context-scale 0.5} \
        2>&1 | tail -20
      kill $smi 2>/dev/null ;;
    probe-*)  # probe-SHAPE: bench/step_probe.py's three traces through `infercept bench` (docs/BENCHMARKS.md)
      model_of "$stage"
      log "step probe: $shape"
      mkdir -p "$OUT/probe-$shape"
      python3 bench/step_probe.py write "$OUT/probe-$shape" | sed -n 's/^BIN //p' | while read -r cmd; do
        timeout 120 $BIN/infercept ${cmd/MODEL/$dir} 2>&1 | tail -4
      done
      cp "$dir".profile-* "$OUT/probe-$shape/" 2>/dev/null
      [ -n "${KEEP:-}" ] || rm -rf "$dir" ;;
    simprof-*)  # simprof-SHAPE: `infercept profile` on the card (every step term the simulator
      # prices, by direct probes on the engine: engine/profile_probes.h), then `infercept simulate
      # --profile` with that file on the paper's mixed workload with bench/h200_paper.sh's flags,
      # one JSON per point (SIMPROF_POINTS, POLICY:RATE), to lay beside that script's runs of the
      # same points (bench/paper_report.py; the 15% check below saturation) with no fit to any
      # run's step traces. PROFILE_ARGS: more profile flags (e.g. --probe-context 1024).
      model_of "$stage"
      log "profile on the card: $shape"
      pf="$OUT/profile-$shape-$(tag).json"
      /usr/bin/time -f "profile %e s (model load included)" timeout 300 $BIN/infercept profile --device cuda \
        --kv-dtype bf16 --model "$dir" --gpu-memory-utilization 0.85 --swap-space-gb 4 --max-seqs 64 \
        --out "$pf" ${PROFILE_ARGS:-} 2>&1 | tee "$OUT/profile-$shape-$(tag).txt" | tail -12
      for pt in ${SIMPROF_POINTS:-discard:2 minwaste:2 minwaste:4 discard:4 minwaste:6}; do
        log "simulate with the card's profile: $shape mixed ${pt%%:*} ${pt##*:} req/s"
        $BIN/infercept simulate --profile "$pf" --workload mixed --policy "${pt%%:*}" --rate "${pt##*:}" \
          --duration 25 --drain 13 --seed "${SEED:-7}" --time-scale 0.1 --context-scale 1 \
          --kv-cache-tokens 16384 --swap-space-gb 16 --max-batch-tokens 512 --max-seqs 64 \
          --json "$OUT/sim-$shape-${pt/:/-}-$(tag).json" 2>&1 | tail -4
      done
      [ "$shape" = tiny ] || [ -n "${KEEP:-}" ] || rm -rf "$dir" ;;
    set:*) kv=${stage#set:}; export "${kv?}"  # a NAME set again replaces its tag; a value's commas tag as '+'
      TAGS=$(echo "${TAGS:-}" | tr , '\n' | grep -v "^${kv%%=*}=" | paste -sd, -)
      TAGS="${TAGS:-}${TAGS:+,}${kv//,/+}"; log "from here on: $kv" ;;
    unset:*) name=${stage#unset:}; unset "$name"; TAGS=$(echo "${TAGS:-}" | tr , '\n' | grep -v "^$name=" | paste -sd, -); log "unset $name" ;;
    keep) KEEP=1 ;;
    hostprep) log "host time per step at 256 running requests (tiny model, CUDA)"
      $BIN/infercept bench-decode --device cuda --model models/tiny --batch 256 --prompt-tokens 64 --decode-tokens 32 \
        --max-seqs 256 --max-batch-tokens 4096 --kv-cache-tokens 32768 2>&1 | tail -1 | tee -a "$OUT/summary.txt" ;;
    pack) tar czf "$FINAL_OUT/results.tgz" -C "$RES" . && cp "$RES/summary.txt" "$FINAL_OUT/" ;;
    *) echo "unknown stage $stage" ;;
  esac
done
exit 0
