// `infercept make-model`: writes a Hugging Face Llama checkpoint with random weights of a real
// shape (src/engine/random_checkpoint.h), for benchmarks that need a 7B/8B/13B-sized model
// without its trained weights.
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cli/common.h"
#include "engine/random_checkpoint.h"

namespace infercept::cli {

namespace {

void make_model_usage(FILE* out) {
  std::fprintf(
      out,
      "usage: infercept make-model --shape llama2-7b|llama2-13b|llama3-8b|tiny --out DIR\n"
      "                            [--seed N] [--dtype bf16|f16] [--tokenizer auto|default|byte]\n"
      "                            [--threads N] [--max-shard-gb G]\n"
      "Writes a Hugging Face Llama checkpoint (config.json, generation_config.json,\n"
      "tokenizer.json, tokenizer_config.json, safetensors shards of at most --max-shard-gb,\n"
      "default 5, with model.safetensors.index.json) with random weights of the shape:\n"
      "  llama2-7b   hidden 4096, 32 layers, 32 heads, ffn 11008, vocab 32000  (13.5 GB bf16)\n"
      "  llama2-13b  hidden 5120, 40 layers, 40 heads, ffn 13824, vocab 32000  (26.0 GB bf16)\n"
      "  llama3-8b   Llama 3.1 8B: hidden 4096, 32 layers, 32/8 heads, ffn 14336,\n"
      "              vocab 128256, rope theta 500000 with llama3 scaling      (16.1 GB bf16)\n"
      "  tiny        hidden 256, 4 layers, 8/4 heads, ffn 768, vocab 49152   (runs in ms on a "
      "CPU)\n"
      "Tokenizer (--tokenizer auto): the default model's (SmolLM2, byte-level BPE, 49152\n"
      "tokens, ChatML) for llama3-8b (rows past 49152 are padding) and tiny; for the llama2\n"
      "shapes, whose 32000 ids cannot hold it, a byte-level fallback cut from it: its special\n"
      "tokens, the 256 byte tokens and its first merges, 32000 tokens in all. --tokenizer byte\n"
      "forces the fallback, --tokenizer default the default model's. Same seed, same bytes.\n");
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
  for (int i = 0; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      make_model_usage(stdout);
      return 0;
    }
  auto args = Args::parse(
      argc, argv, {"shape", "out", "seed", "dtype", "tokenizer", "threads", "max-shard-gb"}, {});
  if (!args.ok()) {
    make_model_usage(stderr);
    return fail(args.error());
  }
  if (!args->has("shape") || !args->has("out")) {
    make_model_usage(stderr);
    return fail(make_error("make-model needs --shape and --out"));
  }
  RandomCheckpointOptions o;
  {
    auto shape = find_llama_shape(args->get("shape"));
    if (!shape.ok()) return fail(shape.error());
    o.shape = *shape;
  }
  o.out_dir = args->get("out");
  auto seed = args->get_int("seed", 0);
  if (!seed.ok()) return fail(seed.error());
  if (*seed < 0) return fail(make_error("--seed must be >= 0"));
  o.seed = (uint64_t)*seed;
  const std::string dtype = args->get("dtype", "bf16");
  if (dtype == "bf16") {
    o.dtype = DType::bf16;
  } else if (dtype == "f16") {
    o.dtype = DType::f16;
  } else {
    return fail(make_error("--dtype must be bf16 or f16, not '", dtype, "'"));
  }
  const std::string tok = args->get("tokenizer", "auto");
  if (tok == "auto") {
    o.tokenizer = CheckpointTokenizer::automatic;
  } else if (tok == "default") {
    o.tokenizer = CheckpointTokenizer::default_model;
  } else if (tok == "byte") {
    o.tokenizer = CheckpointTokenizer::byte_level;
  } else {
    return fail(make_error("--tokenizer must be auto, default or byte, not '", tok, "'"));
  }
  o.tokenizer_source = default_model_path();
  // A bytes-only tokenizer needs no source model: machines without the default model (a
  // bare GPU box) can still write the llama2 shapes with --tokenizer byte.
  if (o.tokenizer == CheckpointTokenizer::byte_level &&
      !std::filesystem::exists(o.tokenizer_source))
    o.tokenizer_source.clear();
  auto threads = args->get_int("threads", 0);
  if (!threads.ok()) return fail(threads.error());
  if (*threads < 0 || *threads > 4096) return fail(make_error("--threads must be in [0, 4096]"));
  o.n_threads = (int)*threads;
  auto shard_gb = args->get_double("max-shard-gb", 5.0);
  if (!shard_gb.ok()) return fail(shard_gb.error());
  if (!(*shard_gb >= 0.001 && *shard_gb <= 1e6))
    return fail(make_error("--max-shard-gb must be between 0.001 and 1e6"));
  o.max_shard_bytes = (uint64_t)(*shard_gb * 1e9);

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
