#include "engine/row_sampling.h"

#include "core/check.h"

namespace infercept {

bool RowSampling::plan(const Backend& backend, std::span<const RowToSample> rows) {
  host_.assign(rows.size(), 0);
  n_host_ = 0;
  device_all_greedy_ = true;
  for (size_t i = 0; i < rows.size(); ++i) {
    const SamplingParams& p = *rows[i].params;
    const bool greedy = p.is_greedy();
    const bool device = !rows[i].needs_host_logits &&
                        (rows[i].mask == nullptr || backend.masks_on_device()) &&
                        (greedy ? backend.greedy_on_device() : backend.samples_on_device());
    host_[i] = device ? 0 : 1;
    n_host_ += device ? 0 : 1;
    device_all_greedy_ = device_all_greedy_ && (!device || greedy);
  }
  return n_host_ < (int64_t)rows.size();
}

void RowSampling::draw(Backend& backend, const Tensor& logits, std::span<const RowToSample> rows,
                       float* host_logits, int64_t vocab) {
  const int64_t n = (int64_t)rows.size();
  CHECK(logits.rows == n && host_.size() == rows.size());
  for (int64_t b = 0; b < n;) {
    if (!host_[(size_t)b]) {
      ++b;
      continue;
    }
    int64_t e = b;
    while (e < n && host_[(size_t)e]) ++e;
    backend.to_host_f32(logits.slice_rows(b, e - b), host_logits + b * vocab);
    b = e;
  }
  tokens_.resize((size_t)n);
  masked_rows_.clear();
  packed_masks_.clear();
  size_t words = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (host_[i] || rows[i].mask == nullptr) continue;
    const std::vector<uint64_t>& m = *rows[i].mask;
    CHECK(masked_rows_.empty() || m.size() == words);  // one vocabulary
    words = m.size();
    masked_rows_.push_back((int32_t)i);
    packed_masks_.insert(packed_masks_.end(), m.begin(), m.end());
  }
  if (!masked_rows_.empty())
    CHECK(backend.mask_rows(logits, masked_rows_, packed_masks_.data(), (int64_t)words));
  if (device_all_greedy_) {
    // (a host row's argmax is computed too and not used)
    CHECK(backend.argmax_rows(logits, tokens_.data()));
    return;
  }
  device_rows_.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    const SamplingParams& p = *rows[i].params;
    DeviceSampleRow r;
    r.greedy = p.is_greedy() || host_[i] ? 1 : 0;  // a host row: a placeholder
    if (!r.greedy) {
      r.inv_temperature = 1.0f / p.temperature;
      r.top_k = p.top_k > 0 ? p.top_k : 0;
      r.top_p = p.top_p;
      r.min_p = p.min_p;
      r.u = rows[i].sampler->draw_uniform();
    }
    device_rows_.push_back(r);
  }
  CHECK(backend.sample_rows(logits, device_rows_, tokens_.data()));
}

}  // namespace infercept
