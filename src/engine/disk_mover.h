// The step loop's disk movers (step_loop.h DiskMover): the engine's, which runs a plan's
// spills and restores on a DiskKvTier between the backend's host pool and the disk, and the
// simulator's, which prices them as bytes over the cost model's disk bandwidths.
//
// The scheduler names a disk copy by its own id (DiskMove::copy) and knows nothing of files
// or tickets: the movers keep that map. Every job submitted is reported once by poll(),
// done or failed, even when its copy was dropped while it ran (the scheduler holds the host
// blocks such a job uses until then).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"
#include "engine/step_loop.h"
#include "kv/disk_tier.h"

namespace infercept {

// Where a host KV pool's blocks lie (KvStorage::host_plane for every plane); an error for a
// pool that is not in host memory.
Result<HostBlockPlanes> host_block_planes(KvStorage& host_kv);

class TierDiskMover final : public DiskMover {
 public:
  // `planes`: the host pool the plans' host blocks index. `before_io` runs before a step's
  // jobs are queued: the backend's queued block copies must have ended before the I/O
  // thread reads or fills host blocks (a device backend copies asynchronously).
  TierDiskMover(DiskKvTier& tier, HostBlockPlanes planes, std::function<void()> before_io);
  void submit(const StepPlan& plan, double now) override;
  void poll(double now, std::vector<DiskDone>& done) override;
  // The last failure's message (logged as well); empty when none.
  const std::string& last_error() const { return last_error_; }

 private:
  struct Copy {
    int64_t group = -1;   // the tier's group; -1 before its write was queued
    uint64_t ticket = 0;  // the job in flight; 0 none
    bool dropped = false;
  };
  void fail(uint64_t copy, const std::string& why);

  DiskKvTier& tier_;
  HostBlockPlanes planes_;
  std::function<void()> before_io_;
  std::map<uint64_t, Copy> copies_;
  std::vector<DiskDone> failed_now_;  // refused at submission, reported by the next poll
  std::string last_error_;
};

// Bytes over bandwidth on one queue (the tier's single I/O thread): a job starts when it is
// submitted or when the job before it ends, whichever is later.
class ClockDiskMover final : public DiskMover {
 public:
  ClockDiskMover(double block_bytes, double write_bytes_per_second, double read_bytes_per_second);
  void submit(const StepPlan& plan, double now) override;
  void poll(double now, std::vector<DiskDone>& done) override;
  double next_done() const override;

 private:
  struct Job {
    uint64_t copy;
    double end;
  };
  double block_bytes_, write_bps_, read_bps_;
  std::deque<Job> queue_;  // in end order (FIFO)
  double free_at_ = 0.0;
};

}  // namespace infercept
