// The engine's constrained-decoding helpers (docs/DESIGN.md, "Constrained decoding"): the
// worker thread that computes a step's token masks beside the forward pass. Internal to the
// engine (engine.cpp and mask_worker.cpp include it).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "engine/engine.h"

namespace infercept {

// Computes the step's token masks on its own thread while the forward pass runs: a mask
// depends only on the tokens its request has accepted, all known before the step starts.
class EngineCore::MaskWorker {
 public:
  MaskWorker() : thread_([this] { loop(); }) {}
  ~MaskWorker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void start(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = std::move(job);
      pending_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !pending_; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || (pending_ && job_); });
      if (stop_) return;
      std::function<void()> job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      job();
      lock.lock();
      pending_ = false;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool pending_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace infercept
