#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace infercept {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Out StopMatcher::push(std::string_view new_text) {
  if (stopped_) return {{}, true};
  pending_ += new_text;
  if (stops_.empty()) return {std::exchange(pending_, {}), false};

  // Earliest complete occurrence of any stop string. Everything emitted earlier was ruled
  // out, so an occurrence can only start inside the held-back part or the new text.
  size_t hit = std::string::npos;
  for (const auto& s : stops_) hit = std::min(hit, pending_.find(s));
  if (hit != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, hit);
    pending_.clear();
    return {std::move(out), true};
  }

  // Hold back the longest suffix that is a proper prefix of some stop string (a full match
  // was ruled out above). Only the last (longest stop - 1) bytes can qualify.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) ==
          std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return {std::move(out), false};
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  return std::exchange(pending_, {});
}

}  // namespace infercept
