#include "test_util.h"

#include <fstream>
#include <sstream>

namespace infercept::testing {

std::string default_model_path() {
  return INFERCEPT_DEFAULT_MODEL;
}

std::string fixture_path(const std::string& name) {
  return std::string(INFERCEPT_SOURCE_DIR) + "/tests/fixtures/" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace infercept::testing
