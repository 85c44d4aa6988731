#include "server/interception_registry.h"

#include <algorithm>
#include <chrono>

namespace infercept::server {

namespace {
constexpr size_t kMaxGone = 10000;
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

std::string InterceptionRegistry::add(PausedRequest p, double now,
                                      std::vector<PausedLease>* evicted) {
  p.id = random_id("icpt_");
  p.expires_at = now + ttl_s_;
  const double unix_now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  p.expires_at_unix = (int64_t)(unix_now + ttl_s_);
  std::vector<PausedLease> dropped;  // released after the lock, when no caller takes them
  std::lock_guard<std::mutex> lock(mu_);
  if (max_per_owner_ > 0) {
    // The owner's paused requests, oldest first; room is made for the new one.
    std::vector<std::map<std::string, PausedRequest>::iterator> mine;
    for (auto it = live_.begin(); it != live_.end(); ++it)
      if (it->second.owner == p.owner) mine.push_back(it);
    std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) {
      return a->second.paused_at < b->second.paused_at;
    });
    for (size_t i = 0; (int64_t)(mine.size() - i) >= max_per_owner_; ++i) {
      remember(mine[i]->second, TakeError::evicted);
      (evicted ? *evicted : dropped).emplace_back(this, std::move(mine[i]->second));
      live_.erase(mine[i]);
    }
  }
  const std::string id = p.id;
  live_.emplace(id, std::move(p));
  return id;
}

PausedLease InterceptionRegistry::take_newest(
    std::vector<std::map<std::string, PausedRequest>::iterator> matched,
    std::vector<PausedLease>* superseded) {
  if (matched.empty()) return {};
  std::sort(matched.begin(), matched.end(),
            [](const auto& a, const auto& b) { return a->second.paused_at < b->second.paused_at; });
  for (size_t i = 0; i + 1 < matched.size(); ++i) {
    remember(matched[i]->second, TakeError::superseded);
    superseded->emplace_back(this, std::move(matched[i]->second));
    live_.erase(matched[i]);
  }
  PausedRequest p = std::move(matched.back()->second);
  live_.erase(matched.back());
  remember(p, TakeError::resumed);
  return PausedLease(this, std::move(p));
}

PausedLease InterceptionRegistry::take_followup(const std::string& owner, const std::string& ns,
                                                const std::set<std::string>& call_ids,
                                                std::vector<PausedLease>* superseded) {
  if (call_ids.empty()) return {};
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::map<std::string, PausedRequest>::iterator> matched;
  for (auto it = live_.begin(); it != live_.end(); ++it) {
    const PausedRequest& p = it->second;
    if (p.owner != owner || p.cache_namespace != ns) continue;
    for (const std::string& id : p.call_ids)
      if (!id.empty() && call_ids.count(id) != 0) {
        matched.push_back(it);
        break;
      }
  }
  return take_newest(std::move(matched), superseded);
}

PausedLease InterceptionRegistry::take_extended(const std::string& owner, const std::string& ns,
                                                const std::vector<int32_t>& prompt,
                                                std::vector<PausedLease>* superseded) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::map<std::string, PausedRequest>::iterator> matched;
  for (auto it = live_.begin(); it != live_.end(); ++it) {
    const PausedRequest& p = it->second;
    if (p.owner != owner || p.cache_namespace != ns || p.tokens.empty() ||
        p.tokens.size() > prompt.size())
      continue;
    if (std::equal(p.tokens.begin(), p.tokens.end(), prompt.begin())) matched.push_back(it);
  }
  return take_newest(std::move(matched), superseded);
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
    case TakeError::superseded:
      return "superseded";
    case TakeError::evicted:
      return "evicted";
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

bool restore_reasoning(std::vector<ChatMessage>& messages, const PausedRequest& p) {
  if (p.request.messages.empty()) return false;
  const ChatMessage& generated = p.request.messages.back();
  if (generated.role != "assistant" || generated.reasoning_content.empty()) return false;
  bool changed = false;
  for (ChatMessage& m : messages) {
    if (m.role != "assistant" || !m.reasoning_content.empty()) continue;
    for (const ToolCall& c : m.tool_calls)
      if (std::find(p.call_ids.begin(), p.call_ids.end(), c.id) != p.call_ids.end()) {
        m.reasoning_content = generated.reasoning_content;
        changed = true;
        break;
      }
  }
  return changed;
}

}  // namespace infercept::server
