// The local-disk tier of paused requests' KV: a store of KV block groups, one file per group,
// below the pinned host pool. A group is the host blocks of one paused request's KV; the
// tier copies them to a file and later back into (possibly other) host blocks, so a request
// whose KV sat on disk resumes without recomputing it. It knows bytes and files only: which
// request a group belongs to, and when to spill or restore it, is the scheduler's business.
//
// Every disk access runs on one I/O thread of the tier, fed by a FIFO queue of jobs: a
// submit_* call only queues the job and returns a ticket, and poll(ticket) says whether it is
// pending, done or failed, so the engine's step never waits on the disk. One thread and FIFO
// order make a read submitted after its group's write see the written file without any
// ordering on the caller's side. What comes from outside (a full disk, an I/O error, a
// directory that is gone, a corrupted or truncated file) is a value: submit_* returns an
// Error when it can tell at once (the byte budget, an unknown group), otherwise the ticket
// ends failed with a message; the caller then recomputes the KV. Never a crash.
//
// A group file is a header (magic, version, shape, payload checksum, its own checksum)
// followed by the payload: for each block in the group's order, that block's bytes in each
// plane, plane 0 first. The checksum covers the payload, so a read that finds a truncated or
// altered file fails instead of handing wrong KV to the model.
//
// The directory is the tier's own: open() takes an exclusive lock on it (a second process
// gets a clear error instead of deleting a live tier's files), removes the group files a
// previous process left there (a cache does not outlive its process), and the destructor
// removes every file it wrote.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/result.h"

namespace infercept {

// Where a host KV pool's blocks lie in memory. A backend's host storage has 2 * n_layers
// planes (layer l's K is plane 2l, its V plane 2l + 1), each [n_blocks, block_bytes]: block b
// of plane p is planes[p] + b * block_bytes (backend/backend.h KvGeometry; the CPU and the
// CUDA host pools both lay blocks out this way).
struct HostBlockPlanes {
  std::vector<uint8_t*> planes;
  size_t block_bytes = 0;  // one block in one plane: KvGeometry::bytes_per_block_per_layer()
  int32_t n_blocks = 0;    // blocks per plane
  // Bytes of `n` blocks across all planes (a group's payload).
  uint64_t group_bytes(size_t n) const { return (uint64_t)n * planes.size() * block_bytes; }
};

struct DiskKvTierOptions {
  std::string dir;            // created when missing (one level of parents too)
  uint64_t budget_bytes = 0;  // headers + payloads of every group the tier holds
  // Test hook: called on the I/O thread before each write system call of a group file; a
  // non-zero return is taken as that call's errno (ENOSPC, EIO) so the failure paths run
  // without a full disk. Null in production.
  std::function<int()> write_fault;
};

enum class DiskJobState { pending, done, failed };

struct DiskPoll {
  DiskJobState state = DiskJobState::pending;
  std::string error;  // failed: what went wrong, naming the file
};

// A queued write: the group it creates and the ticket to poll.
struct DiskWrite {
  int64_t group = -1;
  uint64_t ticket = 0;
};

class DiskKvTier {
 public:
  // Opens (creating it when missing) and locks `dir`, removes group files a previous process
  // left there, checks that a file can be created in it, and starts the I/O thread.
  static Result<std::unique_ptr<DiskKvTier>> open(DiskKvTierOptions options);
  // Drops jobs still queued (their tickets never complete: the caller is going away), waits
  // for the one running, removes every group file and the lock.
  ~DiskKvTier();
  DiskKvTier(const DiskKvTier&) = delete;
  DiskKvTier& operator=(const DiskKvTier&) = delete;

  // Queues the write of host blocks `blocks` of `src` (at least one, each < src.n_blocks:
  // CHECKed) into a new group. Fails at once when the group would take the tier over its
  // budget (headers included).
  // Contract: the blocks' bytes stay unchanged until the ticket is done or failed.
  Result<DiskWrite> submit_write(const HostBlockPlanes& src, std::span<const int32_t> blocks);
  // Queues the read of `group` into host blocks `blocks` of `dst`: as many blocks as the
  // group holds, planes of the same count and block size as written (CHECKed: a mismatch is
  // the caller's bug). Fails at once for a group the tier does not hold or whose write
  // failed. The group stays on disk (remove() drops it). Contract: nothing reads or writes
  // the destination blocks until the ticket is done or failed; a failed read leaves them
  // unspecified (the caller recomputes).
  Result<uint64_t> submit_read(int64_t group, const HostBlockPlanes& dst,
                               std::span<const int32_t> blocks);
  // Forgets `group` and queues the removal of its file (after any job queued on it); its
  // bytes return to the budget now. Removing an unknown group is a no-op.
  void remove(int64_t group);

  // The state of a job; a done or failed answer is given once and forgets the ticket (so
  // tickets cost no memory once consumed). Polling an unknown ticket is a bug (CHECK).
  DiskPoll poll(uint64_t ticket);
  // Blocks until the job is no longer pending, then answers as poll() (tests, shutdown).
  DiskPoll wait(uint64_t ticket);

  uint64_t budget_bytes() const { return options_.budget_bytes; }
  uint64_t used_bytes() const;
  int64_t n_groups() const;
  // The file of a group (tests corrupt it; logs name it).
  std::string group_path(int64_t group) const;
  // Bytes a group of `n` blocks of `planes` takes on disk (header + payload).
  static uint64_t file_bytes(const HostBlockPlanes& planes, size_t n);

 private:
  enum class JobKind { write, read, unlink };
  struct Job {
    JobKind kind;
    uint64_t ticket = 0;
    int64_t group = -1;
    HostBlockPlanes planes;
    std::vector<int32_t> blocks;
  };
  struct Group {
    uint64_t bytes = 0;
    size_t n_blocks = 0;
    size_t n_planes = 0;
    size_t block_bytes = 0;
    bool failed = false;  // its write failed: the file is gone, reads are refused
  };

  DiskKvTier(DiskKvTierOptions options, int lock_fd);
  void io_loop();
  Status run_write(const Job& job);
  Status run_read(const Job& job);
  void finish(uint64_t ticket, Status status);

  DiskKvTierOptions options_;
  int lock_fd_ = -1;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Job> queue_;
  std::unordered_map<uint64_t, DiskPoll> tickets_;
  std::unordered_map<int64_t, Group> groups_;
  uint64_t used_bytes_ = 0;
  uint64_t next_ticket_ = 1;
  int64_t next_group_ = 0;
  bool stopping_ = false;
  std::thread io_;
};

}  // namespace infercept
