#!/usr/bin/env bash
# Where a batch-1 decode step over a 128k context spends its attention time, bf16 and fp8 KV:
# Nsight Compute on the attention kernels of bench-forward's decode steps (Llama-3.1-8B shape,
# 131,071 cached tokens): each kernel's duration, DRAM and L2 bytes, grid and warps active,
# printed as a mean over the last 40 launches (docs/PERF.md, "Long contexts").
#
#   device call: run(carry=[".carry/binpack"], command="bash bench/ncu_long_decode.sh")
#   (binaries from bash bench/gpu_pack.sh; CSVs under $OUT)
set -u
bash bench/gpu_run.sh >/dev/null 2>&1   # unpacks the binaries
OUT=${OUT:-/tmp/out}
mkdir -p models "$OUT"
[ -d models/llama3-8b ] || .carry/bin/infercept make-model --shape llama3-8b --out models/llama3-8b --tokenizer byte | tail -1
[ -f models/floors.json ] || .carry/bin/floors --json models/floors.json >/dev/null 2>&1
export LD_LIBRARY_PATH=$PWD/.carry/bin
for kv in bf16 fp8; do
  timeout 200 ncu --clock-control none --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active \
    --csv --kernel-name regex:"decode|combine|attend" --launch-count ${NCU_COUNT:-70} \
    .carry/bin/infercept bench-forward --device cuda --kv-dtype $kv --model models/llama3-8b --floors models/floors.json \
    --batches 1 --context 131071 --prefill 32768 --chunks 512 --tfwd 1 --repeats 1 --swap-blocks 1 --swap-batch 1 \
    >"$OUT/ncu-long-$kv.csv" 2>"$OUT/ncu-long-$kv.err"
  echo "== $kv rc $?"; python3 - "$OUT/ncu-long-$kv.csv" <<'PY'
import csv,sys,collections
rows=[r for r in csv.reader(open(sys.argv[1])) if len(r)>10]
h=rows[0]; rows=rows[1:]
ki=h.index("Kernel Name"); mi=h.index("Metric Name"); vi=h.index("Metric Value"); ii=h.index("ID")
d=collections.defaultdict(dict)
for r in rows:
  try: d[(int(r[ii]),r[ki][:60])][r[mi]]=float(r[vi].replace(",",""))
  except ValueError: d[(int(r[ii]),r[ki][:60])][r[mi]]=r[vi]
agg=collections.defaultdict(list)
for (i,k),m in sorted(d.items())[-40:]:
  agg[k].append(m)
for k,ms in agg.items():
  t=sum(m.get("gpu__time_duration.sum",0) for m in ms)/len(ms)
  b=sum(m.get("dram__bytes_read.sum",0) for m in ms)/len(ms)
  l2=sum(m.get("lts__t_bytes.sum",0) for m in ms)/len(ms)
  print(f"{k}: n={len(ms)} mean {t/1e3:.1f} us, DRAM read {b/1e6:.2f} MB ({b/t:.0f} GB/s), L2 {l2/1e6:.1f} MB, grid {ms[0].get('launch__grid_size')} x {ms[0].get('launch__block_size')}, warps active {ms[0].get('sm__warps_active.avg.pct_of_peak_sustained_active')}")
PY
done
