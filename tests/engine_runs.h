// Running an EngineCore's requests to the end in tests that step the engine themselves.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "engine/engine.h"

namespace infercept::testing {

// Steps until no request is left; returns the tokens each request generated, by request id.
inline std::map<uint64_t, std::vector<int32_t>> run_all(EngineCore& e) {
  std::map<uint64_t, std::vector<int32_t>> out;
  for (int guard = 0; e.has_work() && guard < 100000; ++guard)
    for (const RequestOutput& o : e.step())
      out[o.id].insert(out[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
  EXPECT_FALSE(e.has_work());
  return out;
}

}  // namespace infercept::testing
