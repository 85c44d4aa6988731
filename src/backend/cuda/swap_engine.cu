#include "backend/cuda/swap_engine.h"

#include <algorithm>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kernels.h"
#include "core/check.h"

namespace infercept::cuda {

SwapEngine::~SwapEngine() {
  if (h2d_ != nullptr) cudaStreamSynchronize(h2d_);
  if (d2h_ != nullptr) cudaStreamSynchronize(d2h_);
  for (cudaEvent_t e : ev_in_) cudaEventDestroy(e);
  for (cudaEvent_t e : ev_out_) cudaEventDestroy(e);
  if (compute_mark_) cudaEventDestroy(compute_mark_);
  if (h2d_ != nullptr) cudaStreamDestroy(h2d_);
  if (d2h_ != nullptr) cudaStreamDestroy(d2h_);
}

Status SwapEngine::init(int device) {
  device_ = device;
  CUDA_CHECK(cudaStreamCreateWithFlags(&h2d_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&compute_mark_, cudaEventDisableTiming));
  return ok_status();
}

void SwapEngine::attach_device_pool(int64_t n_layers, int64_t n_blocks) {
  out_inflight_.assign((size_t)n_blocks, 0);
  in_inflight_.assign((size_t)n_blocks, 0);
  any_out_ = any_in_ = false;
  if (ev_in_.empty()) {
    ev_in_.resize((size_t)n_layers);
    ev_out_.resize((size_t)n_layers);
    for (auto* evs : {&ev_in_, &ev_out_})
      for (cudaEvent_t& e : *evs) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
}

void SwapEngine::sync() {
  flush();
  CUDA_CHECK(cudaStreamSynchronize(h2d_));
  CUDA_CHECK(cudaStreamSynchronize(d2h_));
}

void SwapEngine::copy(const CudaKvStorage& f, CudaKvStorage& t, std::span<const int32_t> src,
                      std::span<const int32_t> dst, cudaStream_t compute) {
  CHECK(src.size() == dst.size());
  CHECK(f.geometry().bytes_per_block_per_layer() == t.geometry().bytes_per_block_per_layer());
  CHECK(f.geometry().n_layers == t.geometry().n_layers);
  if (src.empty()) return;
  for (size_t i = 0; i < src.size(); ++i)
    CHECK(src[i] >= 0 && src[i] < f.geometry().n_blocks && dst[i] >= 0 &&
          dst[i] < t.geometry().n_blocks);
  CHECK(f.host() != t.host());
  const bool in = f.host();  // host -> device: a swap-in
  CHECK((in ? ev_in_ : ev_out_).size() == (size_t)f.geometry().n_layers);
  // After what the compute stream has queued so far (blocks it wrote or still reads). One
  // mark serves every pending copy: a later record only moves it later in the compute order,
  // and nothing is queued on the compute stream between the copy() calls of a step and the
  // flush after its launch.
  CUDA_CHECK(cudaEventRecord(compute_mark_, compute));
  // The device blocks this copy reads (out) or writes (in) are busy until its events fire
  // (the flags of earlier copies that have completed are cleared first).
  refresh_inflight();
  std::vector<uint8_t>& busy = in ? in_inflight_ : out_inflight_;
  for (int32_t b : in ? dst : src) busy[(size_t)b] = 1;
  (in ? any_in_ : any_out_) = true;
  pending_.push_back(PendingCopy{&f, &t, {src.begin(), src.end()}, {dst.begin(), dst.end()}});
}

void SwapEngine::flush() {
  for (const PendingCopy& c : pending_) issue(c);
  pending_.clear();
}

void SwapEngine::issue(const PendingCopy& c) {
  const CudaKvStorage& f = *c.from;
  CudaKvStorage& t = *c.to;
  std::span<const int32_t> src = c.src, dst = c.dst;
  const bool in = f.host();
  cudaStream_t st = in ? h2d_ : d2h_;
  std::vector<cudaEvent_t>& evs = in ? ev_in_ : ev_out_;
  // Per layer after the other direction's last copy of that layer (a host block freed by a
  // swap-in may be refilled by a swap-out of the same step, and the reverse): the two
  // directions still overlap, layer by layer.
  CUDA_CHECK(cudaStreamWaitEvent(st, compute_mark_));
  const std::vector<cudaEvent_t>& other = in ? ev_out_ : ev_in_;
  const bool other_ran = in ? swapped_out_ever_ : swapped_in_ever_;
  const size_t bb = f.geometry().bytes_per_block_per_layer();
  const int64_t layers = f.geometry().n_layers;
  // Copy engines (no SM time): one batched call per layer, K and V chunks of every block.
  auto plane = [](const CudaKvStorage& kv, int64_t l, bool v) { return v ? kv.v(l) : kv.k(l); };
  for (int64_t l = 0; l < layers; ++l) {
    if (other_ran) CUDA_CHECK(cudaStreamWaitEvent(st, other[(size_t)l]));
    batch_src_.clear();
    batch_dst_.clear();
    batch_sizes_.clear();
    // Runs of blocks consecutive on both sides become one copy: fewer, larger pieces.
    for (int kv_i = 0; kv_i < 2; ++kv_i)
      for (size_t i = 0; i < src.size();) {
        size_t n = 1;
        while (i + n < src.size() && src[i + n] == src[i] + (int32_t)n &&
               dst[i + n] == dst[i] + (int32_t)n)
          ++n;
        batch_src_.push_back(plane(f, l, kv_i) + (size_t)src[i] * bb);
        batch_dst_.push_back(plane(t, l, kv_i) + (size_t)dst[i] * bb);
        batch_sizes_.push_back(n * bb);
        i += n;
      }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.srcLocHint.type = in ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    attr.srcLocHint.id = in ? 0 : device_;
    attr.dstLocHint.type = in ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
    attr.dstLocHint.id = in ? device_ : 0;
    size_t attr_idx = 0;
    CUDA_CHECK(cudaMemcpyBatchAsync(batch_dst_.data(), batch_src_.data(), batch_sizes_.data(),
                                    batch_src_.size(), &attr, &attr_idx, 1, st));
    CUDA_CHECK(cudaEventRecord(evs[(size_t)l], st));
  }
  (in ? swapped_in_ever_ : swapped_out_ever_) = true;
}

void SwapEngine::refresh_inflight() {
  // A recorded copy has no events yet: the last ones belong to earlier copies.
  if (!pending_.empty()) return;
  if (any_out_ && cudaEventQuery(ev_out_.back()) == cudaSuccess) {
    std::fill(out_inflight_.begin(), out_inflight_.end(), 0);
    any_out_ = false;
  }
  if (any_in_ && cudaEventQuery(ev_in_.back()) == cudaSuccess) {
    std::fill(in_inflight_.begin(), in_inflight_.end(), 0);
    any_in_ = false;
  }
  cudaGetLastError();  // cudaEventQuery's "not ready" is not an error
}

SwapEngine::StoreWaits SwapEngine::store_waits(int64_t step_no, std::span<const int32_t> slots,
                                               int64_t block_size) {
  if (store_wait_step_ != step_no) {
    store_wait_step_ = step_no;
    refresh_inflight();
    store_waits_ = {};
    if (any_out_ || any_in_)
      for (int32_t sl : slots) {
        const size_t b = (size_t)(sl / block_size);
        store_waits_.out = store_waits_.out || (b < out_inflight_.size() && out_inflight_[b]);
        store_waits_.in = store_waits_.in || (b < in_inflight_.size() && in_inflight_[b]);
      }
  }
  return store_waits_;
}

bool SwapEngine::attention_waits(int64_t step_no, const AttentionBatch& b, int64_t block_size) {
  if (attn_wait_step_ != step_no) {
    attn_wait_step_ = step_no;
    attn_wait_in_ = false;
    if (any_in_)
      for (int32_t s = 0; s < b.n_seqs && !attn_wait_in_; ++s) {
        const int64_t used = (b.ctx_len[s] + block_size - 1) / block_size;
        for (int64_t i = 0; i < used; ++i) {
          const size_t blk = (size_t)b.block_tables[(size_t)(s * b.max_blocks + i)];
          if (blk < in_inflight_.size() && in_inflight_[blk]) {
            attn_wait_in_ = true;
            break;
          }
        }
      }
  }
  return attn_wait_in_;
}

}  // namespace infercept::cuda
