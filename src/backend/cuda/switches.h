// The CUDA backend's switches: environment variables that turn a measured optimization off
// for an ablation (or an unmeasured one on), read once when a backend is made, and the
// process-wide launch mode the kernels' launch code consults. docs/PERF.md says which
// measurement each belongs to.
#pragma once

#include <cstdint>

namespace infercept::cuda {

// "0" or "1" from the environment variable `name`; `fallback` when unset or anything else.
bool env_switch(const char* name, bool fallback);

struct BackendSwitches {
  // Products of at most this many rows go to the GEMV kernel (INFERCEPT_GEMV_MAX_ROWS; 0 =
  // always cuBLASLt). Two: at four rows the kernel lost to cuBLASLt on the 13B shape
  // (T_fwd(4) 13.2 ms against 11.0 at 8 rows, H200, 2026-12-01).
  int gemv_max_rows = 2;
  // Products of gemv_max_rows + 1 up to this many rows go to the tensor-core GEMV (gemv_mma;
  // INFERCEPT_GEMV_MMA_MAX_ROWS, up to 16; 0 = none: cuBLASLt and the composed ops as
  // before). Eight, one mma fragment of rows: decode at batch 3-8 took 1-16% less a step on
  // every shape; at 12 and 16 rows the 7B and 8B still gained 1-5% but the 13B lost 4-11%
  // (PERF 4.5r).
  int gemv_mma_max_rows = 8;
  bool graphs = true;  // INFERCEPT_CUDA_GRAPHS=0: every step eager
  bool fused = true;   // INFERCEPT_FUSED=0: the group ops composed of the plain ones
  // Programmatic dependent launch (sm_90 and later; INFERCEPT_PDL=0 off).
  bool programmatic = false;
  // INFERCEPT_ATTN_PREWAIT=0: the decode attention waits for the RoPE store before its first
  // loads (AttnArgs::prewait; PERF 4.5k).
  bool attn_prewait = true;
  // INFERCEPT_ATTN_FUSED=0: a step of 1-2 decode rows alone keeps the RoPE store kernel and
  // the decode kernel's merge through global memory instead of decode_rope_attention (sm_90;
  // 1-3% faster a step, PERF 4.5o).
  bool attn_fused = true;
  // INFERCEPT_ATTN_SIGNAL=0: with attn_fused, the attention waits for the whole Q/K/V product
  // (pdl_wait) instead of for its KV head's rows (GemvHeadSignal, PERF 4.5p).
  bool attn_signal = true;
  // INFERCEPT_ATTN_GROUP_SPLIT=N: with attn_fused, a KV head's query heads are cut across the
  // largest divisor of the group up to N blocks (DecodeRopeArgs::group_split). 0 (the
  // default): blocks of at most 2 query heads (llama3-8b: 2 blocks a KV head, -4% a step at
  // batch 1; 4 blocks of 1 head were as fast at batch 1 and slower at 2; PERF 4.5q).
  int attn_group_split = 0;
  // INFERCEPT_ATTN_DECODE_WARPS=6: the decode kernel's blocks of 6 warps, two a multiprocessor
  // (AttnArgs::decode_warps; 4 otherwise).
  int attn_decode_warps = 4;
  // INFERCEPT_ATTN_PROJECT=0: with attn_fused, the O projection is a launch of its own after
  // the attention instead of running in the attention's launch (attend_project, PERF 4.5q).
  bool attn_project = true;
  // INFERCEPT_ATTN_PROJECT_KEYS=N (a multiple of 64): attend_project's partitions of N keys.
  int attn_project_keys = 64;
  // INFERCEPT_ATTN_PROJECT_ROWS=1: attend_project for steps of one decode row only (by
  // default up to 2, where the grid leaves a row enough partitions; self_attention_project).
  int attn_project_rows = 2;
  // INFERCEPT_GEMV_ROPE=1: Q/K/V, RoPE and the KV store in one launch at 1-2 rows
  // (norm_project_rope_store); correct and no faster on the H200 (PERF 4.5l), so off.
  // "require": as 1, and a step the fold cannot take is an error (tests and measurements that
  // must not see the fallback).
  bool rope_fold = false, rope_fold_required = false;
  // INFERCEPT_GRAPH_ONE_UPLOAD=1: a captured step copies its staged host arrays in one graph
  // node instead of one per array (9 at batch 1, ~3 us each); no faster (PERF 4.5l), so off.
  bool one_upload = false;
  // INFERCEPT_L2_PREFETCH=1: a decode attention at a small batch fetches the output
  // projection's weight into L2 while it runs (prefetch_hint; measured slower, PERF 4.5i).
  bool l2_prefetch = false;
  // INFERCEPT_LAB_OMIT: a measurement switch that breaks the model's output. A comma list of
  // qkv, rope, attn, o, gateup, down: those ops of a layer launch nothing, so a timed step
  // shows what each kernel (with its boundaries) costs on the step's critical path, which
  // the sum of per-kernel times cannot (programmatic launches overlap them). Warned about on
  // stderr when a backend is made; never set by the engine, the server or a test.
  unsigned lab_omit = 0;
  // INFERCEPT_LAB_ATTN=wait|loads|nomerge|rope|chunks: AttnArgs::lab_mode 1|2|3|4|5 (the same
  // kind of measurement switch, for the decode attention's parts).
  int lab_attn = 0;
  static constexpr unsigned kOmitQkv = 1, kOmitRope = 2, kOmitAttn = 4, kOmitO = 8,
                            kOmitGateUp = 16, kOmitDown = 32;

  static BackendSwitches from_env(int compute_major);
};

// Whether kernels that support it are launched as programmatic dependents (set from
// BackendSwitches::programmatic when a backend is made).
bool programmatic_launch();
void set_programmatic_launch(bool on);

}  // namespace infercept::cuda
