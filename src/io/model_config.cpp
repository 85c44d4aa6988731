// ModelConfig::validate: the numbers come from model files, so they are checked once here
// (positive, heads divide, bounded) and everything downstream may multiply them freely.
#include "io/model_config.h"

#include <cmath>
#include <string>

namespace infercept {

namespace {

// Generous upper bounds: far above any Llama-family model, low enough that products such as
// n_heads * head_dim * d_model stay well inside int64_t.
constexpr int64_t kMaxLayers = 1 << 12;
constexpr int64_t kMaxDim = 1 << 20;  // d_model, d_ff, n_heads * head_dim
constexpr int64_t kMaxHeads = 1 << 12;
constexpr int64_t kMaxVocab = 1 << 24;
constexpr int64_t kMaxContext = 1 << 26;

Status check_range(const char* what, int64_t v, int64_t max) {
  if (v <= 0 || v > max)
    return make_error("invalid model config: ", what, " = ", std::to_string(v), " (must be in [1, ",
                      std::to_string(max), "])");
  return ok_status();
}

}  // namespace

const char* supported_architectures() {
  return "llama, mistral, qwen2, qwen3";
}

void ModelConfig::apply_sliding_window(int64_t window) {
  if (window <= 0) return;
  sliding_window = window;
  if (window < max_context) {
    max_context_note = "context capped from " + std::to_string(max_context) +
                       " to the model's sliding window of " + std::to_string(window) +
                       " tokens (within it full attention is exact; the window itself is not "
                       "implemented)";
    max_context = window;
  }
}

Status ModelConfig::validate() const {
  TRY(check_range("n_layers", n_layers, kMaxLayers));
  TRY(check_range("d_model", d_model, kMaxDim));
  TRY(check_range("n_heads", n_heads, kMaxHeads));
  TRY(check_range("n_kv_heads", n_kv_heads, kMaxHeads));
  TRY(check_range("head_dim", head_dim, kMaxDim));
  TRY(check_range("d_ff", d_ff, kMaxDim));
  TRY(check_range("vocab_size", vocab_size, kMaxVocab));
  TRY(check_range("max_context", max_context, kMaxContext));
  if (n_heads % n_kv_heads != 0)
    return make_error("invalid model config: n_heads (", std::to_string(n_heads),
                      ") is not a multiple of n_kv_heads (", std::to_string(n_kv_heads), ")");
  if (n_heads * head_dim > kMaxDim)
    return make_error("invalid model config: n_heads * head_dim = ",
                      std::to_string(n_heads * head_dim), " is too large");
  if (head_dim % 2 != 0)
    return make_error("invalid model config: head_dim (", std::to_string(head_dim),
                      ") must be even for RoPE");
  if (!std::isfinite(rms_eps) || rms_eps <= 0.0f || rms_eps > 1.0f)
    return make_error("invalid model config: rms_eps = ", std::to_string(rms_eps),
                      " (must be in (0, 1])");
  if (!std::isfinite(rope_theta) || rope_theta <= 0.0f)
    return make_error("invalid model config: rope_theta = ", std::to_string(rope_theta),
                      " (must be positive)");
  if (arch != "llama" && arch != "mistral" && arch != "qwen2" && arch != "qwen3")
    return make_error("invalid model config: unsupported architecture '", arch,
                      "' (supported: ", supported_architectures(), ")");
  if (sliding_window < 0 || (sliding_window > 0 && max_context > sliding_window))
    return make_error("invalid model config: context ", std::to_string(max_context),
                      " is longer than the sliding window ", std::to_string(sliding_window),
                      ", which is not implemented");
  if (rope_scaling.type != "none" && rope_scaling.type != "llama3")
    return make_error("invalid model config: unsupported rope scaling type '", rope_scaling.type,
                      "' (supported: none, llama3)");
  if (rope_scaling.type == "llama3") {
    const RopeScaling& s = rope_scaling;
    if (!std::isfinite(s.factor) || s.factor <= 0.0f || !std::isfinite(s.low_freq_factor) ||
        s.low_freq_factor <= 0.0f || !std::isfinite(s.high_freq_factor) ||
        s.high_freq_factor <= s.low_freq_factor || s.original_max_position <= 0)
      return make_error(
          "invalid model config: llama3 rope scaling needs factor > 0, 0 < low_freq_factor < "
          "high_freq_factor and original_max_position > 0");
  }
  return ok_status();
}

}  // namespace infercept
