// Workload generation, trace files and bench metrics: pure functions, no model. The statistical
// tests draw many requests with fixed seeds, so they are deterministic; their tolerances (10% on
// Table 1 moments, 5% on the arrival rate) are several standard errors wide.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "workload/metrics.h"
#include "workload/trace.h"
#include "workload/workload.h"

namespace infercept {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("infercept_test_workload_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TraceRequest sample_request() {
  TraceRequest r;
  r.id = 7;
  r.arrival_s = 0.1 + 0.2;  // not exactly representable: the round trip must keep every bit
  r.augmentation = "qa";
  r.prompt_tokens = 1200;
  r.seed = 18446744073709551615ULL;  // uint64 max survives JSON
  r.segments = {
      {40, "wikipedia", 0.6931471805599453, 57}, {12, "wikipedia", 1e-300, 0}, {33, "", 0, 0}};
  return r;
}

TEST(Trace, RoundTripIsExact) {
  WorkloadSpec spec;
  spec.rate = 3.0;
  spec.duration_s = 40.0;
  spec.seed = 11;
  std::vector<TraceRequest> reqs = generate_workload(spec);
  reqs.push_back(sample_request());
  reqs.back().id = 1'000'000;
  reqs.back().arrival_s = 1e6;
  const std::string path = temp_path("roundtrip.jsonl");
  ASSERT_TRUE(write_trace(path, reqs).ok());
  auto back = read_trace(path);
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_EQ(back->size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ((*back)[i], reqs[i]) << "request " << i;
  std::filesystem::remove(path);
}

TEST(Trace, ReadsHandWrittenLinesWithOptionalLastSegmentFields) {
  const std::string text =
      "\n"
      R"({"id":1,"arrival_s":0,"augmentation":"custom","prompt_tokens":5,"seed":3,)"
      R"("segments":[{"generate_tokens":2,"tool":"t","tool_seconds":1.5,"return_tokens":0},)"
      R"({"generate_tokens":4,"tool":"","tool_seconds":0,"return_tokens":0}]})"
      "\n  \r\n"
      R"({"id":2,"arrival_s":0,"augmentation":"x","prompt_tokens":1,"seed":0,"segments":[{"generate_tokens":1}]})";
  auto r = parse_trace(text, "t.jsonl");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].n_interceptions(), 1);
  EXPECT_DOUBLE_EQ((*r)[0].total_tool_seconds(), 1.5);
  EXPECT_EQ((*r)[0].final_context_tokens(), 11);
  EXPECT_EQ((*r)[1].n_interceptions(), 0);
}

// The error of a bad line names the source, the line number (blank lines count) and the field.
void expect_error(const std::string& bad_line, const std::string& expected_part) {
  const std::string good =
      R"({"id":1,"arrival_s":0.5,"augmentation":"qa","prompt_tokens":5,"seed":3,)"
      R"("segments":[{"generate_tokens":2}]})";
  const std::string text = good + "\n\n" + bad_line + "\n";
  auto r = parse_trace(text, "trace.jsonl");
  ASSERT_FALSE(r.ok()) << "accepted: " << bad_line;
  EXPECT_NE(r.error().message.find("trace.jsonl:3: "), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find(expected_part), std::string::npos) << r.error().message;
}

TEST(Trace, ErrorsNameLineAndField) {
  expect_error(R"({"id":2,"arrival_s":1,)", "not valid JSON");
  expect_error(R"([1,2])", "expected a JSON object");
  expect_error(
      R"({"id":2,"augmentation":"qa","prompt_tokens":5,"seed":3,"segments":[{"generate_tokens":2}]})",
      "field 'arrival_s': missing");
  expect_error(
      R"({"id":2,"arrival_s":1,"augmentation":"qa","prompt_tokens":-5,"seed":3,"segments":[{"generate_tokens":2}]})",
      "field 'prompt_tokens': must be >= 1, got -5");
  expect_error(
      R"({"id":2,"arrival_s":1,"augmentation":"qa","prompt_tokens":5,"seed":3,"segments":[{"generate_tokens":2,"tool":"w","tool_seconds":1,"return_tokens":-1},{"generate_tokens":2}]})",
      "field 'segments[0].return_tokens': must be >= 0, got -1");
  expect_error(
      R"({"id":2,"arrival_s":1,"augmentation":"qa","prompt_tokens":5,"seed":3,"segments":[{"generate_tokens":2,"tool":"w","return_tokens":1},{"generate_tokens":2}]})",
      "field 'segments[0].tool_seconds': missing");
  expect_error(
      R"({"id":2,"arrival_s":1,"augmentation":"qa","prompt_tokens":5,"seed":3,"segments":[{"generate_tokens":0}]})",
      "field 'segments[0].generate_tokens': must be >= 1");
  expect_error(
      R"({"id":2,"arrival_s":1,"augmentation":"qa","prompt_tokens":5.5,"seed":3,"segments":[{"generate_tokens":2}]})",
      "field 'prompt_tokens': must be an integer");
  expect_error(
      R"({"id":2,"arrival_s":1,"augmentation":"qa","prompt_tokens":5,"seed":3,"segments":[{"generate_tokens":2,"tool":"w","tool_seconds":1,"return_tokens":3}]})",
      "field 'segments[0].tool': must be empty or absent on the last segment");
  expect_error(
      R"({"id":2,"arrival_s":1,"augmentation":"qa","prompt_tokens":5,"seed":3,"segments":[{"generate_tokens":2},{"generate_tokens":2}]})",
      "field 'segments[0].tool': missing or empty");
  expect_error(
      R"({"id":2,"arrival_s":1,"augmentation":"qa","prompt_tokens":5,"seed":3,"segments":[]})",
      "field 'segments': must hold at least one segment");
  expect_error(
      R"({"id":2,"arrival_s":1,"augmentation":"qa","prompt_tokens":5,"seed":3,"segment":[]})",
      "field 'segment': unknown field");
  expect_error(
      R"({"id":1,"arrival_s":1,"augmentation":"qa","prompt_tokens":5,"seed":3,"segments":[{"generate_tokens":2}]})",
      "field 'id': duplicate id 1");
  expect_error(
      R"({"id":2,"arrival_s":0.25,"augmentation":"qa","prompt_tokens":5,"seed":3,"segments":[{"generate_tokens":2}]})",
      "field 'arrival_s': arrivals must be non-decreasing");
  expect_error(
      R"({"id":-2,"arrival_s":1,"augmentation":"qa","prompt_tokens":5,"seed":3,"segments":[{"generate_tokens":2}]})",
      "field 'id': must be >= 0");
  expect_error(
      R"({"id":2,"arrival_s":1,"augmentation":"qa","prompt_tokens":3000000000,"seed":3,"segments":[{"generate_tokens":2}]})",
      "field 'prompt_tokens': must fit in 32 bits");
}

TEST(Trace, MissingFileIsAnError) {
  auto r = read_trace("/nonexistent/dir/trace.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("/nonexistent/dir/trace.jsonl"), std::string::npos);
}

TEST(Workload, SameSeedSameTraceOtherSeedOtherTrace) {
  WorkloadSpec spec;
  spec.rate = 2.0;
  spec.duration_s = 120.0;
  spec.seed = 42;
  const auto a = generate_workload(spec);
  const auto b = generate_workload(spec);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  spec.seed = 43;
  EXPECT_NE(a, generate_workload(spec));
}

// Pins the exact output for one seed: a change here means old seeds no longer reproduce old
// traces (e.g. a different standard library or a changed draw order), which should be a choice.
TEST(Workload, FirstRequestIsStableAcrossBuilds) {
  WorkloadSpec spec;
  spec.name = "qa";
  spec.rate = 1.0;
  spec.duration_s = 100.0;
  spec.seed = 1;
  const auto t = generate_workload(spec);
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(
      trace_request_to_line(t[0]),
      R"({"id":0,"arrival_s":0.7602815873111285,"augmentation":"qa","prompt_tokens":1377,)"
      R"("seed":10276022874973721191,"segments":[)"
      R"({"generate_tokens":52,"tool":"wikipedia","tool_seconds":0.9586823307733947,"return_tokens":71},)"
      R"({"generate_tokens":20,"tool":"wikipedia","tool_seconds":0.7015228375642855,"return_tokens":38},)"
      R"({"generate_tokens":47,"tool":"wikipedia","tool_seconds":0.7295379297920085,"return_tokens":66},)"
      R"({"generate_tokens":20,"tool":"wikipedia","tool_seconds":0.43959934921772903,"return_tokens":62},)"
      R"({"generate_tokens":60,"tool":"wikipedia","tool_seconds":0.718454194138809,"return_tokens":34},)"
      R"({"generate_tokens":55}]})");
}

TEST(Workload, ArrivalsDoNotDependOnTheWorkload) {
  WorkloadSpec spec;
  spec.rate = 2.0;
  spec.duration_s = 200.0;
  spec.seed = 5;
  const auto mixed = generate_workload(spec);
  spec.name = "ve";
  ASSERT_TRUE(apply_token_override(spec, "*.generate=1-2").ok());
  const auto ve = generate_workload(spec);
  ASSERT_EQ(mixed.size(), ve.size());
  for (size_t i = 0; i < ve.size(); ++i) {
    EXPECT_EQ(mixed[i].arrival_s, ve[i].arrival_s);
    EXPECT_EQ(ve[i].augmentation, "ve");
  }
}

TEST(Workload, PoissonRateWithinFivePercent) {
  for (double rate : {0.5, 1.0, 4.0}) {
    WorkloadSpec spec;
    spec.rate = rate;
    spec.duration_s = 20000.0;
    spec.seed = 9;
    const auto t = generate_workload(spec);
    const double measured = static_cast<double>(t.size()) / spec.duration_s;
    EXPECT_NEAR(measured, rate, 0.05 * rate);
    // Gaps are exponential: their coefficient of variation is 1.
    double sum = 0, sum2 = 0, prev = 0;
    for (const auto& r : t) {
      const double g = r.arrival_s - prev;
      prev = r.arrival_s;
      sum += g;
      sum2 += g * g;
    }
    const double n = static_cast<double>(t.size());
    const double mean = sum / n;
    const double cv = std::sqrt(sum2 / n - mean * mean) / mean;
    EXPECT_NEAR(cv, 1.0, 0.05);
    EXPECT_LT(t.back().arrival_s, spec.duration_s);
    for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(t[i].id, i);
  }
}

TEST(Workload, MixedDrawsSixAugmentationsUniformly) {
  WorkloadSpec spec;
  spec.rate = 10.0;
  spec.duration_s = 1200.0;
  spec.seed = 3;
  const auto t = generate_workload(spec);
  std::map<std::string, int> count;
  for (const auto& r : t) ++count[r.augmentation];
  ASSERT_EQ(count.size(), 6u);
  for (const auto& [name, c] : count) {
    EXPECT_NEAR(static_cast<double>(c) / static_cast<double>(t.size()), 1.0 / 6.0, 0.1 / 6.0)
        << name;
  }
}

// Sample means over many requests match Table 1 within 10%.
TEST(Workload, PerAugmentationMomentsMatchTable1) {
  const WorkloadSpec defaults;
  for (const AugmentationProfile& p : defaults.profiles) {
    WorkloadSpec spec;
    spec.name = p.name;
    spec.rate = 20.0;
    spec.duration_s = 1000.0;  // ~20k requests
    spec.seed = 2024;
    const auto t = generate_workload(spec);
    double pauses = 0, n_pauses = 0, count = 0, context = 0;
    for (const auto& r : t) {
      EXPECT_GE(r.n_interceptions(), 1);
      EXPECT_GE(r.prompt_tokens, spec.min_prompt_tokens);
      for (const Segment& s : r.segments) {
        EXPECT_GE(s.generate_tokens, 1);
        if (s.is_last()) continue;
        EXPECT_EQ(s.tool, p.tool);
        EXPECT_GT(s.tool_seconds, 0.0);
        EXPECT_GE(s.return_tokens, 0);
        pauses += s.tool_seconds;
        n_pauses += 1;
      }
      count += r.n_interceptions();
      context += static_cast<double>(r.final_context_tokens());
    }
    const double n = static_cast<double>(t.size());
    EXPECT_NEAR(pauses / n_pauses, p.interception_s.mean, 0.1 * p.interception_s.mean) << p.name;
    EXPECT_NEAR(count / n, p.interceptions.mean, 0.1 * p.interceptions.mean) << p.name;
    EXPECT_NEAR(context / n, p.context_tokens.mean, 0.1 * p.context_tokens.mean) << p.name;
  }
}

TEST(Workload, TokenDefaultsAreUsedWhenTheyFit) {
  WorkloadSpec spec;
  spec.name = "ve";
  spec.rate = 5.0;
  spec.duration_s = 200.0;
  const auto t = generate_workload(spec);
  ASSERT_FALSE(t.empty());
  for (const auto& r : t) {
    for (const Segment& s : r.segments) {
      EXPECT_GE(s.generate_tokens, 3);
      EXPECT_LE(s.generate_tokens, 5);
      if (!s.is_last()) {
        EXPECT_EQ(s.return_tokens, 2);
      }
    }
  }
}

TEST(Workload, ScalesAndClamp) {
  WorkloadSpec spec;
  spec.rate = 5.0;
  spec.duration_s = 400.0;
  spec.seed = 8;
  const auto base = generate_workload(spec);
  spec.time_scale = 0.01;
  spec.context_scale = 0.1;
  spec.max_context = 256;
  const auto small = generate_workload(spec);
  ASSERT_EQ(base.size(), small.size());
  double base_ctx = 0, small_ctx = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    EXPECT_EQ(base[i].augmentation, small[i].augmentation);
    EXPECT_LE(small[i].final_context_tokens(), 256);
    EXPECT_GE(small[i].n_interceptions(), 1);
    EXPECT_GE(small[i].prompt_tokens, spec.min_prompt_tokens);
    base_ctx += static_cast<double>(base[i].final_context_tokens());
    small_ctx += static_cast<double>(small[i].final_context_tokens());
    // Pauses scale exactly when the count was not cut by the clamp.
    if (small[i].segments.size() == base[i].segments.size() && small[i].n_interceptions() > 0) {
      EXPECT_DOUBLE_EQ(small[i].segments[0].tool_seconds, base[i].segments[0].tool_seconds * 0.01);
    }
  }
  EXPECT_LT(small_ctx, 0.15 * base_ctx);
}

TEST(Workload, ValidationAndOverrides) {
  WorkloadSpec spec;
  EXPECT_TRUE(validate_workload_spec(spec).ok());
  spec.name = "trace.jsonl";
  EXPECT_FALSE(validate_workload_spec(spec).ok());
  spec.name = "chat";
  spec.rate = 0;
  EXPECT_FALSE(validate_workload_spec(spec).ok());
  spec.rate = 1;
  spec.max_context = 10;  // cannot hold min prompt 8 + 2 generated + 1 returned
  EXPECT_FALSE(validate_workload_spec(spec).ok());
  spec.max_context = 11;
  EXPECT_TRUE(validate_workload_spec(spec).ok());

  EXPECT_TRUE(apply_token_override(spec, "qa.returned=10-20").ok());
  EXPECT_EQ(find_profile(spec, "qa")->returned.min, 10);
  EXPECT_EQ(find_profile(spec, "qa")->returned.max, 20);
  EXPECT_TRUE(apply_token_override(spec, "*.generate=2-4").ok());
  for (const auto& p : spec.profiles) EXPECT_EQ(p.generate.max, 4);
  for (const char* bad : {"qa.returned=20-10", "qa.generate=0-3", "xx.generate=1-2",
                          "qa.tokens=1-2", "qa.generate=3", "qa.generate=a-b", "generate=1-2"}) {
    EXPECT_FALSE(apply_token_override(spec, bad).ok()) << bad;
  }
  EXPECT_TRUE(is_builtin_workload("mixed"));
  EXPECT_FALSE(is_builtin_workload("traces/x.jsonl"));
}

TEST(Metrics, PercentilesOnKnownData) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  const Percentiles p = percentiles(v);
  EXPECT_DOUBLE_EQ(p.mean, 50.5);
  EXPECT_DOUBLE_EQ(p.p50, 50.5);
  EXPECT_NEAR(p.p90, 90.1, 1e-12);
  EXPECT_NEAR(p.p99, 99.01, 1e-12);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(percentile({7}, 0.99), 7.0);
  EXPECT_DOUBLE_EQ(percentile({}, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(percentile({3, 1}, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(percentile({3, 1}, 1.0), 3.0);
}

TEST(Metrics, NormalizedLatencyFormula) {
  RequestRecord r;
  r.id = 1;
  r.augmentation = "chat";
  r.arrival_s = 10.0;
  r.first_token_s = 10.5;
  r.end_s = 40.0;
  r.interception_s = 25.0;  // 30 s wall, 25 s of it waiting on the tool
  r.output_tokens = 100;    // e.g. 80 generated + 20 returned
  r.completed = true;
  EXPECT_DOUBLE_EQ(normalized_latency(r), 0.05);  // (40 - 10 - 25) / 100

  RequestRecord unfinished = r;
  unfinished.id = 2;
  unfinished.completed = false;
  RequestRecord other = r;
  other.id = 3;
  other.augmentation = "qa";
  other.end_s = 30.0;
  other.interception_s = 0.0;
  other.output_tokens = 40;  // 20 / 40 = 0.5 s/token; TTFT 0.5 s

  const Summary s = summarize({r, unfinished, other}, 100.0);
  EXPECT_EQ(s.submitted, 3);
  EXPECT_EQ(s.completed, 2);
  EXPECT_DOUBLE_EQ(s.throughput_rps, 0.02);
  EXPECT_DOUBLE_EQ(s.normalized_latency.mean, 0.275);
  EXPECT_DOUBLE_EQ(s.normalized_latency.p50, 0.275);
  EXPECT_DOUBLE_EQ(s.ttft.p99, 0.5);

  const auto by = summarize_by_augmentation({r, unfinished, other}, 100.0);
  ASSERT_EQ(by.size(), 2u);
  EXPECT_EQ(by.at("chat").submitted, 2);
  EXPECT_EQ(by.at("chat").completed, 1);
  EXPECT_DOUBLE_EQ(by.at("qa").normalized_latency.p90, 0.5);

  const std::string table = format_summary_table(s, by);
  EXPECT_NE(table.find("all"), std::string::npos);
  EXPECT_NE(table.find("chat"), std::string::npos);
  EXPECT_NE(table.find("275.00"), std::string::npos) << table;  // mean in ms/token

  const nlohmann::json j = to_json(s);
  EXPECT_EQ(j["completed"], 2);
  EXPECT_DOUBLE_EQ(j["normalized_latency_s_per_token"]["mean"].get<double>(), 0.275);
  EXPECT_DOUBLE_EQ(j["ttft_s"]["p50"].get<double>(), 0.5);
  EXPECT_EQ(to_json(r)["output_tokens"], 100);
}

TEST(Metrics, EmptyRunIsZeros) {
  const Summary s = summarize({}, 10.0);
  EXPECT_EQ(s.submitted, 0);
  EXPECT_EQ(s.throughput_rps, 0.0);
  EXPECT_EQ(s.normalized_latency.p99, 0.0);
}

TEST(MetricsDeath, InconsistentRecordIsABug) {
  RequestRecord r;
  r.arrival_s = 5.0;
  r.first_token_s = 6.0;
  r.end_s = 7.0;
  r.interception_s = 3.0;  // longer than the request lived
  r.output_tokens = 1;
  r.completed = true;
  EXPECT_DEATH(summarize({r}, 1.0), "CHECK failed");
}

}  // namespace
}  // namespace infercept
