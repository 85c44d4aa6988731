// Shared helpers for tests: where the default model and the fixtures are.
#pragma once

#include <string>

namespace infercept::testing {

// Path of the default model (fetched by `make test` before tests run).
std::string default_model_path();
// Path of a file under tests/fixtures/.
std::string fixture_path(const std::string& name);
// Whole file as a string; empty if it cannot be read.
std::string read_file(const std::string& path);

}  // namespace infercept::testing
