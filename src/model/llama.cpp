#include "model/llama.h"

#include <cmath>

#include "core/check.h"
#include "core/log.h"

namespace infercept {

void StepInput::clear() {
  tokens.clear();
  positions.clear();
  slots.clear();
  q_start.clear();
  q_len.clear();
  ctx_len.clear();
  block_tables.clear();
  max_blocks = 0;
  logit_rows.clear();
}

std::vector<float> rope_freq_factors(const ModelConfig& c) {
  if (c.rope_scaling.type != "llama3") return {};
  const RopeScaling& s = c.rope_scaling;
  const int64_t half = c.head_dim / 2;
  const double low_wavelen = (double)s.original_max_position / s.low_freq_factor;
  const double high_wavelen = (double)s.original_max_position / s.high_freq_factor;
  std::vector<float> f((size_t)half, 1.0f);
  for (int64_t i = 0; i < half; ++i) {
    const double inv = std::pow((double)c.rope_theta, -2.0 * (double)i / (double)c.head_dim);
    const double wavelen = 2.0 * M_PI / inv;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f[(size_t)i] = s.factor;
    } else {
      const double smooth = ((double)s.original_max_position / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      // scaled inv = (1 - smooth) * inv / factor + smooth * inv  =>  divisor = inv / scaled
      f[(size_t)i] = (float)(1.0 / ((1.0 - smooth) / s.factor + smooth));
    }
  }
  return f;
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::create(const ModelSource& src, Backend& backend,
                                                       int64_t max_rows, int64_t max_logit_rows,
                                                       Communicator* comm) {
  if (!src.config().max_context_note.empty())
    LOG_WARN("%s: %s", src.path().c_str(), src.config().max_context_note.c_str());
  std::unique_ptr<LlamaModel> m(new LlamaModel(backend, src.config()));
  TensorParallel tp;
  if (comm != nullptr) tp = {comm->rank(), comm->world()};
  TRY_ASSIGN(m->weights_, load_weights(src, backend, tp));
  m->comm_ = tp.sharded() ? comm : nullptr;
  m->shard_ = infercept::shard_config(src.config(), tp.world);
  const ModelConfig& c = m->shard_;  // the activations of this rank's share
  m->max_rows_ = max_rows;
  m->max_logit_rows_ = max_logit_rows;
  m->freq_factors_ = rope_freq_factors(c);
  if (const TensorInfo* t = src.find("rope_freqs.weight"); t != nullptr) {
    // GGUF conversions of Llama 3.1 ship the llama3 divisors precomputed: use them as given.
    if (t->n_elements() != c.head_dim / 2)
      return make_error(src.path(), ": tensor 'rope_freqs.weight' has ",
                        std::to_string(t->n_elements()), " elements, expected ",
                        std::to_string(c.head_dim / 2));
    m->freq_factors_.assign((size_t)t->n_elements(), 0.0f);
    dequantize_to_f32(t->dtype, t->data, m->freq_factors_.data(), t->n_elements());
  }
  const DType a = backend.activation_dtype();
  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  m->x_ = backend.alloc_activation(max_rows, c.d_model, a);
  m->h_ = backend.alloc_activation(max_rows, c.d_model, a);
  m->q_ = backend.alloc_activation(max_rows, q_dim, a);
  m->k_ = backend.alloc_activation(max_rows, kv_dim, a);
  m->v_ = backend.alloc_activation(max_rows, kv_dim, a);
  m->attn_ = backend.alloc_activation(max_rows, q_dim, a);
  m->o_ = backend.alloc_activation(max_rows, c.d_model, a);
  m->gate_ = backend.alloc_activation(max_rows, c.d_ff, a);
  m->up_ = backend.alloc_activation(max_rows, c.d_ff, a);
  m->logits_in_ = backend.alloc_activation(max_logit_rows, c.d_model, a);
  m->logits_ = backend.alloc_activation(max_logit_rows, c.vocab_size, DType::f32);
  return m;
}

bool LlamaModel::forward(const StepInput& in, KvStorage& kv, float* logits,
                         const std::atomic<bool>* interrupt) {
  const ModelConfig& c = shard_;
  const int64_t n = (int64_t)in.tokens.size();
  CHECK(n > 0 && n <= max_rows_);
  CHECK(in.positions.size() == (size_t)n && in.slots.size() == (size_t)n);
  CHECK((int64_t)in.logit_rows.size() <= max_logit_rows_);
  Backend& b = backend_;

  Tensor x = x_.slice_rows(0, n), h = h_.slice_rows(0, n), q = q_.slice_rows(0, n),
         k = k_.slice_rows(0, n), v = v_.slice_rows(0, n), attn = attn_.slice_rows(0, n),
         o = o_.slice_rows(0, n), gate = gate_.slice_rows(0, n), up = up_.slice_rows(0, n);
  const AttentionBatch batch{in.n_seqs(), in.q_start,      in.q_len,
                             in.ctx_len,  in.block_tables, in.max_blocks};
  const RopeParams rope{c.head_dim, c.head_dim, c.rope_style == RopeStyle::neox, c.rope_theta,
                        freq_factors_};
  const float scale = 1.0f / std::sqrt((float)c.head_dim);

  // Decode-only steps (one query row per sequence) have the same launches whenever the batch
  // shape repeats: a device backend may replay them from a recording.
  const bool replayable = n == in.n_seqs();
  const int64_t nl = (int64_t)in.logit_rows.size();
  Tensor li = logits_in_.slice_rows(0, nl), lo = logits_.slice_rows(0, nl);
  CHECK(interrupt == nullptr || b.interruptible());
  // (A rank that gave a step up would leave the others waiting in an all-reduce.)
  CHECK_MSG(interrupt == nullptr || comm_ == nullptr,
            "a tensor-parallel step is not interruptible");
  auto interrupted = [&] {
    return interrupt != nullptr && interrupt->load(std::memory_order_relaxed);
  };
  // The backend's flag is cleared on every way out.
  struct InterruptScope {
    Backend& b;
    ~InterruptScope() { b.set_interrupt(nullptr); }
  } scope{b};
  b.set_interrupt(interrupt);
  for (int pass = 0;; ++pass) {
    CHECK_MSG(pass < 2, "a backend asked for a third pass over one step");
    b.begin_step(replayable);
    b.embed(weights_.tok_embd, in.tokens, x);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      if (interrupted()) return false;
      const LayerWeights& w = weights_.layers[(size_t)l];
      // q_norm/k_norm are absent (no-ops) except on Qwen3.
      const Projection qkv[] = {{&w.wq, &w.bq, q, &w.q_norm, c.rms_eps},
                                {&w.wk, &w.bk, k, &w.k_norm, c.rms_eps},
                                {&w.wv, &w.bv, v}};
      if (comm_ != nullptr) {
        // Tensor parallel: wo and w_down give partial sums over this rank's heads and FFN
        // slice; the ranks add them up before the residual.
        b.self_attention(x, w.attn_norm, c.rms_eps, h, qkv, in.positions, rope, kv, l, in.slots,
                         batch, c.n_heads, scale, attn);
        b.matmul(attn, w.wo, nullptr, o);
        comm_->all_reduce_sum(b, o);
        b.add(x, o);
        b.norm_gated_ffn(x, w.ffn_norm, c.rms_eps, h, w.w_gate, w.w_up, gate, up);
        b.matmul(gate, w.w_down, nullptr, o);
        comm_->all_reduce_sum(b, o);
        b.add(x, o);
        continue;
      }
      b.prefetch_hint(w.wo);
      b.self_attention_project(x, w.attn_norm, c.rms_eps, h, qkv, in.positions, rope, kv, l,
                               in.slots, batch, c.n_heads, scale, attn, w.wo, x, o);
      if (interrupted()) return false;
      b.norm_gated_ffn(x, w.ffn_norm, c.rms_eps, h, w.w_gate, w.w_up, gate, up);
      b.project_add(gate, w.w_down, x, o);
    }
    if (interrupted()) return false;
    if (nl > 0) {
      b.rmsnorm(x, weights_.output_norm, c.rms_eps, h);
      b.gather_rows(h, in.logit_rows, li);
      b.matmul(li, weights_.output, nullptr, lo);
    }
    if (b.end_step()) break;
  }
  if (nl > 0 && logits != nullptr) b.to_host_f32(lo, logits);
  return true;
}

}  // namespace infercept
