// `infercept info`: what a model file holds: architecture, sizes, tensor types, tokenizer,
// and what one token of KV cache costs.
#include <cstdio>
#include <map>

#include "cli/common.h"

namespace infercept::cli {

int run_info(int argc, char** argv) {
  CLI::App app{
      "Prints what a model file holds: architecture, sizes, tensor types, and what one "
      "token of KV cache costs.",
      "infercept info"};
  set_up_app(app, "infercept info --model models/SmolLM2-135M-Instruct.Q4_1.gguf");
  std::string path = default_model_path();
  app.add_option("-m,--model", path, "a .gguf file or a Hugging Face checkpoint directory");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto src = open_model_source(path);
  if (!src.ok()) return fail(src.error());
  const ModelConfig& c = (*src)->config();
  std::map<std::string, int> types;
  size_t bytes = 0;
  int64_t params = 0;
  for (const auto& [name, t] : (*src)->tensors()) {
    types[std::string(dtype_name(t.dtype))]++;
    bytes += t.n_bytes;
    params += t.n_elements();
  }
  std::printf("model:           %s (%s)\n", path.c_str(), (*src)->format().c_str());
  if (!c.name.empty()) std::printf("name:            %s\n", c.name.c_str());
  std::printf("architecture:    %s\n", c.arch.c_str());
  std::printf("parameters:      %.1f M (%.1f MiB of weights)\n", (double)params / 1e6,
              (double)bytes / (1024.0 * 1024.0));
  std::printf("layers:          %lld\n", (long long)c.n_layers);
  std::printf("d_model:         %lld\n", (long long)c.d_model);
  std::printf("heads:           %lld query, %lld key/value, head_dim %lld\n", (long long)c.n_heads,
              (long long)c.n_kv_heads, (long long)c.head_dim);
  std::printf("d_ff:            %lld\n", (long long)c.d_ff);
  std::printf("vocab:           %lld\n", (long long)c.vocab_size);
  std::printf("context:         %lld%s%s\n", (long long)c.max_context,
              c.max_context_note.empty() ? "" : " (",
              c.max_context_note.empty() ? "" : (c.max_context_note + ")").c_str());
  std::printf("rope:            theta %.0f, %s%s\n", (double)c.rope_theta,
              c.rope_style == RopeStyle::neox ? "neox" : "interleaved",
              c.rope_scaling.type == "none" ? "" : (", scaling " + c.rope_scaling.type).c_str());
  std::printf("rms_eps:         %g\n", (double)c.rms_eps);
  std::printf("tied embeddings: %s\n", c.tied_embeddings ? "yes" : "no");
  std::printf("qkv bias:        %s\n", c.qkv_bias ? "yes" : "no");
  std::printf("q/k head norm:   %s\n", c.qk_norm ? "yes" : "no");
  std::printf("tensor types:   ");
  for (const auto& [t, n] : types) std::printf(" %s x%d", t.c_str(), n);
  std::printf("\n");
  const double kv_f16 = 2.0 * (double)(c.n_layers * c.n_kv_heads * c.head_dim) * 2.0;
  std::printf("KV per token:    %.1f KiB (f16)\n", kv_f16 / 1024.0);
  return 0;
}

}  // namespace infercept::cli
