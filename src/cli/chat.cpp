// `infercept chat`: an interactive chat in the terminal. Each turn is rendered with the
// model's chat template and streamed token by token; /reset clears the history, /quit or
// end of input leaves.
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/common.h"

namespace infercept::cli {

namespace {

// The reply to the conversation so far, streamed to stdout as it comes.
Result<std::string> reply_to(EngineCore& e, const std::vector<ChatMessage>& history,
                             const SamplingParams& params) {
  GenerateRequest req;
  TRY_ASSIGN(req.prompt, e.encode_chat(history, {}));
  req.params = params;
  TRY(e.add_request(std::move(req)));
  std::string reply;
  bool done = false;
  while (!done && e.has_work()) {
    for (const RequestOutput& o : e.step()) {
      std::fwrite(o.text.data(), 1, o.text.size(), stdout);
      std::fflush(stdout);
      reply += o.text;
      done = done || o.finished();
    }
  }
  std::fprintf(stdout, "\n");
  return reply;
}

}  // namespace

int run_chat(int argc, char** argv) {
  CLI::App app{
      "An interactive chat in the terminal: each turn streamed token by token; /reset "
      "clears the history, /quit or end of input leaves.",
      "infercept chat"};
  set_up_app(app, "infercept chat --system \"You are terse.\" --temperature 0.7");
  EngineFlags engine_flags;
  SamplingFlags sampling_flags;
  std::string system;
  CLI::Option* system_opt =
      app.add_option("--system", system, "system message opening the chat")->default_str("");
  add_engine_flags(app, engine_flags);
  add_sampling_flags(app, sampling_flags, /*default_temperature=*/0.7f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto cfg = engine_config_from(engine_flags);
  if (!cfg.ok()) return fail(cfg.error());
  auto params = sampling_params_from(sampling_flags);
  if (!params.ok()) return fail(params.error());
  auto engine = EngineCore::create(*cfg);
  if (!engine.ok()) return fail(engine.error());
  EngineCore& e = **engine;

  std::vector<ChatMessage> history;
  if (given(system_opt)) history.push_back({"system", system, {}, "", ""});
  const size_t base = history.size();
  std::fprintf(stderr, "infercept chat (%s). /reset clears, /quit leaves.\n",
               e.model_config().name.empty() ? e.model_config().arch.c_str()
                                             : e.model_config().name.c_str());
  std::string line;
  for (;;) {
    std::fprintf(stdout, "> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || line == "/quit") break;
    if (line == "/reset") {
      history.resize(base);
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line, {}, "", ""});
    auto reply = reply_to(e, history, *params);
    if (!reply.ok()) {
      // The turn is dropped (e.g. a conversation longer than the context); the chat goes on.
      std::fprintf(stderr, "error: %s\n", reply.error().message.c_str());
      history.pop_back();
      continue;
    }
    history.push_back({"assistant", *reply, {}, "", ""});
  }
  return 0;
}

}  // namespace infercept::cli
