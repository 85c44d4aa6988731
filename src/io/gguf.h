// GGUF v2/v3 reader: header, metadata key/values, tensor table, alignment; tensor data is
// memory mapped. Every read is bounds-checked against the file size: a truncated or corrupt
// file yields an Error naming the file (and the key or tensor), never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/result.h"
#include "io/tensor_source.h"

namespace infercept {

// One metadata value. Arrays of strings and of numbers are kept; nested arrays are rejected.
struct GgufValue {
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<std::string>,
               std::vector<int64_t>, std::vector<double>>
      v;
};

// What a GGUF must hold to load: a Llama-family model (config derived from `<arch>.*` keys,
// tensors validated against it), or just a well-formed container (metadata and tensor
// table; config() stays default). Tests and tools that only read metadata use the latter.
enum class GgufLoad { model, container_only };

class GgufFile : public ModelSource {
 public:
  // Parses the header, metadata and tensor table of `path` and derives the ModelConfig from
  // the `<arch>.*` keys. Unknown tensor types, misaligned or out-of-file tensors are errors.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path,
                                                GgufLoad load = GgufLoad::model);
  // Parses from memory (used by the fuzz target): `path` only names it in messages. The
  // bytes must outlive the object.
  static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size,
                                                 const std::string& path,
                                                 GgufLoad load = GgufLoad::model);

  const ModelConfig& config() const override { return config_; }
  const TensorInfo* find(const std::string& name) const override;
  const std::map<std::string, TensorInfo>& tensors() const override { return tensors_; }
  const std::string& path() const override { return path_; }
  std::string format() const override { return "gguf"; }

  uint32_t version() const { return version_; }
  // Byte offset of the (aligned) tensor data section, and the alignment in use.
  uint64_t data_offset() const { return data_offset_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* get(const std::string& key) const;
  // Typed getters: nullopt when absent or of another type (integers convert between widths).
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  const std::vector<std::string>* get_string_array(const std::string& key) const;
  const std::vector<int64_t>* get_int_array(const std::string& key) const;
  const std::vector<double>* get_float_array(const std::string& key) const;

 private:
  GgufFile() = default;
  Status derive_config();

  std::shared_ptr<MappedFile> file_;  // null when parsed from memory
  std::string path_;
  uint32_t version_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::map<std::string, TensorInfo> tensors_;
  ModelConfig config_;
};

}  // namespace infercept
