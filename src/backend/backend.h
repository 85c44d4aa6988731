// The op-level backend interface. The model (model/llama.cpp) is written once against it;
// the CPU implementation is the correctness oracle, the CUDA one must match it.
//
// Contracts common to all ops:
//   - tensors are views into memory owned by this backend (alloc_activation),
//   - shapes are checked with CHECK: a mismatch is a bug in the model code, not user input,
//   - ops are synchronous from the caller's point of view on the CPU; a device backend may
//     queue them on its stream, and sync() waits.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/tensor.h"
#include "core/result.h"

namespace infercept {

// Geometry of the paged KV storage. Storage is per layer: K and V arrays of n_blocks blocks,
// a block [block_size, n_kv_heads, head_dim] elements of `dtype`. An fp8_e4m3 block is
// followed by its scales, [block_size, n_kv_heads] f32 (element x of a token's head is
// fp8_e4m3_to_f32(code) * scale, the scale that head's largest magnitude / 448): a scale per
// token and head rather than one per block, so each token is written once and alone (no
// block-wide rescale when a later token outgrows the block's scale, no two rows of a step
// racing over one block's scale), for 4 bytes per head_dim bytes. Kept inside the block, the
// scales travel with every copy of whole blocks (swap, prefix-cache copies, the disk tier).
struct KvGeometry {
  int64_t n_layers = 0;
  int64_t n_blocks = 0;
  int64_t block_size = 16;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::f16;

  bool has_scales() const { return dtype == DType::fp8_e4m3; }
  size_t slot_bytes() const;                 // one token's elements, all heads
  size_t bytes_per_block_per_layer() const;  // K or V alone, with its scales
  size_t total_bytes() const;
  // Byte offsets within a layer's K (or V) array: the elements of token slot `slot` (block
  // slot / block_size, row slot % block_size), and its heads' scales (has_scales() only).
  size_t slot_offset(int64_t slot) const;
  size_t scale_offset(int64_t slot) const;
};

// Backend-owned KV storage. Bookkeeping (which block belongs to whom) lives in kv/, not here.
class KvStorage {
 public:
  virtual ~KvStorage() = default;
  virtual const KvGeometry& geometry() const = 0;
  // Host storage (a host pool): the start of plane p, [n_blocks, bytes_per_block_per_layer()]
  // (plane 2l is layer l's K, 2l + 1 its V), which the disk tier reads and writes. Null for
  // storage that is not in host memory.
  virtual uint8_t* host_plane(int64_t plane) const {
    (void)plane;
    return nullptr;
  }
};

// Describes, for one forward pass, which query rows belong to which sequence and where that
// sequence's KV lives. Row i of q belongs to sequence s with q_start[s] <= i <
// q_start[s] + q_len[s]; its position is ctx_len[s] - q_len[s] + (i - q_start[s]) and it
// attends causally to positions [0, its position]. block_tables is [n_seqs, max_blocks].
struct AttentionBatch {
  int32_t n_seqs = 0;
  std::span<const int32_t> q_start;
  std::span<const int32_t> q_len;
  std::span<const int32_t> ctx_len;
  std::span<const int32_t> block_tables;
  int32_t max_blocks = 0;
};

// One row of sampling done where the logits live (rows without penalties or logprobs: those
// need the row on the host). Greedy: the argmax, lowest id on ties. Otherwise the weights
// exp((logit - max) * inv_temperature) are cut to the top_k largest (0 = off), then to the
// most-likely-first prefix holding top_p of their mass, then to w >= min_p (w_max = 1), and
// u in [0, 1) picks among the survivors by inverse CDF in id order: the host sampler's
// distribution, drawn in another order.
struct DeviceSampleRow {
  int32_t greedy = 0;
  float inv_temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float u = 0.0f;
};

struct RopeParams {
  int64_t head_dim = 0;
  int64_t rot_dim = 0;  // dimensions rotated (== head_dim for Llama)
  bool neox = false;    // pair i with i + rot_dim/2 instead of (2i, 2i+1)
  float theta_base = 10000.0f;
  // [rot_dim / 2] divisors of each frequency (llama3 scaling); empty = all 1.
  std::span<const float> freq_factors;
};

// One product of a group sharing its input (norm_project): out = input @ w^T (+ bias), then,
// with head_norm, head_rmsnorm(out, *head_norm, head_norm_eps) (Qwen3 normalizes each head
// of q and k before RoPE). The norm belongs to the product rather than to the RoPE or the
// attention so that every form of a layer's attention (composed, fused, a device backend's
// decode kernel that rotates q and k itself) receives q and k already normalized.
struct Projection {
  const Weight* w = nullptr;
  const Weight* bias = nullptr;  // nullptr or an absent weight: none
  Tensor out;
  const Weight* head_norm = nullptr;  // nullptr or an absent weight: none; [head_dim] f32
  float head_norm_eps = 1e-6f;
  bool has_head_norm() const { return head_norm != nullptr && head_norm->present(); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Element type of activations this backend computes in (f32 on the CPU).
  virtual DType activation_dtype() const = 0;

  // ---- memory ----
  // A [rows, cols] activation buffer owned by the backend, valid until the backend dies.
  // Called at start-up only (nothing is allocated inside a step).
  virtual Tensor alloc_activation(int64_t rows, int64_t cols, DType dtype) = 0;
  // Makes a weight usable by this backend (the CPU keeps the mapped bytes as they are).
  virtual Result<Weight> upload_weight(const void* data, DType dtype, int64_t rows,
                                       int64_t cols) = 0;
  virtual Result<std::unique_ptr<KvStorage>> create_kv_storage(const KvGeometry& g) = 0;
  // Copies rows of a tensor to host floats (logits for sampling).
  virtual void to_host_f32(const Tensor& t, float* dst) = 0;
  // Waits until every op queued so far has finished (a no-op on the CPU).
  virtual void sync() = 0;
  // The model queues every step's ops between begin_step() and end_step(). Host arrays
  // passed to the ops (tokens, positions, slots, the attention batch) keep their contents
  // until the next begin_step, so a device backend may upload each once per step and reuse
  // it per layer. `replayable`: the step may be recorded and replayed as a whole (a CUDA
  // graph; the model says so for decode-only steps). end_step() returns true when the step's
  // work is queued; false asks the model to queue the same ops once more (a device backend's
  // first pass may only stage the inputs and look the step up among recorded ones; the
  // second pass records it or runs it directly). At most two passes per step.
  virtual void begin_step(bool replayable = false) { (void)replayable; }
  virtual bool end_step() { return true; }
  // Steps run from a recording so far.
  virtual int64_t replayed_steps() const { return 0; }
  // The most recorded steps the backend keeps at once (a CUDA graph cache's capacity, least
  // recently used out); 0 for a backend that records none. The profiler writes it into the
  // simulator's profile rather than a guess.
  virtual int64_t step_graph_capacity() const { return 0; }
  // True when copy_blocks_between only queues the copies (a device backend with copy
  // streams): they then overlap the forward pass and the caller need not wait for them.
  virtual bool copies_are_async() const { return false; }
  // Greedy sampling where the logits live: out[i] = the lowest id of row i's largest value
  // (the host sampler's tie rule). Returns false when the backend leaves sampling to the
  // host; greedy_on_device() says so up front (the CPU does it too: split across threads, and
  // the logits need not be copied out).
  virtual bool greedy_on_device() const { return false; }
  virtual bool argmax_rows(const Tensor& logits, int32_t* out) { return false; }
  // Sampling of any DeviceSampleRow where the logits live; the logits are overwritten.
  // Returns false when the backend leaves it to the host; samples_on_device() says so.
  virtual bool samples_on_device() const { return false; }
  virtual bool sample_rows(Tensor logits, std::span<const DeviceSampleRow> rows, int32_t* out) {
    (void)logits, (void)rows, (void)out;
    return false;
  }
  // Constrained decoding's token masks applied where the logits live, before argmax_rows /
  // sample_rows: for each i, row rows[i] of `logits` keeps the ids whose bit is set in
  // masks[i * words ..] (bit id & 63 of word id >> 6) and gets -inf elsewhere, ids past
  // words * 64 included. So a constrained row is drawn on the device like any other and only
  // its mask crosses (a bit per token, not four bytes). masks_on_device() says whether the
  // backend does it; mask_rows returns false when it does not.
  virtual bool masks_on_device() const { return false; }
  virtual bool mask_rows(Tensor logits, std::span<const int32_t> rows, const uint64_t* masks,
                         int64_t words) {
    (void)logits, (void)rows, (void)masks, (void)words;
    return false;
  }
  // A step that may be given up part-way: while `*flag` (set by another thread) is true, the
  // backend may skip what is left of the ops it runs (their outputs are then meaningless and
  // the model reports the step as not run). Only a backend that runs ops as they are called
  // can (the CPU); one that queues them on a device says interruptible() false. Null: none.
  virtual bool interruptible() const { return false; }
  virtual void set_interrupt(const std::atomic<bool>* flag) { (void)flag; }
  // Device memory still free, in bytes, or -1 where the question has no answer (the CPU).
  // A thread is about to run this backend's ops (tensor-parallel ranks step on threads of
  // their own; a device backend makes its device the thread's current one).
  virtual void bind_thread() {}
  virtual int64_t free_memory_bytes() const { return -1; }
  virtual int64_t total_memory_bytes() const { return -1; }

  // ---- ops ----
  // out[i] = table[tokens[i]]      out: [n, d]
  virtual void embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) = 0;
  // out = x / rms(x) * w           x, out: [n, d]; w: [d]
  virtual void rmsnorm(const Tensor& x, const Weight& w, float eps, Tensor out) = 0;
  // residual += x; out = rmsnorm(residual) * w  (the fused pre-norm of the next sub-layer)
  virtual void add_rmsnorm(Tensor residual, const Tensor& x, const Weight& w, float eps,
                           Tensor out) = 0;
  // out = x @ w^T (+ bias)          x: [n, k]; w: [m, k]; out: [n, m]
  virtual void matmul(const Tensor& x, const Weight& w, const Weight* bias, Tensor out) = 0;
  // RMSNorm of every head of every row, in place: with d = w.cols, each slice
  // x[r, h*d : (h+1)*d] becomes slice / rms(slice) * w.     x: [n, n_heads*d]; w: [d] f32
  virtual void head_rmsnorm(Tensor x, const Weight& w, float eps) = 0;
  // Rotates q and k in place. q: [n, n_heads*head_dim]; k: [n, n_kv_heads*head_dim].
  virtual void rope(Tensor q, Tensor k, std::span<const int32_t> positions,
                    const RopeParams& p) = 0;
  // Writes k, v rows [n, n_kv_heads*head_dim] to the cache slots (block*block_size+offset).
  virtual void store_kv(KvStorage& kv, int64_t layer, const Tensor& k, const Tensor& v,
                        std::span<const int32_t> slots) = 0;
  // rope(q, k) then store_kv(k, v): one fused kernel on a device backend.
  virtual void rope_store_kv(Tensor q, Tensor k, const Tensor& v,
                             std::span<const int32_t> positions, const RopeParams& p, KvStorage& kv,
                             int64_t layer, std::span<const int32_t> slots) {
    rope(q, k, positions, p);
    store_kv(kv, layer, k, v, slots);
  }
  // A hint: `w` is the weight the model multiplies by after the next op. A backend whose next
  // op leaves memory bandwidth idle (decode attention at a small batch is latency-bound) may
  // start fetching `w` into a cache meanwhile. Never changes a result; the default ignores it.
  virtual void prefetch_hint(const Weight& w) { (void)w; }
  // Causal attention of q over the paged cache of `layer` (which already holds this step's
  // k and v).  q, out: [n, n_heads*head_dim].
  virtual void attention(const Tensor& q, const KvStorage& kv, int64_t layer,
                         const AttentionBatch& batch, int64_t n_heads, float scale, Tensor out) = 0;
  // out = silu(gate) * up           gate, up, out: [n, f]
  virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor out) = 0;

  // ---- fused groups ----
  // What a decoder layer does around its products, as single calls, so that a device backend
  // can run each as one launch (at batch 1 a layer is otherwise ~13 launches, and each costs
  // ramp-up and drain). The defaults compose the ops above; the CPU backend keeps them, so
  // they are the oracle of any fused form.
  //
  // h = rmsnorm(x) * norm, then every projection of h: out = h @ w^T (+ bias). h is scratch
  // ([n, d]): a backend that normalizes inside the products leaves it unwritten.
  virtual void norm_project(const Tensor& x, const Weight& norm, float eps, Tensor h,
                            std::span<const Projection> projections) {
    rmsnorm(x, norm, eps, h);
    for (const Projection& p : projections) {
      matmul(h, *p.w, p.bias, p.out);
      if (p.has_head_norm()) head_rmsnorm(p.out, *p.head_norm, p.head_norm_eps);
    }
  }
  // norm_project into q, k, v (projections 0, 1, 2), then rope_store_kv: a layer's attention
  // inputs, rotated and stored to `layer`'s cache slots, as one call.
  virtual void norm_project_rope_store(const Tensor& x, const Weight& norm, float eps, Tensor h,
                                       std::span<const Projection> qkv,
                                       std::span<const int32_t> positions, const RopeParams& p,
                                       KvStorage& kv, int64_t layer,
                                       std::span<const int32_t> slots) {
    CHECK(qkv.size() == 3);
    norm_project(x, norm, eps, h, qkv);
    rope_store_kv(qkv[0].out, qkv[1].out, qkv[2].out, positions, p, kv, layer, slots);
  }
  // norm_project_rope_store, then attention of q (qkv[0].out) over `layer`'s cache into out: a
  // layer's attention from its input. A device backend may fold the RoPE and the store into
  // the attention instead (one kernel fewer between the products at batch 1); q and k are
  // then left unrotated, so after this call they are scratch.
  virtual void self_attention(const Tensor& x, const Weight& norm, float eps, Tensor h,
                              std::span<const Projection> qkv, std::span<const int32_t> positions,
                              const RopeParams& p, KvStorage& kv, int64_t layer,
                              std::span<const int32_t> slots, const AttentionBatch& batch,
                              int64_t n_heads, float scale, Tensor out) {
    norm_project_rope_store(x, norm, eps, h, qkv, positions, p, kv, layer, slots);
    attention(qkv[0].out, kv, layer, batch, n_heads, scale, out);
  }
  // self_attention into out, then residual += out @ wo^T (project_add): a layer's whole
  // attention half. A device backend may run the output projection in the attention's own
  // launch, its blocks streaming wo while the last heads' attention finishes.
  virtual void self_attention_project(const Tensor& x, const Weight& norm, float eps, Tensor h,
                                      std::span<const Projection> qkv,
                                      std::span<const int32_t> positions, const RopeParams& p,
                                      KvStorage& kv, int64_t layer, std::span<const int32_t> slots,
                                      const AttentionBatch& batch, int64_t n_heads, float scale,
                                      Tensor out, const Weight& wo, Tensor residual,
                                      Tensor scratch) {
    self_attention(x, norm, eps, h, qkv, positions, p, kv, layer, slots, batch, n_heads, scale,
                   out);
    project_add(out, wo, residual, scratch);
  }
  // gate = silu(h @ w_gate^T) * (h @ w_up^T) with h = rmsnorm(x) * norm (SwiGLU's first
  // half). h and up are scratch.
  virtual void norm_gated_ffn(const Tensor& x, const Weight& norm, float eps, Tensor h,
                              const Weight& w_gate, const Weight& w_up, Tensor gate, Tensor up) {
    rmsnorm(x, norm, eps, h);
    matmul(h, w_gate, nullptr, gate);
    matmul(h, w_up, nullptr, up);
    silu_mul(gate, up, gate);
  }
  // residual += x @ w^T. scratch ([n, w.rows]) holds the product where a backend needs it.
  virtual void project_add(const Tensor& x, const Weight& w, Tensor residual, Tensor scratch) {
    matmul(x, w, nullptr, scratch);
    add(residual, scratch);
  }
  // a += b
  virtual void add(Tensor a, const Tensor& b) = 0;
  // out[i] = x[rows[i]]              x: [n, d]; out: [rows.size(), d]
  virtual void gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor out) = 0;
  // Copies whole blocks (all layers, K and V) inside the storage: dst[i] = src[i].
  virtual void copy_blocks(KvStorage& kv, std::span<const int32_t> src,
                           std::span<const int32_t> dst) = 0;
  // Copies whole blocks between two storages of the same geometry but their block count
  // (the device pool and the host swap pool): to[dst[i]] = from[src[i]].
  virtual void copy_blocks_between(const KvStorage& from, KvStorage& to,
                                   std::span<const int32_t> src, std::span<const int32_t> dst) = 0;
  // A backend whose copies are async may hold them until the next step has been launched
  // (queueing them costs host time that would otherwise delay the launch); sync(), the next
  // step or this call starts them. Callers with no step to run next call this.
  virtual void flush_copies() {}
  // Host memory for swapped-out KV (pinned on a GPU; on the CPU a second bounded pool, so
  // every swap path runs in CI).
  virtual Result<std::unique_ptr<KvStorage>> create_host_kv_storage(const KvGeometry& g) = 0;
};

// The backends' factories and options live with each backend: backend/cpu/cpu_backend.h,
// backend/cuda/cuda_backend.h.

}  // namespace infercept
