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
  if (f.chat) {
    std::vector<ChatMessage> msgs;
    if (given(f.system_opt)) msgs.push_back({"system", f.system, {}, "", ""});
    msgs.push_back({"user", *prompt, {}, "", ""});
    auto ids = e.encode_chat(msgs, {});
    if (!ids.ok()) return fail(ids.error());
    req.prompt = std::move(*ids);
  } else {
    req.prompt = e.tokenizer().encode(*prompt, /*add_bos=*/true, /*parse_special=*/false);
  }
  const std::vector<int32_t> prompt_ids = req.prompt;
  const bool json = f.json;

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto id = e.add_request(std::move(req));
  if (!id.ok()) return fail(id.error());
  std::vector<int32_t> out_ids;
  std::string text;
  FinishReason finish = FinishReason::none;
  clock::time_point t_first{};
  while (finish == FinishReason::none && e.has_work()) {
    for (const RequestOutput& o : e.step()) {
      if (out_ids.empty() && !o.new_tokens.empty()) t_first = clock::now();
      out_ids.insert(out_ids.end(), o.new_tokens.begin(), o.new_tokens.end());
      text += o.text;
      if (!json) {
        std::fwrite(o.text.data(), 1, o.text.size(), stdout);
        std::fflush(stdout);
      }
      if (o.finished()) finish = o.finish;
    }
  }
  const auto t_end = clock::now();
  const double prefill_s = std::chrono::duration<double>(t_first - t0).count();
  const double decode_s = std::chrono::duration<double>(t_end - t_first).count();
  const double prompt_tps = prefill_s > 0 ? (double)prompt_ids.size() / prefill_s : 0.0;
  const double decode_tps =
      out_ids.size() > 1 && decode_s > 0 ? (double)(out_ids.size() - 1) / decode_s : 0.0;
  if (json) {
    nlohmann::json j;
    j["text"] = text;
    j["prompt_token_ids"] = prompt_ids;
    j["token_ids"] = out_ids;
    j["prompt_tokens"] = prompt_ids.size();
    j["completion_tokens"] = out_ids.size();
    j["finish_reason"] = finish_reason_name(finish);
    j["prompt_tokens_per_s"] = prompt_tps;
    j["decode_tokens_per_s"] = decode_tps;
    j["prefill_seconds"] = prefill_s;
    j["decode_seconds"] = decode_s;
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    // The text ends with a newline before the statistics, whether or not the model gave one.
    if (text.empty() || text.back() != '\n') std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr, "[%zu prompt tokens, %.1f tok/s; %zu generated, %.1f tok/s; %s]\n",
                 prompt_ids.size(), prompt_tps, out_ids.size(), decode_tps,
                 finish_reason_name(finish));
  }
  return 0;
}

}  // namespace infercept::cli
