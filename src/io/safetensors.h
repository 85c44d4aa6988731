// safetensors reader (one file, or shards listed by model.safetensors.index.json) and the
// Hugging Face checkpoint directory around it: config.json -> ModelConfig, tensors renamed
// to the canonical GGUF names. Bad JSON, out-of-range offsets, shape/size mismatches give an
// Error naming the file and tensor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "io/tensor_source.h"

namespace infercept {

// Parses one .safetensors file from memory (fuzz target entry). Names are kept as stored.
Result<std::map<std::string, TensorInfo>> parse_safetensors(const uint8_t* data, size_t size,
                                                            const std::string& path);

// Reads config.json text into a ModelConfig ("LlamaForCausalLM", "MistralForCausalLM",
// "Qwen2ForCausalLM"; rope_scaling of type llama3 understood).
Result<ModelConfig> parse_hf_config(const std::string& json_text, const std::string& path);

// Maps a Hugging Face tensor name to the canonical GGUF name; empty if it is not a weight
// the engine uses (e.g. rotary inv_freq buffers).
std::string hf_to_canonical_name(const std::string& hf_name);

class HfCheckpoint : public ModelSource {
 public:
  static Result<std::unique_ptr<HfCheckpoint>> open(const std::string& dir);

  const ModelConfig& config() const override { return config_; }
  const TensorInfo* find(const std::string& name) const override;
  const std::map<std::string, TensorInfo>& tensors() const override { return tensors_; }
  const std::string& path() const override { return dir_; }
  std::string format() const override { return "safetensors"; }

 private:
  HfCheckpoint() = default;
  std::string dir_;
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::map<std::string, TensorInfo> tensors_;
  ModelConfig config_;
};

}  // namespace infercept
