// The random numbers of the workload generators (workload.h, sessions.h): a trace must be a
// pure function of its spec on every platform. std::mt19937_64's output sequence is fixed by
// the standard; the transforms below (uniform, exponential, Box-Muller normal, log-normal) are
// ours, because the std:: distributions differ between standard libraries.
// bench/agent_workload.py mirrors every function here operation for operation.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

#include "core/check.h"

namespace infercept {

struct Moments {
  double mean = 0.0;
  double std = 0.0;
};

// splitmix64's finalizer: turns nearby seeds (0, 1, 2, ...) into unrelated generator states.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}

  uint64_t next_u64() { return gen_(); }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

  // Uniform integer in [lo, hi]. Multiply-shift; its bias (< 2^-32 here) does not matter.
  int32_t uniform_int(int32_t lo, int32_t hi) {
    CHECK_LE(lo, hi);
    const uint64_t span = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo) + 1;
    const uint64_t r = (gen_() >> 32) * span >> 32;
    return static_cast<int32_t>(lo + static_cast<int64_t>(r));
  }

  double exponential(double rate) { return -std::log1p(-uniform()) / rate; }

  // Box-Muller, one output per call: simple, stateless, and the cost is irrelevant here.
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

  // Log-normal with the given mean and standard deviation of the variable itself.
  double lognormal(const Moments& m) {
    CHECK_GT(m.mean, 0.0);
    if (m.std <= 0.0) return m.mean;
    const double cv = m.std / m.mean;
    const double sigma2 = std::log1p(cv * cv);
    const double mu = std::log(m.mean) - 0.5 * sigma2;
    return std::exp(mu + std::sqrt(sigma2) * normal());
  }

 private:
  std::mt19937_64 gen_;
};

}  // namespace infercept
