// CostModel: the profiled step-time curve and copy bandwidth behind the waste model. The
// policies query it for every paused request every step, so everything here is a few
// arithmetic operations over a handful of samples; validation and JSON happen once, when the
// profiler's cache file is loaded.
#include "sched/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>

namespace infercept {

namespace {

using json = nlohmann::json;

// Bumped when the file's meaning changes, so an old cache is re-profiled instead of misread.
constexpr int kFormatVersion = 1;

// Bounds that keep products of these numbers finite and catch unit mistakes (seconds given
// in milliseconds, bandwidth in GB instead of bytes) long before they skew decisions.
constexpr int64_t kMaxSampleTokens = int64_t{1} << 24;
constexpr double kMaxStepSeconds = 3600.0;

double line(double x0, double y0, double x1, double y1, double x) {
  if (x1 == x0) return y1;
  return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

}  // namespace

double CostModel::t_fwd(int64_t tokens) const {
  // No step at all costs nothing; the chunked-discard term relies on t_fwd(0) == 0 when no
  // request decodes (then a chunk's marginal time is its whole step).
  if (tokens <= 0 || t_fwd_samples.empty()) return 0.0;
  const auto& s = t_fwd_samples;
  if (s.size() == 1) return std::max(0.0, s[0].second);
  const double x = (double)tokens;
  // Below the first sample: a step is never cheaper than the smallest one measured (the
  // decode regime is flat; weights must be read regardless of the token count).
  if (tokens <= s.front().first) return std::max(0.0, s.front().second);
  double y;
  if (tokens >= s.back().first) {
    const auto& a = s[s.size() - 2];
    const auto& b = s.back();
    y = line((double)a.first, a.second, (double)b.first, b.second, x);
    // Noisy samples can give the last segment a negative slope; time does not fall with
    // more work, so extrapolate flat instead.
    y = std::max(y, b.second);
  } else {
    auto it = std::upper_bound(
        s.begin(), s.end(), tokens,
        [](int64_t t, const std::pair<int64_t, double>& p) { return t < p.first; });
    const auto& b = *it;
    const auto& a = *(it - 1);
    y = line((double)a.first, a.second, (double)b.first, b.second, x);
  }
  return std::max(0.0, y);
}

namespace {
// Samples ascending in their key, interpolated linearly between them and flat outside.
double interpolate(const std::vector<std::pair<int64_t, double>>& s, int64_t key) {
  if (s.empty()) return 0.0;
  if (key <= s.front().first) return s.front().second;
  if (key >= s.back().first) return s.back().second;
  auto it =
      std::upper_bound(s.begin(), s.end(), key,
                       [](int64_t n, const std::pair<int64_t, double>& p) { return n < p.first; });
  const auto& b = *it;
  const auto& a = *(it - 1);
  return line((double)a.first, a.second, (double)b.first, b.second, (double)key);
}
}  // namespace

double CostModel::context_seconds_per_token(int64_t sequences) const {
  return interpolate(context_samples, sequences);
}

double CostModel::t_decode(int64_t sequences) const {
  if (sequences <= 0) return 0.0;
  return decode_samples.empty() ? t_fwd(sequences) : interpolate(decode_samples, sequences);
}

double CostModel::chunk_seconds_per_token(int64_t rows, int64_t sequences) const {
  // The kernel that serves a chunk changes at row thresholds (not smoothly): a step function.
  const auto& s = chunk_context_samples;
  auto it =
      std::upper_bound(s.begin(), s.end(), rows,
                       [](int64_t r, const std::pair<int64_t, double>& p) { return r < p.first; });
  if (it == s.begin()) return context_seconds_per_token(sequences);
  return (it - 1)->second;
}

double CostModel::step_seconds(const StepShape& step) const {
  if (step.query_tokens <= 0) return 0.0;
  const double a = context_seconds_per_token(step.sequences);
  // Every sequence's context at a(n); chunks then trade a(n) for their own price.
  double context = a * (double)std::max<int64_t>(0, step.context_tokens);
  // Each chunk: p(rows) instead of a(n) for its context, plus q for its rows x context.
  for (const StepChunk& c : step.chunks) {
    const double held = (double)std::max<int64_t>(0, c.context);
    if (!chunk_context_samples.empty())
      context += (chunk_seconds_per_token(c.rows, step.sequences) - a) * held;
    context += chunk_row_context_seconds * (double)c.rows * held;
  }
  const double base = step.decode_only() ? (decode_samples.empty() ? t_fwd(step.query_tokens)
                                                                   : t_decode(step.sequences))
                                         : chunk_step_scale * t_fwd(step.query_tokens);
  return base + context + sequence_seconds * (double)std::max<int64_t>(0, step.sequences - 1) +
         sample_seconds_per_row * (double)std::max<int64_t>(0, step.sampled_rows - 1);
}

double CostModel::t_swap(int64_t tokens) const {
  if (tokens <= 0) return 0.0;
  // Without a measured bandwidth a copy never finishes: nothing can be swapped for free.
  if (!(swap_bytes_per_second > 0.0)) return std::numeric_limits<double>::infinity();
  return (double)tokens * kv_bytes_per_token / swap_bytes_per_second;
}

double CostModel::t_disk_write(int64_t tokens) const {
  if (tokens <= 0) return 0.0;
  if (!(disk_write_bytes_per_second > 0.0)) return std::numeric_limits<double>::infinity();
  return (double)tokens * kv_bytes_per_token / disk_write_bytes_per_second;
}

double CostModel::t_disk_read(int64_t tokens) const {
  if (tokens <= 0) return 0.0;
  if (!(disk_read_bytes_per_second > 0.0)) return std::numeric_limits<double>::infinity();
  return (double)tokens * kv_bytes_per_token / disk_read_bytes_per_second;
}

int64_t CostModel::swap_budget_tokens(double seconds) const {
  if (!(seconds > 0.0) || !(kv_bytes_per_token > 0.0) || !(swap_bytes_per_second > 0.0)) return 0;
  const double n = std::floor(seconds * swap_bytes_per_second / kv_bytes_per_token);
  // Saturate rather than overflow: a budget beyond int64 is "everything" anyway.
  if (!(n < 9.0e18)) return std::numeric_limits<int64_t>::max();
  return (int64_t)n;
}

int64_t CostModel::derive_saturation(double tolerance) const {
  if (t_fwd_samples.empty()) return 0;
  // Growth is judged stretch by stretch, per doubling, rather than against T_fwd(1) alone:
  // a one-token step made fast by a path of its own (CUDA graphs, a GEMV kernel for a few
  // rows: llama2-7b on the H200 5.7 ms at x = 1 against 6.8-7.4 for x = 8..128) must not make
  // the flat stretch behind it look steep. The total cap keeps a slow creep from counting as
  // flat forever.
  const double tol = std::max(0.0, tolerance);
  // The flat stretch that starts at sample `from`: the last token count before the first
  // stretch that grows too fast (past it the curve has left the flat regime, and a later dip
  // is measurement noise). The first sample is in the flat regime by definition.
  auto flat_from = [&](size_t from) {
    const double base = t_fwd_samples[from].second;
    int64_t s = t_fwd_samples[from].first;
    for (size_t i = from + 1; i < t_fwd_samples.size(); ++i) {
      const auto& [x0, t0] = t_fwd_samples[i - 1];
      const auto& [x1, t1] = t_fwd_samples[i];
      const double doublings = std::log2((double)x1 / (double)x0);
      const double per_doubling = t0 > 0 ? std::pow(t1 / t0, 1.0 / doublings) : INFINITY;
      if (per_doubling > 1.0 + tol || t1 > base * (1.0 + tol) * (1.0 + tol)) break;
      s = x1;
    }
    return s;
  };
  int64_t s = flat_from(0);
  // The one-token step may be a path of its own even against x = 2 (on the H200 the decode
  // of one row replays a CUDA graph of one-row GEMV kernels: 4.2 ms, while x = 2..128 sit at
  // 5.2-6.4 ms). When only that first stretch is steep, the flat stretch behind it is the
  // saturation point: a chunk of x <= S tokens still rides along at the cost of two.
  if (s == t_fwd_samples.front().first && t_fwd_samples.size() >= 2) {
    const int64_t behind = flat_from(1);
    if (behind > t_fwd_samples[1].first) s = behind;
  }
  return std::max<int64_t>(1, s);
}

Status CostModel::validate() const {
  if (t_fwd_samples.empty())
    return make_error("invalid cost model: no forward-time samples (run `infercept profile`)");
  int64_t prev = 0;
  for (size_t i = 0; i < t_fwd_samples.size(); ++i) {
    const auto& [tokens, seconds] = t_fwd_samples[i];
    const std::string where = "invalid cost model: t_fwd sample " + std::to_string(i) + " ";
    if (tokens <= 0 || tokens > kMaxSampleTokens)
      return make_error(where, "has ", std::to_string(tokens), " tokens (must be in [1, ",
                        std::to_string(kMaxSampleTokens), "])");
    if (tokens <= prev)
      return make_error(where, "(", std::to_string(tokens),
                        " tokens) is not above the previous one: samples must ascend");
    if (!std::isfinite(seconds) || seconds <= 0.0 || seconds > kMaxStepSeconds)
      return make_error(where, "has time ", std::to_string(seconds), " s (must be in (0, ",
                        std::to_string(kMaxStepSeconds), "])");
    prev = tokens;
  }
  if (!std::isfinite(kv_bytes_per_token) || kv_bytes_per_token <= 0.0)
    return make_error("invalid cost model: kv_bytes_per_token = ",
                      std::to_string(kv_bytes_per_token), " (must be positive)");
  if (!std::isfinite(swap_bytes_per_second) || swap_bytes_per_second <= 0.0)
    return make_error("invalid cost model: swap_bytes_per_second = ",
                      std::to_string(swap_bytes_per_second), " (must be positive)");
  for (const auto& [name, v] :
       {std::pair{"disk_write_bytes_per_second", disk_write_bytes_per_second},
        std::pair{"disk_read_bytes_per_second", disk_read_bytes_per_second}})
    if (!std::isfinite(v) || v <= 0.0)
      return make_error("invalid cost model: ", name, " = ", std::to_string(v),
                        " (must be positive)");
  int64_t prev_n = 0;
  for (const auto& [n, v] : context_samples) {
    if (n <= prev_n || n > kMaxSampleTokens)
      return make_error("invalid cost model: context samples must ascend in sequences (>= 1), got ",
                        std::to_string(n), " after ", std::to_string(prev_n));
    if (!std::isfinite(v) || v < 0.0 || v > kMaxStepSeconds)
      return make_error("invalid cost model: context_seconds_per_token = ", std::to_string(v),
                        " (must be in [0, ", std::to_string(kMaxStepSeconds), "])");
    prev_n = n;
  }
  for (const auto& [key, samples, positive] :
       {std::tuple{"decode_seconds", &decode_samples, true},
        std::tuple{"chunk_context_seconds_per_token", &chunk_context_samples, false}}) {
    int64_t prev_key = 0;
    for (const auto& [k, v] : *samples) {
      if (k <= prev_key || k > kMaxSampleTokens)
        return make_error("invalid cost model: ", key, " samples must ascend (>= 1), got ",
                          std::to_string(k), " after ", std::to_string(prev_key));
      if (!std::isfinite(v) || v < 0.0 || (positive && v == 0.0) || v > kMaxStepSeconds)
        return make_error("invalid cost model: ", key, " = ", std::to_string(v), " (must be in ",
                          positive ? "(0, " : "[0, ", std::to_string(kMaxStepSeconds), "])");
      prev_key = k;
    }
  }
  for (const auto& [name, v] : {std::pair{"sequence_seconds", sequence_seconds},
                                std::pair{"sample_seconds_per_row", sample_seconds_per_row},
                                std::pair{"chunk_row_context_seconds", chunk_row_context_seconds}})
    if (!std::isfinite(v) || v < 0.0 || v > kMaxStepSeconds)
      return make_error("invalid cost model: ", name, " = ", std::to_string(v), " (must be in [0, ",
                        std::to_string(kMaxStepSeconds), "])");
  if (!std::isfinite(chunk_step_scale) || chunk_step_scale <= 0.0 || chunk_step_scale > 100.0)
    return make_error("invalid cost model: chunk_step_scale = ", std::to_string(chunk_step_scale),
                      " (must be in (0, 100])");
  if (saturation_tokens < 0 || saturation_tokens > kMaxSampleTokens)
    return make_error("invalid cost model: saturation_tokens = ", std::to_string(saturation_tokens),
                      " (must be in [0, ", std::to_string(kMaxSampleTokens), "]; 0 = derive)");
  return ok_status();
}

std::string CostModel::to_json() const {
  json j;
  j["version"] = kFormatVersion;
  json samples = json::array();
  for (const auto& [tokens, seconds] : t_fwd_samples) samples.push_back({tokens, seconds});
  j["t_fwd_samples"] = std::move(samples);
  j["kv_bytes_per_token"] = kv_bytes_per_token;
  j["swap_bytes_per_second"] = swap_bytes_per_second;
  j["saturation_tokens"] = saturation_tokens;
  if (context_samples.size() == 1 && context_samples[0].first == 1) {
    j["context_seconds_per_token"] = context_samples[0].second;
  } else if (!context_samples.empty()) {
    json a = json::array();
    for (const auto& [n, v] : context_samples) a.push_back({n, v});
    j["context_seconds_per_token"] = std::move(a);
  }
  if (sequence_seconds > 0.0) j["sequence_seconds"] = sequence_seconds;
  if (sample_seconds_per_row > 0.0) j["sample_seconds_per_row"] = sample_seconds_per_row;
  if (chunk_row_context_seconds > 0.0) j["chunk_row_context_seconds"] = chunk_row_context_seconds;
  if (chunk_step_scale != 1.0) j["chunk_step_scale"] = chunk_step_scale;
  const CostModel defaults;
  if (disk_write_bytes_per_second != defaults.disk_write_bytes_per_second)
    j["disk_write_bytes_per_second"] = disk_write_bytes_per_second;
  if (disk_read_bytes_per_second != defaults.disk_read_bytes_per_second)
    j["disk_read_bytes_per_second"] = disk_read_bytes_per_second;
  for (const auto& [key, samples] :
       {std::pair{"decode_seconds", &decode_samples},
        std::pair{"chunk_context_seconds_per_token", &chunk_context_samples}}) {
    if (samples->empty()) continue;
    json a = json::array();
    for (const auto& [k, v] : *samples) a.push_back({k, v});
    j[key] = std::move(a);
  }
  return j.dump(2);
}

Result<CostModel> CostModel::from_json(const std::string& text, const std::string& path) {
  // The file is outside input: every shape mistake becomes an Error naming the file, never
  // an exception escaping into the engine.
  const std::string where = path.empty() ? std::string("cost model") : path;
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(where, ": not valid JSON");
  if (!j.is_object()) return make_error(where, ": expected a JSON object");

  auto number = [&](const char* key, bool required, double& out) -> Status {
    auto it = j.find(key);
    if (it == j.end()) {
      if (required) return make_error(where, ": missing \"", key, "\"");
      return ok_status();
    }
    if (!it->is_number()) return make_error(where, ": \"", key, "\" must be a number");
    out = it->get<double>();
    return ok_status();
  };

  if (auto it = j.find("version"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() != kFormatVersion)
      return make_error(where, ": unsupported version ", it->dump(), " (expected ",
                        std::to_string(kFormatVersion), "); re-run `infercept profile`");
  }

  CostModel m;
  auto samples = j.find("t_fwd_samples");
  if (samples == j.end()) return make_error(where, ": missing \"t_fwd_samples\"");
  if (!samples->is_array()) return make_error(where, ": \"t_fwd_samples\" must be an array");
  for (size_t i = 0; i < samples->size(); ++i) {
    const json& s = (*samples)[i];
    if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() || !s[1].is_number())
      return make_error(where, ": t_fwd_samples[", std::to_string(i),
                        "] must be [tokens (integer), seconds (number)]");
    m.t_fwd_samples.emplace_back(s[0].get<int64_t>(), s[1].get<double>());
  }
  TRY(number("kv_bytes_per_token", true, m.kv_bytes_per_token));
  TRY(number("swap_bytes_per_second", true, m.swap_bytes_per_second));
  if (auto it = j.find("context_seconds_per_token"); it != j.end()) {
    if (it->is_number()) {
      m.context_samples = {{1, it->get<double>()}};
    } else if (it->is_array()) {
      for (const json& s : *it) {
        if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() || !s[1].is_number())
          return make_error(where,
                            ": \"context_seconds_per_token\" samples must be "
                            "[sequences (integer), seconds (number)]");
        m.context_samples.emplace_back(s[0].get<int64_t>(), s[1].get<double>());
      }
    } else {
      return make_error(where, ": \"context_seconds_per_token\" must be a number or an array");
    }
  }
  for (const auto& [key, samples] :
       {std::pair{"decode_seconds", &m.decode_samples},
        std::pair{"chunk_context_seconds_per_token", &m.chunk_context_samples}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_array()) return make_error(where, ": \"", key, "\" must be an array");
    for (const json& s : *it) {
      if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() || !s[1].is_number())
        return make_error(where, ": \"", key, "\" samples must be [integer, seconds (number)]");
      samples->emplace_back(s[0].get<int64_t>(), s[1].get<double>());
    }
  }
  TRY(number("sequence_seconds", false, m.sequence_seconds));
  TRY(number("sample_seconds_per_row", false, m.sample_seconds_per_row));
  TRY(number("chunk_row_context_seconds", false, m.chunk_row_context_seconds));
  TRY(number("chunk_step_scale", false, m.chunk_step_scale));
  TRY(number("disk_write_bytes_per_second", false, m.disk_write_bytes_per_second));
  TRY(number("disk_read_bytes_per_second", false, m.disk_read_bytes_per_second));
  if (auto it = j.find("saturation_tokens"); it != j.end()) {
    if (!it->is_number_integer())
      return make_error(where, ": \"saturation_tokens\" must be an integer");
    m.saturation_tokens = it->get<int64_t>();
  }
  if (Status st = m.validate(); !st.ok()) return make_error(where, ": ", st.error().message);
  return m;
}

}  // namespace infercept
