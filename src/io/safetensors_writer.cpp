// safetensors writer (see safetensors_writer.h). File layout: u64 little-endian header
// length, the JSON header padded with spaces to a multiple of 8 bytes, then the tensors back
// to back in header order (the format allows no holes between them).
#include "io/safetensors_writer.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

namespace infercept {

namespace {

namespace fs = std::filesystem;

const char* st_dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    default:
      return nullptr;
  }
}

std::string gb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", (double)bytes / 1e9);
  return buf;
}

// True for the weight files a checkpoint directory may hold from an earlier run.
bool is_weight_file_name(const std::string& n) {
  if (n == "model.safetensors" || n == "model.safetensors.index.json") return true;
  // model-00001-of-00003.safetensors
  const std::string pre = "model-", mid = "-of-", suf = ".safetensors";
  if (n.size() <= pre.size() + suf.size() || n.compare(0, pre.size(), pre) != 0 ||
      n.compare(n.size() - suf.size(), suf.size(), suf) != 0)
    return false;
  return n.find(mid) != std::string::npos;
}

Status pwrite_all(int fd, const void* data, size_t n, uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, std::min<size_t>(n, 1u << 30), (off_t)offset);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      if (e == ENOSPC || e == EDQUOT)
        return make_error("writing '", path, "': no space left on the device (", std::strerror(e),
                          ")");
      return make_error("writing '", path, "': ", std::strerror(e));
    }
    if (w == 0) return make_error("writing '", path, "': the device accepted no more bytes");
    p += w;
    n -= (size_t)w;
    offset += (uint64_t)w;
  }
  return ok_status();
}

struct ShardFile {
  std::string path;
  int fd = -1;
  uint64_t data_begin = 0;  // file offset of the first tensor byte
  uint64_t size = 0;
};

struct WorkItem {
  size_t tensor = 0;
  size_t shard = 0;
  int64_t first = 0;
  int64_t count = 0;
  uint64_t offset = 0;  // in the shard file
  size_t bytes = 0;
};

}  // namespace

int64_t SafetensorsTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t SafetensorsTensor::n_bytes() const {
  return (uint64_t)n_elements() * dtype_block_bytes(dtype);
}

std::vector<SafetensorsShardPlan> plan_safetensors_shards(
    const std::vector<SafetensorsTensor>& tensors, uint64_t max_shard_bytes) {
  std::vector<SafetensorsShardPlan> shards;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t b = tensors[i].n_bytes();
    if (shards.empty() ||
        (!shards.back().tensors.empty() && shards.back().data_bytes + b > max_shard_bytes))
      shards.emplace_back();
    shards.back().tensors.push_back(i);
    shards.back().data_bytes += b;
  }
  if (shards.empty()) shards.emplace_back();
  if (shards.size() == 1) {
    shards[0].file = "model.safetensors";
  } else {
    for (size_t s = 0; s < shards.size(); ++s) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      shards[s].file = name;
    }
  }
  return shards;
}

namespace {

Result<SafetensorsWriteResult> write_safetensors_impl(const std::string& dir,
                                                      const std::vector<SafetensorsTensor>& tensors,
                                                      const TensorFill& fill,
                                                      const SafetensorsWriteOptions& options) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  // Check the tensor list before touching the disk.
  {
    std::map<std::string, int> seen;
    for (const SafetensorsTensor& t : tensors) {
      if (t.name.empty() || t.name == "__metadata__")
        return make_error("safetensors writer: invalid tensor name '", t.name, "'");
      if (seen[t.name]++ > 0)
        return make_error("safetensors writer: tensor '", t.name, "' is listed twice");
      if (st_dtype_name(t.dtype) == nullptr)
        return make_error("safetensors writer: tensor '", t.name, "' has dtype ",
                          std::string(dtype_name(t.dtype)), " (supported: f32, f16, bf16)");
      for (int64_t d : t.shape)
        if (d < 0)
          return make_error("safetensors writer: tensor '", t.name, "' has a negative dimension");
    }
  }
  if (options.max_shard_bytes == 0) return make_error("safetensors writer: max shard size is 0");

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec))
    return make_error("cannot create the output directory '", dir, "'",
                      ec ? ": " + ec.message() : std::string());
  // Remove weight files of an earlier checkpoint in the same place.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (is_weight_file_name(n) && entry.is_regular_file()) {
      std::error_code rm;
      fs::remove(entry.path(), rm);
      if (rm)
        return make_error("cannot remove the old '", entry.path().string(), "': ", rm.message());
    }
  }
  if (ec) return make_error("cannot list '", dir, "': ", ec.message());

  const std::vector<SafetensorsShardPlan> plan =
      plan_safetensors_shards(tensors, options.max_shard_bytes);
  std::vector<ShardFile> files(plan.size());
  std::vector<std::string> headers(plan.size());
  uint64_t total_data = 0, total_file = 0;
  for (size_t s = 0; s < plan.size(); ++s) {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!options.metadata.empty()) {
      nlohmann::ordered_json m = nlohmann::ordered_json::object();
      for (const auto& [k, v] : options.metadata) m[k] = v;
      h["__metadata__"] = m;
    }
    uint64_t off = 0;
    for (size_t i : plan[s].tensors) {
      const SafetensorsTensor& t = tensors[i];
      const uint64_t b = t.n_bytes();
      h[t.name] = {
          {"dtype", st_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + b}}};
      off += b;
    }
    std::string text = h.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    headers[s] = std::move(text);
    files[s].path = dir + "/" + plan[s].file;
    files[s].data_begin = 8 + headers[s].size();
    files[s].size = files[s].data_begin + plan[s].data_bytes;
    total_data += plan[s].data_bytes;
    total_file += files[s].size;
  }

  // Enough room? (fallocate below reserves it; this gives the clearer message up front.)
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    const uint64_t avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    if (avail < total_file)
      return make_error("not enough disk space in '", dir, "': the checkpoint needs ",
                        gb(total_file), ", ", gb(avail), " are available");
  }

  // From here on, created files are removed on failure.
  auto cleanup = [&](Error e) -> Error {
    for (ShardFile& f : files) {
      if (f.fd >= 0) ::close(f.fd);
      f.fd = -1;
      if (!f.path.empty()) ::unlink(f.path.c_str());
    }
    return e;
  };
  for (size_t s = 0; s < files.size(); ++s) {
    ShardFile& f = files[s];
    f.fd = ::open(f.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f.fd < 0)
      return cleanup(make_error("cannot create '", f.path, "': ", std::strerror(errno)));
    if (f.size > 0) {
      const int r = ::posix_fallocate(f.fd, 0, (off_t)f.size);
      if (r == ENOSPC || r == EDQUOT)
        return cleanup(make_error("not enough disk space for '", f.path, "' (", gb(f.size),
                                  "): ", std::strerror(r)));
      if (r == EFBIG)
        return cleanup(make_error("'", f.path, "' (", gb(f.size),
                                  ") is larger than this process or file system may write (",
                                  std::strerror(r), "); use smaller shards"));
      // Other failures (e.g. EOPNOTSUPP) only mean no reservation: pwrite reports real errors.
    }
    uint8_t len[8];
    const uint64_t hl = headers[s].size();
    for (int b = 0; b < 8; ++b) len[b] = (uint8_t)(hl >> (8 * b));
    if (Status st = pwrite_all(f.fd, len, 8, 0, f.path); !st.ok()) return cleanup(st.error());
    if (Status st = pwrite_all(f.fd, headers[s].data(), headers[s].size(), 8, f.path); !st.ok())
      return cleanup(st.error());
  }

  // Work items: pieces of at most chunk_bytes of one tensor.
  std::vector<WorkItem> items;
  for (size_t s = 0; s < plan.size(); ++s) {
    uint64_t off = files[s].data_begin;
    for (size_t i : plan[s].tensors) {
      const SafetensorsTensor& t = tensors[i];
      const size_t es = dtype_block_bytes(t.dtype);
      const int64_t per = std::max<int64_t>(1, (int64_t)(options.chunk_bytes / es));
      const int64_t n = t.n_elements();
      for (int64_t first = 0; first < n; first += per) {
        WorkItem w;
        w.tensor = i;
        w.shard = s;
        w.first = first;
        w.count = std::min(per, n - first);
        w.bytes = (size_t)w.count * es;
        w.offset = off + (uint64_t)first * es;
        items.push_back(w);
      }
      off += t.n_bytes();
    }
  }

  int n_threads = options.n_threads > 0 ? options.n_threads
                                        : (int)std::max(1u, std::thread::hardware_concurrency());
  n_threads = (int)std::max<size_t>(1, std::min<size_t>((size_t)n_threads, items.size()));
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes_done{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::optional<Error> first_error;
  auto worker = [&] {
    std::vector<uint8_t> buf;
    for (;;) {
      if (failed.load(std::memory_order_relaxed)) break;
      const size_t k = next.fetch_add(1);
      if (k >= items.size()) break;
      const WorkItem& w = items[k];
      buf.resize(std::max(buf.size(), w.bytes));
      fill(w.tensor, w.first, w.count, buf.data());
      Status st = pwrite_all(files[w.shard].fd, buf.data(), w.bytes, w.offset, files[w.shard].path);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error) first_error = st.error();
        failed = true;
        break;
      }
      bytes_done.fetch_add(w.bytes);
    }
    std::lock_guard<std::mutex> lock(mu);
    ++finished;
    cv.notify_all();
  };
  std::vector<std::thread> threads;
  threads.reserve((size_t)n_threads);
  for (int i = 0; i < n_threads; ++i) threads.emplace_back(worker);
  {
    std::unique_lock<std::mutex> lock(mu);
    const auto interval =
        std::chrono::duration<double>(std::max(0.01, options.progress_interval_s));
    while (finished < n_threads) {
      cv.wait_for(lock, interval, [&] { return finished >= n_threads; });
      if (options.progress && finished < n_threads) {
        lock.unlock();
        options.progress(bytes_done.load(), total_data,
                         std::chrono::duration<double>(clock::now() - t0).count());
        lock.lock();
      }
    }
  }
  for (std::thread& t : threads) t.join();
  if (first_error) return cleanup(*first_error);

  for (ShardFile& f : files) {
    const int r = ::close(f.fd);
    f.fd = -1;
    if (r != 0) return cleanup(make_error("closing '", f.path, "': ", std::strerror(errno)));
  }

  SafetensorsWriteResult out;
  for (const ShardFile& f : files) out.files.push_back(f.path);
  if (plan.size() > 1) {
    nlohmann::ordered_json idx;
    idx["metadata"] = {{"total_size", total_data}};
    nlohmann::ordered_json wm = nlohmann::ordered_json::object();
    for (const SafetensorsShardPlan& p : plan)
      for (size_t i : p.tensors) wm[tensors[i].name] = p.file;
    idx["weight_map"] = wm;
    const std::string index_path = dir + "/model.safetensors.index.json";
    if (Status st = write_text_file(index_path, idx.dump(2) + "\n"); !st.ok())
      return cleanup(st.error());
    out.files.push_back(index_path);
  }
  out.data_bytes = total_data;
  out.file_bytes = total_file;
  out.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  if (options.progress) options.progress(total_data, total_data, out.seconds);
  return out;
}

}  // namespace

Result<SafetensorsWriteResult> write_safetensors(const std::string& dir,
                                                 const std::vector<SafetensorsTensor>& tensors,
                                                 const TensorFill& fill,
                                                 const SafetensorsWriteOptions& options) {
  // Directory iteration and JSON (a tensor name that is not UTF-8) can throw; memory too.
  try {
    return write_safetensors_impl(dir, tensors, fill, options);
  } catch (const std::exception& e) {
    return make_error("writing safetensors to '", dir, "': ", e.what());
  }
}

Status write_text_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return make_error("cannot create '", path, "': ", std::strerror(errno));
  Status st = pwrite_all(fd, text.data(), text.size(), 0, path);
  if (::close(fd) != 0 && st.ok()) st = make_error("closing '", path, "': ", std::strerror(errno));
  if (!st.ok()) ::unlink(path.c_str());
  return st;
}

}  // namespace infercept
