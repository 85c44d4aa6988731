#include "cli/args.h"

#include <cerrno>
#include <cstdlib>

namespace infercept::cli {

Result<Args> Args::parse(int argc, char** argv, const std::set<std::string>& value_flags,
                         const std::set<std::string>& bool_flags) {
  Args a;
  for (int i = 0; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0) {
      a.positional_.push_back(s);
      continue;
    }
    std::string name = s.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (bool_flags.count(name)) {
      if (has_value) return make_error("--", name, " takes no value");
      a.flags_.insert(name);
    } else if (value_flags.count(name)) {
      if (!has_value) {
        if (i + 1 >= argc) return make_error("--", name, " needs a value");
        value = argv[++i];
      }
      a.values_.emplace(name, value);
    } else {
      return make_error("unknown flag --", name);
    }
  }
  return a;
}

std::string Args::get(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  // The last occurrence wins for single-valued flags.
  auto range = values_.equal_range(name);
  std::string v;
  for (auto r = range.first; r != range.second; ++r) v = r->second;
  return v;
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  std::vector<std::string> out;
  auto range = values_.equal_range(name);
  for (auto r = range.first; r != range.second; ++r) out.push_back(r->second);
  return out;
}

Result<int64_t> Args::get_int(const std::string& name, int64_t def) const {
  if (!has(name)) return def;
  const std::string v = get(name);
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0)
    return make_error("--", name, " expects an integer, got '", v, "'");
  return (int64_t)x;
}

Result<double> Args::get_double(const std::string& name, double def) const {
  if (!has(name)) return def;
  const std::string v = get(name);
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0)
    return make_error("--", name, " expects a number, got '", v, "'");
  return x;
}

}  // namespace infercept::cli
