// The scheduler's queues are kept in arrival order (FCFS): helpers its two files share.
#pragma once

#include <algorithm>

#include "sched/sequence.h"

namespace infercept::sched_queues {

inline bool by_arrival(const Sequence* a, const Sequence* b) {
  return a->arrival_time < b->arrival_time;
}

template <typename Q>
void erase_from(Q& q, Sequence* s) {
  q.erase(std::remove(q.begin(), q.end(), s), q.end());
}

}  // namespace infercept::sched_queues
