// safetensors writer: a list of tensors whose bytes come from a fill callback, written as one
// model.safetensors or as Hugging Face shards (model-00001-of-0000N.safetensors) plus
// model.safetensors.index.json. Made for multi-GB checkpoints: the data is produced and
// written by several threads at once, in large pwrite()s at their final offsets, so the
// result does not depend on the thread count. Disk-space and I/O problems are Errors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"

namespace infercept {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::bf16;   // f32, f16 or bf16
  std::vector<int64_t> shape;  // outermost first

  int64_t n_elements() const;
  uint64_t n_bytes() const;
};

// Writes elements [first, first + count) of tensor `index` to `out` (count * element size
// bytes). Called from several threads at once for disjoint ranges.
using TensorFill = std::function<void(size_t index, int64_t first, int64_t count, void* out)>;

struct SafetensorsWriteOptions {
  // Most tensor bytes per shard (Hugging Face's default "5GB"); a tensor larger than this
  // gets a shard of its own.
  uint64_t max_shard_bytes = 5'000'000'000ull;
  int n_threads = 0;               // 0 = hardware concurrency
  size_t chunk_bytes = 32u << 20;  // one thread's unit of work (fill + pwrite)
  std::map<std::string, std::string> metadata = {{"format", "pt"}};  // "__metadata__"
  // Called on the calling thread about every progress_interval_s, and once at the end.
  std::function<void(uint64_t bytes_done, uint64_t bytes_total, double seconds)> progress;
  double progress_interval_s = 1.0;
};

struct SafetensorsShardPlan {
  std::string file;             // name inside the directory
  std::vector<size_t> tensors;  // indices into the tensor list, in file order
  uint64_t data_bytes = 0;
};

// Splits the tensors, in order, into shards (single shard: "model.safetensors").
std::vector<SafetensorsShardPlan> plan_safetensors_shards(
    const std::vector<SafetensorsTensor>& tensors, uint64_t max_shard_bytes);

struct SafetensorsWriteResult {
  std::vector<std::string> files;  // paths written: shards, then the index if any
  uint64_t data_bytes = 0;         // tensor bytes
  uint64_t file_bytes = 0;         // on disk, headers included
  double seconds = 0.0;
};

// Writes the checkpoint's weights into `dir` (created if missing). Old weight files there
// (model.safetensors, model-*-of-*.safetensors, the index) are removed first so that no stale
// shard is picked up; on failure the files this call created are removed again.
Result<SafetensorsWriteResult> write_safetensors(const std::string& dir,
                                                 const std::vector<SafetensorsTensor>& tensors,
                                                 const TensorFill& fill,
                                                 const SafetensorsWriteOptions& options = {});

// Writes `text` to `path` (replacing it); errors (no space, no permission) as values.
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace infercept
