// A small fork-join pool for the CPU backend. The calling thread takes part in the work,
// so a pool of n threads starts n-1 workers. Workers spin briefly on an atomic generation
// counter before sleeping: a decode step of a small model runs a few hundred parallel regions
// per token, and waking threads through a condition variable each time would cost more than
// the work itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace infercept {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(thread_index, n_threads) on every thread, the caller included, and returns when
  // all are done. Not reentrant: fn must not call run() again.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into contiguous ranges, one per thread: fn(begin, end). When n <= grain
  // the caller does it all inline: waking the workers costs more than a few rows of work.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

// Number of threads to use by default: the hardware concurrency.
int default_thread_count();

}  // namespace infercept
