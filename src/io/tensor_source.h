// A named weight tensor as it sits in a model file (mapped, not copied). Shapes are given in
// row-major order, outermost first: a linear layer's weight is {out_features, in_features}
// with in_features contiguous, for GGUF (whose ne[] order is reversed on reading) and
// safetensors alike. Canonical names are GGUF's ("blk.3.attn_q.weight"); the Hugging Face
// reader renames its tensors to them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/result.h"
#include "io/model_config.h"

namespace infercept {

struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  // outermost first
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;
  std::string file;  // where it came from, for error messages

  int64_t n_elements() const;
  int64_t rows() const;  // product of all but the last dim (1 for vectors)
  int64_t cols() const;  // last dim
};

// Dequantizes/converts `n` elements starting at element 0 of `src` (of type `t`) to fp32.
// n must be a multiple of t's block size.
void dequantize_to_f32(DType t, const void* src, float* dst, int64_t n);

// Everything the engine loads from a model: its config, its tensors, and its tokenizer
// source (filled by the GGUF or Hugging Face reader).
struct TokenizerSpec;

class ModelSource {
 public:
  virtual ~ModelSource() = default;
  virtual const ModelConfig& config() const = 0;
  // nullptr when absent.
  virtual const TensorInfo* find(const std::string& name) const = 0;
  virtual const std::map<std::string, TensorInfo>& tensors() const = 0;
  virtual const std::string& path() const = 0;
  // Human-readable format name, "gguf" or "safetensors".
  virtual std::string format() const = 0;
};

// Opens a model at `path`: a .gguf file, or a directory holding a Hugging Face checkpoint
// (config.json, *.safetensors or model.safetensors.index.json, tokenizer.json).
Result<std::unique_ptr<ModelSource>> open_model_source(const std::string& path);

}  // namespace infercept
