// The disk tier of KV block groups (kv/disk_tier.h): groups written from host blocks come
// back byte for byte into other blocks, jobs run off the caller's thread and complete by
// ticket, and every outside failure (budget, full disk, I/O error, a directory that is gone
// or unusable, a truncated or corrupted file) is an error value, never a crash.
#include "kv/disk_tier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace infercept {
namespace {

namespace fs = std::filesystem;

// A host pool laid out like a backend's: n_planes planes of [n_blocks, block_bytes].
struct FakeHostPool {
  std::vector<std::vector<uint8_t>> bytes;
  HostBlockPlanes planes;
  FakeHostPool(int n_planes, int32_t n_blocks, size_t block_bytes) {
    bytes.resize((size_t)n_planes);
    planes.block_bytes = block_bytes;
    planes.n_blocks = n_blocks;
    for (auto& p : bytes) {
      p.resize((size_t)n_blocks * block_bytes);
      planes.planes.push_back(p.data());
    }
  }
  void fill_random(std::mt19937_64& rng) {
    for (auto& p : bytes)
      for (auto& b : p) b = (uint8_t)rng();
  }
  std::vector<uint8_t> block(int32_t b) const {  // one block across all planes
    std::vector<uint8_t> out;
    for (const auto& p : bytes)
      out.insert(out.end(), p.begin() + (ptrdiff_t)(b * planes.block_bytes),
                 p.begin() + (ptrdiff_t)((b + 1) * planes.block_bytes));
    return out;
  }
};

// A fresh directory per test, removed afterwards.
class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("infercept-disk-tier-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<DiskKvTier> open(uint64_t budget, std::function<int()> fault = nullptr) {
    auto t = DiskKvTier::open({dir_.string(), budget, std::move(fault)});
    EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
    return t.ok() ? std::move(t).value() : nullptr;
  }
  int count_group_files() const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().rfind("kvgroup-", 0) == 0) ++n;
    return n;
  }
  fs::path dir_;
};

TEST_F(DiskTierTest, ManyGroupsRoundTripIntoOtherBlocks) {
  std::mt19937_64 rng(7);
  FakeHostPool src(6, 64, 200);  // 3 layers; 200 bytes: not a multiple of the hash stripe
  FakeHostPool dst(6, 64, 200);
  src.fill_random(rng);
  dst.fill_random(rng);
  auto tier = open(1 << 20);
  ASSERT_TRUE(tier);

  // 12 groups of 1..9 blocks, from scattered source blocks.
  std::vector<std::vector<int32_t>> from, to;
  std::vector<DiskWrite> writes;
  for (int g = 0; g < 12; ++g) {
    std::vector<int32_t> blocks;
    const int n = 1 + (int)(rng() % 9);
    for (int i = 0; i < n; ++i) blocks.push_back((int32_t)(rng() % 64));
    auto w = tier->submit_write(src.planes, blocks);
    ASSERT_TRUE(w.ok()) << w.error().message;
    writes.push_back(*w);
    from.push_back(blocks);
  }
  for (const DiskWrite& w : writes) {
    DiskPoll p = tier->wait(w.ticket);
    EXPECT_EQ(p.state, DiskJobState::done) << p.error;
  }
  EXPECT_EQ(tier->n_groups(), 12);
  EXPECT_EQ(count_group_files(), 12);
  uint64_t expect_used = 0;
  for (const auto& f : from) expect_used += DiskKvTier::file_bytes(src.planes, f.size());
  EXPECT_EQ(tier->used_bytes(), expect_used);

  // Read each group into a reversed run of destination blocks.
  for (size_t g = 0; g < writes.size(); ++g) {
    std::vector<int32_t> blocks;
    for (size_t i = 0; i < from[g].size(); ++i) blocks.push_back((int32_t)(63 - i));
    auto r = tier->submit_read(writes[g].group, dst.planes, blocks);
    ASSERT_TRUE(r.ok()) << r.error().message;
    DiskPoll p = tier->wait(*r);
    ASSERT_EQ(p.state, DiskJobState::done) << p.error;
    for (size_t i = 0; i < blocks.size(); ++i)
      EXPECT_EQ(dst.block(blocks[i]), src.block(from[g][i])) << "group " << g << " block " << i;
  }
  for (const DiskWrite& w : writes) tier->remove(w.group);
  EXPECT_EQ(tier->used_bytes(), 0u);
  EXPECT_EQ(tier->n_groups(), 0);
}

TEST_F(DiskTierTest, QueuedJobsCompleteInAnyPollOrder) {
  std::mt19937_64 rng(11);
  FakeHostPool src(4, 256, 4096);
  FakeHostPool dst(4, 256, 4096);
  src.fill_random(rng);
  auto tier = open(64 << 20);
  ASSERT_TRUE(tier);
  // 32 writes and, queued right behind them without waiting, their reads: FIFO order on the
  // I/O thread makes each read see its group's file.
  std::vector<DiskWrite> writes;
  std::vector<uint64_t> reads;
  for (int g = 0; g < 32; ++g) {
    std::vector<int32_t> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(g * 8 + i);
    auto w = tier->submit_write(src.planes, blocks);
    ASSERT_TRUE(w.ok());
    writes.push_back(*w);
    auto r = tier->submit_read(w->group, dst.planes, blocks);
    ASSERT_TRUE(r.ok());
    reads.push_back(*r);
  }
  // Poll from the back, as an engine step would: never blocking, each ticket answered once.
  std::vector<uint64_t> tickets;
  for (auto& w : writes) tickets.push_back(w.ticket);
  tickets.insert(tickets.end(), reads.begin(), reads.end());
  std::reverse(tickets.begin(), tickets.end());
  size_t done = 0;
  std::vector<bool> answered(tickets.size(), false);
  for (int spin = 0; done < tickets.size() && spin < 200000; ++spin) {
    for (size_t i = 0; i < tickets.size(); ++i) {
      if (answered[i]) continue;
      DiskPoll p = tier->poll(tickets[i]);
      if (p.state == DiskJobState::pending) continue;
      EXPECT_EQ(p.state, DiskJobState::done) << p.error;
      answered[i] = true;
      ++done;
    }
    if (done < tickets.size()) ::usleep(100);
  }
  ASSERT_EQ(done, tickets.size());
  EXPECT_EQ(dst.bytes, src.bytes);
}

TEST_F(DiskTierTest, BudgetRefusesAtOnceAndFreesOnRemove) {
  FakeHostPool src(2, 16, 1024);
  const std::vector<int32_t> four = {0, 1, 2, 3};
  const uint64_t group = DiskKvTier::file_bytes(src.planes, 4);
  auto tier = open(3 * group);  // room for three groups of four blocks
  ASSERT_TRUE(tier);
  std::vector<DiskWrite> w;
  for (int i = 0; i < 3; ++i) {
    auto r = tier->submit_write(src.planes, four);
    ASSERT_TRUE(r.ok()) << r.error().message;
    w.push_back(*r);
  }
  auto refused = tier->submit_write(src.planes, four);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("budget"), std::string::npos) << refused.error().message;
  // A smaller group still fits? No: the budget is full to the byte.
  EXPECT_FALSE(tier->submit_write(src.planes, std::vector<int32_t>{0}).ok());
  EXPECT_EQ(tier->used_bytes(), 3 * group);
  tier->remove(w[1].group);
  EXPECT_EQ(tier->used_bytes(), 2 * group);
  auto again = tier->submit_write(src.planes, four);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(tier->wait(again->ticket).state, DiskJobState::done);
  // A removed group cannot be read.
  auto gone = tier->submit_read(w[1].group, src.planes, four);
  EXPECT_FALSE(gone.ok());
}

TEST_F(DiskTierTest, TruncatedOrCorruptedFilesFailTheirRead) {
  std::mt19937_64 rng(3);
  FakeHostPool src(4, 8, 512);
  FakeHostPool dst(4, 8, 512);
  src.fill_random(rng);
  auto tier = open(1 << 20);
  ASSERT_TRUE(tier);
  const std::vector<int32_t> blocks = {0, 1, 2};
  auto a = tier->submit_write(src.planes, blocks);
  auto b = tier->submit_write(src.planes, blocks);
  auto c = tier->submit_write(src.planes, blocks);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (auto* w : {&*a, &*b, &*c}) ASSERT_EQ(tier->wait(w->ticket).state, DiskJobState::done);

  // a: cut short. b: one payload byte flipped. c: one header byte flipped.
  fs::resize_file(tier->group_path(a->group), fs::file_size(tier->group_path(a->group)) - 100);
  auto flip = [](const std::string& path, std::streamoff at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    char ch = 0;
    f.read(&ch, 1);
    ch = (char)(ch ^ 0x10);
    f.seekp(at);
    f.write(&ch, 1);
  };
  flip(tier->group_path(b->group), 64 + 700);
  flip(tier->group_path(c->group), 20);

  for (auto [w, what] : {std::pair{&*a, "truncated"}, std::pair{&*b, "checksum"},
                         std::pair{&*c, "corrupted header"}}) {
    auto r = tier->submit_read(w->group, dst.planes, blocks);
    ASSERT_TRUE(r.ok());
    DiskPoll p = tier->wait(*r);
    EXPECT_EQ(p.state, DiskJobState::failed);
    EXPECT_NE(p.error.find(what), std::string::npos) << p.error;
    EXPECT_NE(p.error.find(tier->group_path(w->group)), std::string::npos) << p.error;
  }
  // A file deleted behind the tier's back: failed too, naming the cause.
  fs::remove(tier->group_path(a->group));
  auto r = tier->submit_read(a->group, dst.planes, blocks);
  ASSERT_TRUE(r.ok());
  DiskPoll p = tier->wait(*r);
  EXPECT_EQ(p.state, DiskJobState::failed);
  EXPECT_NE(p.error.find("No such file"), std::string::npos) << p.error;
}

TEST_F(DiskTierTest, InjectedWriteErrorsFailTheTicketAndReleaseTheBudget) {
  FakeHostPool src(2, 64, 1024);
  std::atomic<int> fail_next{0};
  auto tier = open(1 << 20, [&] { return fail_next.exchange(0); });
  ASSERT_TRUE(tier);
  std::vector<int32_t> blocks(40);
  for (int i = 0; i < 40; ++i) blocks[(size_t)i] = i;

  for (int err : {ENOSPC, EIO}) {
    fail_next = err;
    auto w = tier->submit_write(src.planes, blocks);
    ASSERT_TRUE(w.ok());
    DiskPoll p = tier->wait(w->ticket);
    EXPECT_EQ(p.state, DiskJobState::failed);
    EXPECT_NE(p.error.find(std::strerror(err)), std::string::npos) << p.error;
    // The partial file is gone, its bytes are back, a read of the group is refused.
    EXPECT_FALSE(fs::exists(tier->group_path(w->group)));
    EXPECT_EQ(tier->used_bytes(), 0u);
    auto r = tier->submit_read(w->group, src.planes, blocks);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("never written"), std::string::npos);
    tier->remove(w->group);
    EXPECT_EQ(tier->n_groups(), 0);
  }
  // The tier goes on working after the failures.
  auto w = tier->submit_write(src.planes, blocks);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(tier->wait(w->ticket).state, DiskJobState::done);
}

TEST_F(DiskTierTest, UnusableDirectoriesAreErrorValues) {
  // A regular file where the directory should be, and below one.
  std::ofstream(dir_.string()) << "x";
  auto a = DiskKvTier::open({dir_.string(), 1 << 20, nullptr});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find(dir_.string()), std::string::npos) << a.error().message;
  auto b = DiskKvTier::open({(dir_ / "sub").string(), 1 << 20, nullptr});
  EXPECT_FALSE(b.ok());
  EXPECT_FALSE(DiskKvTier::open({"", 1 << 20, nullptr}).ok());
  fs::remove(dir_);

  // Not writable (meaningless as root, who writes anywhere).
  if (::geteuid() != 0) {
    fs::create_directories(dir_);
    fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
    auto c = DiskKvTier::open({dir_.string(), 1 << 20, nullptr});
    EXPECT_FALSE(c.ok());
    fs::permissions(dir_, fs::perms::owner_all);
  }
}

TEST_F(DiskTierTest, DirectoryRemovedWhileOpenFailsWritesNotTheProcess) {
  FakeHostPool src(2, 4, 256);
  auto tier = open(1 << 20);
  ASSERT_TRUE(tier);
  fs::remove_all(dir_);
  auto w = tier->submit_write(src.planes, std::vector<int32_t>{0, 1});
  ASSERT_TRUE(w.ok());
  DiskPoll p = tier->wait(w->ticket);
  EXPECT_EQ(p.state, DiskJobState::failed);
  EXPECT_NE(p.error.find("creating"), std::string::npos) << p.error;
  EXPECT_EQ(tier->used_bytes(), 0u);
}

TEST_F(DiskTierTest, OneTierPerDirectoryStaleFilesGoOnOpenAllFilesOnClose) {
  FakeHostPool src(2, 8, 256);
  fs::create_directories(dir_);
  std::ofstream(dir_ / "kvgroup-17.kv") << "left by a dead process";
  std::ofstream(dir_ / "unrelated.txt") << "not ours";
  {
    auto tier = open(1 << 20);
    ASSERT_TRUE(tier);
    EXPECT_FALSE(fs::exists(dir_ / "kvgroup-17.kv"));
    EXPECT_TRUE(fs::exists(dir_ / "unrelated.txt"));
    // A second tier on the same directory is refused while the first lives.
    auto second = DiskKvTier::open({dir_.string(), 1 << 20, nullptr});
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.error().message.find("in use"), std::string::npos);

    for (int i = 0; i < 5; ++i) {
      auto w = tier->submit_write(src.planes, std::vector<int32_t>{i, i + 1});
      ASSERT_TRUE(w.ok());
      ASSERT_EQ(tier->wait(w->ticket).state, DiskJobState::done);
    }
    // Queued behind these, a burst the destructor may drop unrun.
    for (int i = 0; i < 20; ++i)
      ASSERT_TRUE(tier->submit_write(src.planes, std::vector<int32_t>{0}).ok());
    EXPECT_GE(count_group_files(), 5);
  }
  EXPECT_EQ(count_group_files(), 0);
  EXPECT_TRUE(fs::exists(dir_ / "unrelated.txt"));
  // The lock went with it: the directory can be opened again.
  auto again = DiskKvTier::open({dir_.string(), 1 << 20, nullptr});
  EXPECT_TRUE(again.ok());
}

}  // namespace
}  // namespace infercept
