#include "server/interception_registry.h"

#include <algorithm>
#include <chrono>

namespace infercept::server {

namespace {
constexpr size_t kMaxGone = 10000;
// A follow-up may differ from the paused request's prompt in its last few tokens (a
// generation forced to start with a tool call's opening is re-tokenized with the call).
constexpr int64_t kPromptSlack = 8;

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  const size_t m = std::min(a.size(), b.size());
  while (n < m && a[n] == b[n]) ++n;
  return n;
}
}  // namespace

PausedLease& PausedLease::operator=(PausedLease&& o) noexcept {
  if (this != &o) {
    end();
    registry_ = o.registry_;
    p_ = std::move(o.p_);
    put_back_ = o.put_back_;
    o.p_.reset();
  }
  return *this;
}

void PausedLease::end() {
  if (!p_) return;
  PausedRequest p = std::move(*p_);
  p_.reset();
  if (registry_ == nullptr) return;
  if (put_back_)
    registry_->put_back(std::move(p));
  else if (registry_->release_)
    registry_->release_(p.engine_id);
}

InterceptionRegistry::InterceptionRegistry(double ttl_s, int64_t max_per_owner,
                                           std::function<void(uint64_t)> release)
    : ttl_s_(ttl_s), release_(std::move(release)), max_per_owner_(max_per_owner) {}

void InterceptionRegistry::put_back(PausedRequest p) {
  std::lock_guard<std::mutex> lock(mu_);
  gone_.erase(p.id);
  const std::string id = p.id;
  live_.emplace(id, std::move(p));
}

TakeError InterceptionRegistry::gone_reason(const std::string& owner, const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto g = gone_.find(id);
  return g != gone_.end() && g->second.owner == owner ? g->second.what : TakeError::unknown;
}

std::string InterceptionRegistry::add(PausedRequest p, double now) {
  p.id = random_id("icpt_");
  p.expires_at = now + ttl_s_;
  const double unix_now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  p.expires_at_unix = (int64_t)(unix_now + ttl_s_);
  std::lock_guard<std::mutex> lock(mu_);
  const std::string id = p.id;
  live_.emplace(id, std::move(p));
  return id;
}

PausedLease InterceptionRegistry::take_match(const std::string& owner,
                                             const std::vector<int32_t>& prompt) {
  std::lock_guard<std::mutex> lock(mu_);
  auto best = live_.end();
  size_t best_len = 0;
  for (auto it = live_.begin(); it != live_.end(); ++it) {
    const PausedRequest& p = it->second;
    if (p.owner != owner) continue;
    const size_t lcp = common_prefix(p.tokens, prompt);
    if (lcp == 0 || (int64_t)lcp + kPromptSlack < p.n_prompt) continue;
    if (lcp > best_len) {
      best = it;
      best_len = lcp;
    }
  }
  if (best == live_.end()) return {};
  PausedRequest p = std::move(best->second);
  live_.erase(best);
  remember(p, TakeError::resumed);
  return PausedLease(this, std::move(p));
}

PausedLease InterceptionRegistry::take(const std::string& owner, const std::string& id,
                                       bool is_delete, TakeError* why) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end() || it->second.owner != owner) {
    auto g = gone_.find(id);
    *why = g != gone_.end() && g->second.owner == owner ? g->second.what : TakeError::unknown;
    return {};
  }
  PausedRequest p = std::move(it->second);
  live_.erase(it);
  remember(p, is_delete ? TakeError::deleted : TakeError::resumed);
  return PausedLease(this, std::move(p));
}

std::optional<PausedRequest> InterceptionRegistry::get(const std::string& owner,
                                                       const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end() || it->second.owner != owner) return std::nullopt;
  return it->second;
}

std::vector<PausedLease> InterceptionRegistry::take_expired(double now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PausedLease> out;
  for (auto it = live_.begin(); it != live_.end();) {
    if (it->second.expires_at <= now) {
      remember(it->second, TakeError::expired);
      out.emplace_back(this, std::move(it->second));
      it = live_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<PausedLease> InterceptionRegistry::take_all() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PausedLease> out;
  for (auto& [id, p] : live_) out.emplace_back(this, std::move(p));
  live_.clear();
  return out;
}

std::vector<PausedRequest> InterceptionRegistry::list(const std::string& owner, bool all) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PausedRequest> out;
  for (const auto& [id, p] : live_)
    if (all || p.owner == owner) out.push_back(p);
  std::sort(out.begin(), out.end(), [](const PausedRequest& a, const PausedRequest& b) {
    return a.paused_at < b.paused_at;
  });
  return out;
}

size_t InterceptionRegistry::count(const std::string& owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [id, p] : live_) n += p.owner == owner ? 1 : 0;
  return n;
}

size_t InterceptionRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

bool InterceptionRegistry::full(const std::string& owner) const {
  return max_per_owner_ > 0 && (int64_t)count(owner) >= max_per_owner_;
}

const char* InterceptionRegistry::describe(TakeError e) {
  switch (e) {
    case TakeError::unknown:
      return "unknown";
    case TakeError::resumed:
      return "already resumed";
    case TakeError::deleted:
      return "deleted";
    case TakeError::expired:
      return "expired";
  }
  return "?";
}

void InterceptionRegistry::remember(const PausedRequest& p, TakeError what) {
  gone_[p.id] = Gone{p.owner, what};
  gone_order_.push_back(p.id);
  while (gone_order_.size() > kMaxGone) {
    gone_.erase(gone_order_.front());
    gone_order_.pop_front();
  }
}

}  // namespace infercept::server
