#include "workload/workload.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "workload/rng.h"

namespace infercept {

std::vector<AugmentationProfile> default_profiles() {
  // Moments: Table 1 of the InferCept paper (mean, std). Token ranges are not in the paper:
  //  - math, qa, ve `returned` follow one third-party derived trace (Math 17-34, QA 33-81,
  //    VE 2 tokens with ~4 generated between calls);
  //  - math/qa `generate`: one reasoning step or thought+action between calls, a few dozen
  //    tokens; small next to the few-shot prompts that make up most of their context;
  //  - chat: an assistant turn 50-150 tokens and a short human reply 20-60; with 4.45 turns this
  //    already fills most of the 753-token mean context, so longer turns would not fit;
  //  - image/tts: the model writes an image prompt or a passage to speak (30-90 tokens) and the
  //    tool hands back a short reference to the result (10-30 tokens).
  return {
      {"math", "calculator", {9e-5, 6e-5}, {3.75, 1.3}, {1422, 738}, {16, 48}, {17, 34}},
      {"qa", "wikipedia", {0.69, 0.17}, {2.52, 1.73}, {1846, 428}, {20, 60}, {33, 81}},
      {"ve", "alfworld", {0.09, 0.014}, {28.18, 15.2}, {2185, 115}, {3, 5}, {2, 2}},
      {"chat", "human", {28.6, 15.6}, {4.45, 1.96}, {753, 703}, {50, 150}, {20, 60}},
      {"image", "stable-diffusion", {20.03, 7.8}, {6.91, 3.93}, {1247, 792}, {30, 90}, {10, 30}},
      {"tts", "bark", {17.24, 7.6}, {6.91, 3.93}, {1251, 792}, {30, 90}, {10, 30}},
  };
}

const std::vector<std::string>& builtin_workload_names() {
  // "mixed" picks names[1..6]: new workloads go after them.
  static const std::vector<std::string> names = {"mixed", "math",  "qa",  "ve",
                                                 "chat",  "image", "tts", "sessions"};
  return names;
}

bool is_builtin_workload(std::string_view name) {
  const auto& names = builtin_workload_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

const AugmentationProfile* find_profile(const WorkloadSpec& spec, std::string_view name) {
  for (const AugmentationProfile& p : spec.profiles) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

namespace {

Status validate_range(const TokenRange& r, int32_t min_allowed, const std::string& what) {
  if (r.min < min_allowed || r.max < r.min) {
    return make_error(what, ": range ", std::to_string(r.min), "-", std::to_string(r.max),
                      " is invalid (need ", std::to_string(min_allowed), " <= min <= max)");
  }
  return ok_status();
}

Status validate_moments(const Moments& m, const std::string& what) {
  if (!(std::isfinite(m.mean) && m.mean > 0.0 && std::isfinite(m.std) && m.std >= 0.0)) {
    return make_error(what, ": need mean > 0 and std >= 0");
  }
  return ok_status();
}

bool positive_finite(double x) {
  return std::isfinite(x) && x > 0.0;
}

// Smallest final context a request with k interceptions can have: the minimum prompt, one
// generated token per segment and the smallest allowed return per tool call.
int64_t min_context(const WorkloadSpec& spec, const AugmentationProfile& p, int64_t k) {
  const int64_t min_return = std::min<int64_t>(1, p.returned.min);
  return spec.min_prompt_tokens + (k + 1) + k * min_return;
}

}  // namespace

Status validate_workload_spec(const WorkloadSpec& spec) {
  if (!is_builtin_workload(spec.name)) {
    return make_error("unknown workload '", spec.name,
                      "' (expected mixed, math, qa, ve, chat, image, tts or sessions)");
  }
  if (!positive_finite(spec.rate)) return make_error("rate must be > 0 requests/s");
  if (!positive_finite(spec.duration_s)) return make_error("duration must be > 0 s");
  // A guard against typos like --duration 1e9: the trace lives in memory.
  if (spec.rate * spec.duration_s > 1e7) {
    return make_error("rate x duration asks for more than 10 million requests");
  }
  if (!positive_finite(spec.time_scale)) return make_error("time scale must be > 0");
  // The upper bound keeps every drawn context far inside int32 token counts.
  if (!positive_finite(spec.context_scale) || spec.context_scale > 100.0) {
    return make_error("context scale must be in (0, 100]");
  }
  if (spec.min_prompt_tokens < 1) return make_error("min prompt tokens must be >= 1");
  if (spec.max_context < 0) return make_error("max context must be >= 0 (0: no clamp)");
  if (spec.name == "sessions") return validate_session_spec(spec);
  for (const std::string& name : builtin_workload_names()) {
    if (name == "mixed" || name == "sessions") continue;
    const AugmentationProfile* p = find_profile(spec, name);
    if (p == nullptr) return make_error("no profile for augmentation '", name, "'");
    TRY(validate_moments(p->interception_s, name + " interception time"));
    TRY(validate_moments(p->interceptions, name + " interceptions"));
    TRY(validate_moments(p->context_tokens, name + " context tokens"));
    TRY(validate_range(p->generate, 1, name + ".generate"));
    TRY(validate_range(p->returned, 0, name + ".returned"));
    if (p->tool.empty()) return make_error(name, ": tool name must not be empty");
    // Every request has at least one interception; the clamp must leave room for it.
    if (spec.max_context > 0 && min_context(spec, *p, 1) > spec.max_context) {
      return make_error("max context ", std::to_string(spec.max_context),
                        " is too small for a request with one interception (",
                        std::to_string(min_context(spec, *p, 1)), " tokens)");
    }
  }
  return ok_status();
}

Status apply_token_override(WorkloadSpec& spec, std::string_view expr) {
  const auto bad = [&](std::string_view why) {
    return make_error("token override '", std::string(expr), "': ", std::string(why),
                      " (expected AUG.generate=MIN-MAX or AUG.returned=MIN-MAX)");
  };
  const size_t dot = expr.find('.');
  const size_t eq = expr.find('=');
  if (dot == std::string_view::npos || eq == std::string_view::npos || eq < dot) {
    return bad("malformed");
  }
  const std::string_view aug = expr.substr(0, dot);
  const std::string_view field = expr.substr(dot + 1, eq - dot - 1);
  const std::string_view value = expr.substr(eq + 1);
  if (field != "generate" && field != "returned") return bad("unknown field");

  const size_t dash = value.find('-');
  if (dash == std::string_view::npos) return bad("value is not MIN-MAX");
  TokenRange range;
  const auto parse_int = [](std::string_view s, int32_t& out) {
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
  };
  if (!parse_int(value.substr(0, dash), range.min) ||
      !parse_int(value.substr(dash + 1), range.max)) {
    return bad("MIN and MAX must be integers");
  }
  const int32_t min_allowed = field == "generate" ? 1 : 0;
  if (range.min < min_allowed || range.max < range.min) {
    return bad(field == "generate" ? "need 1 <= MIN <= MAX" : "need 0 <= MIN <= MAX");
  }

  bool matched = false;
  for (AugmentationProfile& p : spec.profiles) {
    if (aug != "*" && p.name != aug) continue;
    (field == "generate" ? p.generate : p.returned) = range;
    matched = true;
  }
  if (!matched) return bad("unknown augmentation");
  return ok_status();
}

TraceRequest generate_request(const WorkloadSpec& spec, const AugmentationProfile& p, uint64_t id,
                              double arrival_s, uint64_t request_seed) {
  Rng rng(request_seed);
  TraceRequest r;
  r.id = id;
  r.arrival_s = arrival_s;
  r.augmentation = p.name;
  r.seed = rng.next_u64();

  // Draw in a fixed order so that each quantity's stream does not depend on the others' values.
  int64_t k = std::max<int64_t>(1, std::llround(rng.lognormal(p.interceptions)));
  int64_t context = std::llround(rng.lognormal(p.context_tokens) * spec.context_scale);
  std::vector<double> pause(static_cast<size_t>(k));
  for (double& t : pause) t = rng.lognormal(p.interception_s) * spec.time_scale;
  // gen[i] is generated before tool call i; gen[k] after the last call. ret[i] follows call i.
  std::vector<int32_t> gen(static_cast<size_t>(k) + 1);
  std::vector<int32_t> ret(static_cast<size_t>(k));
  for (int32_t& g : gen) g = rng.uniform_int(p.generate.min, p.generate.max);
  for (int32_t& t : ret) t = rng.uniform_int(p.returned.min, p.returned.max);

  // The clamp bounds the final context. A long tail draw of the count that cannot fit even at
  // one token per segment loses interceptions (validation guarantees one always fits).
  if (spec.max_context > 0) {
    context = std::min<int64_t>(context, spec.max_context);
    while (min_context(spec, p, k) > spec.max_context) --k;
    CHECK_GE(k, 1);
    pause.resize(static_cast<size_t>(k));
    ret.resize(static_cast<size_t>(k));
    gen.resize(static_cast<size_t>(k) + 1);
  }
  // A short context draw with many interceptions grows to the least that can hold them.
  context = std::max(context, min_context(spec, p, k));

  // Fit generated + returned tokens inside context - min_prompt. When they do not fit (short
  // context draws, small context_scale), shrink them proportionally, keeping each >= its floor,
  // then trim the largest one by one: the context is the moment Table 1 gives, the per-segment
  // tokens are our guesses, so the guesses yield.
  const int64_t budget = context - spec.min_prompt_tokens;
  int64_t sum = 0;
  for (int32_t g : gen) sum += g;
  for (int32_t t : ret) sum += t;
  if (sum > budget) {
    const int32_t ret_floor = std::min<int32_t>(1, p.returned.min);
    const double f = static_cast<double>(budget) / static_cast<double>(sum);
    sum = 0;
    for (int32_t& g : gen) {
      g = std::max<int32_t>(1, static_cast<int32_t>(g * f));
      sum += g;
    }
    for (int32_t& t : ret) {
      t = std::max<int32_t>(ret_floor, static_cast<int32_t>(t * f));
      sum += t;
    }
    while (sum > budget) {
      int32_t* largest = nullptr;
      for (int32_t& g : gen) {
        if (g > 1 && (largest == nullptr || g > *largest)) largest = &g;
      }
      for (int32_t& t : ret) {
        if (t > ret_floor && (largest == nullptr || t > *largest)) largest = &t;
      }
      CHECK(largest != nullptr);  // min_context() <= context guarantees a way down
      --*largest;
      --sum;
    }
  }
  CHECK_LE(context - sum, std::numeric_limits<int32_t>::max());
  r.prompt_tokens = static_cast<int32_t>(context - sum);
  CHECK_GE(r.prompt_tokens, spec.min_prompt_tokens);

  r.segments.resize(static_cast<size_t>(k) + 1);
  for (int64_t i = 0; i <= k; ++i) {
    Segment& s = r.segments[static_cast<size_t>(i)];
    s.generate_tokens = gen[static_cast<size_t>(i)];
    if (i < k) {
      s.tool = p.tool;
      s.tool_seconds = pause[static_cast<size_t>(i)];
      s.return_tokens = ret[static_cast<size_t>(i)];
    }
  }
  return r;
}

std::vector<TraceRequest> generate_workload(const WorkloadSpec& spec) {
  const Status valid = validate_workload_spec(spec);
  CHECK_MSG(valid.ok(), valid.ok() ? "" : valid.error().message.c_str());

  // Separate streams: arrivals from the seed, each request's content from (seed, id).
  Rng arrivals(mix64(spec.seed));
  const std::vector<std::string>& names = builtin_workload_names();
  std::vector<TraceRequest> out;
  double t = 0.0;
  for (uint64_t id = 0;; ++id) {
    t += arrivals.exponential(spec.rate);
    if (t >= spec.duration_s) break;
    const uint64_t request_seed = mix64(spec.seed ^ mix64(id));
    if (spec.name == "sessions") {
      out.push_back(generate_session(spec, id, t, request_seed));
      continue;
    }
    std::string_view aug = spec.name;
    if (spec.name == "mixed") {
      // Uniform over the six augmentations (names[0] is "mixed"); from its own stream so that
      // the choice does not perturb the request's other draws.
      Rng pick(mix64(request_seed));
      aug = names[1 + static_cast<size_t>(pick.uniform_int(0, 5))];
    }
    const AugmentationProfile* p = find_profile(spec, aug);
    CHECK(p != nullptr);
    out.push_back(generate_request(spec, *p, id, t, request_seed));
  }
  return out;
}

}  // namespace infercept
