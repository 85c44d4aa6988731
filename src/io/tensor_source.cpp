// TensorInfo helpers, fp32 conversion of any stored tensor type, and the format dispatch
// behind `--model PATH` (a .gguf file or a Hugging Face checkpoint directory).
#include "io/tensor_source.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/quant.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace infercept {

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorInfo::rows() const {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) n *= shape[i];
  return n;
}

int64_t TensorInfo::cols() const {
  return shape.empty() ? 1 : shape.back();
}

void dequantize_to_f32(DType t, const void* src, float* dst, int64_t n) {
  CHECK(n % dtype_block_elems(t) == 0);
  if (t == DType::i32) {  // not a float format; dequantize_row leaves it out
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, static_cast<const uint8_t*>(src) + 4 * i, 4);
      dst[i] = (float)v;
    }
    return;
  }
  dequantize_row(t, src, dst, n);
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool starts_with_gguf_magic(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char magic[4] = {};
  const size_t n = std::fread(magic, 1, 4, f);
  std::fclose(f);
  return n == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace

Result<std::unique_ptr<ModelSource>> open_model_source(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return make_error("cannot open model '", path, "': ", std::strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    TRY_ASSIGN(auto hf, HfCheckpoint::open(path));
    return std::unique_ptr<ModelSource>(std::move(hf));
  }
  if (S_ISREG(st.st_mode) && (ends_with(path, ".gguf") || starts_with_gguf_magic(path))) {
    TRY_ASSIGN(auto g, GgufFile::open(path));
    return std::unique_ptr<ModelSource>(std::move(g));
  }
  return make_error("'", path,
                    "' is neither a GGUF file (.gguf or starting with the GGUF magic) nor a "
                    "Hugging Face checkpoint directory (config.json + *.safetensors)");
}

}  // namespace infercept
