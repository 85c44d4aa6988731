// Token-mask computation for constrained decoding (src/grammar) at a 150k-token vocabulary:
// the time to compute one row's mask for the next token, per generated token, along a
// typical tool call (Hermes format, three tools, nested objects, an enum, an array: case 0),
// and along a call of a fourth tool with bounded integers (minimum/maximum), a bounded number,
// a date pattern and an e-mail pattern (^\S+@\S+$, a broad loop) (case 1: the /1 runs).
//
// The vocabulary: SmolLM2's 49,152 real tokens (its GGUF) and 100,992 generated ones
// shaped like a large multilingual BPE vocabulary's (Qwen2.5's 151k): words of 2-12 ASCII
// letters with and without a leading space, CJK and Cyrillic pieces of 1-4 characters,
// punctuation runs, some with quotes, backslashes or newlines (about 3%, as in real
// vocabularies); no real 150k tokenizer ships inside a package installable here.
//
// Reported per token: the mask computed from scratch (cold: the per-state cache is off),
// from the cache (a state seen before: the common case once a grammar has served a few
// requests), and as a request meets it (one cache, the call generated once), with the
// unconstrained reference beside them: what a row pays without a constraint (nothing for the
// mask; an argmax over the row's logits shown for scale) and the cost of applying a mask.
//
//   build/bench_token_mask --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "engine/sampling.h"
#include "grammar/example_tools.h"
#include "grammar/token_mask.h"
#include "grammar/tool_grammar.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace infercept::grammar {
namespace {

constexpr int32_t kVocab = 150144;

struct Fixture {
  std::unique_ptr<Vocabulary> vocab;
  std::shared_ptr<const Grammar> grammars[2];  // per case: three tools; the same and a fourth
  std::vector<int32_t> calls[2];               // the calls' tokens, per case

  Fixture() {
    auto gguf = GgufFile::open(INFERCEPT_DEFAULT_MODEL);
    CHECK_MSG(gguf.ok(), "bench_token_mask needs the default model (make model)");
    auto spec = tokenizer_spec_from_gguf(**gguf);
    CHECK(spec.ok());
    auto tok = Tokenizer::create(std::move(*spec));
    CHECK(tok.ok());
    const Tokenizer& t = **tok;
    std::vector<std::string> bytes((size_t)kVocab);
    std::vector<int32_t> ends;
    for (int32_t id = 0; id < t.vocab_size(); ++id) {
      if (t.is_eog(id))
        ends.push_back(id);
      else if (!t.is_control(id))
        bytes[(size_t)id] = t.token_to_bytes(id);
    }
    std::mt19937 rng(42);
    auto pick = [&](int n) { return (int)(rng() % (uint32_t)n); };
    auto utf8 = [](uint32_t cp, std::string& s) {
      if (cp < 0x800) {
        s += (char)(0xC0 | (cp >> 6));
        s += (char)(0x80 | (cp & 0x3F));
      } else {
        s += (char)(0xE0 | (cp >> 12));
        s += (char)(0x80 | ((cp >> 6) & 0x3F));
        s += (char)(0x80 | (cp & 0x3F));
      }
    };
    for (int32_t id = t.vocab_size(); id < kVocab; ++id) {
      std::string s;
      const int kind = pick(100);
      if (kind < 45) {  // a word piece
        if (pick(2)) s += ' ';
        const int n = 2 + pick(11);
        for (int k = 0; k < n; ++k) s += (char)((pick(5) == 0 ? 'A' : 'a') + pick(26));
      } else if (kind < 75) {  // CJK
        const int n = 1 + pick(4);
        for (int k = 0; k < n; ++k) utf8(0x4E00 + (uint32_t)pick(20000), s);
      } else if (kind < 90) {  // Cyrillic
        if (pick(2)) s += ' ';
        const int n = 2 + pick(8);
        for (int k = 0; k < n; ++k) utf8(0x430 + (uint32_t)pick(32), s);
      } else if (kind < 97) {  // punctuation and digits
        const char* p = ".,;:!?()[]{}-_=+*/<>#@$%&|~0123456789";
        const int n = 1 + pick(4);
        for (int k = 0; k < n; ++k) s += p[pick(38)];
      } else {  // with a quote, a backslash or a newline
        const char* q[] = {"\"", "\\", "\n", "\",", "\n\n", "\":"};
        s += (char)('a' + pick(26));
        s += q[pick(6)];
        if (pick(2)) s += (char)('a' + pick(26));
      }
      bytes[(size_t)id] = s;
    }
    vocab = std::make_unique<Vocabulary>(std::move(bytes), ends);

    std::vector<ToolSpec> tools = example_tool_specs(3);
    grammars[0] = std::make_shared<const Grammar>(
        std::get<Grammar>(tool_call_grammar(tools, hermes_syntax())));
    tools = example_tool_specs(4);
    grammars[1] = std::make_shared<const Grammar>(
        std::get<Grammar>(tool_call_grammar(tools, hermes_syntax())));
    calls[1] = t.encode(
        "<tool_call>\n{\"name\": \"book_table\", \"arguments\": {\"budget\": 450.5, \"date\": "
        "\"2026-12-24\", \"email\": \"ann.lee@example.com\", \"hour\": 19, \"party_size\": 12, "
        "\"restaurant\": \"Chez Marie by "
        "the river\"}}\n</tool_call>",
        false, false);
    calls[0] = t.encode(
        "<tool_call>\n{\"name\": \"plan_event\", \"arguments\": {\"attendees\": [{\"name\": "
        "\"Ann Smith\", \"role\": \"host\"}, {\"name\": \"Bob Jones\", \"role\": \"guest\"}], "
        "\"day\": 14, \"remote\": false, \"title\": \"Team lunch by the river, with a short "
        "walk after it\"}}\n</tool_call>",
        false, false);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

// Masks along case k's call: every token's mask once per pass; per-mask times in `times`.
void masks_along_call(int64_t k, MaskCache* cache, std::vector<double>& times) {
  Fixture& f = fixture();
  Matcher m(f.grammars[k]);
  std::vector<uint64_t> mask(f.vocab->mask_words());
  for (int32_t id : f.calls[k]) {
    const auto t0 = std::chrono::steady_clock::now();
    compute_mask(m, *f.vocab, cache, mask.data());
    times.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    CHECK((mask[(size_t)id >> 6] >> (id & 63)) & 1);  // the call's own token is allowed
    CHECK(m.advance(f.vocab->bytes(id)));
  }
}

void report(benchmark::State& state, std::vector<double>& times) {
  std::sort(times.begin(), times.end());
  state.counters["median_us"] = times[times.size() / 2];
  state.counters["p90_us"] = times[times.size() * 9 / 10];
  state.counters["max_us"] = times.back();
  state.counters["tokens"] = (double)fixture().calls[state.range(0)].size();
}

// No cache: every mask walks the vocabulary trie.
void BM_MaskCold(benchmark::State& state) {
  std::vector<double> times;
  for (auto _ : state) masks_along_call(state.range(0), nullptr, times);
  report(state, times);
}
BENCHMARK(BM_MaskCold)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// As a request meets it: one cache, empty at the start of each pass (a new grammar).
void BM_MaskFirstRequest(benchmark::State& state) {
  std::vector<double> times;
  for (auto _ : state) {
    MaskCache cache;
    masks_along_call(state.range(0), &cache, times);
  }
  report(state, times);
}
BENCHMARK(BM_MaskFirstRequest)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// A grammar that has served the call before: every state from the cache.
void BM_MaskCached(benchmark::State& state) {
  MaskCache cache;
  std::vector<double> warm, times;
  masks_along_call(state.range(0), &cache, warm);
  for (auto _ : state) masks_along_call(state.range(0), &cache, times);
  report(state, times);
}
BENCHMARK(BM_MaskCached)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The unconstrained reference: a row without a constraint computes no mask; its host-side
// work per token at this vocabulary is at most the argmax over its logits.
void BM_UnconstrainedArgmax(benchmark::State& state) {
  std::vector<float> logits((size_t)kVocab);
  std::mt19937 rng(1);
  for (float& x : logits) x = (float)(rng() % 1000) / 100.0f;
  for (auto _ : state) benchmark::DoNotOptimize(argmax(logits));
}
BENCHMARK(BM_UnconstrainedArgmax)->Unit(benchmark::kMicrosecond);

// Applying a mask (a string body's: most tokens allowed) to one row.
void BM_ApplyMask(benchmark::State& state) {
  Fixture& f = fixture();
  std::vector<float> logits((size_t)kVocab, 1.0f);
  std::vector<uint64_t> mask(f.vocab->plain_mask());
  for (auto _ : state) {
    apply_mask(logits, mask.data());
    benchmark::DoNotOptimize(logits.data());
  }
}
BENCHMARK(BM_ApplyMask)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace infercept::grammar

BENCHMARK_MAIN();
