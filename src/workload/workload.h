// Synthetic workloads for `infercept bench`: the six augmentations of the InferCept paper's
// evaluation (Table 1) and their uniform mix, turned into a trace (workload/trace.h) that the
// engine replays open-loop.
//
// Arrivals are Poisson (exponential gaps) at `rate` until `duration_s`. Per request, the
// number of interceptions, each interception's duration and the final context length are drawn
// from log-normal distributions whose mean and standard deviation equal Table 1's. Log-normal
// rather than a truncated normal because several rows have std close to or above the mean
// (chatbot context 753 +- 703, QA interceptions 2.52 +- 1.73): truncating a normal at zero would
// shift the mean by up to ~30%, while a matched log-normal keeps both moments, stays positive
// and has the right-skewed shape that pause times and lengths have.
//
// Table 1 does not give the tokens generated between interceptions nor the tokens a tool
// returns; those come from AugmentationProfile::generate / ::returned (uniform, inclusive),
// whose defaults and reasons are in default_profiles() and docs/TRACE.md.
//
// The whole trace is a pure function of the spec: the same spec gives the same trace on every
// platform (the random numbers come from std::mt19937_64, whose output the standard fixes, and
// from our own transforms, because std:: distributions differ between standard libraries).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "workload/rng.h"
#include "workload/sessions.h"
#include "workload/trace.h"

namespace infercept {

// Inclusive range for a uniform integer draw.
struct TokenRange {
  int32_t min = 0;
  int32_t max = 0;
};

struct AugmentationProfile {
  std::string name;        // math|qa|ve|chat|image|tts
  std::string tool;        // written into each segment: calculator, wikipedia, ...
  Moments interception_s;  // Table 1: duration of one interception, seconds
  Moments interceptions;   // Table 1: interceptions per request
  Moments context_tokens;  // Table 1: context length, taken as the length when the request ends
  TokenRange generate;     // tokens generated before each tool call and after the last one
  TokenRange returned;     // tokens a tool call appends to the context
};

// Table 1 plus the token defaults, in the order math, qa, ve, chat, image, tts.
std::vector<AugmentationProfile> default_profiles();

struct WorkloadSpec {
  std::string name = "mixed";  // mixed|math|qa|ve|chat|image|tts (Table 1), sessions
  double rate = 1.0;           // requests per second (Poisson)
  double duration_s = 60.0;    // arrivals happen in [0, duration_s)
  uint64_t seed = 0;
  double time_scale = 1.0;        // multiplies tool durations (a CPU run can shrink 28 s pauses)
  double context_scale = 1.0;     // multiplies the drawn context length (small CPU models)
  int32_t max_context = 0;        // clamp on the final context length; 0: no clamp
  int32_t min_prompt_tokens = 8;  // the prompt never gets shorter than this
  std::vector<AugmentationProfile> profiles = default_profiles();
  SessionProfile sessions;  // `sessions`: long agent sessions (sessions.h)
};

// "mixed", the six augmentation names and "sessions"; anything else given to --workload is a
// file.
const std::vector<std::string>& builtin_workload_names();
bool is_builtin_workload(std::string_view name);

// User-facing checks on a spec (rate, duration, scales, ranges, clamp; the session profile for
// `sessions`). generate_workload() requires a spec that passes.
Status validate_workload_spec(const WorkloadSpec& spec);

// Applies one override of the form "AUG.generate=MIN-MAX" or "AUG.returned=MIN-MAX" (AUG is an
// augmentation name or "*" for all six), e.g. "qa.returned=33-81" or "*.generate=2-4".
Status apply_token_override(WorkloadSpec& spec, std::string_view expr);

// The profile named `name`, or nullptr.
const AugmentationProfile* find_profile(const WorkloadSpec& spec, std::string_view name);

// Draws the trace: Table 1 requests, or sessions (generate_session()). Ids are 0.. in arrival
// order. The arrival times depend only on (seed, rate,
// duration_s), and request i's content only on (seed, i) and its profile, so changing a token
// default does not move arrivals and two workloads with the same seed share arrival times.
std::vector<TraceRequest> generate_workload(const WorkloadSpec& spec);

// One request of augmentation `profile`, drawn from its own seed (exposed for tests).
TraceRequest generate_request(const WorkloadSpec& spec, const AugmentationProfile& profile,
                              uint64_t id, double arrival_s, uint64_t request_seed);

}  // namespace infercept
