// The profile file's keys beside the cost model's (profile_file.h).
#include "engine/profile_file.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace infercept {

namespace {
using json = nlohmann::json;

// [a, b] of two non-negative numbers under `key`, when the file has them.
bool read_pair(const json& j, const char* key, double& a, double& b) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_number() ||
      !(*it)[1].is_number())
    return false;
  a = std::max(0.0, (*it)[0].get<double>());
  b = std::max(0.0, (*it)[1].get<double>());
  return true;
}
}  // namespace

ProfileExtras read_profile_extras(const std::string& text) {
  ProfileExtras e;
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return e;
  EngineArtifacts& a = e.artifacts;
  if (auto it = j.find("max_context"); it != j.end() && it->is_number_integer())
    e.max_context = std::max<int64_t>(0, it->get<int64_t>());
  if (auto it = j.find("first_sight_seconds"); it != j.end() && it->is_number())
    a.first_sight_seconds = std::max(0.0, it->get<double>());
  read_pair(j, "graph_miss_seconds", a.new_batch_seconds, a.second_batch_seconds);
  if (auto it = j.find("graph_cache_entries"); it != j.end() && it->is_number_integer())
    a.graph_cache_entries = std::max<int64_t>(0, it->get<int64_t>());
  read_pair(j, "copy_interference", a.copy_in_interference, a.copy_out_interference);
  if (auto it = j.find("copies_overlap"); it != j.end() && it->is_boolean())
    e.copies_overlap = it->get<bool>();
  double in = 0.0, out = 0.0;
  if (read_pair(j, "copy_interference_untouched", in, out))
    e.copy_interference_untouched = std::pair{in, out};
  return e;
}

std::string profile_file_json(const CostModel& cost, const ProfileExtras& extras) {
  json j = json::parse(cost.to_json());
  // A measured term is written even where it came out 0 or 1 (to_json leaves those out, so
  // that an older file round-trips unchanged): the file says it was measured.
  j["sequence_seconds"] = cost.sequence_seconds;
  j["sample_seconds_per_row"] = cost.sample_seconds_per_row;
  j["chunk_row_context_seconds"] = cost.chunk_row_context_seconds;
  j["chunk_step_scale"] = cost.chunk_step_scale;
  const EngineArtifacts& a = extras.artifacts;
  j["first_sight_seconds"] = a.first_sight_seconds;
  j["graph_miss_seconds"] = {a.new_batch_seconds, a.second_batch_seconds};
  j["graph_cache_entries"] = a.graph_cache_entries;
  j["copy_interference"] = {a.copy_in_interference, a.copy_out_interference};
  if (extras.copies_overlap) j["copies_overlap"] = *extras.copies_overlap;
  if (extras.max_context > 0) j["max_context"] = extras.max_context;
  if (extras.copy_interference_untouched)
    j["copy_interference_untouched"] = {extras.copy_interference_untouched->first,
                                        extras.copy_interference_untouched->second};
  return j.dump(2);
}

}  // namespace infercept
