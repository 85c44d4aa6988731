// Flags shared by the subcommands: which model, how the engine is sized, how to sample.
#pragma once

#include <set>
#include <string>

#include "cli/args.h"
#include "engine/engine.h"

namespace infercept::cli {

// Engine flags: --model --threads --kv-cache-gb/--kv-cache-mb --kv-cache-tokens --block-size
// --max-batch-tokens --max-seqs --chat-template --kv-dtype --swap-space-gb/--swap-space-mb
// --policy --estimator --interception-timeout
extern const std::set<std::string> kEngineFlags;
// Sampling flags: --max-tokens --temperature --top-p --top-k --min-p --seed
// --repetition-penalty --presence-penalty --frequency-penalty --stop (repeatable)
extern const std::set<std::string> kSamplingFlags;

std::set<std::string> merge(std::initializer_list<std::set<std::string>> sets);

// The default model: $INFERCEPT_MODEL, else models/<default> under the working directory or
// next to the binary's source tree.
std::string default_model_path();

Result<EngineConfig> engine_config_from(const Args& a);
Result<SamplingParams> sampling_params_from(const Args& a, float default_temperature);

// Prints "error: <message>" to stderr and returns 1.
int fail(const Error& e);

}  // namespace infercept::cli
