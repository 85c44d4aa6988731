#include "kv/disk_tier.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace infercept {
namespace {

namespace fs = std::filesystem;

constexpr const char* kGroupPrefix = "kvgroup-";
constexpr const char* kLockName = ".infercept-kv-disk.lock";
constexpr uint64_t kMagic = 0x3130505247564b49ULL;  // "IKVGRP01" read little-endian
constexpr uint32_t kVersion = 1;
// iovecs per pwritev/preadv call: below every platform's IOV_MAX (1024 on Linux).
constexpr size_t kIovBatch = 512;

// The group file's header. Written last, after the payload, so a file cut short while it was
// written never carries a valid header.
struct FileHeader {
  uint64_t magic = kMagic;
  uint32_t version = kVersion;
  uint32_t n_planes = 0;
  uint64_t n_blocks = 0;
  uint64_t block_bytes = 0;
  int64_t group = -1;
  uint64_t payload_hash = 0;
  uint64_t header_hash = 0;  // of every field above
  uint64_t reserved = 0;
};
static_assert(sizeof(FileHeader) == 64);

// A 64-bit checksum of the payload, fast enough (several GB/s: four independent
// multiply-rotate lanes over 32-byte stripes) not to be what limits an NVMe drive. It
// detects truncation and corruption, not an adversary: the files are this process's own.
// Chained span by span: each span's hash is seeded with the previous one, so the order of
// the spans counts.
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;

inline uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t lane(uint64_t acc, uint64_t w) {
  return rotl(acc + w * kP2, 31) * kP1;
}

uint64_t hash_bytes(const uint8_t* p, size_t n, uint64_t seed) {
  uint64_t a = seed + kP1 + kP2, b = seed + kP2, c = seed, d = seed - kP1;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a = lane(a, load64(p + i));
    b = lane(b, load64(p + i + 8));
    c = lane(c, load64(p + i + 16));
    d = lane(d, load64(p + i + 24));
  }
  uint64_t h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18) + (uint64_t)n;
  for (; i + 8 <= n; i += 8) h = rotl(h ^ lane(0, load64(p + i)), 27) * kP1 + kP3;
  for (; i < n; ++i) h = rotl(h ^ (p[i] * kP3), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t header_hash(const FileHeader& h) {
  return hash_bytes(reinterpret_cast<const uint8_t*>(&h), offsetof(FileHeader, header_hash), 0);
}

Error io_error(const char* what, const std::string& path, int err) {
  return make_error("disk KV tier: ", what, " ", path, ": ", std::strerror(err));
}

// The payload's spans in file order: for each block, its bytes in each plane.
std::vector<iovec> payload_spans(const HostBlockPlanes& planes, std::span<const int32_t> blocks) {
  std::vector<iovec> v;
  v.reserve(blocks.size() * planes.planes.size());
  for (int32_t b : blocks)
    for (uint8_t* plane : planes.planes)
      v.push_back(iovec{plane + (size_t)b * planes.block_bytes, planes.block_bytes});
  return v;
}

// Drops the first `done` bytes of spans[first..] (a short transfer): spans done in full are
// skipped, the first one left is trimmed.
void consume_spans(std::vector<iovec>& spans, size_t& first, size_t done) {
  while (done > 0) {
    iovec& s = spans[first];
    const size_t take = std::min(done, s.iov_len);
    s.iov_base = static_cast<uint8_t*>(s.iov_base) + take;
    s.iov_len -= take;
    done -= take;
    if (s.iov_len == 0) ++first;
  }
}

// Writes every span in order from `offset`, resuming after short writes and EINTR.
// `fault` (the test hook) may stand in for a system call's errno.
Status write_spans(int fd, std::vector<iovec> spans, off_t offset, const std::string& path,
                   const std::function<int()>& fault) {
  size_t first = 0;
  while (first < spans.size()) {
    if (spans[first].iov_len == 0) {
      ++first;
      continue;
    }
    const int injected = fault ? fault() : 0;
    if (injected != 0) return io_error("writing", path, injected);
    const int n = (int)std::min(kIovBatch, spans.size() - first);
    const ssize_t w = ::pwritev(fd, spans.data() + first, n, offset);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("writing", path, errno);
    }
    if (w == 0) return io_error("writing", path, EIO);
    offset += w;
    consume_spans(spans, first, (size_t)w);
  }
  return ok_status();
}

// Reads every span in order from `offset`; a file that ends first is reported as truncated.
Status read_spans(int fd, std::vector<iovec> spans, off_t offset, const std::string& path) {
  size_t first = 0;
  while (first < spans.size()) {
    if (spans[first].iov_len == 0) {
      ++first;
      continue;
    }
    const int n = (int)std::min(kIovBatch, spans.size() - first);
    const ssize_t r = ::preadv(fd, spans.data() + first, n, offset);
    if (r < 0) {
      if (errno == EINTR) continue;
      return io_error("reading", path, errno);
    }
    if (r == 0) return make_error("disk KV tier: ", path, " is truncated");
    offset += r;
    consume_spans(spans, first, (size_t)r);
  }
  return ok_status();
}

uint64_t spans_hash(const HostBlockPlanes& planes, std::span<const int32_t> blocks) {
  uint64_t h = 0;
  for (int32_t b : blocks)
    for (const uint8_t* plane : planes.planes)
      h = hash_bytes(plane + (size_t)b * planes.block_bytes, planes.block_bytes, h);
  return h;
}

void check_blocks(const HostBlockPlanes& planes, std::span<const int32_t> blocks) {
  CHECK_MSG(!blocks.empty(), "a disk group holds at least one block");
  CHECK(!planes.planes.empty() && planes.block_bytes > 0);
  for (const uint8_t* p : planes.planes) CHECK(p != nullptr);
  for (int32_t b : blocks) CHECK(b >= 0 && b < planes.n_blocks);
}

// Removes the group files in `dir` (a previous process's, or this one's on close).
void remove_group_files(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kGroupPrefix, 0) == 0) {
      std::error_code rm;
      fs::remove(it->path(), rm);  // best effort: a file that will not go is only disk space
    }
  }
}

}  // namespace

uint64_t DiskKvTier::file_bytes(const HostBlockPlanes& planes, size_t n) {
  return sizeof(FileHeader) + planes.group_bytes(n);
}

Result<std::unique_ptr<DiskKvTier>> DiskKvTier::open(DiskKvTierOptions options) {
  if (options.dir.empty()) return make_error("disk KV tier: no directory given");
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec)
    return make_error("disk KV tier: cannot create directory ", options.dir, ": ", ec.message());
  if (!fs::is_directory(options.dir, ec))
    return make_error("disk KV tier: ", options.dir, " is not a directory");

  // The lock: group files of a live tier must never be taken for a dead one's.
  const std::string lock_path = (fs::path(options.dir) / kLockName).string();
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) return io_error("opening", lock_path, errno);
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd);
    if (err == EWOULDBLOCK)
      return make_error("disk KV tier: ", options.dir, " is in use by another KV disk tier");
    return io_error("locking", lock_path, err);
  }
  remove_group_files(options.dir);

  // A file can be created and written here (the lock file proves creation only when it was
  // new; a read-only remount or a full disk shows up now rather than at the first pause).
  const std::string probe =
      (fs::path(options.dir) / (std::string(kGroupPrefix) + "probe")).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    ::close(lock_fd);
    return io_error("cannot create a file in", options.dir, err);
  }
  const char byte = 0;
  const ssize_t w = ::write(fd, &byte, 1);
  const int werr = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (w != 1) {
    ::close(lock_fd);
    return io_error("cannot write a file in", options.dir, w < 0 ? werr : EIO);
  }
  return std::unique_ptr<DiskKvTier>(new DiskKvTier(std::move(options), lock_fd));
}

DiskKvTier::DiskKvTier(DiskKvTierOptions options, int lock_fd)
    : options_(std::move(options)), lock_fd_(lock_fd) {
  io_ = std::thread([this] { io_loop(); });
}

DiskKvTier::~DiskKvTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  work_cv_.notify_all();
  io_.join();
  remove_group_files(options_.dir);
  ::unlink((fs::path(options_.dir) / kLockName).c_str());
  ::close(lock_fd_);
}

std::string DiskKvTier::group_path(int64_t group) const {
  return (fs::path(options_.dir) / (kGroupPrefix + std::to_string(group) + ".kv")).string();
}

uint64_t DiskKvTier::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_bytes_;
}

int64_t DiskKvTier::n_groups() const {
  std::lock_guard<std::mutex> lock(mu_);
  return (int64_t)groups_.size();
}

Result<DiskWrite> DiskKvTier::submit_write(const HostBlockPlanes& src,
                                           std::span<const int32_t> blocks) {
  check_blocks(src, blocks);
  const uint64_t bytes = file_bytes(src, blocks.size());
  DiskWrite out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (used_bytes_ + bytes > options_.budget_bytes)
      return make_error("disk KV tier: a group of ", std::to_string(bytes),
                        " bytes does not fit the budget (", std::to_string(used_bytes_), " of ",
                        std::to_string(options_.budget_bytes), " bytes used)");
    out.group = next_group_++;
    out.ticket = next_ticket_++;
    used_bytes_ += bytes;
    groups_[out.group] = Group{bytes, blocks.size(), src.planes.size(), src.block_bytes, false};
    tickets_[out.ticket] = DiskPoll{};
    queue_.push_back(Job{JobKind::write, out.ticket, out.group, src,
                         std::vector<int32_t>(blocks.begin(), blocks.end())});
  }
  work_cv_.notify_one();
  return out;
}

Result<uint64_t> DiskKvTier::submit_read(int64_t group, const HostBlockPlanes& dst,
                                         std::span<const int32_t> blocks) {
  check_blocks(dst, blocks);
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = groups_.find(group);
    if (it == groups_.end())
      return make_error("disk KV tier: group ", std::to_string(group), " is not on disk");
    if (it->second.failed)
      return make_error("disk KV tier: group ", std::to_string(group), " was never written");
    const Group& g = it->second;
    CHECK_MSG(g.n_blocks == blocks.size() && g.n_planes == dst.planes.size() &&
                  g.block_bytes == dst.block_bytes,
              "a disk group is read into blocks of another shape than it was written from");
    ticket = next_ticket_++;
    tickets_[ticket] = DiskPoll{};
    queue_.push_back(
        Job{JobKind::read, ticket, group, dst, std::vector<int32_t>(blocks.begin(), blocks.end())});
  }
  work_cv_.notify_one();
  return ticket;
}

void DiskKvTier::remove(int64_t group) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = groups_.find(group);
    if (it == groups_.end()) return;
    if (!it->second.failed) used_bytes_ -= it->second.bytes;
    groups_.erase(it);
    queue_.push_back(Job{JobKind::unlink, 0, group, {}, {}});
  }
  work_cv_.notify_one();
}

DiskPoll DiskKvTier::poll(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tickets_.find(ticket);
  CHECK_MSG(it != tickets_.end(), "polled a disk ticket that is unknown or already answered");
  DiskPoll p = it->second;
  if (p.state != DiskJobState::pending) tickets_.erase(it);
  return p;
}

DiskPoll DiskKvTier::wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = tickets_.find(ticket);
  CHECK_MSG(it != tickets_.end(), "waited on a disk ticket that is unknown or already answered");
  done_cv_.wait(lock, [&] { return tickets_.at(ticket).state != DiskJobState::pending; });
  DiskPoll p = tickets_.at(ticket);
  tickets_.erase(ticket);
  return p;
}

void DiskKvTier::finish(uint64_t ticket, Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    DiskPoll& p = tickets_.at(ticket);
    if (status.ok()) {
      p.state = DiskJobState::done;
    } else {
      p.state = DiskJobState::failed;
      p.error = status.error().message;
    }
  }
  done_cv_.notify_all();
}

void DiskKvTier::io_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    switch (job.kind) {
      case JobKind::write: {
        Status st = run_write(job);
        if (!st.ok()) {
          // The partial file goes, and so do its bytes; the group stays known as failed
          // until remove(), so a read of it is refused with a reason.
          ::unlink(group_path(job.group).c_str());
          std::lock_guard<std::mutex> lock(mu_);
          auto it = groups_.find(job.group);
          if (it != groups_.end() && !it->second.failed) {
            it->second.failed = true;
            used_bytes_ -= it->second.bytes;
          }
        }
        finish(job.ticket, std::move(st));
        break;
      }
      case JobKind::read:
        finish(job.ticket, run_read(job));
        break;
      case JobKind::unlink:
        ::unlink(group_path(job.group).c_str());  // ENOENT: its write failed, nothing to do
        break;
    }
  }
}

// No fsync: the files are a cache that lives and dies with this process (open() removes any
// left over), so they never need to survive a crash, and the page cache already gives this
// process back what it wrote. Forcing them to the device would add milliseconds per group
// for nothing the tier relies on.
Status DiskKvTier::run_write(const Job& job) {
  const std::string path = group_path(job.group);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return io_error("creating", path, errno);
  FileHeader h;
  h.n_planes = (uint32_t)job.planes.planes.size();
  h.n_blocks = job.blocks.size();
  h.block_bytes = job.planes.block_bytes;
  h.group = job.group;
  h.payload_hash = spans_hash(job.planes, job.blocks);
  h.header_hash = header_hash(h);
  Status st = write_spans(fd, payload_spans(job.planes, job.blocks), sizeof(FileHeader), path,
                          options_.write_fault);
  if (st.ok()) st = write_spans(fd, {iovec{&h, sizeof(h)}}, 0, path, options_.write_fault);
  // close() can report a deferred write error (network file systems): it counts too.
  if (::close(fd) != 0 && st.ok()) st = io_error("closing", path, errno);
  return st;
}

Status DiskKvTier::run_read(const Job& job) {
  const std::string path = group_path(job.group);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("opening", path, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  const uint64_t expect = file_bytes(job.planes, job.blocks.size());
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("inspecting", path, errno);
  if ((uint64_t)st.st_size != expect)
    return make_error("disk KV tier: ", path, " holds ", std::to_string(st.st_size),
                      " bytes, expected ", std::to_string(expect), " (truncated or overwritten)");
  FileHeader h;
  TRY(read_spans(fd, {iovec{&h, sizeof(h)}}, 0, path));
  if (h.magic != kMagic || h.version != kVersion || h.header_hash != header_hash(h))
    return make_error("disk KV tier: ", path, " has a corrupted header");
  if (h.group != job.group || h.n_planes != job.planes.planes.size() ||
      h.n_blocks != job.blocks.size() || h.block_bytes != job.planes.block_bytes)
    return make_error("disk KV tier: ", path, " holds a group of another shape");
  TRY(read_spans(fd, payload_spans(job.planes, job.blocks), sizeof(FileHeader), path));
  if (spans_hash(job.planes, job.blocks) != h.payload_hash)
    return make_error("disk KV tier: ", path, " failed its checksum (corrupted)");
  return ok_status();
}

}  // namespace infercept
