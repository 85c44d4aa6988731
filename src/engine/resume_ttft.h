// Resumed turns' first token: seconds from a tool's answer to the request's next token, as
// `infercept bench` measures it and `infercept simulate` predicts it, in all and by where the
// paused request's KV was when the tool answered (KvPlace). The split is what the targets are
// stated for: a resume whose KV was kept on the device or on the host should cost about a
// decode step, one whose KV was dropped pays a prefill of its context.
#pragma once

#include <array>
#include <vector>

#include "sched/sequence.h"

namespace infercept {

struct ResumeTtft {
  std::vector<double> all;  // in the order they came
  std::array<std::vector<double>, kKvPlaces> by_place;

  void add(KvPlace place, double seconds) {
    all.push_back(seconds);
    by_place[(size_t)place].push_back(seconds);
  }
  const std::vector<double>& of(KvPlace place) const { return by_place[(size_t)place]; }
};

}  // namespace infercept
