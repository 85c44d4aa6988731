// The cost model (interpolation, saturation, swap budget, validation, JSON) and the waste
// formulas, checked against numbers worked out by hand in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "sched/cost_model.h"
#include "sched/waste.h"

namespace infercept {
namespace {

// Round numbers so the expected values can be computed by hand:
//   t_fwd flat-ish up to 500 tokens (S = 500 at 20% tolerance), then linear.
//   M = 1000 bytes per token, B = 1e6 bytes per second (1000 tokens per second).
CostModel hand_model() {
  CostModel m;
  m.t_fwd_samples = {{100, 0.010}, {500, 0.011}, {1000, 0.020}, {2000, 0.040}};
  m.kv_bytes_per_token = 1000.0;
  m.swap_bytes_per_second = 1.0e6;
  return m;
}

TEST(CostModel, TfwdInterpolatesAndExtrapolates) {
  const CostModel m = hand_model();
  EXPECT_DOUBLE_EQ(m.t_fwd(0), 0.0);  // no step
  EXPECT_DOUBLE_EQ(m.t_fwd(-3), 0.0);
  EXPECT_DOUBLE_EQ(m.t_fwd(1), 0.010);  // below the first sample: clamped, not extrapolated
  EXPECT_DOUBLE_EQ(m.t_fwd(100), 0.010);
  EXPECT_DOUBLE_EQ(m.t_fwd(300), 0.0105);  // halfway between 100 and 500
  EXPECT_DOUBLE_EQ(m.t_fwd(750), 0.0155);
  EXPECT_DOUBLE_EQ(m.t_fwd(2000), 0.040);
  EXPECT_DOUBLE_EQ(m.t_fwd(3000), 0.060);  // slope of the last segment: 2e-5 s per token
}

TEST(CostModel, TfwdNeverFallsPastTheLastSample) {
  CostModel m = hand_model();
  m.t_fwd_samples = {{1, 0.010}, {100, 0.030}, {200, 0.020}};  // noisy last point
  EXPECT_DOUBLE_EQ(m.t_fwd(150), 0.025);
  EXPECT_DOUBLE_EQ(m.t_fwd(1000), 0.020);  // flat, not negative-slope extrapolation
  m.t_fwd_samples = {{64, 0.5}};
  EXPECT_DOUBLE_EQ(m.t_fwd(1), 0.5);
  EXPECT_DOUBLE_EQ(m.t_fwd(10000), 0.5);
  m.t_fwd_samples.clear();
  EXPECT_DOUBLE_EQ(m.t_fwd(10), 0.0);
}

TEST(CostModel, SwapTimeAndBudget) {
  const CostModel m = hand_model();
  EXPECT_DOUBLE_EQ(m.t_swap(0), 0.0);
  EXPECT_DOUBLE_EQ(m.t_swap(1000), 1.0);
  EXPECT_DOUBLE_EQ(m.t_swap(250), 0.25);
  EXPECT_EQ(m.swap_budget_tokens(0.010), 10);
  EXPECT_EQ(m.swap_budget_tokens(0.0105), 10);  // floor: never promise more than fits
  EXPECT_EQ(m.swap_budget_tokens(0.0), 0);
  EXPECT_EQ(m.swap_budget_tokens(-1.0), 0);
  EXPECT_EQ(m.swap_budget_tokens(std::nan("")), 0);
  EXPECT_EQ(m.swap_budget_tokens(1e30), std::numeric_limits<int64_t>::max());
  CostModel none = m;
  none.swap_bytes_per_second = 0;
  EXPECT_EQ(none.swap_budget_tokens(1.0), 0);
  EXPECT_TRUE(std::isinf(none.t_swap(1)));

  // The brief's H200 figures: 7B bf16 (512 KiB per token) at 55 GB/s: ~1,000 tokens in 10 ms.
  CostModel h200;
  h200.kv_bytes_per_token = 512.0 * 1024;
  h200.swap_bytes_per_second = 55e9;
  EXPECT_NEAR((double)h200.swap_budget_tokens(0.010), 1049.0, 1.0);
}

TEST(CostModel, SaturationDerivedOrGiven) {
  CostModel m = hand_model();
  // 100 -> 500 flat (+10% over 2.3 doublings); 500 -> 1000 nearly doubles the time.
  EXPECT_EQ(m.derive_saturation(0.2), 500);
  EXPECT_EQ(m.derive_saturation(0.02), 100);  // +4.2% per doubling is too steep at 2%
  EXPECT_EQ(m.derive_saturation(0.9), 1000);  // 1000 -> 2000 doubles: past 90%
  EXPECT_EQ(m.saturation(), 500);
  m.saturation_tokens = 384;
  EXPECT_EQ(m.saturation(), 384);
  // A later dip under the limit is noise, not a second flat region.
  m.t_fwd_samples = {{1, 0.01}, {256, 0.011}, {512, 0.02}, {1024, 0.0115}};
  EXPECT_EQ(m.derive_saturation(0.2), 256);
  // llama2-7b on the H200 (2026-12-01, graphs and GEMV): a fast one-token step does not hide
  // the flat stretch up to 128; 128 -> 256 grows 22%.
  m.t_fwd_samples = {{1, 5.69e-3},  {2, 6.13e-3},  {4, 6.59e-3},   {8, 6.79e-3},   {16, 6.90e-3},
                     {32, 7.21e-3}, {64, 6.94e-3}, {128, 7.39e-3}, {256, 9.04e-3}, {512, 14.17e-3}};
  EXPECT_EQ(m.derive_saturation(0.2), 128);
  // The same after the fused one-row kernels (docs/DESIGN.md, "The CUDA backend"): x = 1 alone
  // is fast (+25% to x = 2), the stretch 2..128 is flat: S = 128, not 1.
  m.t_fwd_samples = {{1, 4.17e-3},  {2, 5.21e-3},  {4, 5.68e-3},   {8, 5.72e-3},   {16, 5.86e-3},
                     {32, 6.16e-3}, {64, 5.88e-3}, {128, 6.37e-3}, {256, 8.21e-3}, {512, 13.39e-3}};
  EXPECT_EQ(m.derive_saturation(0.2), 128);
  // A steep first stretch with nothing flat behind it stays at the first sample.
  m.t_fwd_samples = {{1, 1.0e-3}, {2, 1.5e-3}, {4, 2.4e-3}, {8, 4.0e-3}};
  EXPECT_EQ(m.derive_saturation(0.2), 1);
  // The CPU's default model (2 threads): 4 -> 8 doubles the step.
  m.t_fwd_samples = {{1, 0.0654}, {2, 0.0576}, {4, 0.0646}, {8, 0.129}, {16, 0.180}};
  EXPECT_EQ(m.derive_saturation(0.2), 4);
}

TEST(CostModel, ValidateRejectsBadModels) {
  EXPECT_TRUE(hand_model().validate().ok());
  CostModel m = hand_model();
  m.t_fwd_samples.clear();
  EXPECT_FALSE(m.validate().ok());
  m = hand_model();
  m.t_fwd_samples[2].first = 500;  // not ascending
  EXPECT_FALSE(m.validate().ok());
  m = hand_model();
  m.t_fwd_samples[0].second = -1.0;
  EXPECT_FALSE(m.validate().ok());
  m = hand_model();
  m.t_fwd_samples[0].second = std::nan("");
  EXPECT_FALSE(m.validate().ok());
  m = hand_model();
  m.t_fwd_samples[0].first = 0;
  EXPECT_FALSE(m.validate().ok());
  m = hand_model();
  m.kv_bytes_per_token = 0;
  EXPECT_FALSE(m.validate().ok());
  m = hand_model();
  m.swap_bytes_per_second = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(m.validate().ok());
  m = hand_model();
  m.saturation_tokens = -1;
  EXPECT_FALSE(m.validate().ok());
}

TEST(CostModel, JsonRoundTrip) {
  CostModel m = hand_model();
  m.t_fwd_samples.push_back({4096, 0.0812345678901234});
  m.saturation_tokens = 384;
  auto back = CostModel::from_json(m.to_json(), "cache.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->t_fwd_samples, m.t_fwd_samples);  // doubles survive exactly
  EXPECT_EQ(back->kv_bytes_per_token, m.kv_bytes_per_token);
  EXPECT_EQ(back->swap_bytes_per_second, m.swap_bytes_per_second);
  EXPECT_EQ(back->saturation_tokens, 384);
  // saturation_tokens is optional (0 = derive).
  auto minimal = CostModel::from_json(
      R"({"t_fwd_samples": [[1, 0.02]], "kv_bytes_per_token": 2, "swap_bytes_per_second": 3})",
      "x");
  ASSERT_TRUE(minimal.ok()) << minimal.error().message;
  EXPECT_EQ(minimal->saturation_tokens, 0);
}

TEST(CostModel, JsonErrorsNameTheFile) {
  const char* bad[] = {
      "",
      "{",
      "[1, 2]",
      R"({"kv_bytes_per_token": 2, "swap_bytes_per_second": 3})",
      R"({"t_fwd_samples": 5, "kv_bytes_per_token": 2, "swap_bytes_per_second": 3})",
      R"({"t_fwd_samples": [[1.5, 0.02]], "kv_bytes_per_token": 2, "swap_bytes_per_second": 3})",
      R"({"t_fwd_samples": [[1, 0.02, 3]], "kv_bytes_per_token": 2, "swap_bytes_per_second": 3})",
      R"({"t_fwd_samples": [[1, 0.02]], "kv_bytes_per_token": "2", "swap_bytes_per_second": 3})",
      R"({"t_fwd_samples": [[1, 0.02]], "swap_bytes_per_second": 3})",
      R"({"t_fwd_samples": [[1, 0.02]], "kv_bytes_per_token": 2, "swap_bytes_per_second": -3})",
      R"({"t_fwd_samples": [[9, 0.02], [3, 0.03]], "kv_bytes_per_token": 2,
          "swap_bytes_per_second": 3})",
      R"({"version": 99, "t_fwd_samples": [[1, 0.02]], "kv_bytes_per_token": 2,
          "swap_bytes_per_second": 3})",
      R"({"t_fwd_samples": [[1, 0.02]], "kv_bytes_per_token": 2, "swap_bytes_per_second": 3,
          "saturation_tokens": 1.5})",
  };
  for (const char* text : bad) {
    auto r = CostModel::from_json(text, "prof/cost.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.error().message.find("prof/cost.json"), std::string::npos) << r.error().message;
  }
}

TEST(Waste, HandComputedTerms) {
  const CostModel m = hand_model();
  WasteInputs in;
  in.context_tokens = 1000;  // C
  in.expected_remaining = 2.0;
  in.other_tokens = 3000;
  in.batch_tokens = 4000;
  in.decode_tokens = 100;  // R
  const Waste w = compute_waste(m, in);
  // W_p = 2 s * 1000 * 1000 B
  EXPECT_DOUBLE_EQ(w.preserve, 2.0e6);
  // T_fwd(1000) = 0.02: W_d = 0.02*1000*1000 + 0.02*3000*1000 = 20000 + 60000
  EXPECT_DOUBLE_EQ(w.discard, 80000.0);
  // S - R = 400 -> n = ceil(1000/400) = 3 chunks of ceil(1000/3) = 334 tokens.
  // T_fwd(434) - T_fwd(100) = (0.010 + 334 * 2.5e-6) - 0.010 = 0.000835
  // W_cd = 0.02*1000*1000/2 + 3 * 0.000835 * 3000 * 1000 = 10000 + 7515
  EXPECT_EQ(w.chunks, 3);
  EXPECT_NEAR(w.discard_chunked, 17515.0, 1e-6);
  // T_swap(1000) = 1 s: W_s = 2 * 1 * 4000 * 1000
  EXPECT_DOUBLE_EQ(w.swap_sync, 8.0e6);
}

TEST(Waste, DecodeAlreadyPastSaturation) {
  // S = 500 <= R = 600: chunks of one token each (progress must still be made).
  const CostModel m = hand_model();
  WasteInputs in;
  in.context_tokens = 10;
  in.expected_remaining = 1.0;
  in.other_tokens = 1000;
  in.batch_tokens = 1010;
  in.decode_tokens = 600;
  const Waste w = compute_waste(m, in);
  EXPECT_EQ(w.chunks, 10);
  // T_fwd(10) = 0.010 -> own part 0.010*10*1000/2 = 50.
  // Between 500 and 1000 the slope is 1.8e-5 s/token: 10 * 1.8e-5 * 1000 * 1000 = 180.
  EXPECT_NEAR(w.discard_chunked, 230.0, 1e-6);
  EXPECT_TRUE(std::isfinite(w.discard_chunked));
}

TEST(Waste, EdgeCases) {
  const CostModel m = hand_model();
  WasteInputs in;
  in.context_tokens = 0;
  in.expected_remaining = 5.0;
  in.other_tokens = 1000;
  in.batch_tokens = 1000;
  Waste w = compute_waste(m, in);
  EXPECT_EQ(w.preserve, 0.0);
  EXPECT_EQ(w.discard, 0.0);
  EXPECT_EQ(w.discard_chunked, 0.0);
  EXPECT_EQ(w.swap_sync, 0.0);
  EXPECT_EQ(w.chunks, 0);

  // A negative or NaN estimate counts as "returns now", never as negative waste.
  in.context_tokens = 100;
  in.expected_remaining = -1.0;
  EXPECT_EQ(compute_waste(m, in).preserve, 0.0);
  in.expected_remaining = std::nan("");
  EXPECT_EQ(compute_waste(m, in).preserve, 0.0);
  // A call that never ends makes preserving infinitely wasteful, without NaNs elsewhere.
  in.expected_remaining = std::numeric_limits<double>::infinity();
  w = compute_waste(m, in);
  EXPECT_TRUE(std::isinf(w.preserve));
  EXPECT_TRUE(std::isfinite(w.discard_chunked));

  // Nobody else running: discarding costs only the request's own memory while it
  // recomputes; no decode step to ride along, so each chunk is its whole step.
  in.expected_remaining = 1.0;
  in.other_tokens = 0;
  in.batch_tokens = 100;
  in.decode_tokens = 0;
  w = compute_waste(m, in);
  EXPECT_DOUBLE_EQ(w.discard, 0.010 * 100 * 1000);
  EXPECT_DOUBLE_EQ(w.discard_chunked, 0.010 * 100 * 1000 / 2);
  EXPECT_EQ(w.chunks, 1);
}

TEST(Waste, ChunkedDiscardIsCheaperThanDiscardAtOnceUnderSaturation) {
  // The point of chunking: riding along decode steps under S costs the others almost
  // nothing, while a whole prefill stalls all of them.
  const CostModel m = hand_model();
  for (int64_t c : {50, 400, 1000, 3000}) {
    WasteInputs in;
    in.context_tokens = c;
    in.expected_remaining = 1.0;
    in.other_tokens = 5000;
    in.batch_tokens = 5000 + c;
    in.decode_tokens = 64;
    const Waste w = compute_waste(m, in);
    EXPECT_LT(w.discard_chunked, w.discard) << c;
    EXPECT_GE(w.discard_chunked, 0.0);
  }
}

// The disk tier's terms with round numbers: disk writes at 500 tokens/s, reads at 1000.
TEST(Waste, SpillHandComputed) {
  CostModel m = hand_model();
  m.disk_write_bytes_per_second = 0.5e6;
  m.disk_read_bytes_per_second = 1.0e6;
  EXPECT_DOUBLE_EQ(m.t_disk_write(1000), 2.0);
  EXPECT_DOUBLE_EQ(m.t_disk_read(1000), 1.0);
  EXPECT_DOUBLE_EQ(m.t_disk_read(0), 0.0);
  WasteInputs in;
  in.context_tokens = 1000;
  in.other_tokens = 3000;
  in.batch_tokens = 4000;
  in.decode_tokens = 100;
  // The write (2 s) ends within the pause: the wait is the read, 1 s -> 1 * 1000 * 1000.
  in.expected_remaining = 2.0;
  Waste w = compute_waste(m, in);
  EXPECT_DOUBLE_EQ(w.spill, 1.0e6);
  EXPECT_DOUBLE_EQ(w.spill_sync, 1.0e6 + w.swap_sync);
  EXPECT_DOUBLE_EQ(w.swap_sync, 8.0e6);
  // A 0.5 s pause: 1.5 s of the write are left, then the read: 2.5 s.
  in.expected_remaining = 0.5;
  EXPECT_DOUBLE_EQ(compute_waste(m, in).spill, 2.5e6);
  // A pause that never ends hides the write; the read still costs, and nothing is NaN.
  in.expected_remaining = std::numeric_limits<double>::infinity();
  w = compute_waste(m, in);
  EXPECT_DOUBLE_EQ(w.spill, 1.0e6);
  EXPECT_TRUE(std::isinf(w.preserve));
  // No context: nothing to spill.
  in.context_tokens = 0;
  EXPECT_EQ(compute_waste(m, in).spill, 0.0);
}

TEST(Waste, SpillBeatsPreserveExactlyPastTheDiskRead) {
  // Once the write has ended, spilling costs T_dr * C * M whatever the pause, preserving
  // T_int * C * M: they cross at T_int = T_dr (when the write is no slower than the read).
  CostModel m = hand_model();
  m.disk_write_bytes_per_second = 2.0e6;
  m.disk_read_bytes_per_second = 2.0e6;
  WasteInputs in;
  in.context_tokens = 4000;
  in.other_tokens = 1000;
  in.batch_tokens = 5000;
  const double t_dr = m.t_disk_read(4000);  // 2 s
  for (double t : {0.25 * t_dr, 0.99 * t_dr}) {
    in.expected_remaining = t;
    const Waste w = compute_waste(m, in);
    EXPECT_LT(w.preserve, w.spill) << t;
  }
  for (double t : {1.01 * t_dr, 10.0 * t_dr, 1000.0 * t_dr}) {
    in.expected_remaining = t;
    const Waste w = compute_waste(m, in);
    EXPECT_LT(w.spill, w.preserve) << t;
    EXPECT_DOUBLE_EQ(w.spill, t_dr * 4000 * 1000) << t;  // flat in the pause
  }
  // The swap never loses to the spill on this measure: same device legs, no disk wait.
  EXPECT_LE(compute_waste(m, in).swap_sync, compute_waste(m, in).spill_sync);
}

// With the host pool full the choice is preserve, chunked discard or spill. A Llama-3.1-8B
// shape (M = 2 * 32 layers * 8 KV heads * 128 * 2 bytes), a forward curve through an H100's
// measured 32k-token prefill from empty (1.87 s), a ~50 GB/s host link and the default
// (conservative) disk figures.
CostModel llama8b_model() {
  CostModel m;
  m.t_fwd_samples = {{1, 0.0065}, {512, 0.030}, {2048, 0.110}, {32768, 1.87}};
  m.kv_bytes_per_token = 2.0 * 32 * 8 * 128 * 2;
  m.swap_bytes_per_second = 5.0e10;
  m.saturation_tokens = 512;
  return m;
}

enum class NoHostChoice { preserve, discard, spill };
NoHostChoice cheapest_without_host(const Waste& w) {
  if (w.spill < w.preserve && w.spill < w.discard_chunked) return NoHostChoice::spill;
  return w.preserve <= w.discard_chunked ? NoHostChoice::preserve : NoHostChoice::discard;
}

TEST(Waste, SpillWinsLongPausesOfLongContextsWhenTheHostPoolIsFull) {
  const CostModel m = llama8b_model();
  ASSERT_TRUE(m.validate().ok());
  WasteInputs in;
  in.context_tokens = 100000;
  in.other_tokens = 200000;
  in.batch_tokens = 300000;
  in.decode_tokens = 32;
  // A one-minute human pause: preserving idles ~12 GiB for a minute, recomputing 100k tokens
  // takes seconds and slows every chunked step of the others; the disk brings it back in
  // T_dr = 13.1 GB / 2 GB/s = 6.6 s.
  in.expected_remaining = 60.0;
  Waste w = compute_waste(m, in);
  EXPECT_EQ(cheapest_without_host(w), NoHostChoice::spill)
      << w.preserve << " " << w.discard_chunked << " " << w.spill;
  // A 2 s tool call: the write has not even ended when it returns; preserve.
  in.expected_remaining = 2.0;
  w = compute_waste(m, in);
  EXPECT_EQ(cheapest_without_host(w), NoHostChoice::preserve)
      << w.preserve << " " << w.discard_chunked << " " << w.spill;
  // A short context alone on the card: nobody waits for a recompute of 2k tokens, which is
  // faster than reading them from the disk.
  in.context_tokens = 2000;
  in.other_tokens = 0;
  in.batch_tokens = 2000;
  in.expected_remaining = 60.0;
  w = compute_waste(m, in);
  EXPECT_EQ(cheapest_without_host(w), NoHostChoice::discard)
      << w.preserve << " " << w.discard_chunked << " " << w.spill;
  // The same context beside a busy batch: its recompute chunks slow 200k tokens' steps.
  in.other_tokens = 200000;
  in.batch_tokens = 202000;
  w = compute_waste(m, in);
  EXPECT_EQ(cheapest_without_host(w), NoHostChoice::spill)
      << w.preserve << " " << w.discard_chunked << " " << w.spill;
  // A disk 20x slower than the defaults (a network volume) loses the long pause to discard.
  CostModel slow = m;
  slow.disk_write_bytes_per_second = 5.0e7;
  slow.disk_read_bytes_per_second = 1.0e8;
  in.context_tokens = 100000;
  in.other_tokens = 200000;
  in.batch_tokens = 300000;
  w = compute_waste(slow, in);
  EXPECT_EQ(cheapest_without_host(w), NoHostChoice::discard)
      << w.preserve << " " << w.discard_chunked << " " << w.spill;
}

TEST(CostModel, DiskBandwidthsValidateAndRoundTrip) {
  CostModel m = hand_model();
  auto plain = CostModel::from_json(m.to_json(), "x");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->disk_read_bytes_per_second, CostModel{}.disk_read_bytes_per_second);
  EXPECT_EQ(m.to_json().find("disk_"), std::string::npos);  // defaults are not written
  m.disk_write_bytes_per_second = 3.5e9;
  m.disk_read_bytes_per_second = 6.25e9;
  auto back = CostModel::from_json(m.to_json(), "x");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->disk_write_bytes_per_second, 3.5e9);
  EXPECT_EQ(back->disk_read_bytes_per_second, 6.25e9);
  m.disk_read_bytes_per_second = 0.0;
  EXPECT_FALSE(m.validate().ok());
  m.disk_read_bytes_per_second = std::nan("");
  EXPECT_FALSE(m.validate().ok());
}

}  // namespace
}  // namespace infercept
