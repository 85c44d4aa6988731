// Long agent sessions (`--workload sessions`): coding and browsing agents as they run today,
// tens of tool calls per task over contexts that grow turn by turn to 10k-150k tokens.
//
// Each arrival (Poisson at the spec's rate) is one session:
//   shared prefix   the system prompt and tool definitions, the same tokens in every session:
//                   not part of the trace, replayed through the bench's shared-prefix
//                   mechanism (`--shared-prefix`, default system_tokens x context_scale);
//   task            the user's initial request: the trace's prompt_tokens;
//   N turns         each: the model generates some tokens ending in a tool call, the tool
//                   pauses the session for a duration drawn from that tool's distribution,
//                   then its output is appended to the context;
//   final answer    one more generation, no tool.
// N, the task, every generation, every pause and every output are log-normal draws with the
// profile's mean and standard deviation (a log-normal keeps both moments and stays positive,
// as for Table 1 in workload.h). The tool of each call is drawn by weight from a small set that
// spans milliseconds (file reads, grep) to seconds (test runs, web fetches) to minutes (a human
// answering, rare). Defaults and the published figures they come from: docs/TRACE.md.
//
// Token sizes (shared prefix, task, generations, outputs) scale with the spec's context_scale
// and pauses with time_scale, so one profile serves a CPU smoke test and a GPU run. The spec's
// max_context bounds the whole context (shared prefix included): a session that would outgrow
// it ends early, the turns past the limit dropped and the final answer kept.
//
// A session is a pure function of (spec, id, seed): the draws come from rng.h's generator and
// transforms in a fixed order; bench/agent_workload.py mirrors this file operation for
// operation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "workload/rng.h"
#include "workload/trace.h"

namespace infercept {

struct WorkloadSpec;

struct SessionTool {
  std::string name;       // written into each segment
  double weight = 0.0;    // relative share of the tool calls (0: never called)
  Moments seconds;        // how long one call pauses the session
  Moments output_tokens;  // what one call appends to the context
};

// read_file, grep, edit_file, run_tests, web_fetch, human (docs/TRACE.md says why).
std::vector<SessionTool> default_session_tools();

struct SessionProfile {
  int32_t system_tokens = 8192;           // the shared prefix: system prompt + tool definitions
  Moments turns{30.0, 20.0};              // tool calls per session (at least 1)
  Moments task_tokens{500.0, 400.0};      // the user's initial task
  Moments generate_tokens{150.0, 120.0};  // per turn before its call, and the final answer
  std::vector<SessionTool> tools = default_session_tools();
};

// No session holds more tool calls than this (a guard on absurd turn distributions).
inline constexpr int64_t kMaxSessionTurns = 10000;
// Without a max_context clamp, a session's context still stays below this (int32 counts).
inline constexpr int64_t kSessionContextCap = int64_t{1} << 30;

// The shared prefix the sessions of `spec` start with: system_tokens x context_scale, rounded.
int64_t session_shared_prefix_tokens(const WorkloadSpec& spec);

// User-facing checks of spec.sessions (moments, tools, the clamp against the shared prefix).
Status validate_session_spec(const WorkloadSpec& spec);

// Applies one override of the session profile:
//   system=TOKENS, turns=MEAN,STD, task=MEAN,STD, generate=MEAN,STD,
//   TOOL.seconds=MEAN,STD, TOOL.output=MEAN,STD, TOOL.weight=W
// TOOL is a tool name or "*" for all; ",STD" may be left out (a constant).
Status apply_session_override(WorkloadSpec& spec, std::string_view expr);

// One session drawn from its own seed (generate_workload() passes the same per-request seed
// as for the Table 1 workloads). Requires a spec that passes validate_session_spec().
TraceRequest generate_session(const WorkloadSpec& spec, uint64_t id, double arrival_s,
                              uint64_t session_seed);

}  // namespace infercept
