// Access: optional API keys. Without keys every request is let in under one anonymous owner;
// with keys, a request needs "Authorization: Bearer <key>" (the dashboard also takes
// ?api_key=, since a browser page cannot set headers on its own navigation) and is served
// as that key's owner, whose paused requests no other key can see or resume.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace infercept::server {

class ApiKeys {
 public:
  // Keys given directly and/or one per line in `file` (blank lines and # comments skipped).
  static Result<ApiKeys> load(const std::vector<std::string>& keys, const std::string& file);

  bool enabled() const { return !keys_.empty(); }
  // The owner of a request ("" without keys; "key<N>" for the N-th key), or nullopt when
  // keys are on and the request carries none of them.
  std::optional<std::string> authenticate(const std::string& authorization_header,
                                          const std::string& query_key) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace infercept::server
