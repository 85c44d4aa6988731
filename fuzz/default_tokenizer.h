// The default model's tokenizer for the fuzz targets that encode text: loaded once, on the
// first input, from INFERCEPT_FUZZ_MODEL (environment) or else the GGUF the build was
// configured with (INFERCEPT_DEFAULT_MODEL, `make model` fetches it). Without it the target
// cannot run: it says so and exits, so a missing model is never mistaken for a clean pass.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace infercept::fuzz {

inline const Tokenizer& default_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    const char* env = std::getenv("INFERCEPT_FUZZ_MODEL");
    const std::string path = env != nullptr && *env != '\0' ? env : INFERCEPT_DEFAULT_MODEL;
    auto gguf = GgufFile::open(path, GgufLoad::container_only);
    if (!gguf.ok()) {
      std::fprintf(stderr, "fuzz: cannot open the tokenizer's model %s: %s (run `make model`)\n",
                   path.c_str(), gguf.error().message.c_str());
      std::exit(2);
    }
    auto spec = tokenizer_spec_from_gguf(**gguf);
    if (!spec.ok()) {
      std::fprintf(stderr, "fuzz: %s\n", spec.error().message.c_str());
      std::exit(2);
    }
    auto t = Tokenizer::create(std::move(*spec));
    if (!t.ok()) {
      std::fprintf(stderr, "fuzz: %s\n", t.error().message.c_str());
      std::exit(2);
    }
    return std::move(*t);
  }();
  return *tok;
}

}  // namespace infercept::fuzz
