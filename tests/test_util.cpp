#include "test_util.h"

#include <algorithm>
#include <cstdio>
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

StepTraceTotals read_step_trace(const std::string& path) {
  StepTraceTotals t;
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) {
    t.error = "cannot open " + path;
    return t;
  }
  char line[512];
  if (std::fgets(line, sizeof line, f) == nullptr ||
      std::string(line).rfind("t,seconds,sequences,decode_rows,prompt_rows,chunks,", 0) != 0) {
    t.error = "no step-trace header in " + path;
    std::fclose(f);
    return t;
  }
  double last_t = -1e300;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    double at = 0, sec = 0;
    long long v[14] = {};
    if (std::sscanf(line,
                    "%lf,%lf,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld",
                    &at, &sec, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9],
                    &v[10], &v[11], &v[12], &v[13]) != 16) {
      t.error = "malformed row in " + path + ": " + line;
      std::fclose(f);
      return t;
    }
    t.time_ordered = t.time_ordered && at >= last_t;
    last_t = at;
    t.rows++;
    if (v[0] > 0) t.forward_rows++;
    t.seconds += sec;
    t.decode_rows += v[1];
    t.prompt_rows += v[2];
    t.max_free_blocks = std::max<int64_t>(t.max_free_blocks, v[5]);
    t.preempted += v[9];
    t.dropped_tokens += v[10];
    t.swap_in_blocks += v[12];
    t.swap_out_blocks += v[13];
  }
  std::fclose(f);
  t.ok = true;
  return t;
}

}  // namespace infercept::testing
