#include "server/auth.h"

#include <fstream>

namespace infercept::server {

namespace {
std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// Compares without stopping at the first difference.
bool same(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= (unsigned char)(a[i] ^ b[i]);
  return diff == 0;
}
}  // namespace

Result<ApiKeys> ApiKeys::load(const std::vector<std::string>& keys, const std::string& file,
                              const std::vector<std::string>& admin_keys) {
  ApiKeys k;
  for (const std::string& key : admin_keys) {
    const std::string t = trim(key);
    if (t.empty()) return make_error("--admin-api-key must not be empty");
    k.admin_keys_.push_back(t);
  }
  for (const std::string& key : keys) {
    const std::string t = trim(key);
    if (t.empty()) return make_error("--api-key must not be empty");
    k.keys_.push_back(t);
  }
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return make_error("cannot read the API key file ", file);
    std::string line;
    size_t n = 0;
    while (std::getline(in, line)) {
      const std::string t = trim(line);
      if (t.empty() || t[0] == '#') continue;
      k.keys_.push_back(t);
      ++n;
    }
    if (n == 0) return make_error("the API key file ", file, " has no keys");
  }
  return k;
}

std::optional<std::string> ApiKeys::authenticate(const std::string& authorization_header,
                                                 const std::string& other_key) const {
  if (!enabled()) return std::string();
  std::string given;
  const std::string bearer = "Bearer ";
  if (authorization_header.size() > bearer.size() &&
      authorization_header.compare(0, bearer.size(), bearer) == 0)
    given = trim(authorization_header.substr(bearer.size()));
  else if (!other_key.empty())
    given = other_key;
  if (given.empty()) return std::nullopt;
  std::optional<std::string> owner;
  for (size_t i = 0; i < keys_.size(); ++i)
    if (same(given, keys_[i]) && !owner) owner = "key" + std::to_string(i);
  for (size_t i = 0; i < admin_keys_.size(); ++i)
    if (same(given, admin_keys_[i]) && !owner) owner = "admin" + std::to_string(i);
  return owner;
}

}  // namespace infercept::server
