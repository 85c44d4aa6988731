#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace infercept {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Orders candidates most likely first, lowest id first on ties; a total order, so every
// partial sort below is deterministic.
bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

std::string num(double v) {
  std::string s = std::to_string(v);
  // to_string prints 6 decimals; trim trailing zeros for readable messages.
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return s;
}

float sanitize(float v) {
  return std::isnan(v) ? kNegInf : v;
}

}  // namespace

Status SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f)
    return make_error("temperature must be >= 0 (0 = greedy), got ", num(temperature));
  if (top_k < -1)
    return make_error("top_k must be >= 0 (0 or -1 = off), got ", std::to_string(top_k));
  if (!std::isfinite(top_p) || top_p <= 0.0f || top_p > 1.0f)
    return make_error("top_p must be in (0, 1], got ", num(top_p));
  if (!std::isfinite(min_p) || min_p < 0.0f || min_p > 1.0f)
    return make_error("min_p must be in [0, 1], got ", num(min_p));
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f)
    return make_error("repetition_penalty must be > 0 (1 = off), got ", num(repetition_penalty));
  if (!std::isfinite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f)
    return make_error("presence_penalty must be in [-2, 2], got ", num(presence_penalty));
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f)
    return make_error("frequency_penalty must be in [-2, 2], got ", num(frequency_penalty));
  if (max_tokens < 1)
    return make_error("max_tokens must be >= 1, got ", std::to_string(max_tokens));
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return make_error("stop[", std::to_string(i), "] must not be empty");
  }
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    if (stop_token_ids[i] < 0)
      return make_error("stop_token_ids[", std::to_string(i), "] must be >= 0, got ",
                        std::to_string(stop_token_ids[i]));
  }
  return ok_status();
}

Sampler::Sampler(const SamplingParams& params, uint64_t default_seed)
    : params_(params), rng_(params.seed.value_or(default_seed)) {
  CHECK_MSG(params_.validate().ok(), "Sampler needs validated SamplingParams");
}

double Sampler::uniform() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

float Sampler::draw_uniform() {
  // Rounding to float may reach 1.0: keep the draw inside [0, 1).
  return std::min(static_cast<float>(uniform()), 0x1.fffffep-1f);
}

void Sampler::compute_penalties(std::span<const float> logits,
                                std::span<const int32_t> prompt_tokens,
                                std::span<const int32_t> generated_tokens) {
  penalized_.clear();
  ids_scratch_.clear();
  const auto vocab = static_cast<int64_t>(logits.size());
  const bool rep = params_.repetition_penalty != 1.0f;
  // Key = id * 2 + (1 if generated): one sort groups each id's occurrences and counts the
  // generated ones. Prompt tokens only matter for the repetition penalty.
  auto add = [&](int32_t id, int32_t generated) {
    if (id >= 0 && id < vocab) ids_scratch_.push_back(id * 2 + generated);
  };
  if (rep) {
    for (int32_t id : prompt_tokens) add(id, 0);
  }
  for (int32_t id : generated_tokens) add(id, 1);
  std::sort(ids_scratch_.begin(), ids_scratch_.end());
  for (size_t i = 0; i < ids_scratch_.size();) {
    const int32_t id = ids_scratch_[i] / 2;
    int32_t count = 0;
    size_t j = i;
    for (; j < ids_scratch_.size() && ids_scratch_[j] / 2 == id; ++j) count += ids_scratch_[j] & 1;
    i = j;
    float v = sanitize(logits[id]);
    if (rep) v = v > 0.0f ? v / params_.repetition_penalty : v * params_.repetition_penalty;
    if (count > 0) {
      v -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
    }
    penalized_.emplace_back(id, v);
  }
}

// Calls fn(id, value) for every id in order, with the penalized value where there is one.
template <typename Fn>
void Sampler::for_each_logit(std::span<const float> logits, Fn&& fn) const {
  size_t pos = 0;
  for (const auto& [id, v] : penalized_) {
    for (; pos < static_cast<size_t>(id); ++pos) fn(pos, logits[pos]);
    fn(pos, v);
    pos = static_cast<size_t>(id) + 1;
  }
  for (; pos < logits.size(); ++pos) fn(pos, logits[pos]);
}

int32_t Sampler::greedy(std::span<const float> logits) const {
  if (penalized_.empty()) return argmax(logits);
  // Substitute the penalized values on the fly, so nothing is copied and ties still go to
  // the lowest id.
  int32_t best = -1;
  float best_v = kNegInf;
  for_each_logit(logits, [&](size_t i, float v) {
    if (v > best_v) {
      best_v = v;
      best = static_cast<int32_t>(i);
    }
  });
  return best < 0 ? 0 : best;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> prompt_tokens,
                        std::span<const int32_t> generated_tokens) {
  CHECK(!logits.empty());
  if (params_.has_penalties()) {
    compute_penalties(logits, prompt_tokens, generated_tokens);
  } else {
    penalized_.clear();
  }
  if (params_.is_greedy()) return greedy(logits);

  // cand_: [n candidates] (penalized logit, id). Without top_k: the whole row in id order.
  // With top_k: the k best, found with a size-k heap in one pass (most of the row is
  // rejected by one comparison against the heap's worst), in heap order.
  const size_t vocab = logits.size();
  const size_t k = params_.top_k > 0 ? std::min(static_cast<size_t>(params_.top_k), vocab) : vocab;
  cand_.clear();
  if (k < vocab) {
    for_each_logit(logits, [&](size_t i, float v) {
      const std::pair<float, int32_t> c{sanitize(v), static_cast<int32_t>(i)};
      if (cand_.size() < k) {
        cand_.push_back(c);
        std::push_heap(cand_.begin(), cand_.end(), better);
      } else if (better(c, cand_.front())) {
        std::pop_heap(cand_.begin(), cand_.end(), better);
        cand_.back() = c;
        std::push_heap(cand_.begin(), cand_.end(), better);
      }
    });
  } else {
    cand_.resize(vocab);
    for (size_t i = 0; i < vocab; ++i) cand_[i] = {sanitize(logits[i]), static_cast<int32_t>(i)};
    for (const auto& [id, v] : penalized_) cand_[static_cast<size_t>(id)].first = v;
  }

  float top = kNegInf;
  for (const auto& c : cand_) top = std::max(top, c.first);
  if (top == kNegInf) return cand_.front().second;  // every candidate masked

  // Temperature, then weights relative to the best candidate: w = exp((s - top) / T), so
  // the best has w = 1 and a tiny temperature cannot overflow. Exactly one exp per
  // candidate; from here on cand_.first holds w (monotone in the logit).
  const bool use_top_p = params_.top_p < 1.0f;
  if (use_top_p) {
    bin_mass_.assign(kBins + 1, 0.0);
    bins_.resize(cand_.size());
  }
  const float inv_t = 1.0f / params_.temperature;
  double total = 0.0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    const float d = (top - cand_[i].first) * inv_t;  // >= 0; +inf when masked
    const float w = std::exp(-d);
    cand_[i].first = w;
    total += w;
    if (use_top_p) {
      const auto b = d < kBinRange ? static_cast<uint16_t>(d * kBinsPerUnit) : kBins;
      bins_[i] = b;
      bin_mass_[b] += w;
    }
  }

  // top_p: the smallest most-likely-first prefix whose mass reaches top_p * total (mass
  // renormalized over what top_k kept). Candidates are bucketed by log-weight, so every
  // bucket before the one where the cumulative mass crosses the target is kept whole and
  // only that boundary bucket is sorted.
  if (use_top_p) {
    const double target = static_cast<double>(params_.top_p) * total;
    double cum = 0.0;
    uint16_t boundary = kBins;
    for (uint16_t b = 0; b <= kBins; ++b) {
      if (cum + bin_mass_[b] >= target) {
        boundary = b;
        break;
      }
      cum += bin_mass_[b];
    }
    boundary_.clear();
    size_t out = 0;
    for (size_t i = 0; i < cand_.size(); ++i) {
      if (bins_[i] < boundary) {
        cand_[out++] = cand_[i];  // stable compaction, out <= i
      } else if (bins_[i] == boundary) {
        boundary_.push_back(cand_[i]);
      }
    }
    cand_.resize(out);
    std::sort(boundary_.begin(), boundary_.end(), better);
    for (const auto& c : boundary_) {
      cand_.push_back(c);
      cum += c.first;
      if (cum >= target) break;
    }
    total = cum;
  }

  // min_p: p_i >= min_p * p_max  <=>  w_i >= min_p (w_max = 1). The best always survives.
  if (params_.min_p > 0.0f) {
    std::erase_if(cand_, [&](const auto& c) { return c.first < params_.min_p; });
    total = 0.0;
    for (const auto& c : cand_) total += c.first;
  }

  // Draw: inverse CDF over the survivors in their current (deterministic) order.
  const double u = uniform() * total;
  double cum = 0.0;
  int32_t last_nonzero = cand_.front().second;
  for (const auto& c : cand_) {
    if (c.first <= 0.0f) continue;
    last_nonzero = c.second;
    cum += c.first;
    if (u < cum) return c.second;
  }
  return last_nonzero;  // u landed on the rounding slack at the very end
}

int32_t argmax(std::span<const float> logits) {
  // Two passes: a max reduction over 8 independent lanes (no loop-carried dependency, so
  // it pipelines and vectorizes), then the first index holding that max. std::max(m, x)
  // keeps m when x is NaN, so NaN is never chosen.
  const size_t n = logits.size();
  const float* x = logits.data();
  float lane[8];
  std::fill(lane, lane + 8, kNegInf);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) lane[j] = std::max(lane[j], x[i + j]);
  }
  float m = kNegInf;
  for (; i < n; ++i) m = std::max(m, x[i]);
  for (float v : lane) m = std::max(m, v);
  if (m == kNegInf) return 0;  // empty, all masked, or all NaN
  for (i = 0; i < n; ++i) {
    if (x[i] == m) return static_cast<int32_t>(i);
  }
  return 0;
}

float log_sum_exp(std::span<const float> logits) {
  float m = kNegInf;
  for (float v : logits) m = std::max(m, sanitize(v));
  if (m == kNegInf) return kNegInf;
  double s = 0.0;
  for (float v : logits) s += std::exp(static_cast<double>(sanitize(v) - m));
  return m + static_cast<float>(std::log(s));
}

float log_softmax_at(std::span<const float> logits, int32_t id) {
  CHECK(id >= 0 && static_cast<size_t>(id) < logits.size());
  return sanitize(logits[static_cast<size_t>(id)]) - log_sum_exp(logits);
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n) {
  const size_t count = std::min(static_cast<size_t>(std::max(n, 0)), logits.size());
  if (count == 0) return {};
  // One pass with a heap of the `count` best seen so far; the heap top is the worst of them,
  // so most of the row is rejected with a single comparison.
  std::vector<std::pair<float, int32_t>> heap;
  heap.reserve(count);
  for (size_t i = 0; i < logits.size(); ++i) {
    std::pair<float, int32_t> c{sanitize(logits[i]), static_cast<int32_t>(i)};
    if (heap.size() < count) {
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(c, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = c;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  const float lse = log_sum_exp(logits);
  std::vector<TokenLogprob> out;
  out.reserve(count);
  for (const auto& [v, id] : heap) out.push_back({id, v - lse});
  return out;
}

}  // namespace infercept
