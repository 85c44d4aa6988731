// `infercept generate`: one prompt in, text out (streamed), or a JSON record with the token
// ids and the prompt and decode speeds (--json).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/common.h"

namespace infercept::cli {

namespace {

struct GenerateFlags {
  EngineFlags engine;
  SamplingFlags sampling;
  std::string prompt, prompt_file, system;
  CLI::Option *prompt_opt = nullptr, *prompt_file_opt = nullptr, *system_opt = nullptr;
  bool chat = false, json = false, ignore_eos = false;
};

void add_generate_flags(CLI::App& app, GenerateFlags& f) {
  f.prompt_opt = app.add_option("--prompt", f.prompt, "the prompt text")->default_str("");
  f.prompt_file_opt = app.add_option("--prompt-file", f.prompt_file, "read the prompt from a file")
                          ->excludes(f.prompt_opt)
                          ->default_str("");
  app.add_flag("--chat", f.chat, "wrap the prompt in the model's chat template");
  f.system_opt =
      app.add_option("--system", f.system, "system message (with --chat)")->default_str("");
  app.add_flag("--json", f.json, "print one JSON record: text, token ids, speeds");
  app.add_flag("--ignore-eos", f.ignore_eos, "keep generating past end-of-sequence");
  add_engine_flags(app, f.engine);
  add_sampling_flags(app, f.sampling, /*default_temperature=*/0.0f);
}

Result<std::string> read_prompt(const GenerateFlags& f) {
  if (given(f.prompt_opt) == given(f.prompt_file_opt))
    return make_error("generate needs exactly one of --prompt TEXT or --prompt-file F");
  if (given(f.prompt_opt)) return f.prompt;
  std::ifstream in(f.prompt_file, std::ios::binary);
  if (!in) return make_error("cannot read prompt file '", f.prompt_file, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The prompt's token ids: the text as it is, or as the user turn of a chat (--chat).
Result<std::vector<int32_t>> encode_prompt(EngineCore& e, const GenerateFlags& f,
                                           const std::string& prompt) {
  if (!f.chat) return e.tokenizer().encode(prompt, /*add_bos=*/true, /*parse_special=*/false);
  std::vector<ChatMessage> msgs;
  if (given(f.system_opt)) msgs.push_back({"system", f.system, {}, "", ""});
  msgs.push_back({"user", prompt, {}, "", ""});
  return e.encode_chat(msgs, {});
}

// What one request generated, and how fast.
struct Generation {
  std::vector<int32_t> prompt_ids, ids;
  std::string text;
  FinishReason finish = FinishReason::none;
  double prefill_s = 0.0, decode_s = 0.0;
  double prompt_tokens_per_s() const {
    return prefill_s > 0 ? (double)prompt_ids.size() / prefill_s : 0.0;
  }
  double decode_tokens_per_s() const {
    return ids.size() > 1 && decode_s > 0 ? (double)(ids.size() - 1) / decode_s : 0.0;
  }
};

// Runs the request to its end; its text goes to stdout as it comes when `stream`.
Result<Generation> generate(EngineCore& e, GenerateRequest req, bool stream) {
  using clock = std::chrono::steady_clock;
  Generation g;
  g.prompt_ids = req.prompt;
  const auto t0 = clock::now();
  TRY(e.add_request(std::move(req)));
  clock::time_point t_first{};
  while (g.finish == FinishReason::none && e.has_work()) {
    for (const RequestOutput& o : e.step()) {
      if (g.ids.empty() && !o.new_tokens.empty()) t_first = clock::now();
      g.ids.insert(g.ids.end(), o.new_tokens.begin(), o.new_tokens.end());
      g.text += o.text;
      if (stream) {
        std::fwrite(o.text.data(), 1, o.text.size(), stdout);
        std::fflush(stdout);
      }
      if (o.finished()) g.finish = o.finish;
    }
  }
  const auto t_end = clock::now();
  g.prefill_s = std::chrono::duration<double>(t_first - t0).count();
  g.decode_s = std::chrono::duration<double>(t_end - t_first).count();
  return g;
}

void print_json(const Generation& g) {
  nlohmann::json j;
  j["text"] = g.text;
  j["prompt_token_ids"] = g.prompt_ids;
  j["token_ids"] = g.ids;
  j["prompt_tokens"] = g.prompt_ids.size();
  j["completion_tokens"] = g.ids.size();
  j["finish_reason"] = finish_reason_name(g.finish);
  j["prompt_tokens_per_s"] = g.prompt_tokens_per_s();
  j["decode_tokens_per_s"] = g.decode_tokens_per_s();
  j["prefill_seconds"] = g.prefill_s;
  j["decode_seconds"] = g.decode_s;
  std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

// After the streamed text: a newline ends it, whether or not the model gave one, then the
// statistics on stderr.
void print_stats(const Generation& g) {
  if (g.text.empty() || g.text.back() != '\n') std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "[%zu prompt tokens, %.1f tok/s; %zu generated, %.1f tok/s; %s]\n",
               g.prompt_ids.size(), g.prompt_tokens_per_s(), g.ids.size(), g.decode_tokens_per_s(),
               finish_reason_name(g.finish));
}

}  // namespace

int run_generate(int argc, char** argv) {
  CLI::App app{"Generates text for one prompt, streamed to stdout; statistics go to stderr.",
               "infercept generate"};
  set_up_app(app, "infercept generate --prompt \"The capital of France is\" --max-tokens 32");
  GenerateFlags f;
  add_generate_flags(app, f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto prompt = read_prompt(f);
  if (!prompt.ok()) return fail(prompt.error());
  auto cfg = engine_config_from(f.engine);
  if (!cfg.ok()) return fail(cfg.error());
  auto params = sampling_params_from(f.sampling);
  if (!params.ok()) return fail(params.error());
  params->ignore_eos = f.ignore_eos;
  auto engine = EngineCore::create(*cfg);
  if (!engine.ok()) return fail(engine.error());
  EngineCore& e = **engine;

  GenerateRequest req;
  req.params = *params;
  auto ids = encode_prompt(e, f, *prompt);
  if (!ids.ok()) return fail(ids.error());
  req.prompt = std::move(*ids);
  auto g = generate(e, std::move(req), /*stream=*/!f.json);
  if (!g.ok()) return fail(g.error());
  if (f.json)
    print_json(*g);
  else
    print_stats(*g);
  return 0;
}

}  // namespace infercept::cli
