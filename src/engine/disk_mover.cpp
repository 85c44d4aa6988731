#include "engine/disk_mover.h"

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "core/log.h"

namespace infercept {

Result<HostBlockPlanes> host_block_planes(KvStorage& host_kv) {
  HostBlockPlanes planes;
  const KvGeometry& g = host_kv.geometry();
  for (int64_t p = 0; p < 2 * g.n_layers; ++p) {
    uint8_t* plane = host_kv.host_plane(p);
    if (plane == nullptr) return make_error("the backend's host KV pool is not in host memory");
    planes.planes.push_back(plane);
  }
  planes.block_bytes = g.bytes_per_block_per_layer();
  planes.n_blocks = (int32_t)g.n_blocks;
  return planes;
}

TierDiskMover::TierDiskMover(DiskKvTier& tier, HostBlockPlanes planes,
                             std::function<void()> before_io)
    : tier_(tier), planes_(std::move(planes)), before_io_(std::move(before_io)) {}

void TierDiskMover::fail(uint64_t copy, const std::string& why) {
  last_error_ = why;
  LOG_WARN("%s (the KV stays on the host or is recomputed)", why.c_str());
  failed_now_.push_back({copy, false});
}

void TierDiskMover::submit(const StepPlan& plan, double now) {
  (void)now;
  if ((!plan.spill_out.empty() || !plan.spill_in.empty()) && before_io_) before_io_();
  for (const DiskMove& m : plan.spill_out) {
    CHECK(copies_.find(m.copy) == copies_.end());
    auto w = tier_.submit_write(planes_, m.host_blocks);
    if (!w.ok()) {
      copies_[m.copy] = Copy{};
      fail(m.copy, w.error().message);
      continue;
    }
    copies_[m.copy] = Copy{w->group, w->ticket, false};
  }
  for (const DiskMove& m : plan.spill_in) {
    Copy& c = copies_.at(m.copy);
    CHECK(c.ticket == 0);
    auto r = c.group >= 0 ? tier_.submit_read(c.group, planes_, m.host_blocks)
                          : Result<uint64_t>(make_error("no file for this copy"));
    if (!r.ok()) {
      fail(m.copy, r.error().message);
      continue;
    }
    c.ticket = *r;
  }
  for (uint64_t id : plan.disk_drops) {
    auto it = copies_.find(id);
    if (it == copies_.end()) continue;
    if (it->second.group >= 0) tier_.remove(it->second.group);  // after the job on it, if any
    it->second.group = -1;
    it->second.dropped = true;
    const bool reported = std::any_of(failed_now_.begin(), failed_now_.end(),
                                      [id](const DiskDone& d) { return d.copy == id; });
    if (it->second.ticket == 0 && !reported) copies_.erase(it);
  }
}

void TierDiskMover::poll(double now, std::vector<DiskDone>& done) {
  (void)now;
  for (const DiskDone& d : failed_now_) {
    done.push_back(d);
    auto it = copies_.find(d.copy);
    if (it != copies_.end() && (it->second.dropped || it->second.group < 0) &&
        it->second.ticket == 0)
      copies_.erase(it);
  }
  failed_now_.clear();
  for (auto it = copies_.begin(); it != copies_.end();) {
    Copy& c = it->second;
    if (c.ticket == 0) {
      ++it;
      continue;
    }
    const DiskPoll p = tier_.poll(c.ticket);
    if (p.state == DiskJobState::pending) {
      ++it;
      continue;
    }
    c.ticket = 0;
    const bool ok = p.state == DiskJobState::done;
    if (!ok) {
      last_error_ = p.error;
      LOG_WARN("%s (the KV stays on the host or is recomputed)", p.error.c_str());
    }
    done.push_back({it->first, ok});
    if (c.dropped) {
      it = copies_.erase(it);
      continue;
    }
    ++it;
  }
}

ClockDiskMover::ClockDiskMover(double block_bytes, double write_bytes_per_second,
                               double read_bytes_per_second)
    : block_bytes_(block_bytes),
      write_bps_(write_bytes_per_second),
      read_bps_(read_bytes_per_second) {
  CHECK(block_bytes > 0 && write_bytes_per_second > 0 && read_bytes_per_second > 0);
}

void ClockDiskMover::submit(const StepPlan& plan, double now) {
  auto queue = [&](const DiskMove& m, double bps) {
    const double start = std::max(now, free_at_);
    free_at_ = start + (double)m.host_blocks.size() * block_bytes_ / bps;
    queue_.push_back({m.copy, free_at_});
  };
  for (const DiskMove& m : plan.spill_out) queue(m, write_bps_);
  for (const DiskMove& m : plan.spill_in) queue(m, read_bps_);
  // (a dropped copy's job still runs to its end: the tier removes the file after it)
}

void ClockDiskMover::poll(double now, std::vector<DiskDone>& done) {
  while (!queue_.empty() && queue_.front().end <= now) {
    done.push_back({queue_.front().copy, true});
    queue_.pop_front();
  }
}

double ClockDiskMover::next_done() const {
  return queue_.empty() ? std::numeric_limits<double>::infinity() : queue_.front().end;
}

}  // namespace infercept
