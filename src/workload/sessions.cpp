#include "workload/sessions.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "workload/workload.h"

namespace infercept {

std::vector<SessionTool> default_session_tools() {
  // {name, weight, seconds {mean, std}, output tokens {mean, std}}. The mix and the sizes are
  // our estimates (docs/TRACE.md gives the published figures they lean on): reads, searches
  // and edits dominate coding-agent steps and return within milliseconds; test runs and web
  // fetches take seconds and return the largest outputs; a human answer is rare and takes
  // minutes.
  return {
      {"read_file", 0.30, {0.005, 0.005}, {2000.0, 1500.0}},
      {"grep", 0.20, {0.05, 0.08}, {800.0, 900.0}},
      {"edit_file", 0.20, {0.02, 0.02}, {300.0, 250.0}},
      {"run_tests", 0.17, {8.0, 12.0}, {2500.0, 3000.0}},
      {"web_fetch", 0.10, {2.0, 2.0}, {4000.0, 4000.0}},
      {"human", 0.03, {120.0, 120.0}, {60.0, 50.0}},
  };
}

int64_t session_shared_prefix_tokens(const WorkloadSpec& spec) {
  return std::llround(static_cast<double>(spec.sessions.system_tokens) * spec.context_scale);
}

namespace {

Status check_moments(const Moments& m, const std::string& what) {
  if (!(std::isfinite(m.mean) && m.mean > 0.0 && std::isfinite(m.std) && m.std >= 0.0)) {
    return make_error("sessions ", what, ": need mean > 0 and std >= 0");
  }
  return ok_status();
}

// The largest context a session may reach: the clamp, or the int32 guard without one.
int64_t context_limit(const WorkloadSpec& spec) {
  return spec.max_context > 0 ? spec.max_context : kSessionContextCap;
}

// The least context a session can have: the shared prefix, the shortest task, one token
// before its one tool call (whose output may be empty) and a one-token answer.
int64_t min_session_context(const WorkloadSpec& spec) {
  return session_shared_prefix_tokens(spec) + spec.min_prompt_tokens + 2;
}

// A token count: log-normal x scale, capped before rounding (llround of a huge double is
// undefined), at least `floor`.
int64_t draw_tokens(Rng& rng, const Moments& m, double scale, int64_t floor, int64_t cap) {
  const double x = std::min(rng.lognormal(m) * scale, static_cast<double>(cap));
  return std::max<int64_t>(floor, std::llround(x));
}

// Index of the tool of one call, by weight. `total` is the sum of the weights in list order.
size_t pick_tool(Rng& rng, const std::vector<SessionTool>& tools, double total) {
  const double u = rng.uniform() * total;
  double acc = 0.0;
  size_t last = 0;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (tools[i].weight <= 0.0) continue;
    acc += tools[i].weight;
    last = i;
    if (u < acc) return i;
  }
  return last;  // u rounded up to the total: the last tool that can be called
}

bool parse_double(std::string_view s, double& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(out);
}

}  // namespace

Status validate_session_spec(const WorkloadSpec& spec) {
  const SessionProfile& p = spec.sessions;
  if (p.system_tokens < 0) return make_error("sessions system tokens must be >= 0");
  TRY(check_moments(p.turns, "turns"));
  TRY(check_moments(p.task_tokens, "task tokens"));
  TRY(check_moments(p.generate_tokens, "generated tokens"));
  if (p.tools.empty()) return make_error("sessions need at least one tool");
  std::set<std::string> names;
  double total = 0.0;
  for (const SessionTool& t : p.tools) {
    if (t.name.empty()) return make_error("sessions: a tool name must not be empty");
    if (!names.insert(t.name).second) return make_error("sessions: tool '", t.name, "' twice");
    if (!(std::isfinite(t.weight) && t.weight >= 0.0)) {
      return make_error("sessions tool ", t.name, ": weight must be >= 0");
    }
    TRY(check_moments(t.seconds, t.name + ".seconds"));
    TRY(check_moments(t.output_tokens, t.name + ".output"));
    total += t.weight;
  }
  if (!(total > 0.0)) return make_error("sessions: every tool has weight 0");
  if (min_session_context(spec) > context_limit(spec)) {
    return make_error("max context ", std::to_string(context_limit(spec)),
                      " is too small for the shared prefix (",
                      std::to_string(session_shared_prefix_tokens(spec)),
                      " tokens) and a session with one tool call (",
                      std::to_string(min_session_context(spec)), " tokens in all)");
  }
  return ok_status();
}

Status apply_session_override(WorkloadSpec& spec, std::string_view expr) {
  const auto bad = [&](std::string_view why) {
    return make_error("session override '", std::string(expr), "': ", std::string(why),
                      " (expected system=TOKENS, turns|task|generate=MEAN[,STD], "
                      "TOOL.seconds|TOOL.output=MEAN[,STD] or TOOL.weight=W; TOOL a name or *)");
  };
  const size_t eq = expr.find('=');
  if (eq == std::string_view::npos) return bad("malformed");
  const std::string_view key = expr.substr(0, eq);
  const std::string_view value = expr.substr(eq + 1);
  SessionProfile& p = spec.sessions;

  const auto parse_moments = [&](Moments& out) -> Status {
    const size_t comma = value.find(',');
    Moments m;
    if (!parse_double(value.substr(0, comma), m.mean)) return bad("MEAN must be a number");
    if (comma != std::string_view::npos && !parse_double(value.substr(comma + 1), m.std)) {
      return bad("STD must be a number");
    }
    if (!(m.mean > 0.0 && m.std >= 0.0)) return bad("need MEAN > 0 and STD >= 0");
    out = m;
    return ok_status();
  };

  if (key == "system") {
    int32_t n = 0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || n < 0) {
      return bad("TOKENS must be an integer >= 0");
    }
    p.system_tokens = n;
    return ok_status();
  }
  if (key == "turns") return parse_moments(p.turns);
  if (key == "task") return parse_moments(p.task_tokens);
  if (key == "generate") return parse_moments(p.generate_tokens);

  const size_t dot = key.rfind('.');
  if (dot == std::string_view::npos) return bad("unknown key");
  const std::string_view tool = key.substr(0, dot);
  const std::string_view field = key.substr(dot + 1);
  if (field != "seconds" && field != "output" && field != "weight") return bad("unknown field");
  Moments m;
  double weight = 0.0;
  if (field == "weight") {
    if (!parse_double(value, weight) || weight < 0.0) return bad("W must be a number >= 0");
  } else {
    TRY(parse_moments(m));
  }
  bool matched = false;
  for (SessionTool& t : p.tools) {
    if (tool != "*" && t.name != tool) continue;
    if (field == "weight") t.weight = weight;
    if (field == "seconds") t.seconds = m;
    if (field == "output") t.output_tokens = m;
    matched = true;
  }
  if (!matched) return bad("unknown tool");
  return ok_status();
}

TraceRequest generate_session(const WorkloadSpec& spec, uint64_t id, double arrival_s,
                              uint64_t session_seed) {
  const SessionProfile& p = spec.sessions;
  const double cs = spec.context_scale;
  const int64_t limit = context_limit(spec);
  double total_weight = 0.0;
  for (const SessionTool& t : p.tools) total_weight += t.weight;

  Rng rng(session_seed);
  TraceRequest r;
  r.id = id;
  r.arrival_s = arrival_s;
  r.augmentation = "sessions";
  r.seed = rng.next_u64();

  // Draw everything, in a fixed order, before the clamp looks at it: the clamp then only
  // drops turns, so a tighter max_context never changes what a kept turn looks like.
  const double turns = std::min(rng.lognormal(p.turns), static_cast<double>(kMaxSessionTurns));
  const int64_t k = std::max<int64_t>(1, std::llround(turns));
  int64_t task = draw_tokens(rng, p.task_tokens, cs, spec.min_prompt_tokens, limit);
  std::vector<size_t> tool((size_t)k);
  std::vector<int64_t> gen((size_t)k + 1), out((size_t)k);
  std::vector<double> pause((size_t)k);
  for (int64_t i = 0; i < k; ++i) {
    tool[(size_t)i] = pick_tool(rng, p.tools, total_weight);
    gen[(size_t)i] = draw_tokens(rng, p.generate_tokens, cs, 1, limit);
    pause[(size_t)i] = rng.lognormal(p.tools[tool[(size_t)i]].seconds) * spec.time_scale;
    out[(size_t)i] = draw_tokens(rng, p.tools[tool[(size_t)i]].output_tokens, cs, 0, limit);
  }
  gen[(size_t)k] = draw_tokens(rng, p.generate_tokens, cs, 1, limit);

  // The clamp: keep the turns that fit with the final answer; the context grows monotonically,
  // so they are a prefix of the drawn ones.
  const int64_t system = session_shared_prefix_tokens(spec);
  int64_t context = system + task + gen[(size_t)k];
  int64_t n = 0;
  while (n < k && context + gen[(size_t)n] + out[(size_t)n] <= limit) {
    context += gen[(size_t)n] + out[(size_t)n];
    ++n;
  }
  if (n == 0) {
    // Not even one turn fits: keep one, trimming its output first (agents truncate long tool
    // output), then the task, then the two generations. validate_session_spec() guarantees
    // that the floors fit.
    int64_t excess = context + gen[0] + out[0] - limit;
    const std::pair<int64_t*, int64_t> trims[] = {
        {&out[0], 0}, {&task, spec.min_prompt_tokens}, {&gen[0], 1}, {&gen[(size_t)k], 1}};
    for (const auto& [value, floor] : trims) {
      const int64_t cut = std::clamp<int64_t>(excess, 0, *value - floor);
      *value -= cut;
      excess -= cut;
    }
    CHECK_LE(excess, 0);
    n = 1;
  }

  r.prompt_tokens = static_cast<int32_t>(task);
  r.segments.resize((size_t)n + 1);
  for (int64_t i = 0; i < n; ++i) {
    Segment& s = r.segments[(size_t)i];
    s.generate_tokens = static_cast<int32_t>(gen[(size_t)i]);
    s.tool = p.tools[tool[(size_t)i]].name;
    s.tool_seconds = pause[(size_t)i];
    s.return_tokens = static_cast<int32_t>(out[(size_t)i]);
  }
  r.segments[(size_t)n].generate_tokens = static_cast<int32_t>(gen[(size_t)k]);
  CHECK_LE(system + r.final_context_tokens(), limit);
  return r;
}

}  // namespace infercept
