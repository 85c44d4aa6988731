// The CUDA backend's layer ops: embedding, norms, products (GEMV at few rows, cuBLASLt past
// them), the fused attention forms, RoPE and the KV store, the attention plan's launches and
// block copies. The class and its design: cuda_backend_impl.h.
#include "backend/cuda/cuda_backend_impl.h"

namespace infercept::cuda_impl {

void CudaBackend::embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) {
  CHECK((int64_t)tokens.size() == out.rows && table.cols == out.cols);
  const int32_t* t = dev(tokens);
  if (skip_launch(1, table.data, t, out)) return;
  cuda::embed(table.data, table.dtype, t, view(out), compute_);
}

void CudaBackend::rmsnorm(const Tensor& x, const Weight& w, float eps, Tensor out) {
  CHECK(w.dtype == DType::f32 && w.cols == x.cols);
  if (skip_launch(2, x, w.data, eps, out)) return;
  cuda::rmsnorm(view(x), static_cast<const float*>(w.data), eps, view(out), nullptr, compute_);
}

void CudaBackend::add_rmsnorm(Tensor residual, const Tensor& x, const Weight& w, float eps,
                              Tensor out) {
  CHECK(w.dtype == DType::f32 && w.cols == x.cols);
  if (skip_launch(3, residual, x, w.data, eps, out)) return;
  RowsView res = view(residual);
  cuda::rmsnorm(view(x), static_cast<const float*>(w.data), eps, view(out), &res, compute_);
}

void CudaBackend::matmul(const Tensor& x, const Weight& w, const Weight* bias, Tensor out) {
  CHECK(x.cols == w.cols && out.cols == w.rows && out.rows == x.rows);
  CHECK(x.dtype == act_ && w.dtype == act_);
  const void* b = bias != nullptr && bias->present() ? bias->data : nullptr;
  if (skip_launch(4, x, w.data, w.rows, w.cols, b, out)) return;
  cuda::GemvArgs a = gemv_args(x, cuda::GemvEpilogue::store);
  a.out_dtype = out.dtype;
  set_segment(a.seg[0], w.data, nullptr, nullptr, out, w.rows);
  if (gemv_takes(a))
    run_gemv(a);
  else
    gemm_->run(x.data, x.stride, act_, w.data, x.rows, w.rows, w.cols, out.data, out.stride,
               out.dtype, compute_);
  if (bias != nullptr && bias->present()) {
    CHECK(out.dtype == act_ && bias->cols == out.cols);
    cuda::add_bias(view(out), static_cast<const float*>(bias->data), compute_);
  }
}

void CudaBackend::head_rmsnorm(Tensor x, const Weight& w, float eps) {
  CHECK(w.dtype == DType::f32 && w.cols > 0 && x.cols % w.cols == 0 && x.dtype == act_);
  if (skip_launch(19, x, w.data, w.cols, eps)) return;
  cuda::head_rmsnorm(view(x), static_cast<const float*>(w.data), (int)w.cols, eps, compute_);
}

// The fused groups run as one GEMV launch each when the batch is small enough for the GEMV
// kernel (decode at batch 1-2); otherwise as the composed ops, with the residual add done by
// cuBLASLt's beta = 1 instead of a kernel of its own.
void CudaBackend::norm_project(const Tensor& x, const Weight& norm, float eps, Tensor h,
                               std::span<const Projection> projections) {
  if (!launch_norm_project(x, norm, eps, projections, cuda::GemvHeadSignal{}))
    Backend::norm_project(x, norm, eps, h, projections);
}

// norm_project as one GEMV launch, with `signal`'s per-KV-head counters when it names them
// (GemvHeadSignal); false, launching nothing, when the GEMV kernel cannot take it.
bool CudaBackend::launch_norm_project(const Tensor& x, const Weight& norm, float eps,
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
  // A head norm (Qwen3's q/k norm) runs after the product, so the product's per-head
  // counters would tell the attention too early: no signalled form with one.
  bool head_norms = false;
  for (const Projection& p : projections) head_norms = head_norms || p.has_head_norm();
  if (head_norms && signal.ready != nullptr) return false;
  if (!fits || !fused_fits(a)) return false;
  if (!skip_launch(16, bytes_of(a))) run_gemv(a);  // 11: an upload's
  for (const Projection& p : projections)
    if (p.has_head_norm()) head_rmsnorm(p.out, *p.head_norm, p.head_norm_eps);
  return true;
}

// self_attention's Q/K/V product: where the GEMV kernel takes it with this layer's counters
// (in signal_counters_), its rows go in the order of the KV heads and each head's counter
// counts them (GemvHeadSignal), so the attention of a head may start before the product
// ends. Returns the counters the attention must wait on, or null when the product does not
// signal (the attention then waits for the launch).
int* CudaBackend::project_qkv_signalled(const Tensor& x, const Weight& norm, float eps, Tensor h,
                                        std::span<const Projection> qkv, int64_t layer,
                                        int64_t n_heads, const KvGeometry& g) {
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

// A step of decode rows alone (up to kFusedDecodeMaxRows, sm_90): the Q/K/V product, then
// one decode_rope_attention launch that rotates q and the new keys, stores them and attends,
// its partitions merged within a thread-block cluster: no RoPE store kernel and no merge
// through global memory on the path to the output projection. Otherwise the composed ops.
void CudaBackend::self_attention(const Tensor& x, const Weight& norm, float eps, Tensor h,
                                 std::span<const Projection> qkv,
                                 std::span<const int32_t> positions, const RopeParams& p,
                                 KvStorage& kv, int64_t layer, std::span<const int32_t> slots,
                                 const AttentionBatch& b, int64_t n_heads, float scale,
                                 Tensor out) {
  cuda::AttnArgs a;
  cuda::DecodeRopeArgs r;
  if (!fused_attention_fits(x, qkv, positions, p, kv, slots, b, n_heads, out))
    return Backend::self_attention(x, norm, eps, h, qkv, positions, p, kv, layer, slots, b, n_heads,
                                   scale, out);
  const int parts = cuda::decode_rope_parts(
      b.ctx_len, (int)static_cast<CudaKvStorage&>(kv).geometry().n_kv_heads,
      attn_planner_.target_ctas(), attn_planner_.min_partition(), max_parts_);
  project_for_fused_attention(x, norm, eps, h, qkv, positions, p, kv, layer, slots, b, n_heads,
                              scale, out, parts, a, r);
  if (skip_launch(17, bytes_of(a), bytes_of(r))) return;
  cuda::decode_rope_attention(a, r, (int)x.rows, compute_);
}

// Where the fused attention fits and CudaBackendOptions::attn_project is on: the Q/K/V product,
// then one attend_project launch whose blocks do the attention (as decode_rope_attention, its
// partitions merged through L2) and then the output projection added into the residual
// (PERF 4.5q). Otherwise self_attention and project_add.
void CudaBackend::self_attention_project(const Tensor& x, const Weight& norm, float eps, Tensor h,
                                         std::span<const Projection> qkv,
                                         std::span<const int32_t> positions, const RopeParams& p,
                                         KvStorage& kv, int64_t layer,
                                         std::span<const int32_t> slots, const AttentionBatch& b,
                                         int64_t n_heads, float scale, Tensor out, const Weight& wo,
                                         Tensor residual, Tensor scratch) {
  cuda::AttendProjectArgs pa;
  std::memset(&pa, 0, sizeof pa);  // hashed as bytes by skip_launch: no stray padding
  pa.wo = wo.data;
  pa.m = (int)wo.rows;
  pa.k = (int)wo.cols;
  pa.residual = residual.data;
  pa.residual_stride = residual.stride;
  const int64_t n = x.rows;
  // Up to two decode rows; two only where the grid
  // leaves each row's groups at least kProjectMinParts partitions of one item a block
  // (llama2-7b, llama3-8b: 2-2.5% faster at batch 2; llama2-13b's 2 x 40 groups got 6
  // partitions of three chunks a warp and were 1% slower; PERF 4.5q).
  bool fits = opt_.attn_project && opt_.fused && project_counters_ != nullptr && n <= 2 &&
              layer < kSignalLayers && wo.dtype == act_ && residual.dtype == act_ &&
              wo.cols == out.cols && residual.cols == wo.rows && residual.rows == n &&
              fused_attention_fits(x, qkv, positions, p, kv, slots, b, n_heads, out);
  cuda::AttnArgs a;
  cuda::DecodeRopeArgs r;
  if (fits) {
    // The group split and partitions the launch will take, checked before the Q/K/V product
    // is enqueued, so a shape the kernel does not take still has both forms.
    const auto& s = static_cast<CudaKvStorage&>(kv);
    a = attn_geometry(qkv[0].out, s, layer, out, n_heads, scale);
    std::memset(&r, 0, sizeof r);
    r.group_split = group_split(n_heads, s.geometry(), b);
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
                              scale, out, r.parts, a, r);
  a.partial_acc = partial_acc_;
  a.partial_ml = partial_ml_;
  pa.counters = project_counters_ + layer * cuda::kAttendProjectCounters;
  if (skip_launch(18, bytes_of(a), bytes_of(r), bytes_of(pa))) return;
  cuda::attend_project(a, r, pa, (int)n, compute_);
}

// Whether a step's attention takes the fused forms (decode rows alone, shapes the kernels
// take). Never over an fp8 cache: the fused kernels store and read 16-bit K and V, so a step
// over an fp8 cache takes rope_store_kv and attention (then project_add).
bool CudaBackend::fused_attention_fits(const Tensor& x, std::span<const Projection> qkv,
                                       std::span<const int32_t> positions, const RopeParams& p,
                                       const KvStorage& kv, std::span<const int32_t> slots,
                                       const AttentionBatch& b, int64_t n_heads,
                                       const Tensor& out) const {
  CHECK(qkv.size() == 3);
  const KvGeometry& g = static_cast<const CudaKvStorage&>(kv).geometry();
  const Tensor &q = qkv[0].out, &k = qkv[1].out, &v = qkv[2].out;
  const int64_t n = x.rows;
  bool fits = opt_.attn_fused && max_parts_ > 0 && n <= kFusedDecodeMaxRows && b.n_seqs == n &&
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
int CudaBackend::project_parts(const AttentionBatch& b, int n_groups) const {
  return cuda::attend_project_parts(b.ctx_len, 64, n_groups, project_blocks());
}

// Blocks a KV head's query group is cut across (DecodeRopeArgs::group_split): the largest
// divisor of the group up to CudaBackendOptions::attn_group_split, by default up to half the
// group; by default not cut at all in the long-context decode forms
// (AttentionPlanner::long_decode) where one block can take the whole group (at most 4 heads):
// there every block's share of the KV comes from L2 to each block of its group, which at 128k
// moved 2.7x the DRAM bytes through L2.
int CudaBackend::group_split(int64_t n_heads, const KvGeometry& g, const AttentionBatch& b) const {
  const int group = (int)(n_heads / g.n_kv_heads);
  if (opt_.attn_group_split == 0 && group <= 4 && cuda::AttentionPlanner::long_decode(b)) return 1;
  const int split_max = opt_.attn_group_split > 0 ? opt_.attn_group_split : group / 2;
  int split = 1;
  for (int d = 1; d <= split_max; ++d)
    if (group % d == 0) split = d;
  return split;
}

// The fused attention's Q/K/V product (counting each KV head's rows where it can), the
// step's waits and uploads, and the attention's arguments with `parts` partitions a row: what
// both fused forms share.
void CudaBackend::project_for_fused_attention(
    const Tensor& x, const Weight& norm, float eps, Tensor h, std::span<const Projection> qkv,
    std::span<const int32_t> positions, const RopeParams& p, KvStorage& kv, int64_t layer,
    std::span<const int32_t> slots, const AttentionBatch& b, int64_t n_heads, float scale,
    const Tensor& out, int parts, cuda::AttnArgs& a, cuda::DecodeRopeArgs& r) {
  auto& s = static_cast<CudaKvStorage&>(kv);
  const KvGeometry& g = s.geometry();
  const Tensor &q = qkv[0].out, &k = qkv[1].out, &v = qkv[2].out;
  int* ready = project_qkv_signalled(x, norm, eps, h, qkv, layer, n_heads, g);
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
  r.parts = parts;
  // The partitions do not depend on the split, so a split changes no bit of the output.
  r.group_split = group_split(n_heads, g, b);
  if (ready != nullptr) {
    r.ready = ready;
    r.passed = ready + g.n_kv_heads;
    r.ready_count = (int)((n_heads / g.n_kv_heads + 2) * g.head_dim);
  }
  // As for the decode kernel (attention()): the first chunk's loads may go out before the
  // Q/K/V product ends only if this call enqueued no upload and no swap wait.
  a.prewait = !waited && !store_waited && step_.used == staged_before;
}

void CudaBackend::norm_gated_ffn(const Tensor& x, const Weight& norm, float eps, Tensor h,
                                 const Weight& w_gate, const Weight& w_up, Tensor gate, Tensor up) {
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
  if (skip_launch(12, bytes_of(a))) return;
  run_gemv(a);
}

void CudaBackend::project_add(const Tensor& x, const Weight& w, Tensor residual, Tensor scratch) {
  CHECK(x.cols == w.cols && residual.cols == w.rows && residual.rows == x.rows);
  CHECK(x.dtype == act_ && w.dtype == act_ && residual.dtype == act_);
  cuda::GemvArgs a = gemv_args(x, cuda::GemvEpilogue::accumulate);
  set_segment(a.seg[0], w.data, nullptr, nullptr, residual, w.rows);
  if (!opt_.fused) return Backend::project_add(x, w, residual, scratch);
  if (skip_launch(13, bytes_of(a))) return;
  if (fused_fits(a))
    run_gemv(a);
  else
    gemm_->run(x.data, x.stride, act_, w.data, x.rows, w.rows, w.cols, residual.data,
               residual.stride, act_, compute_, /*accumulate=*/true);
}

void CudaBackend::rope(Tensor q, Tensor k, std::span<const int32_t> positions,
                       const RopeParams& p) {
  run_rope(q, k, k, positions, p, nullptr, 0, {});
}

void CudaBackend::store_kv(KvStorage& kv, int64_t layer, const Tensor& k, const Tensor& v,
                           std::span<const int32_t> slots) {
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

void CudaBackend::rope_store_kv(Tensor q, Tensor k, const Tensor& v,
                                std::span<const int32_t> positions, const RopeParams& p,
                                KvStorage& kv, int64_t layer, std::span<const int32_t> slots) {
  wait_before_store(layer, slots, kv.geometry().block_size);
  run_rope(q, k, v, positions, p, &static_cast<CudaKvStorage&>(kv), layer, slots);
}

void CudaBackend::attention(const Tensor& q, const KvStorage& kv, int64_t layer,
                            const AttentionBatch& b, int64_t n_heads, float scale, Tensor out) {
  const auto& s = static_cast<const CudaKvStorage&>(kv);
  const KvGeometry& g = s.geometry();
  const bool waited = wait_before_attention(layer, b, g.block_size);
  const size_t staged_before = step_.used;  // grows with every upload below
  if (!plan_ready_) {                       // the same for every layer of a step (attention_plan.h)
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
  // The decode kernel may read the plan, the block tables and the cached context before the
  // RoPE store ends (AttnArgs::prewait) only if none of them was put on the stream by this
  // call: then all of it was there before an earlier kernel that everything after it
  // follows. Decode rows alone, so that the kernel before is that store, which writes only
  // this step's keys.
  a.prewait = !waited && step_.used == staged_before && plan.items.empty() &&
              prefill.tiles.empty() && !plan.decode_items.empty();
  if (skip_launch(8, bytes_of(a), d_prefill_tiles_, prefill.tiles.size(), d_prefill_combines_,
                  prefill.combines.size()))
    return;
  cuda::attention(a, compute_);
  cuda::attention_prefill(a, d_prefill_tiles_, (int)prefill.tiles.size(), compute_);
  cuda::attention_combine(a, d_prefill_combines_, (int)prefill.combines.size(),
                          prefill.max_combine_rows, compute_);
}

void CudaBackend::silu_mul(const Tensor& gate, const Tensor& up, Tensor out) {
  if (skip_launch(5, gate, up, out)) return;
  cuda::silu_mul(view(gate), view(up), view(out), compute_);
}

void CudaBackend::add(Tensor a, const Tensor& b) {
  if (skip_launch(6, a, b)) return;
  cuda::add(view(a), view(b), compute_);
}

void CudaBackend::gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor out) {
  CHECK((int64_t)rows.size() == out.rows);
  const int32_t* r = dev(rows);
  if (skip_launch(7, x, r, out)) return;
  cuda::gather_rows(view(x), r, view(out), compute_);
}

void CudaBackend::copy_blocks(KvStorage& kv, std::span<const int32_t> src,
                              std::span<const int32_t> dst) {
  auto& s = static_cast<CudaKvStorage&>(kv);
  CHECK(src.size() == dst.size());
  if (src.empty()) return;
  swap_.flush();  // copies reach the device in the order they were asked for
  const KvGeometry& g = s.geometry();
  // Its own small upload (not the step's staging: this may run between steps).
  const int32_t* idx = cuda::upload_indices(block_copy_idx_, compute_, src, dst);
  cuda::copy_chunks(s.planes(), s.planes(), (int)(2 * g.n_layers), idx, idx + src.size(),
                    (int)src.size(), g.bytes_per_block_per_layer(), 4 * props_.multiProcessorCount,
                    compute_);
}

void CudaBackend::copy_blocks_between(const KvStorage& from, KvStorage& to,
                                      std::span<const int32_t> src, std::span<const int32_t> dst) {
  swap_.copy(static_cast<const CudaKvStorage&>(from), static_cast<CudaKvStorage&>(to), src, dst,
             compute_);
}

}  // namespace infercept::cuda_impl
