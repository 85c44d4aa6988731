#include "backend/cuda/switches.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "backend/cuda/gemv.h"

namespace infercept::cuda {
namespace {
bool g_programmatic_launch = false;
}  // namespace

bool env_switch(const char* name, bool fallback) {
  const char* e = std::getenv(name);
  if (e == nullptr) return fallback;
  if (std::strcmp(e, "0") == 0) return false;
  if (std::strcmp(e, "1") == 0) return true;
  return fallback;
}

BackendSwitches BackendSwitches::from_env(int compute_major) {
  BackendSwitches s;
  if (const char* r = std::getenv("INFERCEPT_GEMV_MAX_ROWS"); r != nullptr)
    s.gemv_max_rows = std::clamp(std::atoi(r), 0, kGemvMaxRows);
  if (const char* r = std::getenv("INFERCEPT_GEMV_MMA_MAX_ROWS"); r != nullptr)
    s.gemv_mma_max_rows = std::clamp(std::atoi(r), 0, kGemvMmaMaxRows);
  s.graphs = env_switch("INFERCEPT_CUDA_GRAPHS", true);
  s.fused = env_switch("INFERCEPT_FUSED", true);
  s.programmatic = compute_major >= 9 && env_switch("INFERCEPT_PDL", true);
  s.attn_prewait = env_switch("INFERCEPT_ATTN_PREWAIT", true);
  s.attn_fused = compute_major >= 9 && env_switch("INFERCEPT_ATTN_FUSED", true);
  s.attn_signal = env_switch("INFERCEPT_ATTN_SIGNAL", true);
  s.attn_project = env_switch("INFERCEPT_ATTN_PROJECT", true);
  if (const char* w = std::getenv("INFERCEPT_ATTN_DECODE_WARPS"); w != nullptr)
    s.attn_decode_warps = std::string(w) == "6" ? 6 : 4;
  if (const char* k = std::getenv("INFERCEPT_ATTN_PROJECT_KEYS"); k != nullptr)
    s.attn_project_keys = std::clamp(std::atoi(k) / 64 * 64, 64, 4096);
  if (const char* r = std::getenv("INFERCEPT_ATTN_PROJECT_ROWS"); r != nullptr)
    s.attn_project_rows = std::clamp(std::atoi(r), 1, 2);
  if (const char* g = std::getenv("INFERCEPT_ATTN_GROUP_SPLIT"); g != nullptr)
    s.attn_group_split = std::clamp(std::atoi(g), 0, 8);
  const char* rope = std::getenv("INFERCEPT_GEMV_ROPE");
  s.rope_fold_required = rope != nullptr && std::strcmp(rope, "require") == 0;
  s.rope_fold = s.rope_fold_required || env_switch("INFERCEPT_GEMV_ROPE", false);
  s.one_upload = env_switch("INFERCEPT_GRAPH_ONE_UPLOAD", false);
  s.l2_prefetch = env_switch("INFERCEPT_L2_PREFETCH", false);
  if (const char* m = std::getenv("INFERCEPT_LAB_ATTN"); m != nullptr) {
    const std::string v = m;
    s.lab_attn = v == "wait"      ? 1
                 : v == "loads"   ? 2
                 : v == "nomerge" ? 3
                 : v == "rope"    ? 4
                 : v == "chunks"  ? 5
                                  : 0;
  }
  if (const char* o = std::getenv("INFERCEPT_LAB_OMIT"); o != nullptr) {
    const std::string list = std::string(",") + o + ",";
    const std::pair<const char*, unsigned> names[] = {
        {",qkv,", kOmitQkv}, {",rope,", kOmitRope},     {",attn,", kOmitAttn},
        {",o,", kOmitO},     {",gateup,", kOmitGateUp}, {",down,", kOmitDown}};
    for (const auto& [name, bit] : names)
      if (list.find(name) != std::string::npos) s.lab_omit |= bit;
  }
  return s;
}

bool programmatic_launch() {
  return g_programmatic_launch;
}
void set_programmatic_launch(bool on) {
  g_programmatic_launch = on;
}

}  // namespace infercept::cuda
