// The disk tier end to end on the default model (CPU): minwaste spills paused requests' host
// KV to files when a small host pool is full, reads it back when their tools answer, and the
// greedy tokens stay those of uninterrupted runs. A write that fails (ENOSPC, EIO through the
// tier's fault hook) keeps the KV on the host; a file corrupted on disk fails its read's
// checksum and the request recomputes. Never a failed request; the scheduler's invariants
// (free + used == total per tier, the disk's blocks) are checked after every step.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "interception_scripts.h"
#include "test_util.h"

namespace infercept {
namespace {

using namespace testing;

const std::vector<Generated>& reference_tokens() {
  static const std::vector<Generated> ref = reference(scripts());
  return ref;
}

struct DiskDir {
  std::string path;
  DiskDir() {
    char tmpl[] = "/tmp/infercept-disk-engine-XXXXXX";
    const char* d = mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    path = d != nullptr ? d : "";
  }
  ~DiskDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// A device pool too small for everyone and a host pool of 4 blocks: paused requests' KV
// goes to the host, and the host fills.
EngineConfig disk_config(const std::string& dir) {
  EngineConfig c = config_for("minwaste", "oracle", 160);
  c.swap_space_tokens = 64;
  c.kv_disk_dir = dir;
  c.kv_disk_gb = 0.1;
  return c;
}

void expect_same_tokens(const std::vector<Generated>& got) {
  const std::vector<Generated>& ref = reference_tokens();
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    for (size_t k = 0; k < ref[i].size(); ++k)
      EXPECT_EQ(got[i][k], ref[i][k]) << "script " << i << " segment " << k;
}

void expect_nothing_held(const EngineCore& e) {
  EXPECT_EQ(e.allocator().n_held(), 0);
  EXPECT_EQ(e.host_allocator().n_held(), 0);
  EXPECT_EQ(e.scheduler().disk_used_blocks(), 0);
  EXPECT_EQ(e.scheduler().disk_jobs_in_flight(), 0);
}

TEST(DiskTierEngine, SpilledRequestsResumeWithTheTokensOfUninterruptedRuns) {
  DiskDir dir;
  auto e = EngineCore::create(disk_config(dir.path));
  ASSERT_TRUE(e.ok()) << e.error().message;
  ASSERT_NE((*e)->disk_tier(), nullptr);
  EngineStats st;
  expect_same_tokens(run_scripts(**e, scripts(), /*hints=*/true, &st));
  std::printf("spills %lld, spilled/restored %lld/%lld tokens, failures %lld/%lld\n",
              (long long)st.spill_decisions, (long long)st.spilled_tokens,
              (long long)st.restored_tokens, (long long)st.disk_write_failures,
              (long long)st.disk_read_failures);
  EXPECT_GT(st.spilled_tokens, 0);
  EXPECT_GT(st.restored_tokens, 0);
  EXPECT_EQ(st.disk_write_failures, 0);
  EXPECT_EQ(st.disk_read_failures, 0);
  EXPECT_GT(st.spilled_bytes, 0.0);
  expect_nothing_held(**e);
}

// Over three tensor-parallel ranks a disk copy holds every rank's share of its blocks: the
// spilled requests resume with the tokens the same ranks generate uninterrupted.
TEST(DiskTierEngine, ThreeRanksSpillAndRestoreEveryRanksShare) {
  DiskDir dir;
  EngineConfig c = disk_config(dir.path);
  c.tensor_parallel_size = 3;
  c.n_threads = 3;
  auto e = EngineCore::create(c);
  ASSERT_TRUE(e.ok()) << e.error().message;
  EngineStats st;
  const std::vector<Generated> got = run_scripts(**e, scripts(), /*hints=*/true, &st);
  EXPECT_GT(st.spilled_tokens, 0);
  EXPECT_GT(st.restored_tokens, 0);
  EXPECT_EQ(st.disk_write_failures + st.disk_read_failures, 0);
  const std::vector<Generated> ref = reference(scripts(), "cpu", 3);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    for (size_t k = 0; k < ref[i].size(); ++k)
      EXPECT_EQ(got[i][k], ref[i][k]) << "script " << i << " segment " << k;
  expect_nothing_held(**e);
}

TEST(DiskTierEngine, FailedWritesKeepTheKvAndEveryRequestCompletes) {
  for (int err : {ENOSPC, EIO}) {
    DiskDir dir;
    EngineConfig c = disk_config(dir.path);
    c.kv_disk_write_fault = [err] { return err; };
    auto e = EngineCore::create(c);
    ASSERT_TRUE(e.ok()) << e.error().message;
    EngineStats st;
    expect_same_tokens(run_scripts(**e, scripts(), /*hints=*/true, &st));
    EXPECT_GT(st.disk_write_failures, 0) << err;
    EXPECT_EQ(st.spilled_tokens, 0) << err;
    EXPECT_EQ(st.restored_tokens, 0) << err;
    expect_nothing_held(**e);
  }
}

// Flips a byte of every group file's payload (the lock file aside).
int corrupt_group_files(const std::string& dir) {
  int n = 0;
  // The tier's I/O thread may remove a group's file (a copy dropped) while this looks: a file
  // gone meanwhile is skipped, not an error.
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    if (!f.is_regular_file(ec) || f.path().filename().string().rfind(".infercept", 0) == 0)
      continue;
    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = (std::streamoff)std::filesystem::file_size(f.path(), ec);
    if (!io || ec || size < 1) continue;
    io.seekg(size - 1);
    char b = 0;
    io.read(&b, 1);
    b = (char)~b;
    io.seekp(size - 1);
    io.write(&b, 1);
    ++n;
  }
  return n;
}

TEST(DiskTierEngine, CorruptedFileOnRestoreRecomputes) {
  DiskDir dir;
  auto e = EngineCore::create(disk_config(dir.path));
  ASSERT_TRUE(e.ok()) << e.error().message;
  EngineCore& core = **e;
  bool corrupted = false;
  EngineStats st;
  auto got = run_scripts(core, scripts(), /*hints=*/true, &st, [&] {
    if (corrupted) return;
    for (const Sequence* s : core.scheduler().paused())
      if (s->on_disk()) {
        corrupted = corrupt_group_files(dir.path) > 0;
        break;
      }
  });
  ASSERT_TRUE(corrupted);
  expect_same_tokens(got);
  EXPECT_GT(st.disk_read_failures, 0);
  EXPECT_GT(st.recomputed_tokens, 0);
  expect_nothing_held(core);
}

TEST(DiskTierEngine, BadFlagsAreClearStartUpErrors) {
  DiskDir dir;
  EngineConfig c = disk_config(dir.path);
  c.kv_disk_gb = 0.0;
  auto e = EngineCore::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("--kv-disk-gb"), std::string::npos) << e.error().message;
  c = disk_config("");
  c.kv_disk_gb = 1.0;
  e = EngineCore::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("--kv-disk-dir"), std::string::npos) << e.error().message;
  const std::string file = dir.path + "/not-a-dir";
  std::ofstream(file) << "x";
  e = EngineCore::create(disk_config(file));  // a file where the directory should be
  EXPECT_FALSE(e.ok());
}

}  // namespace
}  // namespace infercept
