// infercept: one binary, one subcommand per file. `infercept <command> --help` lists a
// command's flags (src/cli/common.h says how they are declared).
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
int run_render_template(int argc, char** argv);
}  // namespace infercept::cli

namespace {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* summary;
};

using namespace infercept::cli;
const Command kCommands[] = {
    {"serve", run_serve, "OpenAI-compatible HTTP server (docs/SERVER.md)"},
    {"generate", run_generate, "generate text for one prompt (--prompt TEXT | --prompt-file F)"},
    {"chat", run_chat, "interactive chat in the terminal, streaming tokens"},
    {"info", run_info, "print the model's architecture and sizes"},
    {"bench", run_bench, "agent workload benchmark: Poisson arrivals, tool pauses, policies"},
    {"simulate", run_simulate, "bench in virtual time: real scheduler, a cost model for the model"},
    {"profile", run_profile, "measure T_fwd(x) and KV copy bandwidth; cache the cost model"},
    {"bench-decode", run_bench_decode, "measure prefill and batched decode throughput"},
    {"bench-forward", run_bench_forward, "time the forward pass and swaps against hardware floors"},
    {"logits", run_logits, "last-position logits of token sequences, as .npy"},
    {"make-model", run_make_model, "write a random-weight HF Llama checkpoint of a real shape"},
    {"render-template", run_render_template, "render a Jinja chat template with a JSON context"},
};

void usage(FILE* out) {
  std::fprintf(out,
               "usage: infercept <command> [flags]   (infercept <command> --help: its flags)\n"
               "commands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-14s %s\n", c.name, c.summary);
  std::fprintf(out,
               "Without --model the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf) is "
               "used.\nExample:\n  infercept generate --prompt \"The capital of France is\" "
               "--max-tokens 32\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  for (const Command& c : kCommands)
    if (argv[1] == std::string(c.name)) return c.run(argc - 2, argv + 2);
  std::fprintf(stderr, "error: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
