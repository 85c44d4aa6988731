// `infercept make-model`: writes a Hugging Face checkpoint (Llama, Qwen2, Qwen3 or Mistral)
// with random weights of a real shape (src/engine/random_checkpoint.h), for benchmarks that
// need a 7B/8B/13B-sized model without its trained weights, and tiny ones for tests.
#include <unistd.h>
#include <cstdio>
#include <filesystem>

#include "cli/common.h"
#include "engine/random_checkpoint.h"

namespace infercept::cli {

namespace {

// What `--help` adds below the flags: the shapes and the tokenizer each gets.
const char* const kShapesHelp =
    "Writes a Hugging Face checkpoint (config.json, generation_config.json,\n"
    "tokenizer.json, tokenizer_config.json, safetensors shards of at most --max-shard-gb,\n"
    "with model.safetensors.index.json) with random weights of the shape:\n"
    "  llama2-7b   hidden 4096, 32 layers, 32 heads, ffn 11008, vocab 32000  (13.5 GB bf16)\n"
    "  llama2-13b  hidden 5120, 40 layers, 40 heads, ffn 13824, vocab 32000  (26.0 GB bf16)\n"
    "  llama3-8b   Llama 3.1 8B: hidden 4096, 32 layers, 32/8 heads, ffn 14336,\n"
    "              vocab 128256, rope theta 500000 with llama3 scaling      (16.1 GB bf16)\n"
    "  qwen2.5-7b  Qwen2.5-7B-Instruct: hidden 3584, 28 layers, 28/4 heads, ffn 18944,\n"
    "              vocab 152064, q/k/v biases                               (15.2 GB bf16)\n"
    "  qwen3-8b    Qwen3-8B: hidden 4096, 36 layers, 32/8 heads of 128, ffn 12288,\n"
    "              vocab 151936, q/k head norms                             (16.4 GB bf16)\n"
    "  mistral-7b  Mistral-7B-Instruct-v0.3: hidden 4096, 32 layers, 32/8 heads,\n"
    "              ffn 14336, vocab 32768                                   (14.5 GB bf16)\n"
    "  tiny        Llama: hidden 256, 4 layers, 8/4 heads, ffn 768, vocab 49152 (ms on a CPU)\n"
    "  qwen2-tiny, qwen3-tiny (head_dim 64), mistral-tiny (sliding window 4096): the same\n"
    "              size in each architecture; the Qwen ones tie their embeddings\n"
    "Tokenizer (--tokenizer auto): the default model's (SmolLM2, byte-level BPE, 49152\n"
    "tokens, ChatML) for every shape whose vocabulary holds it (rows past 49152 are\n"
    "padding); for the llama2 and mistral-7b shapes, whose 32000 / 32768 ids cannot hold\n"
    "it, a byte-level fallback cut from it: its special\n"
    "tokens, the 256 byte tokens and its first merges, 32000 tokens in all. --tokenizer byte\n"
    "forces the fallback, --tokenizer default the default model's. Same seed, same bytes.\n";

std::vector<std::string> shape_names() {
  std::vector<std::string> names;
  for (const LlamaShape& s : llama_shapes()) names.push_back(s.name);
  return names;
}

struct MakeModelFlags {
  std::string shape, out, dtype = "bf16", tokenizer = "auto";
  int64_t seed = 0, threads = 0;
  double max_shard_gb = 5.0;
};

void add_make_model_flags(CLI::App& app, MakeModelFlags& f) {
  // --shape and --out are required; checked after parsing, so that an unknown flag is the
  // error named first.
  app.add_option("--shape", f.shape, "the model's shape (required)")
      ->check(CLI::IsMember(shape_names()));
  app.add_option("--out", f.out, "directory to write (required)");
  app.add_option("--seed", f.seed, "weights seed (same seed, same bytes)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dtype", f.dtype, "weight type")->check(CLI::IsMember({"bf16", "f16"}));
  app.add_option("--tokenizer", f.tokenizer, "which tokenizer the checkpoint gets")
      ->check(CLI::IsMember({"auto", "default", "byte"}));
  app.add_option("--threads", f.threads, "writer threads (0: all cores)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--max-shard-gb", f.max_shard_gb, "largest safetensors shard, GB")
      ->check(CLI::Range(0.001, 1e6));
}

// The options of write_random_checkpoint, from checked flags.
Result<RandomCheckpointOptions> checkpoint_options_from(const MakeModelFlags& f) {
  if (f.shape.empty() || f.out.empty()) return make_error("make-model needs --shape and --out");
  RandomCheckpointOptions o;
  TRY_ASSIGN(o.shape, find_llama_shape(f.shape));
  o.out_dir = f.out;
  o.seed = (uint64_t)f.seed;
  o.dtype = f.dtype == "f16" ? DType::f16 : DType::bf16;
  o.tokenizer = f.tokenizer == "default" ? CheckpointTokenizer::default_model
                : f.tokenizer == "byte"  ? CheckpointTokenizer::byte_level
                                         : CheckpointTokenizer::automatic;
  o.tokenizer_source = default_model_path();
  // A bytes-only tokenizer needs no source model: machines without the default model (a
  // bare GPU box) can still write the llama2 shapes with --tokenizer byte.
  if (o.tokenizer == CheckpointTokenizer::byte_level &&
      !std::filesystem::exists(o.tokenizer_source))
    o.tokenizer_source.clear();
  o.n_threads = (int)f.threads;
  o.max_shard_bytes = (uint64_t)(f.max_shard_gb * 1e9);
  return o;
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  return buf;
}

}  // namespace

int run_make_model(int argc, char** argv) {
  CLI::App app{"Writes a random-weight Hugging Face checkpoint of a real shape.",
               "infercept make-model"};
  set_up_app(app, "infercept make-model --shape tiny --out /tmp/tiny --seed 1");
  app.footer(std::string(kShapesHelp) +
             "Example:\n  infercept make-model --shape tiny --out "
             "/tmp/tiny --seed 1");
  MakeModelFlags f;
  add_make_model_flags(app, f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto options = checkpoint_options_from(f);
  if (!options.ok()) return fail(options.error());
  RandomCheckpointOptions& o = *options;
  const std::string& dtype = f.dtype;

  const bool tty = isatty(fileno(stderr)) != 0;
  double last_print = -1.0;
  o.progress = [&](uint64_t done, uint64_t total, double s) {
    const bool end = done == total;
    if (!end && s - last_print < (tty ? 0.5 : 5.0)) return;
    last_print = s;
    std::fprintf(stderr, "%s  weights: %s / %s (%3.0f%%), %.0f MB/s%s", tty ? "\r" : "",
                 human_bytes((double)done).c_str(), human_bytes((double)total).c_str(),
                 total > 0 ? 100.0 * (double)done / (double)total : 100.0,
                 s > 0 ? (double)done / s / 1e6 : 0.0, (tty && !end) ? "" : "\n");
    std::fflush(stderr);
  };
  std::fprintf(stderr, "writing %s (%s, seed %llu) to %s\n", o.shape.name.c_str(), dtype.c_str(),
               (unsigned long long)o.seed, o.out_dir.c_str());
  auto info = write_random_checkpoint(o);
  if (!info.ok()) {
    if (tty) std::fprintf(stderr, "\n");
    return fail(info.error());
  }
  std::printf(
      "wrote %s: %.1f M parameters, %s of weights in %.1f s (%.0f MB/s), %zu files\n",
      o.out_dir.c_str(), (double)info->n_params / 1e6,
      human_bytes((double)info->weight_bytes).c_str(), info->weight_seconds,
      info->weight_seconds > 0 ? (double)info->weight_bytes / info->weight_seconds / 1e6 : 0.0,
      info->files.size());
  std::printf("tokenizer: %s, %lld tokens, %lld merges\n",
              info->default_tokenizer ? "the default model's" : "byte-level fallback",
              (long long)info->tokenizer_vocab, (long long)info->tokenizer_merges);
  return 0;
}

}  // namespace infercept::cli
