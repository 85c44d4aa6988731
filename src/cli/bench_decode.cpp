// `infercept bench-decode`: throughput of the engine itself. B requests with P-token prompts
// are prefilled, then decode N tokens each (EOS ignored, greedy), all batched together.
// Reports prompt tokens/s over the prefill phase and aggregate decode tokens/s over the
// steps in which every request was decoding.
//
// With --constrained the same batch runs twice more on the same engine, once free and once
// with every row constrained to tool calls of four typical tool schemas (Hermes format,
// parallel calls allowed, so the grammar stays in force), and the two decode rates are
// printed side by side: what constrained decoding costs a batch (masks computed beside the
// forward pass, applied where the logits are).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "cli/common.h"
#include "grammar/example_tools.h"
#include "grammar/token_mask.h"
#include "grammar/tool_grammar.h"

namespace infercept::cli {

namespace {

using clock_type = std::chrono::steady_clock;

// `batch` greedy requests of `prompt_tokens` each, decoding `decode_tokens` past EOS. The
// prompts are a fixed text offset per request, so no two are equal.
Status add_requests(EngineCore& e, int64_t batch, int64_t prompt_tokens, int64_t decode_tokens,
                    const std::shared_ptr<const GenerationConstraint>& constraint = nullptr) {
  const std::string base_text =
      "The history of computing is a story of machines that learned to remember. ";
  std::vector<int32_t> pool;
  while ((int64_t)pool.size() < prompt_tokens + batch)
    for (int32_t t : e.tokenizer().encode(base_text, false, false)) pool.push_back(t);
  for (int64_t i = 0; i < batch; ++i) {
    GenerateRequest r;
    r.prompt.assign(pool.begin() + i, pool.begin() + i + prompt_tokens);
    r.params.temperature = 0.0f;
    r.params.max_tokens = (int32_t)decode_tokens;
    r.params.ignore_eos = true;
    r.constraint = constraint;
    TRY(e.add_request(std::move(r)));
  }
  return ok_status();
}

// Prefill: until every request has its first token; decode: the steps after that, in which
// every request was decoding.
struct Phases {
  double prefill_s = 0.0, decode_s = 0.0;
  int64_t decode_tokens = 0;
};

Phases run_to_end(EngineCore& e, int64_t batch, clock_type::time_point t0) {
  int64_t started = 0;
  Phases p;
  clock_type::time_point t_all_started{};
  std::unordered_set<uint64_t> seen;  // requests with a first token
  while (e.has_work()) {
    const bool all_decoding = started == batch;
    for (const RequestOutput& o : e.step()) {
      if (o.new_tokens.empty()) continue;
      if (seen.insert(o.id).second) {
        ++started;
      } else if (all_decoding) {
        ++p.decode_tokens;
      }
    }
    if (!all_decoding && started == batch) t_all_started = clock_type::now();
  }
  p.prefill_s = std::chrono::duration<double>(t_all_started - t0).count();
  p.decode_s = std::chrono::duration<double>(clock_type::now() - t_all_started).count();
  return p;
}

// Every row's generation held to calls of the four example tools (grammar/example_tools.h: an
// enum, nested objects in an array, extra properties, numeric bounds and patterns).
Result<std::shared_ptr<const GenerationConstraint>> tool_call_constraint() {
  const std::vector<grammar::ToolSpec> tools = grammar::example_tool_specs(4);
  auto g = grammar::tool_call_grammar(tools, grammar::hermes_syntax());
  if (auto* err = std::get_if<grammar::ToolGrammarError>(&g)) return make_error(err->message);
  auto c = std::make_shared<GenerationConstraint>();
  c->grammar = std::make_shared<const grammar::Grammar>(std::move(std::get<grammar::Grammar>(g)));
  c->cache = std::make_shared<grammar::MaskCache>();
  return std::shared_ptr<const GenerationConstraint>(std::move(c));
}

}  // namespace

int run_bench_decode(int argc, char** argv) {
  CLI::App app{
      "Measures prefill and batched decode throughput: --batch requests of "
      "--prompt-tokens each, decoding --decode-tokens together.",
      "infercept bench-decode"};
  set_up_app(app, "infercept bench-decode --batch 32 --prompt-tokens 128 --decode-tokens 64");
  EngineFlags engine_flags;
  int64_t batch = 1, prompt_tokens = 128, decode_tokens = 64;
  bool json = false, constrained = false;
  app.add_option("--batch", batch, "requests decoding together");
  app.add_option("--prompt-tokens", prompt_tokens, "prompt length of each request");
  app.add_option("--decode-tokens", decode_tokens, "tokens each request generates (>= 2)");
  app.add_flag("--json", json, "print the result as JSON");
  app.add_flag("--constrained", constrained,
               "also decode the batch free and with every row constrained to tool calls, "
               "and compare the two rates");
  add_engine_flags(app, engine_flags);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto cfg = engine_config_from(engine_flags);
  if (!cfg.ok()) return fail(cfg.error());
  if (batch < 1 || prompt_tokens < 1 || decode_tokens < 2)
    return fail(Error{"--batch and --prompt-tokens must be >= 1, --decode-tokens >= 2"});
  cfg->max_seqs = std::max<int64_t>(cfg->max_seqs, batch);
  auto engine = EngineCore::create(*cfg);
  if (!engine.ok()) return fail(engine.error());
  EngineCore& e = **engine;

  const auto t0 = clock_type::now();
  if (Status st = add_requests(e, batch, prompt_tokens, decode_tokens); !st.ok())
    return fail(st.error());
  const Phases p = run_to_end(e, batch, t0);
  nlohmann::json cmp;  // --constrained: the free and the constrained round
  if (constrained) {
    // The same batch on the warm engine: free, then every row constrained. Stats are read as
    // differences, since they accumulate over the engine's life.
    auto constraint = tool_call_constraint();
    if (!constraint.ok()) return fail(constraint.error());
    double rate[2] = {0.0, 0.0};
    for (int round = 0; round < 2; ++round) {
      const EngineStats before = e.stats();
      const auto t = clock_type::now();
      if (Status st = add_requests(e, batch, prompt_tokens, decode_tokens,
                                   round == 1 ? *constraint : nullptr);
          !st.ok())
        return fail(st.error());
      const Phases q = run_to_end(e, batch, t);
      rate[round] = (double)q.decode_tokens / q.decode_s;
      const EngineStats& after = e.stats();
      const int64_t steps = std::max<int64_t>(1, after.steps - before.steps);
      nlohmann::json r;
      r["decode_tokens_per_s"] = rate[round];
      r["masked_rows"] = after.masked_rows - before.masked_rows;
      r["host_sampled_rows"] = after.host_sampled_rows - before.host_sampled_rows;
      r["mask_ms_per_step"] = (after.mask_seconds - before.mask_seconds) * 1e3 / (double)steps;
      r["mask_wait_ms_per_step"] =
          (after.mask_wait_seconds - before.mask_wait_seconds) * 1e3 / (double)steps;
      cmp[round == 1 ? "constrained" : "free"] = r;
    }
    cmp["constrained_slowdown"] = rate[0] / rate[1] - 1.0;
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  nlohmann::json j;
  j["batch"] = batch;
  j["prompt_tokens"] = prompt_tokens;
  j["decode_tokens"] = decode_tokens;
  j["prompt_tokens_per_s"] = (double)(batch * prompt_tokens) / p.prefill_s;
  j["decode_tokens_per_s"] = (double)p.decode_tokens / p.decode_s;
  j["peak_rss_mb"] = (double)ru.ru_maxrss / 1024.0;
  j["preemptions"] = e.stats().preemptions;
  j["host_prepare_ms_per_step"] =
      e.stats().host_prepare_seconds * 1e3 / (double)std::max<int64_t>(1, e.stats().steps);
  j["forward_ms_per_step"] =
      e.stats().forward_seconds * 1e3 / (double)std::max<int64_t>(1, e.stats().steps);
  if (constrained) j.update(cmp);
  if (json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf(
        "batch %lld: prompt %.1f tok/s, decode %.1f tok/s (aggregate), peak RSS %.0f MiB, "
        "host %.3f ms + forward %.3f ms per step\n",
        (long long)batch, j["prompt_tokens_per_s"].get<double>(),
        j["decode_tokens_per_s"].get<double>(), j["peak_rss_mb"].get<double>(),
        j["host_prepare_ms_per_step"].get<double>(), j["forward_ms_per_step"].get<double>());
    if (constrained) {
      std::printf("%-12s %14s %12s %14s %12s %14s\n", "decode", "tok/s", "masked rows",
                  "host-sampled", "mask ms/step", "mask wait ms");
      for (const char* k : {"free", "constrained"}) {
        const nlohmann::json& r = j[k];
        std::printf("%-12s %14.1f %12lld %14lld %12.3f %14.3f\n", k,
                    r["decode_tokens_per_s"].get<double>(),
                    (long long)r["masked_rows"].get<int64_t>(),
                    (long long)r["host_sampled_rows"].get<int64_t>(),
                    r["mask_ms_per_step"].get<double>(), r["mask_wait_ms_per_step"].get<double>());
      }
      std::printf("constrained decode is %.1f%% slower\n",
                  100.0 * j["constrained_slowdown"].get<double>());
    }
  }
  return 0;
}

}  // namespace infercept::cli
