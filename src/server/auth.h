// Access: optional API keys. Without keys every request is let in under one anonymous owner;
// with keys, a request needs "Authorization: Bearer <key>" or "x-api-key: <key>" (Anthropic's
// clients; the dashboard also takes ?api_key=, since a browser page cannot set headers on its
// own navigation) and is served
// as that key's owner, whose paused requests no other key can see or resume. Admin keys
// (--admin-api-key) are owners too, and see every owner's paused requests and per-tool series
// in the shared views (/dashboard/data, /metrics); other keys see their own only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace infercept::server {

class ApiKeys {
 public:
  // Keys given directly and/or one per line in `file` (blank lines and # comments skipped).
  static Result<ApiKeys> load(const std::vector<std::string>& keys, const std::string& file,
                              const std::vector<std::string>& admin_keys = {});

  bool enabled() const { return !keys_.empty() || !admin_keys_.empty(); }
  // The owner of a request ("" without keys; "key<N>" for the N-th key, "admin<N>" for the
  // N-th admin key), or nullopt when keys are on and the request carries none of them.
  // `other_key` is a key given other than as a Bearer token (x-api-key, ?api_key=).
  std::optional<std::string> authenticate(const std::string& authorization_header,
                                          const std::string& other_key) const;
  static bool is_admin(const std::string& owner) { return owner.rfind("admin", 0) == 0; }

 private:
  std::vector<std::string> keys_;
  std::vector<std::string> admin_keys_;
};

}  // namespace infercept::server
