// libFuzzer target for the safetensors parser and the Hugging Face config.json parser: any
// byte string must give either tensors lying inside the input or an Error, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/safetensors.h"

using namespace infercept;

namespace {
volatile uint64_t g_sink;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto ts = parse_safetensors(data, size, "fuzz.safetensors");
  if (ts.ok()) {
    uint64_t acc = 0;
    for (const auto& [name, t] : *ts) {
      acc += name.size() + (uint64_t)t.n_elements();
      if (t.n_bytes > 0) acc += t.data[0] + t.data[t.n_bytes - 1];
    }
    g_sink = acc;
  }
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto cfg = parse_hf_config(text, "fuzz/config.json");
  if (cfg.ok()) g_sink = (uint64_t)(cfg->n_layers + cfg->d_model);
  (void)hf_to_canonical_name(text);
  return 0;
}
