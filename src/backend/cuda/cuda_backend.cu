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
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/decode_rope_attention.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_storage.h"
#include "backend/cuda/sample_io.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/step_graphs.h"
#include "backend/cuda/swap_engine.h"
#include "backend/cuda/switches.h"
#include "backend/cuda/weight_upload.h"
#include "core/check.h"
#include "core/half.h"
#include "core/quant.h"

namespace infercept {
namespace {

using cuda::RowsView;

RowsView view(const Tensor& t) {
  return RowsView{t.data, t.rows, t.cols, t.stride, t.dtype};
}

using cuda::CudaKvStorage;
using cuda::Staging;

// Decode steps of at most this many rows take decode_rope_attention (self_attention), those
// whose products are GEMVs too. Measured on the H200 (PERF 4.5o): llama2-7b batch 1 -1..-2.5%,
// batch 2 -3%, but batch 4 +5% (after cuBLASLt products) and batch 8 even.
constexpr int64_t kFusedDecodeMaxRows = 2;
// The Q/K/V product's counters per KV head (GemvHeadSignal) for layers below kSignalLayers of
// models with at most kSignalHeads KV heads: a counter and a "passed" count each, per layer.
constexpr int64_t kSignalLayers = 256, kSignalHeads = 128;

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, DType act, bool graphs)
      : device_(device), act_(act), graphs_on_(graphs) {}

  Status init() {
    if (cudaSetDevice(device_) != cudaSuccess)
      return make_error("cannot use CUDA device ", std::to_string(device_));
    CUDA_CHECK(cudaGetDeviceProperties(&props_, device_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    gemm_ = std::make_unique<cuda::Gemm>();
    TRY(cuda::make_staging(step_, 16u << 20, compute_));
    TRY(cuda::make_staging(block_copy_idx_, 4u << 20, compute_));
    TRY(swap_.init(device_, props_.multiProcessorCount));
    attn_planner_ = cuda::AttentionPlanner(props_.multiProcessorCount);
    TRY(sample_io_.init(compute_));
    sw_ = cuda::BackendSwitches::from_env(props_.major);
    graphs_on_ = graphs_on_ && sw_.graphs;
    cuda::set_programmatic_launch(sw_.programmatic);
    // prefetch_hint's budget: at most 60% of L2, the rest stays for the KV the attention streams.
    if (sw_.l2_prefetch) l2_prefetch_bytes_ = (int64_t)props_.l2CacheSize * 6 / 10;
    if (sw_.attn_fused) max_parts_ = cuda::decode_rope_max_parts();
    if (max_parts_ > 0 && sw_.attn_signal) {
      const size_t bytes = (size_t)(kSignalLayers * kSignalHeads * 2) * sizeof(int);
      signal_counters_ = static_cast<int*>(device_alloc(bytes));
      CUDA_CHECK(cudaMemset(signal_counters_, 0, bytes));
    }
    if (max_parts_ > 0 && sw_.attn_project) {
      const size_t bytes = (size_t)(kSignalLayers * cuda::kAttendProjectCounters) * sizeof(int);
      project_counters_ = static_cast<int*>(device_alloc(bytes));
      CUDA_CHECK(cudaMemset(project_counters_, 0, bytes));
    }
    if (sw_.lab_omit != 0 || sw_.lab_attn != 0)
      std::fprintf(stderr,
                   "infercept: INFERCEPT_LAB_OMIT or _ATTN is set: some ops do not run and the "
                   "model's outputs are wrong (a timing experiment)\n");
    return ok_status();
  }

  ~CudaBackend() override {
    cudaDeviceSynchronize();
    for (void* p : device_buffers_) cudaFree(p);
    cuda::free_staging(step_);
    cuda::free_staging(block_copy_idx_);
    cudaFreeHost(logits_host_);
    gemm_.reset();
    cudaStreamDestroy(compute_);
  }

  std::string name() const override { return std::string("cuda:") + props_.name; }
  DType activation_dtype() const override { return act_; }
  bool copies_are_async() const override { return true; }
  int64_t replayed_steps() const override { return graph_replays_ + graph_captures_; }
  int64_t free_memory_bytes() const override {
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return (int64_t)free;
  }
  int64_t total_memory_bytes() const override {
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return (int64_t)total;
  }

  // ---- memory ----
  Tensor alloc_activation(int64_t rows, int64_t cols, DType dtype) override {
    CHECK(dtype == act_ || dtype == DType::f32);
    void* p = device_alloc((size_t)(rows * cols) * dtype_block_bytes(dtype));
    return Tensor{p, dtype, rows, cols, cols};
  }

  Result<Weight> upload_weight(const void* data, DType dtype, int64_t rows, int64_t cols) override {
    return cuda::upload_weight(data, dtype, rows, cols, act_,
                               [this](size_t bytes) { return device_alloc_checked(bytes); });
  }

  Result<std::unique_ptr<KvStorage>> create_kv_storage(const KvGeometry& g) override {
    return create_storage(g, /*host=*/false);
  }
  Result<std::unique_ptr<KvStorage>> create_host_kv_storage(const KvGeometry& g) override {
    return create_storage(g, /*host=*/true);
  }

  void to_host_f32(const Tensor& t, float* dst) override {
    const size_t n = (size_t)(t.rows * t.cols);
    if (n == 0) return;
    ensure_logits_host(n);
    float* src = static_cast<float*>(t.data);
    if (t.dtype != DType::f32 || t.stride != t.cols) {
      CHECK(n <= f32_scratch_elems_);
      cuda::convert_to_f32(view(t), f32_scratch_, compute_);
      src = f32_scratch_;
    }
    CUDA_CHECK(cudaMemcpyAsync(logits_host_, src, n * 4, cudaMemcpyDeviceToHost, compute_));
    CUDA_CHECK(cudaStreamSynchronize(compute_));
    std::memcpy(dst, logits_host_, n * 4);
  }

  bool greedy_on_device() const override { return true; }
  bool argmax_rows(const Tensor& t, int32_t* out) override {
    CHECK(t.dtype == DType::f32 && t.rows <= cuda::SampleIo::kCapacity);
    if (t.rows == 0) return true;
    cuda::argmax_rows(view(t), sample_io_.ids_dev(), compute_);
    sample_io_.ids_to_host(t.rows, out, compute_);
    return true;
  }

  bool samples_on_device() const override { return true; }
  bool sample_rows(Tensor t, std::span<const DeviceSampleRow> rows, int32_t* out) override {
    CHECK(t.dtype == DType::f32 && t.rows == (int64_t)rows.size());
    if (t.rows == 0) return true;
    // The previous call synchronized the stream, so the pinned parameters are free again.
    const DeviceSampleRow* params = sample_io_.upload_params(rows, compute_);
    cuda::sample_rows(static_cast<float*>(t.data), t.rows, t.cols, t.stride, params,
                      sample_io_.ids_dev(), compute_);
    sample_io_.ids_to_host(t.rows, out, compute_);
    return true;
  }

  void sync() override {
    CUDA_CHECK(cudaStreamSynchronize(compute_));
    swap_.sync();
  }

  void begin_step(bool replayable) override {
    ++step_no_;
    CUDA_CHECK(cudaEventSynchronize(step_.done));  // the last step's uploads have left
    step_.used = 0;
    uploads_.clear();
    plan_ready_ = false;
    sig_.clear();
    step_needs_wait_ = false;
    const Pass next = next_pass_;
    next_pass_ = Pass::probe;
    if (!graphs_on_ || !replayable) {
      pass_ = Pass::eager;
    } else if (next == Pass::capture) {
      pass_ = Pass::capture;
      // Relaxed: the swap bookkeeping queries events while this thread captures.
      CUDA_CHECK(cudaStreamBeginCapture(compute_, cudaStreamCaptureModeRelaxed));
      // One upload node for the whole step (INFERCEPT_GRAPH_ONE_UPLOAD=1): the probe before
      // a capture or replay has staged every host array at the offsets the ops will use, so
      // the graph's first node can copy them all; upload() then adds no node of its own.
      if (sw_.one_upload && probe_staged_ > 0)
        sample_io_.small_copy()(step_.dev, step_.host_dev, step_.host, probe_staged_,
                                cudaMemcpyHostToDevice, compute_);
    } else {
      pass_ = next;  // probe, or eager after a probe that found nothing to replay
    }
    // An eager step may wait for this step's swap copies: queue them now. A replayed or
    // captured one queues them right after its graph launch (SwapEngine::flush).
    if (pass_ == Pass::eager) swap_.flush();
  }

  bool end_step() override {
    switch (pass_) {
      case Pass::eager:
        return true;
      case Pass::probe: {
        if (step_needs_wait_) {  // a swap copy in flight touches this step's blocks
          next_pass_ = Pass::eager;
          return false;
        }
        if (cudaGraphExec_t exec = graphs_.find(sig_, step_no_)) {
          CUDA_CHECK(cudaGraphLaunch(exec, compute_));
          CUDA_CHECK(cudaEventRecord(step_.done, compute_));
          swap_.flush();
          ++graph_replays_;
          return true;
        }
        next_pass_ = graphs_.worth_recording(sig_) ? Pass::capture : Pass::eager;
        probe_sig_ = sig_;
        probe_staged_ = step_.used;
        return false;
      }
      case Pass::capture: {
        cudaGraph_t graph = nullptr;
        CUDA_CHECK(cudaStreamEndCapture(compute_, &graph));
        CHECK_MSG(sig_ == probe_sig_,
                  "a step's launches changed between its probe and its capture");
        // The one upload node copied the probe's staged range: the capture staged the same.
        if (sw_.one_upload) CHECK(step_.used == probe_staged_);
        cudaGraphExec_t exec = graphs_.add(sig_, graph, step_no_, compute_);
        CUDA_CHECK(cudaGraphDestroy(graph));
        CUDA_CHECK(cudaGraphLaunch(exec, compute_));
        CUDA_CHECK(cudaEventRecord(step_.done, compute_));
        swap_.flush();
        ++graph_captures_;
        return true;
      }
    }
    return true;
  }

  // ---- ops ----
  void embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) override {
    CHECK((int64_t)tokens.size() == out.rows && table.cols == out.cols);
    const int32_t* t = dev(tokens);
    if (skip_launch(1, table.data, t, out)) return;
    cuda::embed(table.data, table.dtype, t, view(out), compute_);
  }

  void rmsnorm(const Tensor& x, const Weight& w, float eps, Tensor out) override {
    CHECK(w.dtype == DType::f32 && w.cols == x.cols);
    if (skip_launch(2, x, w.data, eps, out)) return;
    cuda::rmsnorm(view(x), static_cast<const float*>(w.data), eps, view(out), nullptr, compute_);
  }

  void add_rmsnorm(Tensor residual, const Tensor& x, const Weight& w, float eps,
                   Tensor out) override {
    CHECK(w.dtype == DType::f32 && w.cols == x.cols);
    if (skip_launch(3, residual, x, w.data, eps, out)) return;
    RowsView res = view(residual);
    cuda::rmsnorm(view(x), static_cast<const float*>(w.data), eps, view(out), &res, compute_);
  }

  void matmul(const Tensor& x, const Weight& w, const Weight* bias, Tensor out) override {
    CHECK(x.cols == w.cols && out.cols == w.rows && out.rows == x.rows);
    CHECK(x.dtype == act_ && w.dtype == act_);
    const void* b = bias != nullptr && bias->present() ? bias->data : nullptr;
    if (skip_launch(4, x, w.data, w.rows, w.cols, b, out)) return;
    if (x.rows <= sw_.gemv_max_rows &&
        cuda::gemv_fits(x.rows, x.cols, x.data, x.stride, w.data, act_, out.dtype))
      cuda::gemv(x.data, x.stride, act_, w.data, x.rows, w.rows, w.cols, out.data, out.stride,
                 out.dtype, compute_);
    else
      gemm_->run(x.data, x.stride, act_, w.data, x.rows, w.rows, w.cols, out.data, out.stride,
                 out.dtype, compute_);
    if (bias != nullptr && bias->present()) {
      CHECK(out.dtype == act_ && bias->cols == out.cols);
      cuda::add_bias(view(out), static_cast<const float*>(bias->data), compute_);
    }
  }

  // The fused groups run as one GEMV launch each when the batch is small enough for the GEMV
  // kernel (decode at batch 1-2); otherwise as the composed ops, with the residual add done by
  // cuBLASLt's beta = 1 instead of a kernel of its own.
  void norm_project(const Tensor& x, const Weight& norm, float eps, Tensor h,
                    std::span<const Projection> projections) override {
    if (!launch_norm_project(x, norm, eps, projections, cuda::GemvHeadSignal{}))
      Backend::norm_project(x, norm, eps, h, projections);
  }

  // norm_project as one GEMV launch, with `signal`'s per-KV-head counters when it names them
  // (GemvHeadSignal); false, launching nothing, when the GEMV kernel cannot take it.
  bool launch_norm_project(const Tensor& x, const Weight& norm, float eps,
                           std::span<const Projection> projections,
                           const cuda::GemvHeadSignal& signal) {
    cuda::GemvArgs a = gemv_args(x, cuda::GemvEpilogue::store);
    a.norm = static_cast<const float*>(norm.data);
    a.eps = eps;
    a.n_segments = (int)projections.size();
    bool fits = norm.dtype == DType::f32 && norm.cols == x.cols &&
                projections.size() <= (size_t)cuda::kGemvMaxSegments;
    for (size_t i = 0; fits && i < projections.size(); ++i) {
      const Projection& p = projections[i];
      CHECK(p.w->cols == x.cols && p.out.cols == p.w->rows && p.out.rows == x.rows);
      const bool has_bias = p.bias != nullptr && p.bias->present();
      fits = p.w->dtype == act_ && p.out.dtype == act_ &&
             (!has_bias || (p.bias->dtype == DType::f32 && p.bias->cols == p.w->rows));
      set_segment(a.seg[i], p.w->data, nullptr,
                  has_bias ? static_cast<const float*>(p.bias->data) : nullptr, p.out, p.w->rows);
    }
    a.signal.ready = signal.ready;
    a.signal.q_rows = signal.q_rows;
    a.signal.kv_rows = signal.kv_rows;
    if (!fits || !fused_fits(a)) return false;
    if (skip_launch(16, bytes_of(a)) || omitted(Sw::kOmitQkv)) return true;  // 11: an upload's
    cuda::gemv(a, compute_);
    return true;
  }

  // self_attention's Q/K/V product: where the GEMV kernel takes it with this layer's counters
  // (in signal_counters_), its rows go in the order of the KV heads and each head's counter
  // counts them (GemvHeadSignal), so the attention of a head may start before the product
  // ends. Returns the counters the attention must wait on, or null when the product does not
  // signal (the attention then waits for the launch).
  int* project_qkv_signalled(const Tensor& x, const Weight& norm, float eps, Tensor h,
                             std::span<const Projection> qkv, int64_t layer, int64_t n_heads,
                             const KvGeometry& g) {
    if (signal_counters_ != nullptr && layer < kSignalLayers && g.n_kv_heads <= kSignalHeads) {
      cuda::GemvHeadSignal signal;
      signal.ready = signal_counters_ + layer * kSignalHeads * 2;
      signal.q_rows = (int)(n_heads / g.n_kv_heads * g.head_dim);
      signal.kv_rows = (int)g.head_dim;
      if (launch_norm_project(x, norm, eps, qkv, signal)) return signal.ready;
    }
    norm_project(x, norm, eps, h, qkv);
    return nullptr;
  }

  // With INFERCEPT_GEMV_ROPE=1 (off until measured on the device) and 1-2 rows: Q, K and V,
  // RoPE and the store in one GEMV launch (GemvEpilogue::rope_store), one kernel a layer less
  // on the path from the norm to the attention. Otherwise the two group ops.
  void norm_project_rope_store(const Tensor& x, const Weight& norm, float eps, Tensor h,
                               std::span<const Projection> qkv, std::span<const int32_t> positions,
                               const RopeParams& p, KvStorage& kv, int64_t layer,
                               std::span<const int32_t> slots) override {
    CHECK(qkv.size() == 3);
    auto composed = [&] {
      CHECK_MSG(!sw_.rope_fold_required,
                "INFERCEPT_GEMV_ROPE=require: a step the fold cannot take");
      Backend::norm_project_rope_store(x, norm, eps, h, qkv, positions, p, kv, layer, slots);
    };
    if (!sw_.rope_fold)
      return Backend::norm_project_rope_store(x, norm, eps, h, qkv, positions, p, kv, layer, slots);
    auto& s = static_cast<CudaKvStorage&>(kv);
    const KvGeometry& g = s.geometry();
    bool fits = norm.dtype == DType::f32 && norm.cols == x.cols && p.rot_dim == p.head_dim &&
                p.head_dim == g.head_dim && g.dtype == act_ &&
                (int64_t)positions.size() == x.rows && (int64_t)slots.size() == x.rows;
    for (const Projection& pr : qkv) {
      CHECK(pr.w->cols == x.cols && pr.out.cols == pr.w->rows && pr.out.rows == x.rows);
      fits = fits && (pr.bias == nullptr || !pr.bias->present()) && pr.w->dtype == act_ &&
             pr.out.dtype == act_;
    }
    if (!fits) return composed();
    cuda::GemvArgs a = gemv_args(x, cuda::GemvEpilogue::rope_store);
    a.norm = static_cast<const float*>(norm.data);
    a.eps = eps;
    a.n_segments = 3;
    for (int i = 0; i < 3; ++i)
      set_segment(a.seg[i], qkv[i].w->data, nullptr, nullptr, qkv[i].out, qkv[i].w->rows);
    cuda::GemvRope& r = a.rope;
    r.positions = dev(positions);  // the composed path finds them again (dev)
    r.slots = dev(slots);
    r.freq_factors = freq_factors(p.freq_factors);
    r.theta_base = p.theta_base;
    r.head_dim = (int)p.head_dim;
    r.neox = p.neox;
    r.k_cache = s.k(layer);
    r.v_cache = s.v(layer);
    r.kv_width = (int)(g.n_kv_heads * g.head_dim);
    if (!fused_fits(a)) return composed();
    wait_before_store(layer, slots, g.block_size);
    if (skip_launch(14, bytes_of(a)) || omitted(Sw::kOmitQkv)) return;
    cuda::gemv(a, compute_);
  }

  // A step of decode rows alone (up to kFusedDecodeMaxRows, sm_90): the Q/K/V product, then
  // one decode_rope_attention launch that rotates q and the new keys, stores them and attends,
  // its partitions merged within a thread-block cluster: no RoPE store kernel and no merge
  // through global memory on the path to the output projection. Otherwise the composed ops.
  void self_attention(const Tensor& x, const Weight& norm, float eps, Tensor h,
                      std::span<const Projection> qkv, std::span<const int32_t> positions,
                      const RopeParams& p, KvStorage& kv, int64_t layer,
                      std::span<const int32_t> slots, const AttentionBatch& b, int64_t n_heads,
                      float scale, Tensor out) override {
    cuda::AttnArgs a;
    cuda::DecodeRopeArgs r;
    if (!fused_attention_fits(x, qkv, positions, p, kv, slots, b, n_heads, out))
      return Backend::self_attention(x, norm, eps, h, qkv, positions, p, kv, layer, slots, b,
                                     n_heads, scale, out);
    project_for_fused_attention(x, norm, eps, h, qkv, positions, p, kv, layer, slots, b, n_heads,
                                scale, out, a, r);
    if (skip_launch(17, bytes_of(a), bytes_of(r)) || omitted(Sw::kOmitAttn)) return;
    cuda::decode_rope_attention(a, r, (int)x.rows, compute_);
  }

  // Where the fused attention fits and INFERCEPT_ATTN_PROJECT is not 0: the Q/K/V product, then
  // one attend_project launch whose blocks do the attention (as decode_rope_attention, its
  // partitions merged through L2) and then the output projection added into the residual
  // (PERF 4.5q). Otherwise self_attention and project_add.
  void self_attention_project(const Tensor& x, const Weight& norm, float eps, Tensor h,
                              std::span<const Projection> qkv, std::span<const int32_t> positions,
                              const RopeParams& p, KvStorage& kv, int64_t layer,
                              std::span<const int32_t> slots, const AttentionBatch& b,
                              int64_t n_heads, float scale, Tensor out, const Weight& wo,
                              Tensor residual, Tensor scratch) override {
    cuda::AttendProjectArgs pa;
    std::memset(&pa, 0, sizeof pa);  // hashed as bytes by skip_launch: no stray padding
    pa.wo = wo.data;
    pa.m = (int)wo.rows;
    pa.k = (int)wo.cols;
    pa.residual = residual.data;
    pa.residual_stride = residual.stride;
    pa.prefetch = sw_.attn_project_prefetch ? 1 : 0;
    const int64_t n = x.rows;
    // Up to two decode rows (INFERCEPT_ATTN_PROJECT_ROWS=1: one); two only where the grid
    // leaves each row's groups at least kProjectMinParts partitions of one item a block
    // (llama2-7b, llama3-8b: 2-2.5% faster at batch 2; llama2-13b's 2 x 40 groups got 6
    // partitions of three chunks a warp and were 1% slower; PERF 4.5q).
    bool fits = sw_.attn_project && sw_.fused && project_counters_ != nullptr &&
                n <= sw_.attn_project_rows && sw_.lab_omit == 0 && sw_.lab_attn == 0 &&
                layer < kSignalLayers && wo.dtype == act_ && residual.dtype == act_ &&
                wo.cols == out.cols && residual.cols == wo.rows && residual.rows == n &&
                fused_attention_fits(x, qkv, positions, p, kv, slots, b, n_heads, out);
    cuda::AttnArgs a;
    cuda::DecodeRopeArgs r;
    if (fits) {
      // The same group split and partitions as the launch would take; the Q/K/V product has
      // not been enqueued yet, so a shape the kernel does not take still has both forms.
      std::memset(&a, 0, sizeof a);
      std::memset(&r, 0, sizeof r);
      const KvGeometry& g = static_cast<CudaKvStorage&>(kv).geometry();
      a.n_heads = (int)n_heads;
      a.n_kv_heads = (int)g.n_kv_heads;
      a.head_dim = (int)g.head_dim;
      a.act_dtype = out.dtype;
      a.kv_dtype = g.dtype;
      a.out = out.data;
      a.out_stride = out.stride;
      r.group_split = group_split(n_heads, g);
      const int n_groups = (int)n * a.n_kv_heads * r.group_split;
      r.parts = project_parts(b, n_groups);
      fits = n * n_heads * r.parts <= scratch_pairs_ &&
             (n == 1 || n_groups * kProjectMinParts <= project_blocks()) &&
             cuda::attend_project_fits(a, r, pa, (int)n);
    }
    if (!fits) {
      self_attention(x, norm, eps, h, qkv, positions, p, kv, layer, slots, b, n_heads, scale, out);
      return project_add(out, wo, residual, scratch);
    }
    project_for_fused_attention(x, norm, eps, h, qkv, positions, p, kv, layer, slots, b, n_heads,
                                scale, out, a, r);
    r.parts = project_parts(b, (int)n * a.n_kv_heads * r.group_split);
    a.partial_acc = partial_acc_;
    a.partial_ml = partial_ml_;
    pa.counters = project_counters_ + layer * cuda::kAttendProjectCounters;
    if (skip_launch(18, bytes_of(a), bytes_of(r), bytes_of(pa))) return;
    cuda::attend_project(a, r, pa, (int)n, compute_);
  }

  // Whether a step's attention takes the fused forms (decode rows alone, shapes the kernels
  // take).
  bool fused_attention_fits(const Tensor& x, std::span<const Projection> qkv,
                            std::span<const int32_t> positions, const RopeParams& p,
                            const KvStorage& kv, std::span<const int32_t> slots,
                            const AttentionBatch& b, int64_t n_heads, const Tensor& out) const {
    CHECK(qkv.size() == 3);
    const KvGeometry& g = static_cast<const CudaKvStorage&>(kv).geometry();
    const Tensor &q = qkv[0].out, &k = qkv[1].out, &v = qkv[2].out;
    const int64_t n = x.rows;
    bool fits = sw_.attn_fused && max_parts_ > 0 && n <= kFusedDecodeMaxRows && b.n_seqs == n &&
                (int64_t)positions.size() == n && (int64_t)slots.size() == n &&
                p.rot_dim == p.head_dim && p.head_dim == g.head_dim && q.dtype == act_ &&
                k.dtype == act_ && v.dtype == act_ &&
                (g.dtype == DType::bf16 || g.dtype == DType::f16) &&
                (g.head_dim == 32 || g.head_dim == 64 || g.head_dim == 128) &&
                n_heads % g.n_kv_heads == 0 && n_heads / g.n_kv_heads <= 8 &&
                q.cols == n_heads * g.head_dim && k.cols == g.n_kv_heads * g.head_dim &&
                v.cols == k.cols && out.dtype == act_ && out.cols == q.cols;
    for (int64_t i = 0; fits && i < n; ++i) fits = b.q_len[i] == 1 && b.q_start[i] == i;
    return fits;
  }

  // attend_project's partitions a row (attend_project_parts), for its grid of four blocks a
  // multiprocessor.
  int project_parts(const AttentionBatch& b, int n_groups) const {
    return cuda::attend_project_parts(b.ctx_len, sw_.attn_project_keys, n_groups, project_blocks());
  }
  int project_blocks() const { return 4 * props_.multiProcessorCount; }
  static constexpr int kProjectMinParts = 8;

  // Blocks a KV head's query group is cut across (DecodeRopeArgs::group_split): the largest
  // divisor of the group up to INFERCEPT_ATTN_GROUP_SPLIT, by default up to half the group.
  int group_split(int64_t n_heads, const KvGeometry& g) const {
    const int group = (int)(n_heads / g.n_kv_heads);
    const int split_max = sw_.attn_group_split > 0 ? sw_.attn_group_split : group / 2;
    int split = 1;
    for (int d = 1; d <= split_max; ++d)
      if (group % d == 0) split = d;
    return split;
  }

  // The fused attention's Q/K/V product (counting each KV head's rows where it can), the
  // step's waits and uploads, and the attention's arguments: what both fused forms share.
  void project_for_fused_attention(const Tensor& x, const Weight& norm, float eps, Tensor h,
                                   std::span<const Projection> qkv,
                                   std::span<const int32_t> positions, const RopeParams& p,
                                   KvStorage& kv, int64_t layer, std::span<const int32_t> slots,
                                   const AttentionBatch& b, int64_t n_heads, float scale,
                                   const Tensor& out, cuda::AttnArgs& a, cuda::DecodeRopeArgs& r) {
    auto& s = static_cast<CudaKvStorage&>(kv);
    const KvGeometry& g = s.geometry();
    const Tensor &q = qkv[0].out, &k = qkv[1].out, &v = qkv[2].out;
    // (INFERCEPT_LAB_OMIT=qkv: no product, so nothing to count; =attn: counters that nobody
    // resets, harmless in a measurement.)
    int* ready = omitted(Sw::kOmitQkv)
                     ? (norm_project(x, norm, eps, h, qkv), nullptr)
                     : project_qkv_signalled(x, norm, eps, h, qkv, layer, n_heads, g);
    hint_ = Weight{};  // the fused kernel fetches nothing ahead
    const bool store_waited = wait_before_store(layer, slots, g.block_size);
    const bool waited = wait_before_attention(layer, b, g.block_size);
    const size_t staged_before = step_.used;  // grows with every upload below
    a = attn_args(q, s, layer, out, b, n_heads, scale);
    std::memset(&r, 0, sizeof r);
    r.k_new = k.data;
    r.k_stride = k.stride;
    r.v_new = v.data;
    r.v_stride = v.stride;
    r.k_cache = s.k(layer);
    r.v_cache = s.v(layer);
    r.positions = dev(positions);
    r.slots = dev(slots);
    r.freq_factors = freq_factors(p.freq_factors);
    r.theta_base = p.theta_base;
    r.neox = p.neox ? 1 : 0;
    r.parts = cuda::decode_rope_parts(b.ctx_len, (int)g.n_kv_heads, attn_planner_.target_ctas(),
                                      attn_planner_.min_partition(), max_parts_);
    // The partitions do not depend on the split, so a split changes no bit of the output.
    r.group_split = group_split(n_heads, g);
    if (ready != nullptr) {
      r.ready = ready;
      r.passed = ready + g.n_kv_heads;
      r.ready_count = (int)((n_heads / g.n_kv_heads + 2) * g.head_dim);
    }
    // As for the decode kernel (attention()): the first chunk's loads may go out before the
    // Q/K/V product ends only if this call enqueued no upload and no swap wait.
    a.prewait = sw_.attn_prewait && !waited && !store_waited && step_.used == staged_before;
    a.lab_mode = sw_.lab_attn;
  }

  void norm_gated_ffn(const Tensor& x, const Weight& norm, float eps, Tensor h,
                      const Weight& w_gate, const Weight& w_up, Tensor gate, Tensor up) override {
    CHECK(w_gate.rows == w_up.rows && w_gate.cols == x.cols && w_up.cols == x.cols);
    CHECK(gate.rows == x.rows && gate.cols == w_gate.rows);
    cuda::GemvArgs a = gemv_args(x, cuda::GemvEpilogue::gated);
    a.norm = static_cast<const float*>(norm.data);
    a.eps = eps;
    set_segment(a.seg[0], w_gate.data, w_up.data, nullptr, gate, w_gate.rows);
    const bool fits = norm.dtype == DType::f32 && norm.cols == x.cols && w_gate.dtype == act_ &&
                      w_up.dtype == act_ && gate.dtype == act_;
    if (!fits || !fused_fits(a))
      return Backend::norm_gated_ffn(x, norm, eps, h, w_gate, w_up, gate, up);
    if (skip_launch(12, bytes_of(a)) || omitted(Sw::kOmitGateUp)) return;
    cuda::gemv(a, compute_);
  }

  void project_add(const Tensor& x, const Weight& w, Tensor residual, Tensor scratch) override {
    CHECK(x.cols == w.cols && residual.cols == w.rows && residual.rows == x.rows);
    CHECK(x.dtype == act_ && w.dtype == act_ && residual.dtype == act_);
    cuda::GemvArgs a = gemv_args(x, cuda::GemvEpilogue::accumulate);
    set_segment(a.seg[0], w.data, nullptr, nullptr, residual, w.rows);
    if (!sw_.fused) return Backend::project_add(x, w, residual, scratch);
    if (skip_launch(13, bytes_of(a)) || omitted(w.rows == w.cols ? Sw::kOmitO : Sw::kOmitDown))
      return;
    if (fused_fits(a))
      cuda::gemv(a, compute_);
    else
      gemm_->run(x.data, x.stride, act_, w.data, x.rows, w.rows, w.cols, residual.data,
                 residual.stride, act_, compute_, /*accumulate=*/true);
  }

  void rope(Tensor q, Tensor k, std::span<const int32_t> positions, const RopeParams& p) override {
    run_rope(q, k, k, positions, p, nullptr, 0, {});
  }

  void store_kv(KvStorage& kv, int64_t layer, const Tensor& k, const Tensor& v,
                std::span<const int32_t> slots) override {
    // Only reached when a caller stores without rotating (the model fuses both).
    auto& s = static_cast<CudaKvStorage&>(kv);
    const KvGeometry& g = s.geometry();
    wait_before_store(layer, slots, g.block_size);
    CHECK((int64_t)slots.size() == k.rows && k.cols == g.n_kv_heads * g.head_dim);
    // A rope with zero rotation would change nothing but costs sincos: copy rows instead.
    cuda::RopeStoreArgs a =
        rope_args(k, k, v, {}, RopeParams{g.head_dim, g.head_dim}, &s, layer, slots);
    a.n_heads = 0;
    a.theta_base = 1.0f;
    a.positions = zero_positions(k.rows);
    if (skip_launch(10, bytes_of(a))) return;
    cuda::rope_store_kv(a, compute_);
  }

  void rope_store_kv(Tensor q, Tensor k, const Tensor& v, std::span<const int32_t> positions,
                     const RopeParams& p, KvStorage& kv, int64_t layer,
                     std::span<const int32_t> slots) override {
    wait_before_store(layer, slots, kv.geometry().block_size);
    run_rope(q, k, v, positions, p, &static_cast<CudaKvStorage&>(kv), layer, slots);
  }

  void prefetch_hint(const Weight& w) override {
    if (l2_prefetch_bytes_ > 0) hint_ = w;
  }

  void attention(const Tensor& q, const KvStorage& kv, int64_t layer, const AttentionBatch& b,
                 int64_t n_heads, float scale, Tensor out) override {
    const auto& s = static_cast<const CudaKvStorage&>(kv);
    const KvGeometry& g = s.geometry();
    const bool waited = wait_before_attention(layer, b, g.block_size);
    const size_t staged_before = step_.used;  // grows with every upload below
    if (!plan_ready_) {  // the same for every layer of a step (attention_plan.h)
      const bool tensor_cores = cuda::prefill_supports_head_dim((int)g.head_dim) &&
                                q.stride % 8 == 0 && out.stride % 8 == 0;
      attn_ = attn_planner_.plan(b, (int)n_heads, g, q.dtype, tensor_cores, scratch_pairs_);
      d_prefill_tiles_ = upload_vec(attn_.prefill.tiles);
      d_prefill_combines_ = upload_vec(attn_.prefill.combines);
      d_items_ = upload_vec(attn_.paged.items);
      d_decode_items_ = upload_vec(attn_.paged.decode_items);
      d_combines_ = upload_vec(attn_.paged.combines);
      d_decode_combines_ = upload_vec(attn_.paged.decode_combines);
      plan_ready_ = true;
    }
    const cuda::AttnPlan& plan = attn_.paged;
    const cuda::PrefillPlan& prefill = attn_.prefill;
    cuda::AttnArgs a = attn_args(q, s, layer, out, b, n_heads, scale);
    a.items = d_items_;
    a.n_items = (int)plan.items.size();
    a.decode_items = d_decode_items_;
    a.n_decode_items = (int)plan.decode_items.size();
    a.combines = d_combines_;
    a.n_combines = (int)plan.combines.size();
    a.decode_combines = d_decode_combines_;
    a.combine_counters = combine_counters_;
    a.q_start = dev(b.q_start);
    a.q_len = dev(b.q_len);
    a.max_pairs = plan.max_pairs;
    a.partial_acc = partial_acc_;
    a.partial_ml = partial_ml_;
    // Only a step of a few decode rows alone leaves the bandwidth idle; the hint is this
    // attention's either way.
    if (hint_.present() && prefill.tiles.empty() && plan.items.empty() && q.rows <= 8) {
      a.prefetch = hint_.data;
      a.prefetch_bytes =
          std::min<int64_t>(l2_prefetch_bytes_, hint_.rows * (int64_t)hint_.row_bytes);
    }
    hint_ = Weight{};
    // The decode kernel may read the plan, the block tables and the cached context before the
    // RoPE store ends (AttnArgs::prewait) only if none of them was put on the stream by this
    // call: then all of it was there before an earlier kernel that everything after it
    // follows. Decode rows alone, so that the kernel before is that store (or the Q/K/V
    // product that does it, norm_project_rope_store), which writes only this step's keys.
    a.prewait = sw_.attn_prewait && !waited && step_.used == staged_before && plan.items.empty() &&
                prefill.tiles.empty() && !plan.decode_items.empty();
    a.lab_mode = sw_.lab_attn;
    if (skip_launch(8, bytes_of(a), d_prefill_tiles_, prefill.tiles.size(), d_prefill_combines_,
                    prefill.combines.size()) ||
        omitted(Sw::kOmitAttn))
      return;
    cuda::attention(a, compute_);
    if (!prefill.tiles.empty())
      cuda::attention_prefill(a, d_prefill_tiles_, (int)prefill.tiles.size(), compute_);
    cuda::attention_combine(a, d_prefill_combines_, (int)prefill.combines.size(),
                            prefill.max_combine_rows, compute_);
  }

  void silu_mul(const Tensor& gate, const Tensor& up, Tensor out) override {
    if (skip_launch(5, gate, up, out)) return;
    cuda::silu_mul(view(gate), view(up), view(out), compute_);
  }
  void add(Tensor a, const Tensor& b) override {
    if (skip_launch(6, a, b)) return;
    cuda::add(view(a), view(b), compute_);
  }
  void gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor out) override {
    CHECK((int64_t)rows.size() == out.rows);
    const int32_t* r = dev(rows);
    if (skip_launch(7, x, r, out)) return;
    cuda::gather_rows(view(x), r, view(out), compute_);
  }

  void copy_blocks(KvStorage& kv, std::span<const int32_t> src,
                   std::span<const int32_t> dst) override {
    auto& s = static_cast<CudaKvStorage&>(kv);
    CHECK(src.size() == dst.size());
    if (src.empty()) return;
    swap_.flush();  // copies reach the device in the order they were asked for
    const KvGeometry& g = s.geometry();
    // Its own small upload (not the step's staging: this may run between steps).
    const int32_t* idx = cuda::upload_indices(block_copy_idx_, compute_, src, dst);
    cuda::copy_chunks(s.planes(), s.planes(), (int)(2 * g.n_layers), idx, idx + src.size(),
                      (int)src.size(), g.bytes_per_block_per_layer(),
                      4 * props_.multiProcessorCount, compute_);
  }

  void copy_blocks_between(const KvStorage& from, KvStorage& to, std::span<const int32_t> src,
                           std::span<const int32_t> dst) override {
    swap_.copy(static_cast<const CudaKvStorage&>(from), static_cast<CudaKvStorage&>(to), src, dst,
               compute_);
  }
  void flush_copies() override { swap_.flush(); }

 private:
  void* device_alloc(size_t bytes) {
    void* p = device_alloc_checked(bytes);
    CHECK_MSG(p != nullptr, "out of GPU memory for an activation buffer");
    return p;
  }
  void* device_alloc_checked(size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    device_buffers_.push_back(p);
    return p;
  }

  Result<std::unique_ptr<KvStorage>> create_storage(const KvGeometry& g, bool host) {
    TRY_ASSIGN(std::unique_ptr<CudaKvStorage> s, cuda::allocate_kv_storage(g, host));
    if (!host) {
      swap_.attach_device_pool(g.n_layers, g.n_blocks);
      const int64_t pairs = attn_planner_.scratch_pairs((int)g.n_kv_heads);
      if (pairs > scratch_pairs_) {
        partial_acc_ = static_cast<float*>(device_alloc((size_t)(pairs * g.head_dim) * 4));
        partial_ml_ = static_cast<float*>(device_alloc((size_t)pairs * 2 * 4));
        combine_counters_ = static_cast<int*>(device_alloc((size_t)pairs * sizeof(int)));
        CUDA_CHECK(cudaMemset(combine_counters_, 0, (size_t)pairs * sizeof(int)));
        scratch_pairs_ = pairs;
      }
    }
    return std::unique_ptr<KvStorage>(std::move(s));
  }

  // Device copy of a host array for this step (uploaded once, found again by address).
  const int32_t* dev(std::span<const int32_t> a) {
    if (a.empty()) return nullptr;
    for (const auto& u : uploads_)
      if (u.host == a.data() && u.n == a.size()) return u.dev;
    const int32_t* d = static_cast<const int32_t*>(upload(a.data(), a.size_bytes(), nullptr));
    uploads_.push_back({a.data(), a.size(), d});
    return d;
  }

  const void* upload(const void* src, size_t bytes, cudaStream_t st) {
    if (bytes == 0) return nullptr;
    st = st ? st : compute_;
    const size_t off = (step_.used + 255) / 256 * 256;
    CHECK_MSG(off + bytes <= step_.bytes, "CUDA step staging buffer overflow");
    std::memcpy(step_.host + off, src, bytes);
    step_.used = off + bytes;
    if (skip_launch(11, off, bytes)) return step_.dev + off;  // a replayed graph copies it
    if (pass_ == Pass::capture && sw_.one_upload) return step_.dev + off;  // the first node does
    // Through the SMs by default: never behind a swap copy on a copy engine (sample_io.h).
    sample_io_.small_copy()(step_.dev + off, step_.host_dev + off, step_.host + off, bytes,
                            cudaMemcpyHostToDevice, st);
    // In a capture the copy is a graph node; end_step records `done` after the launch.
    if (pass_ != Pass::capture) CUDA_CHECK(cudaEventRecord(step_.done, st));
    return step_.dev + off;
  }
  template <typename T>
  const T* upload_vec(const std::vector<T>& v) {
    return static_cast<const T*>(upload(v.data(), v.size() * sizeof(T), nullptr));
  }

  // The compute stream waits for a layer's swap copies only where this step touches blocks
  // they move (SwapEngine decides, once per step).
  // True when it put a wait on the stream.
  bool wait_before_store(int64_t layer, std::span<const int32_t> slots, int64_t block_size) {
    const cuda::SwapEngine::StoreWaits w = swap_.store_waits(step_no_, slots, block_size);
    if ((w.out || w.in) && !must_wait()) return false;
    if (w.out) CUDA_CHECK(cudaStreamWaitEvent(compute_, swap_.out_event(layer)));
    if (w.in) CUDA_CHECK(cudaStreamWaitEvent(compute_, swap_.in_event(layer)));
    return w.out || w.in;
  }
  // True when it put a wait on the stream.
  bool wait_before_attention(int64_t layer, const AttentionBatch& b, int64_t block_size) {
    if (!swap_.attention_waits(step_no_, b, block_size) || !must_wait()) return false;
    CUDA_CHECK(cudaStreamWaitEvent(compute_, swap_.in_event(layer)));
    return true;
  }

  // A wait on a swap copy cannot go into a graph: a probe notes it (the step then runs
  // eagerly) and tells the caller to skip the wait; an eager pass waits.
  bool must_wait() {
    CHECK_MSG(pass_ != Pass::capture, "a captured step would wait for a swap copy");
    if (pass_ == Pass::probe) {
      step_needs_wait_ = true;
      return false;
    }
    return true;
  }

  static cuda::LaunchSignature::Bytes bytes_of(const auto& v) {
    return cuda::LaunchSignature::bytes_of(v);
  }
  cuda::GemvArgs gemv_args(const Tensor& x, cuda::GemvEpilogue epilogue) const {
    cuda::GemvArgs a;
    std::memset(static_cast<void*>(&a), 0, sizeof a);  // hashed as bytes: no stray padding
    a.n_segments = 1;
    a.x = x.data;
    a.x_stride = x.stride;
    a.n = (int)x.rows;
    a.k = (int)x.cols;
    a.in_dtype = act_;
    a.out_dtype = act_;
    a.epilogue = epilogue;
    return a;
  }
  // Member by member: the zeroed padding of gemv_args() stays zero for the signature hash.
  static void set_segment(cuda::GemvSegment& g, const void* w, const void* w2, const float* bias,
                          const Tensor& out, int64_t m) {
    g.w = w;
    g.w2 = w2;
    g.bias = bias;
    g.out = out.data;
    g.out_stride = out.stride;
    g.m = (int)m;
  }
  bool fused_fits(const cuda::GemvArgs& a) const {
    return sw_.fused && a.n <= sw_.gemv_max_rows && cuda::gemv_fits(a);
  }

  // The attention arguments every form shares: q, out, `layer`'s cache and the batch's
  // context lengths, block tables and sizes (uploaded, dev); the rest zero.
  cuda::AttnArgs attn_args(const Tensor& q, const CudaKvStorage& s, int64_t layer,
                           const Tensor& out, const AttentionBatch& b, int64_t n_heads,
                           float scale) {
    const KvGeometry& g = s.geometry();
    cuda::AttnArgs a;
    std::memset(&a, 0, sizeof a);  // hashed as bytes by skip_launch: no stray padding
    a.q = q.data;
    a.q_stride = q.stride;
    a.k_cache = s.k(layer);
    a.v_cache = s.v(layer);
    a.out = out.data;
    a.out_stride = out.stride;
    a.act_dtype = q.dtype;
    a.kv_dtype = g.dtype;
    a.ctx_len = dev(b.ctx_len);
    a.block_tables = dev(b.block_tables);
    a.max_blocks = b.max_blocks;
    a.block_size = (int)g.block_size;
    a.n_heads = (int)n_heads;
    a.n_kv_heads = (int)g.n_kv_heads;
    a.head_dim = (int)g.head_dim;
    a.scale = scale;
    return a;
  }

  // INFERCEPT_LAB_OMIT (BackendSwitches::lab_omit): this op launches nothing.
  using Sw = cuda::BackendSwitches;
  bool omitted(unsigned op) const { return (sw_.lab_omit & op) != 0; }

  // Appends an op's launch parameters to the step's signature while recording (probe or
  // capture) and says whether to skip the launch (the probe launches nothing).
  template <class... A>
  bool skip_launch(const A&... args) {
    if (pass_ == Pass::eager) return false;
    (sig_.add(args), ...);
    return pass_ == Pass::probe;
  }

  const float* freq_factors(std::span<const float> f) {
    if (f.empty()) return nullptr;
    for (const auto& [host, d] : freq_uploads_)
      if (host == f.data()) return d;
    float* d = static_cast<float*>(device_alloc(f.size_bytes()));
    CUDA_CHECK(cudaMemcpy(d, f.data(), f.size_bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
    freq_uploads_.push_back({f.data(), d});
    return d;
  }

  const int32_t* zero_positions(int64_t n) {
    zeros_.assign((size_t)n, 0);
    return static_cast<const int32_t*>(upload(zeros_.data(), zeros_.size() * 4, nullptr));
  }

  cuda::RopeStoreArgs rope_args(Tensor q, Tensor k, const Tensor& v,
                                std::span<const int32_t> positions, const RopeParams& p,
                                CudaKvStorage* kv, int64_t layer, std::span<const int32_t> slots) {
    cuda::RopeStoreArgs a;
    std::memset(&a, 0, sizeof a);  // hashed as bytes by skip_launch: no stray padding
    a.q = view(q);
    a.k = view(k);
    a.v = view(v);
    a.positions = dev(positions);
    a.slots = kv != nullptr ? dev(slots) : nullptr;
    a.freq_factors = freq_factors(p.freq_factors);
    a.head_dim = (int)p.head_dim;
    a.n_heads = (int)(q.cols / p.head_dim);
    a.n_kv_heads = (int)(k.cols / p.head_dim);
    a.neox = p.neox;
    a.theta_base = p.theta_base;
    if (kv != nullptr) {
      a.k_cache = kv->k(layer);
      a.v_cache = kv->v(layer);
      a.kv_dtype = kv->geometry().dtype;
    } else {
      a.kv_dtype = DType::f16;
    }
    return a;
  }

  void run_rope(Tensor q, Tensor k, const Tensor& v, std::span<const int32_t> positions,
                const RopeParams& p, CudaKvStorage* kv, int64_t layer,
                std::span<const int32_t> slots) {
    CHECK_MSG(p.rot_dim == p.head_dim, "CUDA RoPE rotates whole heads");
    CHECK((int64_t)positions.size() == q.rows && q.rows == k.rows);
    if (kv != nullptr) CHECK((int64_t)slots.size() == k.rows);
    const cuda::RopeStoreArgs a = rope_args(q, k, v, positions, p, kv, layer, slots);
    if (skip_launch(9, bytes_of(a)) || omitted(Sw::kOmitRope)) return;
    cuda::rope_store_kv(a, compute_);
  }

  void ensure_logits_host(size_t n) {
    if (n <= logits_host_elems_) return;
    cudaFreeHost(logits_host_);
    CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&logits_host_), n * 4, cudaHostAllocDefault));
    logits_host_elems_ = n;
    if (n > f32_scratch_elems_) {
      f32_scratch_ = static_cast<float*>(device_alloc(n * 4));
      f32_scratch_elems_ = n;
    }
  }

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
  cuda::BackendSwitches sw_;
  // prefetch_hint: the most bytes a decode attention asks L2 to fetch (0: off), and the hint
  // the next attention() takes (cleared by it).
  int64_t l2_prefetch_bytes_ = 0;
  // The largest cluster decode_rope_attention may form here (0: the fused path is off).
  int max_parts_ = 0;
  size_t probe_staged_ = 0;  // staging bytes of the last probe that led to a capture
  Weight hint_{};
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

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options) {
  if (options.activation_dtype != DType::bf16 && options.activation_dtype != DType::f16)
    return make_error("the CUDA backend computes in bf16 or f16");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return make_error("no CUDA device is available");
  }
  if (options.device < 0 || options.device >= count)
    return make_error("CUDA device ", std::to_string(options.device), " does not exist (",
                      std::to_string(count), " found)");
  auto b = std::make_unique<CudaBackend>(options.device, options.activation_dtype, options.graphs);
  TRY(b->init());
  return std::unique_ptr<Backend>(std::move(b));
}

bool cuda_backend_built() {
  return true;
}

}  // namespace infercept
