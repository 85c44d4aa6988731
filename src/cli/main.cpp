// infercept: one binary, one subcommand per file (generate, chat, info, bench-decode).
#include <cstdio>
#include <cstring>
#include <string>

namespace infercept::cli {
int run_generate(int argc, char** argv);
int run_chat(int argc, char** argv);
int run_info(int argc, char** argv);
int run_bench_decode(int argc, char** argv);
int run_bench_forward(int argc, char** argv);
int run_logits(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_profile(int argc, char** argv);
int run_serve(int argc, char** argv);
int run_make_model(int argc, char** argv);
int run_simulate(int argc, char** argv);
}  // namespace infercept::cli

namespace {
void usage() {
  std::fprintf(stderr,
               "usage: infercept <command> [flags]\n"
               "commands:\n"
               "  generate      generate text for one prompt (--prompt TEXT | --prompt-file F)\n"
               "  chat          interactive chat in the terminal, streaming tokens\n"
               "  info          print the model's architecture and sizes\n"
               "  bench-decode  measure prefill and batched decode throughput\n"
               "  bench-forward time the forward pass and swaps against hardware floors\n"
               "  logits        last-position logits of token sequences, as .npy\n"
               "  bench         agent workload benchmark: Poisson arrivals, tool pauses, policies\n"
               "  simulate      bench in virtual time: real scheduler, a cost model for the model\n"
               "  profile       measure T_fwd(x) and KV copy bandwidth; cache the cost model\n"
               "  serve         OpenAI-compatible HTTP server (--host, --port; docs/SERVER.md)\n"
               "  make-model    write a random-weight HF Llama checkpoint of a real shape\n"
               "Without --model the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf) is "
               "used.\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    usage();
    return argc < 2 ? 1 : 0;
  }
  const std::string cmd = argv[1];
  using namespace infercept::cli;
  if (cmd == "generate") return run_generate(argc - 2, argv + 2);
  if (cmd == "chat") return run_chat(argc - 2, argv + 2);
  if (cmd == "info") return run_info(argc - 2, argv + 2);
  if (cmd == "bench-decode") return run_bench_decode(argc - 2, argv + 2);
  if (cmd == "bench-forward") return run_bench_forward(argc - 2, argv + 2);
  if (cmd == "logits") return run_logits(argc - 2, argv + 2);
  if (cmd == "bench") return run_bench(argc - 2, argv + 2);
  if (cmd == "simulate") return run_simulate(argc - 2, argv + 2);
  if (cmd == "profile") return run_profile(argc - 2, argv + 2);
  if (cmd == "serve") return run_serve(argc - 2, argv + 2);
  if (cmd == "make-model") return run_make_model(argc - 2, argv + 2);
  std::fprintf(stderr, "error: unknown command '%s'\n", cmd.c_str());
  usage();
  return 1;
}
