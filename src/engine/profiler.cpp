#include "engine/profiler.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <numeric>

#include "core/check.h"
#include "kv/block_allocator.h"
#include "kv/disk_tier.h"

namespace infercept {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Best of `repeats` timed forward passes after one warm-up.
double best_forward(StepModel& model, const StepInput& in, KvStorage& device,
                    std::vector<float>& logits, int repeats) {
  model.forward(in, device, logits.data());
  double best = 1e30;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto t = std::chrono::steady_clock::now();
    model.forward(in, device, logits.data());
    best = std::min(best, seconds_since(t));
  }
  return best;
}

// A step of `rows` decode rows, row i at `position` of its own block table `tables[i]`
// (ctx_len position + 1), sampling only the last row as T_fwd(x) does.
StepInput decode_step(int64_t rows, int64_t position, int64_t block_size,
                      const std::vector<std::vector<int32_t>>& tables, int32_t vocab) {
  StepInput in;
  in.max_blocks = 0;
  for (const auto& t : tables) in.max_blocks = std::max(in.max_blocks, (int32_t)t.size());
  for (int64_t i = 0; i < rows; ++i) {
    const auto& t = tables[(size_t)i];
    in.q_start.push_back((int32_t)i);
    in.q_len.push_back(1);
    in.ctx_len.push_back((int32_t)position + 1);
    in.tokens.push_back((int32_t)((i * 7919 + 13) % vocab));
    in.positions.push_back((int32_t)position);
    in.slots.push_back(t[(size_t)(position / block_size)] * (int32_t)block_size +
                       (int32_t)(position % block_size));
    for (int32_t b = 0; b < in.max_blocks; ++b)
      in.block_tables.push_back(b < (int32_t)t.size() ? t[(size_t)b] : t.back());
  }
  in.logit_rows = {(int32_t)rows - 1};
  return in;
}
}  // namespace

std::string profile_backend_label(const std::string& device, int tensor_parallel_size) {
  const std::string kind = device == "cpu" ? "cpu" : "cuda";
  return tensor_parallel_size > 1 ? kind + "-tp" + std::to_string(tensor_parallel_size) : kind;
}

std::string profile_cache_path(const std::string& model_path, const std::string& backend,
                               int threads) {
  return model_path + ".profile-" + backend + "-" + std::to_string(threads) + "t.json";
}

namespace {
void measure_step_terms(StepModel& model, KvStorage& device, int64_t block_size,
                        std::vector<float>& logits, int repeats, CostModel& cost) {
  // What a step costs beyond T_fwd(x) (CostModel::step_seconds). Both are differences of two
  // steps timed here back to back, so a noisy machine can make them negative: they are
  // clamped to 0 (no term) rather than let more work look cheaper.
  const int64_t blocks = device.geometry().n_blocks;
  const int32_t vocab = (int32_t)model.config().vocab_size;
  // Context: one decode row reading a context of C tokens against one reading 1 token. The
  // largest T_fwd sample left positions [0, x) of a valid sequence in blocks 0.. (slot ==
  // position), so the long row reads real KV (no denormals or NaNs to slow it). At batch 1
  // on a GPU this is attention's small-batch cost (it cannot fill the device), the upper end.
  const int64_t c = cost.t_fwd_samples.back().first;
  if (c >= 2 && BlockTable::blocks_for(c, block_size) <= blocks) {
    std::vector<int32_t> table((size_t)BlockTable::blocks_for(c, block_size));
    std::iota(table.begin(), table.end(), 0);
    const double t_long = best_forward(model, decode_step(1, c - 1, block_size, {table}, vocab),
                                       device, logits, repeats);
    const double t_short =
        best_forward(model, decode_step(1, 0, block_size, {table}, vocab), device, logits, repeats);
    cost.context_samples = {{1, std::max(0.0, (t_long - t_short) / (double)(c - 1))}};
  }
  // Sequences: n decode rows of one token each (no context to speak of) against T_fwd(n),
  // one sequence of n tokens: the difference is what n - 1 more sequences cost (their own
  // attention items, block tables, the per-row paths).
  const int64_t n = std::min<int64_t>({16, model.max_rows(), blocks});
  if (n >= 2) {
    std::vector<std::vector<int32_t>> tables((size_t)n);
    for (int64_t i = 0; i < n; ++i) tables[(size_t)i] = {(int32_t)i};
    StepInput one;
    for (int64_t p = 0; p < n; ++p) {
      one.tokens.push_back((int32_t)((p * 7919) % vocab));
      one.positions.push_back((int32_t)p);
      one.slots.push_back((int32_t)p);
    }
    one.q_start = {0};
    one.q_len = {(int32_t)n};
    one.ctx_len = {(int32_t)n};
    one.max_blocks = (int32_t)BlockTable::blocks_for(n, block_size);
    for (int32_t b = 0; b < one.max_blocks; ++b) one.block_tables.push_back(b);
    one.logit_rows = {(int32_t)n - 1};
    const double t_one = best_forward(model, one, device, logits, repeats);
    const double t_many =
        best_forward(model, decode_step(n, 0, block_size, tables, vocab), device, logits, repeats);
    cost.sequence_seconds = std::max(0.0, (t_many - t_one) / (double)(n - 1));
  }
}
}  // namespace

Result<CostModel> profile_cost_model(StepModel& model, Backend& backend, KvStorage& device,
                                     KvStorage& host, int64_t block_size,
                                     const ProfileOptions& options) {
  const KvGeometry& g = device.geometry();
  std::vector<int64_t> counts = options.token_counts;
  if (counts.empty())
    for (int64_t x = 1; x <= model.max_rows(); x *= 2) counts.push_back(x);
  const int64_t max_tokens = std::min<int64_t>(model.max_rows(), g.n_blocks * block_size);
  CostModel cost;
  const int64_t vocab = model.config().vocab_size;
  std::vector<float> logits((size_t)vocab);
  for (int64_t x : counts) {
    if (x < 1 || x > max_tokens) continue;
    StepInput in;
    const int64_t n_blocks = BlockTable::blocks_for(x, block_size);
    for (int64_t p = 0; p < x; ++p) {
      in.tokens.push_back((int32_t)((p * 7919) % vocab));
      in.positions.push_back((int32_t)p);
      in.slots.push_back((int32_t)p);  // blocks 0.. in order: slot == position
    }
    in.q_start = {0};
    in.q_len = {(int32_t)x};
    in.ctx_len = {(int32_t)x};
    in.max_blocks = (int32_t)n_blocks;
    for (int32_t b = 0; b < (int32_t)n_blocks; ++b) in.block_tables.push_back(b);
    in.logit_rows = {(int32_t)x - 1};
    double best = 1e30;
    model.forward(in, device, logits.data());  // warm-up
    for (int r = 0; r < std::max(1, options.repeats); ++r) {
      const auto t = std::chrono::steady_clock::now();
      model.forward(in, device, logits.data());
      best = std::min(best, seconds_since(t));
    }
    cost.t_fwd_samples.emplace_back(x, best);
  }
  if (cost.t_fwd_samples.empty())
    return make_error("profile: no token count fits the model's step size");

  // Copy bandwidth: whole blocks device -> host and back, best of the repeats.
  const int64_t nb = std::min({options.copy_blocks, g.n_blocks, host.geometry().n_blocks});
  std::vector<int32_t> ids((size_t)nb);
  std::iota(ids.begin(), ids.end(), 0);
  double best_out = 1e30, best_in = 1e30;
  backend.copy_blocks_between(device, host, ids, ids);  // warm-up: touch the pages
  for (int r = 0; r < std::max(1, options.repeats); ++r) {
    auto t = std::chrono::steady_clock::now();
    backend.copy_blocks_between(device, host, ids, ids);
    backend.sync();
    best_out = std::min(best_out, seconds_since(t));
    t = std::chrono::steady_clock::now();
    backend.copy_blocks_between(host, device, ids, ids);
    backend.sync();
    best_in = std::min(best_in, seconds_since(t));
  }
  cost.kv_bytes_per_token =
      (double)g.bytes_per_block_per_layer() * 2.0 * (double)g.n_layers / (double)block_size;
  const double bytes = cost.kv_bytes_per_token * (double)(nb * block_size);
  cost.swap_bytes_per_second = bytes / std::max(best_out, best_in);
  cost.saturation_tokens = cost.derive_saturation();
  // Differences of two steps are noisier than the steps: best of at least 5 each.
  measure_step_terms(model, device, block_size, logits, std::max(5, options.repeats), cost);
  TRY(cost.validate());
  return cost;
}

Result<DiskBandwidth> measure_disk_bandwidth(const std::string& dir, uint64_t bytes) {
  // A pool of 64 blocks of 1 MiB in one plane holds the group; its bytes are not zero (a
  // filesystem may store zero pages sparsely).
  constexpr size_t kBlock = 1 << 20;
  const int32_t n = (int32_t)std::clamp<uint64_t>(bytes / kBlock, 1, 4096);
  std::vector<uint8_t> pool((size_t)n * kBlock);
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = (uint8_t)(i * 2654435761u >> 13);
  HostBlockPlanes planes;
  planes.planes = {pool.data()};
  planes.block_bytes = kBlock;
  planes.n_blocks = n;
  std::vector<int32_t> blocks((size_t)n);
  for (int32_t i = 0; i < n; ++i) blocks[(size_t)i] = i;
  DiskKvTierOptions o;
  o.dir = dir;
  o.budget_bytes = DiskKvTier::file_bytes(planes, blocks.size());
  TRY_ASSIGN(std::unique_ptr<DiskKvTier> tier, DiskKvTier::open(std::move(o)));
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  TRY_ASSIGN(DiskWrite w, tier->submit_write(planes, blocks));
  if (DiskPoll p = tier->wait(w.ticket); p.state != DiskJobState::done)
    return make_error("measuring the disk: ", p.error);
  const std::string path = tier->group_path(w.group);
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return make_error("measuring the disk: cannot open ", path);
  ::fdatasync(fd);
  const double write_s = std::chrono::duration<double>(clock::now() - t0).count();
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // the read comes from the drive
  ::close(fd);
  t0 = clock::now();
  TRY_ASSIGN(uint64_t ticket, tier->submit_read(w.group, planes, blocks));
  if (DiskPoll p = tier->wait(ticket); p.state != DiskJobState::done)
    return make_error("measuring the disk: ", p.error);
  const double read_s = std::chrono::duration<double>(clock::now() - t0).count();
  const double payload = (double)planes.group_bytes(blocks.size());
  return DiskBandwidth{payload / std::max(write_s, 1e-9), payload / std::max(read_s, 1e-9)};
}

}  // namespace infercept
