// The Responses API's stored responses (response_store.h).
#include "server/response_store.h"

#include <algorithm>

#include "server/openai_protocol.h"

namespace infercept::server {

void ResponseStore::put(const std::string& owner, const std::string& id, Stored s) {
  const size_t bytes = dump(s.messages).size() + dump(s.response).size() + id.size();
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > max_bytes_) return;
  if (auto it = by_id_.find(id); it != by_id_.end()) {  // kept again: it becomes the newest
    bytes_ -= it->second.bytes;
    by_id_.erase(it);
    std::erase(order_, id);
  }
  while (bytes_ + bytes > max_bytes_ && !by_id_.empty()) drop_oldest();
  by_id_[id] = Entry{owner, std::move(s), bytes};
  order_.push_back(id);
  bytes_ += bytes;
  // Ids of erased entries wait in order_ until they reach its front; keep it from growing
  // without bound when many are erased out of order.
  if (order_.size() > 2 * by_id_.size() + 64) {
    std::deque<std::string> live;
    for (const std::string& k : order_)
      if (by_id_.count(k) != 0) live.push_back(k);
    order_ = std::move(live);
  }
}

void ResponseStore::drop_oldest() {
  while (!order_.empty()) {
    const std::string id = std::move(order_.front());
    order_.pop_front();
    auto it = by_id_.find(id);
    if (it == by_id_.end()) continue;
    bytes_ -= it->second.bytes;
    by_id_.erase(it);
    return;
  }
}

std::optional<ResponseStore::Stored> ResponseStore::get(const std::string& owner,
                                                        const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second.owner != owner) return std::nullopt;
  return it->second.stored;
}

bool ResponseStore::erase(const std::string& owner, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second.owner != owner) return false;
  bytes_ -= it->second.bytes;
  by_id_.erase(it);
  return true;
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_id_.size();
}

}  // namespace infercept::server
