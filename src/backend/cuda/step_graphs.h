// CUDA graphs of whole decode steps (cuda_backend_impl.h says how a step is probed, recorded and
// replayed). Here: the launch signature a step is looked up by, and the bounded cache of
// recorded steps.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "backend/tensor.h"

namespace infercept::cuda {

// Every launch parameter of every op of a step, in order, with a running FNV-1a hash.
class LaunchSignature {
 public:
  struct Bytes {  // a trivially copyable struct of launch arguments, taken as bytes
    const void* p;
    size_t n;
  };
  template <class T>
  static Bytes bytes_of(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    return Bytes{&v, sizeof v};
  }

  void clear() {
    words_.clear();
    hash_ = 1469598103934665603ull;
  }
  void add(const Tensor& t) {
    word(reinterpret_cast<uintptr_t>(t.data));
    word((uint64_t)t.rows);
    word((uint64_t)t.cols);
    word((uint64_t)t.stride);
    word((uint64_t)t.dtype);
  }
  void add(Bytes b) {
    for (size_t i = 0; i < b.n; i += 8) {
      uint64_t w = 0;
      std::memcpy(&w, static_cast<const char*>(b.p) + i, b.n - i < 8 ? b.n - i : 8);
      word(w);
    }
  }
  void add(const void* p) { word(reinterpret_cast<uintptr_t>(p)); }
  void add(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    word(u);
  }
  template <class I>
  requires std::is_integral_v<I>
  void add(I v) { word((uint64_t)v); }

  uint64_t hash() const { return hash_; }
  bool operator==(const LaunchSignature& o) const { return hash_ == o.hash_ && words_ == o.words_; }

 private:
  void word(uint64_t w) {
    words_.push_back(w);
    hash_ = (hash_ ^ w) * 1099511628211ull;
  }
  std::vector<uint64_t> words_;
  uint64_t hash_ = 1469598103934665603ull;
};

// Recorded steps by signature, at most kMaxGraphs (least recently used out).
class StepGraphCache {
 public:
  static constexpr size_t kMaxGraphs = 64;
  StepGraphCache() = default;
  StepGraphCache(const StepGraphCache&) = delete;
  StepGraphCache& operator=(const StepGraphCache&) = delete;
  ~StepGraphCache();

  // The recording of `sig`, marked used at `step`; nullptr when there is none.
  cudaGraphExec_t find(const LaunchSignature& sig, int64_t step);
  // Counts a sighting of an unrecorded signature; true from the second on (a one-off shape
  // is not worth a capture).
  bool worth_recording(const LaunchSignature& sig);
  // Instantiates a captured step under `sig` (waiting on `stream` before dropping an old one).
  cudaGraphExec_t add(const LaunchSignature& sig, cudaGraph_t graph, int64_t step,
                      cudaStream_t stream);

 private:
  struct Entry {
    LaunchSignature sig;
    cudaGraphExec_t exec;
    int64_t last_use;
  };
  std::vector<Entry> graphs_;
  std::unordered_map<uint64_t, int> seen_;  // unrecorded signatures by hash, and how often
};

}  // namespace infercept::cuda
