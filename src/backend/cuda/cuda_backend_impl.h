// The CUDA backend: bf16 (or f16) weights and activations, GEMMs through cuBLASLt, fused
// kernels for the rest (kernels.cu, attention.cu), a paged KV pool on the device and a
// pinned host pool for swapped-out blocks.
//
// Streams: every op runs on the compute stream. Swaps run on the swap engine's copy streams
// (swap_engine.h), and the forward pass waits for layer l's copies just before layer l
// first touches blocks they move, so a swap issued before a step is hidden under the
// layers before the one that needs it (layer-wise pipelining).
//
// Host arrays given to the ops (tokens, positions, slots, the attention batch) are uploaded
// once per step: begin_step() opens a staging area, and each array is copied the first time
// an op sees it in that step and reused by every later layer.
//
// CUDA graphs (decode steps): a step of ~10 launches a layer is launch-bound at small batch
// (~330 launches, ~2 ms of gaps on a 7B at batch 1). A replayable step is first run as a
// probe pass: every op stages its host arrays at the same offsets as ever and appends its
// launch parameters (pointers, shapes, plan sizes) to a signature, launching nothing. A
// signature recorded before replays its graph (whose upload nodes read the staging area the
// probe just filled); one seen twice is recorded on a second pass by stream capture; a new
// one runs eagerly on the second pass (one-off shapes are not worth a capture). Steps that
// must wait for a swap copy in flight run eagerly.
//
// The class is declared here and defined in two files: cuda_backend.cu (set-up, memory,
// sampling, the step's recording and replay, uploads and the launch-argument helpers) and
// cuda_backend_ops.cu (the layer ops).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include "backend/backend.h"
#include "backend/cuda/attend_project.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_plan.h"
#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/decode_rope_attention.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_storage.h"
#include "backend/cuda/launch_mode.h"
#include "backend/cuda/sample_io.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/step_graphs.h"
#include "backend/cuda/swap_engine.h"
#include "backend/cuda/weight_upload.h"
#include "core/check.h"
#include "core/half.h"
#include "core/quant.h"

namespace infercept::cuda_impl {

using cuda::RowsView;

inline RowsView view(const Tensor& t) {
  return RowsView{t.data, t.rows, t.cols, t.stride, t.dtype};
}

using cuda::CudaKvStorage;
using cuda::Staging;

// Decode steps of at most this many rows take decode_rope_attention (self_attention), those
// whose products are GEMVs too. Measured on the H200 (PERF 4.5o): llama2-7b batch 1 -1..-2.5%,
// batch 2 -3%, but batch 4 +5% (after cuBLASLt products) and batch 8 even.
inline constexpr int64_t kFusedDecodeMaxRows = 2;
// The Q/K/V product's counters per KV head (GemvHeadSignal) for layers below kSignalLayers of
// models with at most kSignalHeads KV heads: a counter and a "passed" count each, per layer.
inline constexpr int64_t kSignalLayers = 256, kSignalHeads = 128;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& o)
      : device_(o.device), act_(o.activation_dtype), graphs_on_(o.graphs), opt_(o) {}

  Status init();

  ~CudaBackend() override;

  std::string name() const override { return std::string("cuda:") + props_.name; }
  DType activation_dtype() const override { return act_; }
  bool copies_are_async() const override { return true; }
  int64_t replayed_steps() const override { return graph_replays_ + graph_captures_; }
  int64_t step_graph_capacity() const override {
    return graphs_on_ ? (int64_t)cuda::StepGraphCache::kMaxGraphs : 0;
  }
  int64_t free_memory_bytes() const override;
  void bind_thread() override { cudaSetDevice(device_); }
  // For a tensor-parallel group's all-reduce (nccl_communicator.cu): queued with the ops.
  int device() const { return device_; }
  cudaStream_t compute_stream() const { return compute_; }
  int64_t total_memory_bytes() const override;

  // ---- memory ----
  Tensor alloc_activation(int64_t rows, int64_t cols, DType dtype) override;

  Result<Weight> upload_weight(const void* data, DType dtype, int64_t rows, int64_t cols) override;

  Result<std::unique_ptr<KvStorage>> create_kv_storage(const KvGeometry& g) override;
  Result<std::unique_ptr<KvStorage>> create_host_kv_storage(const KvGeometry& g) override;

  void to_host_f32(const Tensor& t, float* dst) override;

  bool greedy_on_device() const override { return true; }
  bool argmax_rows(const Tensor& t, int32_t* out) override;

  bool samples_on_device() const override { return true; }
  bool sample_rows(Tensor t, std::span<const DeviceSampleRow> rows, int32_t* out) override;

  bool masks_on_device() const override { return true; }
  bool mask_rows(Tensor t, std::span<const int32_t> rows, const uint64_t* masks,
                 int64_t words) override;

  void sync() override;

  void begin_step(bool replayable) override;

  bool end_step() override;

  // ---- ops ----
  void embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) override;

  void rmsnorm(const Tensor& x, const Weight& w, float eps, Tensor out) override;

  void add_rmsnorm(Tensor residual, const Tensor& x, const Weight& w, float eps,
                   Tensor out) override;

  void matmul(const Tensor& x, const Weight& w, const Weight* bias, Tensor out) override;
  void head_rmsnorm(Tensor x, const Weight& w, float eps) override;

  void norm_project(const Tensor& x, const Weight& norm, float eps, Tensor h,
                    std::span<const Projection> projections) override;

  void self_attention(const Tensor& x, const Weight& norm, float eps, Tensor h,
                      std::span<const Projection> qkv, std::span<const int32_t> positions,
                      const RopeParams& p, KvStorage& kv, int64_t layer,
                      std::span<const int32_t> slots, const AttentionBatch& b, int64_t n_heads,
                      float scale, Tensor out) override;

  void self_attention_project(const Tensor& x, const Weight& norm, float eps, Tensor h,
                              std::span<const Projection> qkv, std::span<const int32_t> positions,
                              const RopeParams& p, KvStorage& kv, int64_t layer,
                              std::span<const int32_t> slots, const AttentionBatch& b,
                              int64_t n_heads, float scale, Tensor out, const Weight& wo,
                              Tensor residual, Tensor scratch) override;

  void norm_gated_ffn(const Tensor& x, const Weight& norm, float eps, Tensor h,
                      const Weight& w_gate, const Weight& w_up, Tensor gate, Tensor up) override;

  void project_add(const Tensor& x, const Weight& w, Tensor residual, Tensor scratch) override;

  void rope(Tensor q, Tensor k, std::span<const int32_t> positions, const RopeParams& p) override;

  void store_kv(KvStorage& kv, int64_t layer, const Tensor& k, const Tensor& v,
                std::span<const int32_t> slots) override;

  void rope_store_kv(Tensor q, Tensor k, const Tensor& v, std::span<const int32_t> positions,
                     const RopeParams& p, KvStorage& kv, int64_t layer,
                     std::span<const int32_t> slots) override;

  void attention(const Tensor& q, const KvStorage& kv, int64_t layer, const AttentionBatch& b,
                 int64_t n_heads, float scale, Tensor out) override;

  void silu_mul(const Tensor& gate, const Tensor& up, Tensor out) override;
  void add(Tensor a, const Tensor& b) override;
  void gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor out) override;

  void copy_blocks(KvStorage& kv, std::span<const int32_t> src,
                   std::span<const int32_t> dst) override;

  void copy_blocks_between(const KvStorage& from, KvStorage& to, std::span<const int32_t> src,
                           std::span<const int32_t> dst) override;
  void flush_copies() override { swap_.flush(); }

 private:
  // The layer ops' helpers: the Q/K/V product as a norm + GEMV launch (counting each KV
  // head's rows where asked), and the fused attention forms' shape checks and arguments.
  bool launch_norm_project(const Tensor& x, const Weight& norm, float eps,
                           std::span<const Projection> projections,
                           const cuda::GemvHeadSignal& signal);
  int* project_qkv_signalled(const Tensor& x, const Weight& norm, float eps, Tensor h,
                             std::span<const Projection> qkv, int64_t layer, int64_t n_heads,
                             const KvGeometry& g);
  bool fused_attention_fits(const Tensor& x, std::span<const Projection> qkv,
                            std::span<const int32_t> positions, const RopeParams& p,
                            const KvStorage& kv, std::span<const int32_t> slots,
                            const AttentionBatch& b, int64_t n_heads, const Tensor& out) const;
  int project_parts(const AttentionBatch& b, int n_groups) const;
  int group_split(int64_t n_heads, const KvGeometry& g, const AttentionBatch& b) const;
  void project_for_fused_attention(const Tensor& x, const Weight& norm, float eps, Tensor h,
                                   std::span<const Projection> qkv,
                                   std::span<const int32_t> positions, const RopeParams& p,
                                   KvStorage& kv, int64_t layer, std::span<const int32_t> slots,
                                   const AttentionBatch& b, int64_t n_heads, float scale,
                                   const Tensor& out, int parts, cuda::AttnArgs& a,
                                   cuda::DecodeRopeArgs& r);
  int project_blocks() const { return 4 * props_.multiProcessorCount; }
  static constexpr int kProjectMinParts = 8;

  void* device_alloc(size_t bytes);
  void* device_alloc_checked(size_t bytes);

  Result<std::unique_ptr<KvStorage>> create_storage(const KvGeometry& g, bool host);

  const int32_t* dev(std::span<const int32_t> a);

  const void* upload(const void* src, size_t bytes, cudaStream_t st);
  template <typename T>
  const T* upload_vec(const std::vector<T>& v) {
    return static_cast<const T*>(upload(v.data(), v.size() * sizeof(T), nullptr));
  }

  bool wait_before_store(int64_t layer, std::span<const int32_t> slots, int64_t block_size);
  bool wait_before_attention(int64_t layer, const AttentionBatch& b, int64_t block_size);

  bool must_wait();

  static cuda::LaunchSignature::Bytes bytes_of(const auto& v) {
    return cuda::LaunchSignature::bytes_of(v);
  }
  cuda::GemvArgs gemv_args(const Tensor& x, cuda::GemvEpilogue epilogue) const;
  static void set_segment(cuda::GemvSegment& g, const void* w, const void* w2, const float* bias,
                          const Tensor& out, int64_t m);
  bool gemv_takes(const cuda::GemvArgs& a) const;
  bool fused_fits(const cuda::GemvArgs& a) const;  // gemv_takes, with opt_.fused
  void run_gemv(const cuda::GemvArgs& a);          // a product gemv_takes() took

  cuda::AttnArgs attn_geometry(const Tensor& q, const CudaKvStorage& s, int64_t layer,
                               const Tensor& out, int64_t n_heads, float scale) const;
  cuda::AttnArgs attn_args(const Tensor& q, const CudaKvStorage& s, int64_t layer,
                           const Tensor& out, const AttentionBatch& b, int64_t n_heads,
                           float scale);

  // Appends an op's launch parameters to the step's signature while recording (probe or
  // capture) and says whether to skip the launch (the probe launches nothing).
  template <class... A>
  bool skip_launch(const A&... args) {
    if (pass_ == Pass::eager) return false;
    (sig_.add(args), ...);
    return pass_ == Pass::probe;
  }

  const float* freq_factors(std::span<const float> f);

  const int32_t* zero_positions(int64_t n);

  cuda::RopeStoreArgs rope_args(Tensor q, Tensor k, const Tensor& v,
                                std::span<const int32_t> positions, const RopeParams& p,
                                CudaKvStorage* kv, int64_t layer, std::span<const int32_t> slots);

  void run_rope(Tensor q, Tensor k, const Tensor& v, std::span<const int32_t> positions,
                const RopeParams& p, CudaKvStorage* kv, int64_t layer,
                std::span<const int32_t> slots);

  void ensure_logits_host(size_t n);

  struct Upload {
    const int32_t* host;
    size_t n;
    const int32_t* dev;
  };

  int device_;
  DType act_;
  // Step graphs (see the top of the file).
  enum class Pass { eager, probe, capture };
  bool graphs_on_ = true;
  Pass pass_ = Pass::eager, next_pass_ = Pass::probe;
  cuda::LaunchSignature sig_, probe_sig_;
  bool step_needs_wait_ = false;
  cuda::StepGraphCache graphs_;
  int64_t graph_replays_ = 0, graph_captures_ = 0;
  // As made, with programmatic and attn_fused cleared below sm_90 and the row bounds clamped
  // to what the kernels take (init).
  CudaBackendOptions opt_;
  // The largest cluster decode_rope_attention may form here (0: the fused path is off).
  int max_parts_ = 0;
  cudaDeviceProp props_{};
  cudaStream_t compute_ = nullptr;
  std::unique_ptr<cuda::Gemm> gemm_;
  std::vector<void*> device_buffers_;
  Staging step_, block_copy_idx_;
  cuda::SwapEngine swap_;
  std::vector<Upload> uploads_;
  std::vector<std::pair<const float*, float*>> freq_uploads_;
  std::vector<int32_t> zeros_;
  cuda::AttentionPlanner attn_planner_;
  cuda::StepAttentionPlan attn_;  // this step's (plan_ready_)
  bool plan_ready_ = false;
  const cuda::AttnItem* d_items_ = nullptr;
  const cuda::AttnItem* d_decode_items_ = nullptr;
  const cuda::PrefillTile* d_prefill_tiles_ = nullptr;
  const cuda::AttnCombine* d_prefill_combines_ = nullptr;
  const cuda::AttnCombine* d_combines_ = nullptr;
  const cuda::AttnCombine* d_decode_combines_ = nullptr;
  int* combine_counters_ = nullptr;  // zero between attention launches (the kernel resets them)
  // kSignalLayers x 2 x kSignalHeads ints: a layer's KV heads' counters, then (from
  // n_kv_heads on) their passed counts (project_qkv_signalled, DecodeRopeArgs); zero between
  // steps (decode_rope_attention resets them).
  int* signal_counters_ = nullptr;
  // kSignalLayers x kAttendProjectCounters ints, a layer's attend_project counters; zero
  // between steps (the kernel resets them).
  int* project_counters_ = nullptr;
  float* partial_acc_ = nullptr;
  float* partial_ml_ = nullptr;
  int64_t scratch_pairs_ = 0;
  int64_t step_no_ = 0;
  float* logits_host_ = nullptr;
  cuda::SampleIo sample_io_;  // sampling parameters in, sampled ids out
  size_t logits_host_elems_ = 0;
  float* f32_scratch_ = nullptr;
  size_t f32_scratch_elems_ = 0;
};

}  // namespace infercept::cuda_impl
