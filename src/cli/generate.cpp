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

int run_generate(int argc, char** argv) {
  auto args = Args::parse(
      argc, argv, merge({kEngineFlags, kSamplingFlags, {"prompt", "prompt-file", "system"}}),
      {"chat", "json", "ignore-eos"});
  if (!args.ok()) return fail(args.error());
  const Args& a = *args;
  if (a.has("prompt") == a.has("prompt-file"))
    return fail(Error{"generate needs exactly one of --prompt TEXT or --prompt-file F"});
  std::string prompt = a.get("prompt");
  if (a.has("prompt-file")) {
    std::ifstream in(a.get("prompt-file"), std::ios::binary);
    if (!in) return fail(Error{"cannot read prompt file '" + a.get("prompt-file") + "'"});
    std::stringstream ss;
    ss << in.rdbuf();
    prompt = ss.str();
  }
  auto cfg = engine_config_from(a);
  if (!cfg.ok()) return fail(cfg.error());
  auto params = sampling_params_from(a, 0.0f);
  if (!params.ok()) return fail(params.error());
  params->ignore_eos = a.flag("ignore-eos");
  auto engine = EngineCore::create(*cfg);
  if (!engine.ok()) return fail(engine.error());
  EngineCore& e = **engine;

  GenerateRequest req;
  req.params = *params;
  if (a.flag("chat")) {
    std::vector<ChatMessage> msgs;
    if (a.has("system")) msgs.push_back({"system", a.get("system"), {}, "", ""});
    msgs.push_back({"user", prompt, {}, "", ""});
    auto ids = e.encode_chat(msgs, {});
    if (!ids.ok()) return fail(ids.error());
    req.prompt = std::move(*ids);
  } else {
    req.prompt = e.tokenizer().encode(prompt, /*add_bos=*/true, /*parse_special=*/false);
  }
  const std::vector<int32_t> prompt_ids = req.prompt;
  const bool json = a.flag("json");

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
    std::printf("\n");
    std::fprintf(stderr, "[%zu prompt tokens, %.1f tok/s; %zu generated, %.1f tok/s; %s]\n",
                 prompt_ids.size(), prompt_tps, out_ids.size(), decode_tps,
                 finish_reason_name(finish));
  }
  return 0;
}

}  // namespace infercept::cli
