// libFuzzer target for the GGUF reader: any byte string must give either a parsed file whose
// every tensor lies inside the input and every metadata value is readable, or an Error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "io/gguf.h"

using namespace infercept;

namespace {

volatile uint64_t g_sink;

void touch(const GgufFile& g) {
  uint64_t acc = 0;
  for (const auto& [key, v] : g.metadata()) {
    acc += key.size();
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            acc += x.size();
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            for (const auto& s : x) acc += s.size();
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                               std::is_same_v<T, std::vector<double>>) {
            for (const auto& e : x) acc += (uint64_t)(e != 0);
          } else {
            acc += (uint64_t)(x != 0);
          }
        },
        v.v);
  }
  for (const auto& [name, t] : g.tensors()) {
    acc += (uint64_t)t.n_elements() + (uint64_t)t.rows() + (uint64_t)t.cols();
    if (t.n_bytes > 0) acc += t.data[0] + t.data[t.n_bytes - 1];
  }
  g_sink = acc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto container = GgufFile::parse(data, size, "fuzz.gguf", GgufLoad::container_only);
  if (!container.ok()) return 0;
  touch(**container);
  auto model = GgufFile::parse(data, size, "fuzz.gguf", GgufLoad::model);
  if (model.ok()) {
    const ModelConfig& c = (*model)->config();
    g_sink = (uint64_t)(c.n_layers + c.d_model + c.vocab_size);
  }
  return 0;
}
