#include "test_util.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
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
  char line[8192];  // a row lists every chunk of its step
  if (std::fgets(line, sizeof line, f) == nullptr ||
      std::string(line).rfind("t,seconds,sequences,decode_rows,prompt_rows,chunks,", 0) != 0 ||
      std::string(line).find(
          ",sampled_rows,chunk_context_tokens,chunk_list,longest_blocks,replayed") ==
          std::string::npos) {
    t.error = "no step-trace header in " + path;
    std::fclose(f);
    return t;
  }
  double last_t = -1e300;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    double at = 0, sec = 0;
    long long v[16] = {};
    if (std::sscanf(line,
                    "%lf,%lf,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,"
                    "%lld,%lld",
                    &at, &sec, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9],
                    &v[10], &v[11], &v[12], &v[13], &v[14], &v[15]) != 18) {
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
    t.sampled_rows += v[14];
    t.chunk_context_tokens += v[15];
    // A chunk's context is part of the step's, and only chunks have it.
    t.chunk_context_consistent =
        t.chunk_context_consistent && v[15] <= v[4] && (v[2] > 0 || v[15] == 0);
    // The chunk list adds up to the chunks' context, and its rows to at most the prompt rows
    // (a chunk, more than one row, is always a prompt row's sequence).
    // Field 19 is the chunk list (no commas inside), then longest_blocks and replayed.
    const char* list = line;
    for (int comma = 0; comma < 18 && list != nullptr; ++comma) {
      list = std::strchr(list, ',');
      if (list != nullptr) ++list;
    }
    const char* after = list != nullptr ? std::strchr(list, ',') : nullptr;
    long long longest = -1, replayed = -2;
    if (after == nullptr || std::sscanf(after, ",%lld,%lld", &longest, &replayed) != 2) {
      t.error = "malformed row in " + path + ": " + line;
      std::fclose(f);
      return t;
    }
    t.longest_blocks_present =
        t.longest_blocks_present && longest >= 0 && (v[0] == 0 || longest > 0);
    if (replayed == 1) t.replayed_rows++;
    if (replayed == -1) t.unknown_replay_rows++;
    t.longest_blocks_present = t.longest_blocks_present && replayed >= -1 && replayed <= 1;
    long long list_ctx = 0, list_rows = 0, rows_i = 0, ctx_i = 0;
    for (const char* q = list; q < after && *q != '\0' && *q != '\n';) {
      if (std::sscanf(q, "%lld:%lld", &rows_i, &ctx_i) != 2) break;
      list_rows += rows_i;
      list_ctx += ctx_i;
      const char* semi = std::strchr(q, ';');
      if (semi == nullptr) break;
      q = semi + 1;
    }
    t.chunk_context_consistent =
        t.chunk_context_consistent && list_ctx == v[15] && list_rows <= v[2];
  }
  std::fclose(f);
  t.ok = true;
  return t;
}

}  // namespace infercept::testing
