// The CUDA backend's set-up, memory, sampling, step recording and uploads (the class and its
// design: cuda_backend_impl.h; the layer ops: cuda_backend_ops.cu), and make_cuda_backend.
#include "backend/cuda/cuda_backend_impl.h"

namespace infercept::cuda_impl {

Status CudaBackend::init() {
  if (cudaSetDevice(device_) != cudaSuccess)
    return make_error("cannot use CUDA device ", std::to_string(device_));
  CUDA_CHECK(cudaGetDeviceProperties(&props_, device_));
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  gemm_ = std::make_unique<cuda::Gemm>();
  TRY(cuda::make_staging(step_, 16u << 20, compute_));
  TRY(cuda::make_staging(block_copy_idx_, 4u << 20, compute_));
  TRY(swap_.init(device_));
  attn_planner_ = cuda::AttentionPlanner(props_.multiProcessorCount);
  TRY(sample_io_.init(compute_));
  opt_.programmatic = opt_.programmatic && props_.major >= 9;
  opt_.attn_fused = opt_.attn_fused && props_.major >= 9;
  opt_.gemv_max_rows = std::clamp(opt_.gemv_max_rows, 0, cuda::kGemvMaxRows);
  opt_.gemv_mma_max_rows = std::clamp(opt_.gemv_mma_max_rows, 0, cuda::kGemvMmaMaxRows);
  opt_.attn_group_split = std::clamp(opt_.attn_group_split, 0, 8);
  cuda::set_programmatic_launch(opt_.programmatic);
  if (opt_.attn_fused) max_parts_ = cuda::decode_rope_max_parts();
  if (max_parts_ > 0 && opt_.attn_signal) {
    const size_t bytes = (size_t)(kSignalLayers * kSignalHeads * 2) * sizeof(int);
    signal_counters_ = static_cast<int*>(device_alloc(bytes));
    CUDA_CHECK(cudaMemset(signal_counters_, 0, bytes));
  }
  if (max_parts_ > 0 && opt_.attn_project) {
    const size_t bytes = (size_t)(kSignalLayers * cuda::kAttendProjectCounters) * sizeof(int);
    project_counters_ = static_cast<int*>(device_alloc(bytes));
    CUDA_CHECK(cudaMemset(project_counters_, 0, bytes));
  }
  return ok_status();
}

CudaBackend::~CudaBackend() {
  cudaDeviceSynchronize();
  for (void* p : device_buffers_) cudaFree(p);
  cuda::free_staging(step_);
  cuda::free_staging(block_copy_idx_);
  cudaFreeHost(logits_host_);
  gemm_.reset();
  cudaStreamDestroy(compute_);
}

int64_t CudaBackend::free_memory_bytes() const {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return (int64_t)free;
}

int64_t CudaBackend::total_memory_bytes() const {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return (int64_t)total;
}

Tensor CudaBackend::alloc_activation(int64_t rows, int64_t cols, DType dtype) {
  CHECK(dtype == act_ || dtype == DType::f32);
  void* p = device_alloc((size_t)(rows * cols) * dtype_block_bytes(dtype));
  return Tensor{p, dtype, rows, cols, cols};
}

Result<Weight> CudaBackend::upload_weight(const void* data, DType dtype, int64_t rows,
                                          int64_t cols) {
  return cuda::upload_weight(data, dtype, rows, cols, act_,
                             [this](size_t bytes) { return device_alloc_checked(bytes); });
}

Result<std::unique_ptr<KvStorage>> CudaBackend::create_kv_storage(const KvGeometry& g) {
  return create_storage(g, /*host=*/false);
}

Result<std::unique_ptr<KvStorage>> CudaBackend::create_host_kv_storage(const KvGeometry& g) {
  return create_storage(g, /*host=*/true);
}

void CudaBackend::to_host_f32(const Tensor& t, float* dst) {
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

bool CudaBackend::argmax_rows(const Tensor& t, int32_t* out) {
  CHECK(t.dtype == DType::f32 && t.rows <= cuda::SampleIo::kCapacity);
  if (t.rows == 0) return true;
  cuda::argmax_rows(view(t), sample_io_.ids_dev(), compute_);
  sample_io_.ids_to_host(t.rows, out, compute_);
  return true;
}

bool CudaBackend::sample_rows(Tensor t, std::span<const DeviceSampleRow> rows, int32_t* out) {
  CHECK(t.dtype == DType::f32 && t.rows == (int64_t)rows.size());
  if (t.rows == 0) return true;
  // The previous call synchronized the stream, so the pinned parameters are free again.
  const DeviceSampleRow* params = sample_io_.upload_params(rows, compute_);
  cuda::sample_rows(static_cast<float*>(t.data), t.rows, t.cols, t.stride, params,
                    sample_io_.ids_dev(), compute_);
  sample_io_.ids_to_host(t.rows, out, compute_);
  return true;
}

bool CudaBackend::mask_rows(Tensor t, std::span<const int32_t> rows, const uint64_t* masks,
                            int64_t words) {
  CHECK(t.dtype == DType::f32 && words > 0);
  // The pinned side is free: the last draw synchronized the stream.
  const int64_t per_turn = (int64_t)cuda::SampleIo::kMaskWords / words;
  CHECK(per_turn > 0);
  for (int64_t b = 0; b < (int64_t)rows.size(); b += per_turn) {
    if (b > 0) CUDA_CHECK(cudaStreamSynchronize(compute_));  // the last turn's uploads read
    const int64_t n = std::min<int64_t>(per_turn, (int64_t)rows.size() - b);
    const int32_t* rows_dev =
        sample_io_.upload_mask_rows(rows.subspan((size_t)b, (size_t)n), compute_);
    const uint64_t* masks_dev =
        sample_io_.upload_masks(masks + b * words, (size_t)(n * words), compute_);
    cuda::mask_rows(static_cast<float*>(t.data), t.cols, t.stride, rows_dev, n, masks_dev, words,
                    compute_);
  }
  return true;
}

void CudaBackend::sync() {
  CUDA_CHECK(cudaStreamSynchronize(compute_));
  swap_.sync();
}

void CudaBackend::begin_step(bool replayable) {
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
  } else {
    pass_ = next;  // probe, or eager after a probe that found nothing to replay
  }
  // An eager step may wait for this step's swap copies: queue them now. A replayed or
  // captured one queues them right after its graph launch (SwapEngine::flush).
  if (pass_ == Pass::eager) swap_.flush();
}

bool CudaBackend::end_step() {
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
      return false;
    }
    case Pass::capture: {
      cudaGraph_t graph = nullptr;
      CUDA_CHECK(cudaStreamEndCapture(compute_, &graph));
      CHECK_MSG(sig_ == probe_sig_, "a step's launches changed between its probe and its capture");
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

void* CudaBackend::device_alloc(size_t bytes) {
  void* p = device_alloc_checked(bytes);
  CHECK_MSG(p != nullptr, "out of GPU memory for an activation buffer");
  return p;
}

void* CudaBackend::device_alloc_checked(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  device_buffers_.push_back(p);
  return p;
}

Result<std::unique_ptr<KvStorage>> CudaBackend::create_storage(const KvGeometry& g, bool host) {
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
const int32_t* CudaBackend::dev(std::span<const int32_t> a) {
  if (a.empty()) return nullptr;
  for (const auto& u : uploads_)
    if (u.host == a.data() && u.n == a.size()) return u.dev;
  const int32_t* d = static_cast<const int32_t*>(upload(a.data(), a.size_bytes(), nullptr));
  uploads_.push_back({a.data(), a.size(), d});
  return d;
}

const void* CudaBackend::upload(const void* src, size_t bytes, cudaStream_t st) {
  if (bytes == 0) return nullptr;
  st = st ? st : compute_;
  const size_t off = (step_.used + 255) / 256 * 256;
  CHECK_MSG(off + bytes <= step_.bytes, "CUDA step staging buffer overflow");
  std::memcpy(step_.host + off, src, bytes);
  step_.used = off + bytes;
  if (skip_launch(11, off, bytes)) return step_.dev + off;  // a replayed graph copies it
  // Through the SMs by default: never behind a swap copy on a copy engine (sample_io.h).
  sample_io_.small_copy()(step_.dev + off, step_.host_dev + off, bytes, st);
  // In a capture the copy is a graph node; end_step records `done` after the launch.
  if (pass_ != Pass::capture) CUDA_CHECK(cudaEventRecord(step_.done, st));
  return step_.dev + off;
}

// The compute stream waits for a layer's swap copies only where this step touches blocks
// they move (SwapEngine decides, once per step).
// True when it put a wait on the stream.
bool CudaBackend::wait_before_store(int64_t layer, std::span<const int32_t> slots,
                                    int64_t block_size) {
  const cuda::SwapEngine::StoreWaits w = swap_.store_waits(step_no_, slots, block_size);
  if ((w.out || w.in) && !must_wait()) return false;
  if (w.out) CUDA_CHECK(cudaStreamWaitEvent(compute_, swap_.out_event(layer)));
  if (w.in) CUDA_CHECK(cudaStreamWaitEvent(compute_, swap_.in_event(layer)));
  return w.out || w.in;
}

// True when it put a wait on the stream.
bool CudaBackend::wait_before_attention(int64_t layer, const AttentionBatch& b,
                                        int64_t block_size) {
  if (!swap_.attention_waits(step_no_, b, block_size) || !must_wait()) return false;
  CUDA_CHECK(cudaStreamWaitEvent(compute_, swap_.in_event(layer)));
  return true;
}

// A wait on a swap copy cannot go into a graph: a probe notes it (the step then runs
// eagerly) and tells the caller to skip the wait; an eager pass waits.
bool CudaBackend::must_wait() {
  CHECK_MSG(pass_ != Pass::capture, "a captured step would wait for a swap copy");
  if (pass_ == Pass::probe) {
    step_needs_wait_ = true;
    return false;
  }
  return true;
}

cuda::GemvArgs CudaBackend::gemv_args(const Tensor& x, cuda::GemvEpilogue epilogue) const {
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
void CudaBackend::set_segment(cuda::GemvSegment& g, const void* w, const void* w2,
                              const float* bias, const Tensor& out, int64_t m) {
  g.w = w;
  g.w2 = w2;
  g.bias = bias;
  g.out = out.data;
  g.out_stride = out.stride;
  g.m = (int)m;
}

// The GEMV kernel up to gemv_max_rows, the tensor-core form beyond up to gemv_mma_max_rows;
// false: cuBLASLt (and, for a group op, the composed ops).
bool CudaBackend::gemv_takes(const cuda::GemvArgs& a) const {
  if (a.n <= opt_.gemv_max_rows) return cuda::gemv_fits(a);
  return a.n <= opt_.gemv_mma_max_rows && cuda::gemv_mma_fits(a);
}

bool CudaBackend::fused_fits(const cuda::GemvArgs& a) const {
  return opt_.fused && gemv_takes(a);
}

void CudaBackend::run_gemv(const cuda::GemvArgs& a) {
  if (a.n <= opt_.gemv_max_rows)
    cuda::gemv(a, compute_);
  else
    cuda::gemv_mma(a, compute_);
}

// The attention arguments every form shares but the batch's: q, out, `layer`'s cache and the
// sizes; nothing uploaded, so a form's shape can be checked before anything is enqueued.
cuda::AttnArgs CudaBackend::attn_geometry(const Tensor& q, const CudaKvStorage& s, int64_t layer,
                                          const Tensor& out, int64_t n_heads, float scale) const {
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
  a.block_size = (int)g.block_size;
  a.n_heads = (int)n_heads;
  a.n_kv_heads = (int)g.n_kv_heads;
  a.head_dim = (int)g.head_dim;
  a.scale = scale;
  return a;
}

// attn_geometry and the batch's context lengths and block tables (uploaded, dev); the rest
// zero.
cuda::AttnArgs CudaBackend::attn_args(const Tensor& q, const CudaKvStorage& s, int64_t layer,
                                      const Tensor& out, const AttentionBatch& b, int64_t n_heads,
                                      float scale) {
  cuda::AttnArgs a = attn_geometry(q, s, layer, out, n_heads, scale);
  a.ctx_len = dev(b.ctx_len);
  a.block_tables = dev(b.block_tables);
  a.max_blocks = b.max_blocks;
  return a;
}

const float* CudaBackend::freq_factors(std::span<const float> f) {
  if (f.empty()) return nullptr;
  for (const auto& [host, d] : freq_uploads_)
    if (host == f.data()) return d;
  float* d = static_cast<float*>(device_alloc(f.size_bytes()));
  CUDA_CHECK(cudaMemcpy(d, f.data(), f.size_bytes(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
  freq_uploads_.push_back({f.data(), d});
  return d;
}

const int32_t* CudaBackend::zero_positions(int64_t n) {
  zeros_.assign((size_t)n, 0);
  return static_cast<const int32_t*>(upload(zeros_.data(), zeros_.size() * 4, nullptr));
}

cuda::RopeStoreArgs CudaBackend::rope_args(Tensor q, Tensor k, const Tensor& v,
                                           std::span<const int32_t> positions, const RopeParams& p,
                                           CudaKvStorage* kv, int64_t layer,
                                           std::span<const int32_t> slots) {
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
    a.block_size = (int)kv->geometry().block_size;
  } else {
    a.kv_dtype = DType::f16;
  }
  return a;
}

void CudaBackend::run_rope(Tensor q, Tensor k, const Tensor& v, std::span<const int32_t> positions,
                           const RopeParams& p, CudaKvStorage* kv, int64_t layer,
                           std::span<const int32_t> slots) {
  CHECK_MSG(p.rot_dim == p.head_dim, "CUDA RoPE rotates whole heads");
  CHECK((int64_t)positions.size() == q.rows && q.rows == k.rows);
  if (kv != nullptr) CHECK((int64_t)slots.size() == k.rows);
  const cuda::RopeStoreArgs a = rope_args(q, k, v, positions, p, kv, layer, slots);
  if (skip_launch(9, bytes_of(a))) return;
  cuda::rope_store_kv(a, compute_);
}

void CudaBackend::ensure_logits_host(size_t n) {
  if (n <= logits_host_elems_) return;
  cudaFreeHost(logits_host_);
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&logits_host_), n * 4, cudaHostAllocDefault));
  logits_host_elems_ = n;
  if (n > f32_scratch_elems_) {
    f32_scratch_ = static_cast<float*>(device_alloc(n * 4));
    f32_scratch_elems_ = n;
  }
}

}  // namespace infercept::cuda_impl

namespace infercept {

using cuda_impl::CudaBackend;

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
  auto b = std::make_unique<CudaBackend>(options);
  TRY(b->init());
  return std::unique_ptr<Backend>(std::move(b));
}

bool cuda_backend_built() {
  return true;
}

}  // namespace infercept
