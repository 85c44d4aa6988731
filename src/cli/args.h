// A small command-line flag parser for the subcommands: --name value, --name=value and
// boolean --flag. Unknown flags and bad numbers are errors with the flag named, so a typo
// never silently falls back to a default.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/result.h"

namespace infercept::cli {

class Args {
 public:
  // `value_flags` take a value; `bool_flags` do not. Repeated value flags are kept in order.
  static Result<Args> parse(int argc, char** argv, const std::set<std::string>& value_flags,
                            const std::set<std::string>& bool_flags);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  bool flag(const std::string& name) const { return flags_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& def = "") const;
  std::vector<std::string> get_all(const std::string& name) const;
  Result<int64_t> get_int(const std::string& name, int64_t def) const;
  Result<double> get_double(const std::string& name, double def) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::multimap<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
};

}  // namespace infercept::cli
