// GGUF v2/v3 reader. A GGUF file is: magic "GGUF", u32 version, u64 tensor count, u64
// key/value count, the key/values, the tensor table (name, n_dims, ne[] with ne[0] fastest,
// ggml type id, offset into the data section), then the data section, aligned to
// `general.alignment`. Everything here is untrusted input: every read goes through Reader,
// which checks the remaining bytes first, and every count is checked against what the
// remaining bytes could possibly hold before anything is allocated for it.
#include "io/gguf.h"

#include <cstring>
#include <limits>
#include <optional>

#include "io/model_validate.h"

namespace infercept {

namespace {

enum GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// Smallest encoding of one value of `type` (a string is at least its u64 length).
size_t min_value_bytes(uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
    case kString:
      return 8;
    case kArray:
      return 12;  // element type + count
    default:
      return 0;
  }
}

std::optional<DType> dtype_from_ggml(uint32_t id) {
  switch (id) {
    case 0:
      return DType::f32;
    case 1:
      return DType::f16;
    case 2:
      return DType::q4_0;
    case 3:
      return DType::q4_1;
    case 8:
      return DType::q8_0;
    case 9:
      return DType::q8_1;
    case 12:
      return DType::q4_k;
    case 14:
      return DType::q6_k;
    case 26:
      return DType::i32;
    case 30:
      return DType::bf16;
    default:
      return std::nullopt;
  }
}

std::string n2s(uint64_t v) {
  return std::to_string(v);
}

// Bounds-checked little-endian cursor over the file bytes.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  Result<T> read(const std::string& what) {
    if (remaining() < sizeof(T)) return truncated(what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string> read_string(const std::string& what) {
    TRY_ASSIGN(const uint64_t len, read<uint64_t>(what + " length"));
    if (len > remaining())
      return make_error(path_, ": ", what, " has length ", n2s(len), " but only ", n2s(remaining()),
                        " bytes remain in the file");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), (size_t)len);
    pos_ += (size_t)len;
    return s;
  }

  Error truncated(const std::string& what) const {
    return make_error(path_, ": file truncated at offset ", n2s(pos_), " while reading ", what);
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

Result<int64_t> read_array_int(Reader& r, uint32_t type, const std::string& path,
                               const std::string& what) {
  switch (type) {
    case kU8: {
      TRY_ASSIGN(const uint8_t v, r.read<uint8_t>(what));
      return (int64_t)v;
    }
    case kI8: {
      TRY_ASSIGN(const int8_t v, r.read<int8_t>(what));
      return (int64_t)v;
    }
    case kBool: {
      TRY_ASSIGN(const uint8_t v, r.read<uint8_t>(what));
      return (int64_t)(v != 0);
    }
    case kU16: {
      TRY_ASSIGN(const uint16_t v, r.read<uint16_t>(what));
      return (int64_t)v;
    }
    case kI16: {
      TRY_ASSIGN(const int16_t v, r.read<int16_t>(what));
      return (int64_t)v;
    }
    case kU32: {
      TRY_ASSIGN(const uint32_t v, r.read<uint32_t>(what));
      return (int64_t)v;
    }
    case kI32: {
      TRY_ASSIGN(const int32_t v, r.read<int32_t>(what));
      return (int64_t)v;
    }
    case kI64: {
      TRY_ASSIGN(const int64_t v, r.read<int64_t>(what));
      return v;
    }
    default: {  // kU64
      TRY_ASSIGN(const uint64_t v, r.read<uint64_t>(what));
      if (v > (uint64_t)std::numeric_limits<int64_t>::max())
        return make_error(path, ": ", what, " = ", n2s(v), " does not fit in int64");
      return (int64_t)v;
    }
  }
}

Result<GgufValue> read_value(Reader& r, uint32_t type, const std::string& path,
                             const std::string& key) {
  const std::string what = "value of key '" + key + "'";
  GgufValue out;
  switch (type) {
    case kU8: {
      TRY_ASSIGN(const uint8_t v, r.read<uint8_t>(what));
      out.v = (uint64_t)v;
      break;
    }
    case kU16: {
      TRY_ASSIGN(const uint16_t v, r.read<uint16_t>(what));
      out.v = (uint64_t)v;
      break;
    }
    case kU32: {
      TRY_ASSIGN(const uint32_t v, r.read<uint32_t>(what));
      out.v = (uint64_t)v;
      break;
    }
    case kU64: {
      TRY_ASSIGN(const uint64_t v, r.read<uint64_t>(what));
      out.v = v;
      break;
    }
    case kI8: {
      TRY_ASSIGN(const int8_t v, r.read<int8_t>(what));
      out.v = (int64_t)v;
      break;
    }
    case kI16: {
      TRY_ASSIGN(const int16_t v, r.read<int16_t>(what));
      out.v = (int64_t)v;
      break;
    }
    case kI32: {
      TRY_ASSIGN(const int32_t v, r.read<int32_t>(what));
      out.v = (int64_t)v;
      break;
    }
    case kI64: {
      TRY_ASSIGN(const int64_t v, r.read<int64_t>(what));
      out.v = v;
      break;
    }
    case kF32: {
      TRY_ASSIGN(const float v, r.read<float>(what));
      out.v = (double)v;
      break;
    }
    case kF64: {
      TRY_ASSIGN(const double v, r.read<double>(what));
      out.v = v;
      break;
    }
    case kBool: {
      TRY_ASSIGN(const uint8_t v, r.read<uint8_t>(what));
      out.v = v != 0;
      break;
    }
    case kString: {
      TRY_ASSIGN(std::string v, r.read_string(what));
      out.v = std::move(v);
      break;
    }
    case kArray: {
      TRY_ASSIGN(const uint32_t elem, r.read<uint32_t>(what + " (array element type)"));
      TRY_ASSIGN(const uint64_t count, r.read<uint64_t>(what + " (array length)"));
      if (elem == kArray)
        return make_error(path, ": key '", key, "' is a nested array (not supported)");
      const size_t min_bytes = min_value_bytes(elem);
      if (min_bytes == 0)
        return make_error(path, ": key '", key, "' is an array of unknown type id ", n2s(elem));
      if (count > r.remaining() / min_bytes)
        return make_error(path, ": key '", key, "' claims ", n2s(count),
                          " array elements but only ", n2s(r.remaining()),
                          " bytes remain in the file");
      const std::string ewhat = what + " (array element)";
      if (elem == kString) {
        std::vector<std::string> vs;
        vs.reserve((size_t)count);
        for (uint64_t i = 0; i < count; ++i) {
          TRY_ASSIGN(std::string s, r.read_string(ewhat));
          vs.push_back(std::move(s));
        }
        out.v = std::move(vs);
      } else if (elem == kF32 || elem == kF64) {
        std::vector<double> vd;
        vd.reserve((size_t)count);
        for (uint64_t i = 0; i < count; ++i) {
          if (elem == kF32) {
            TRY_ASSIGN(const float f, r.read<float>(ewhat));
            vd.push_back(f);
          } else {
            TRY_ASSIGN(const double f, r.read<double>(ewhat));
            vd.push_back(f);
          }
        }
        out.v = std::move(vd);
      } else {
        std::vector<int64_t> vi;
        vi.reserve((size_t)count);
        for (uint64_t i = 0; i < count; ++i) {
          TRY_ASSIGN(const int64_t v, read_array_int(r, elem, path, ewhat));
          vi.push_back(v);
        }
        out.v = std::move(vi);
      }
      break;
    }
    default:
      return make_error(path, ": key '", key, "' has unknown value type id ", n2s(type));
  }
  return out;
}

const char* value_kind(const GgufValue& v) {
  switch (v.v.index()) {
    case 0:
      return "unsigned integer";
    case 1:
      return "signed integer";
    case 2:
      return "float";
    case 3:
      return "bool";
    case 4:
      return "string";
    case 5:
      return "string array";
    case 6:
      return "integer array";
    default:
      return "float array";
  }
}

}  // namespace

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path, GgufLoad load) {
  TRY_ASSIGN(std::shared_ptr<MappedFile> f, MappedFile::open(path));
  TRY_ASSIGN(std::unique_ptr<GgufFile> g, parse(f->data(), f->size(), path, load));
  g->file_ = std::move(f);
  return g;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size,
                                                  const std::string& path, GgufLoad load) {
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->path_ = path;
  Reader r(data, size, g->path_);

  TRY_ASSIGN(const uint32_t magic, r.read<uint32_t>("magic"));
  if (std::memcmp(&magic, "GGUF", 4) != 0) return make_error(path, ": not a GGUF file (bad magic)");
  TRY_ASSIGN(g->version_, r.read<uint32_t>("version"));
  if (g->version_ == 1)
    return make_error(path, ": GGUF version 1 is not supported (re-convert to v3)");
  if (g->version_ != 2 && g->version_ != 3)
    return make_error(path, ": unsupported GGUF version ", n2s(g->version_),
                      " (supported: 2, 3; big-endian files are not supported)");
  TRY_ASSIGN(const uint64_t n_tensors, r.read<uint64_t>("tensor count"));
  TRY_ASSIGN(const uint64_t n_kv, r.read<uint64_t>("metadata key/value count"));
  // Smallest key/value: key length (8) + type (4) + 1-byte value.
  if (n_kv > r.remaining() / 13)
    return make_error(path, ": metadata key/value count ", n2s(n_kv), " is impossible for ",
                      n2s(size), " bytes");
  // Smallest tensor info: name length (8) + n_dims (4) + one ne (8) + type (4) + offset (8).
  if (n_tensors > r.remaining() / 32)
    return make_error(path, ": tensor count ", n2s(n_tensors), " is impossible for ", n2s(size),
                      " bytes");

  for (uint64_t i = 0; i < n_kv; ++i) {
    TRY_ASSIGN(std::string key, r.read_string("key of metadata entry #" + n2s(i)));
    TRY_ASSIGN(const uint32_t type, r.read<uint32_t>("type of key '" + key + "'"));
    TRY_ASSIGN(GgufValue value, read_value(r, type, path, key));
    if (g->metadata_.count(key) != 0)
      return make_error(path, ": duplicate metadata key '", key, "'");
    g->metadata_.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* a = g->get("general.alignment")) {
    const uint64_t* v = std::get_if<uint64_t>(&a->v);
    if (v == nullptr || *v == 0 || (*v & (*v - 1)) != 0 || *v > (1u << 30))
      return make_error(path,
                        ": key 'general.alignment' must be a power of two unsigned "
                        "integer up to 2^30");
    g->alignment_ = *v;
  }

  struct Pending {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset;
    uint64_t n_bytes;
  };
  std::vector<Pending> infos;
  infos.reserve((size_t)n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Pending p;
    TRY_ASSIGN(p.name, r.read_string("name of tensor #" + n2s(i)));
    const std::string tw = "tensor '" + p.name + "'";
    TRY_ASSIGN(const uint32_t n_dims, r.read<uint32_t>("dimension count of " + tw));
    if (n_dims < 1 || n_dims > 4)
      return make_error(path, ": ", tw, " has ", n2s(n_dims), " dimensions (must be 1..4)");
    int64_t ne[4] = {1, 1, 1, 1};
    // The product of the non-zero dims must fit, so that any partial product of the shape
    // (in whatever order a consumer multiplies) fits too.
    int64_t nonzero_product = 1;
    bool has_zero = false;
    for (uint32_t d = 0; d < n_dims; ++d) {
      TRY_ASSIGN(const uint64_t v, r.read<uint64_t>("dimensions of " + tw));
      if (v > (uint64_t)std::numeric_limits<int64_t>::max() ||
          (v != 0 && __builtin_mul_overflow(nonzero_product, (int64_t)v, &nonzero_product)))
        return make_error(path, ": ", tw, " has an absurd size (element count overflows)");
      has_zero = has_zero || v == 0;
      ne[d] = (int64_t)v;
    }
    const int64_t n_elements = has_zero ? 0 : nonzero_product;
    TRY_ASSIGN(const uint32_t type_id, r.read<uint32_t>("type of " + tw));
    TRY_ASSIGN(p.offset, r.read<uint64_t>("data offset of " + tw));
    const std::optional<DType> dt = dtype_from_ggml(type_id);
    if (!dt)
      return make_error(path, ": ", tw, " has unsupported ggml type id ", n2s(type_id),
                        " (supported: F32, F16, BF16, I32, Q4_0, Q4_1, Q8_0, Q8_1, Q4_K, Q6_K)");
    p.dtype = *dt;
    const int64_t be = dtype_block_elems(p.dtype);
    if (ne[0] % be != 0)
      return make_error(path, ": ", tw, " has a row of ", n2s((uint64_t)ne[0]), " elements, not a ",
                        "multiple of the ", std::string(dtype_name(p.dtype)), " block size ",
                        n2s((uint64_t)be));
    if (__builtin_mul_overflow((uint64_t)(n_elements / be), (uint64_t)dtype_block_bytes(p.dtype),
                               &p.n_bytes))
      return make_error(path, ": ", tw, " has an absurd size (byte count overflows)");
    for (int d = (int)n_dims - 1; d >= 0; --d) p.shape.push_back(ne[d]);
    infos.push_back(std::move(p));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t pos = r.pos();
  const uint64_t pad = (g->alignment_ - pos % g->alignment_) % g->alignment_;
  g->data_offset_ = pos + pad;

  for (Pending& p : infos) {
    const std::string tw = "tensor '" + p.name + "'";
    if (p.offset % g->alignment_ != 0)
      return make_error(path, ": ", tw, " data offset ", n2s(p.offset),
                        " is not a multiple of the alignment ", n2s(g->alignment_));
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(g->data_offset_, p.offset, &begin) ||
        __builtin_add_overflow(begin, p.n_bytes, &end) || end > size)
      return make_error(path, ": ", tw, " data (offset ", n2s(p.offset), ", ", n2s(p.n_bytes),
                        " bytes) lies outside the file (", n2s(size), " bytes, data section at ",
                        n2s(g->data_offset_), ")");
    if (g->tensors_.count(p.name) != 0)
      return make_error(path, ": duplicate tensor name '", p.name, "'");
    TensorInfo t;
    t.name = p.name;
    t.dtype = p.dtype;
    t.shape = std::move(p.shape);
    t.data = data + begin;
    t.n_bytes = (size_t)p.n_bytes;
    t.file = path;
    g->tensors_.emplace(std::move(p.name), std::move(t));
  }

  if (load == GgufLoad::model) TRY(g->derive_config());
  return g;
}

const TensorInfo* GgufFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const GgufValue* GgufFile::get(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* s = std::get_if<std::string>(&v->v)) return *s;
  return std::nullopt;
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v->v)) {
    if (*u > (uint64_t)std::numeric_limits<int64_t>::max()) return std::nullopt;
    return (int64_t)*u;
  }
  if (const auto* i = std::get_if<int64_t>(&v->v)) return *i;
  return std::nullopt;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* d = std::get_if<double>(&v->v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v->v)) return (double)*u;
  if (const auto* i = std::get_if<int64_t>(&v->v)) return (double)*i;
  return std::nullopt;
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&v->v)) return *b;
  return std::nullopt;
}

const std::vector<std::string>* GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = get(key);
  return v == nullptr ? nullptr : std::get_if<std::vector<std::string>>(&v->v);
}

const std::vector<int64_t>* GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = get(key);
  return v == nullptr ? nullptr : std::get_if<std::vector<int64_t>>(&v->v);
}

const std::vector<double>* GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = get(key);
  return v == nullptr ? nullptr : std::get_if<std::vector<double>>(&v->v);
}

Status GgufFile::derive_config() {
  const std::string& path = path_;
  const GgufValue* arch_v = get("general.architecture");
  if (arch_v == nullptr) return make_error(path, ": missing metadata key 'general.architecture'");
  const std::optional<std::string> arch = get_string("general.architecture");
  if (!arch) return make_error(path, ": metadata key 'general.architecture' is not a string");
  if (*arch != "llama" && *arch != "mistral" && *arch != "qwen2" && *arch != "qwen3")
    return make_error(path, ": unsupported architecture '", *arch,
                      "' (supported: ", supported_architectures(), ")");

  // Typed lookups that tell "absent" (nullopt) from "present with the wrong type" (Error).
  auto opt_int = [&](const std::string& key) -> Result<std::optional<int64_t>> {
    if (get(key) == nullptr) return std::optional<int64_t>();
    if (auto v = get_int(key)) return std::optional<int64_t>(*v);
    return make_error(path, ": metadata key '", key, "' should be an integer, found ",
                      value_kind(*get(key)));
  };
  auto req_int = [&](const std::string& key) -> Result<int64_t> {
    TRY_ASSIGN(std::optional<int64_t> v, opt_int(key));
    if (!v) return make_error(path, ": missing metadata key '", key, "'");
    return *v;
  };
  auto opt_float = [&](const std::string& key) -> Result<std::optional<double>> {
    if (get(key) == nullptr) return std::optional<double>();
    if (auto v = get_float(key)) return std::optional<double>(*v);
    return make_error(path, ": metadata key '", key, "' should be a number, found ",
                      value_kind(*get(key)));
  };

  ModelConfig c;
  c.arch = *arch;
  c.name = get_string("general.name").value_or("");
  const std::string a = *arch + ".";
  TRY_ASSIGN(c.n_layers, req_int(a + "block_count"));
  TRY_ASSIGN(c.d_model, req_int(a + "embedding_length"));
  TRY_ASSIGN(c.d_ff, req_int(a + "feed_forward_length"));
  TRY_ASSIGN(c.n_heads, req_int(a + "attention.head_count"));
  TRY_ASSIGN(c.max_context, req_int(a + "context_length"));
  TRY_ASSIGN(std::optional<int64_t> n_kv, opt_int(a + "attention.head_count_kv"));
  c.n_kv_heads = n_kv.value_or(c.n_heads);
  TRY_ASSIGN(std::optional<double> eps, opt_float(a + "attention.layer_norm_rms_epsilon"));
  c.rms_eps = (float)eps.value_or(1e-5);
  TRY_ASSIGN(std::optional<double> theta, opt_float(a + "rope.freq_base"));
  c.rope_theta = (float)theta.value_or(10000.0);

  // head_dim: the attention key length when given, else the RoPE dimension count (equal
  // for Llama-family models), else d_model / n_heads.
  TRY_ASSIGN(std::optional<int64_t> key_len, opt_int(a + "attention.key_length"));
  TRY_ASSIGN(std::optional<int64_t> rope_dim, opt_int(a + "rope.dimension_count"));
  if (key_len) {
    c.head_dim = *key_len;
  } else if (rope_dim) {
    c.head_dim = *rope_dim;
  } else {
    if (c.n_heads <= 0) return make_error(path, ": '", a, "attention.head_count' must be > 0");
    c.head_dim = c.d_model / c.n_heads;
  }
  if (rope_dim && *rope_dim != c.head_dim)
    return make_error(path, ": '", a, "rope.dimension_count' (", n2s((uint64_t)*rope_dim),
                      ") differs from head_dim (", n2s((uint64_t)c.head_dim),
                      "): partial RoPE is not supported");

  TRY_ASSIGN(std::optional<int64_t> vocab, opt_int(a + "vocab_size"));
  if (vocab) {
    c.vocab_size = *vocab;
  } else if (const auto* toks = get_string_array("tokenizer.ggml.tokens")) {
    c.vocab_size = (int64_t)toks->size();
  } else if (const TensorInfo* emb = find("token_embd.weight"); emb && emb->shape.size() == 2) {
    c.vocab_size = emb->shape[0];
  }

  // RoPE scaling. GGUF llama3 models usually carry precomputed factors in rope_freqs.weight.
  if (get(a + "rope.scaling.type") != nullptr) {
    const std::optional<std::string> type = get_string(a + "rope.scaling.type");
    if (!type) return make_error(path, ": metadata key '", a, "rope.scaling.type' is not a string");
    c.rope_scaling.type = *type;
  }
  TRY_ASSIGN(std::optional<double> factor, opt_float(a + "rope.scaling.factor"));
  if (c.rope_scaling.type == "linear" || c.rope_scaling.type == "yarn") {
    // A factor of 1 scales nothing; anything else we cannot honour.
    if (factor && *factor != 1.0)
      return make_error(path, ": rope scaling type '", c.rope_scaling.type,
                        "' is not supported (key '", a, "rope.scaling.type')");
    c.rope_scaling.type = "none";
  }
  if (c.rope_scaling.type != "none" && c.rope_scaling.type != "llama3")
    return make_error(path, ": rope scaling type '", c.rope_scaling.type,
                      "' is not supported (key '", a, "rope.scaling.type')");
  if (factor) c.rope_scaling.factor = (float)*factor;
  TRY_ASSIGN(std::optional<double> lo, opt_float(a + "rope.scaling.low_freq_factor"));
  TRY_ASSIGN(std::optional<double> hi, opt_float(a + "rope.scaling.high_freq_factor"));
  TRY_ASSIGN(std::optional<int64_t> orig, opt_int(a + "rope.scaling.original_context_length"));
  if (lo) c.rope_scaling.low_freq_factor = (float)*lo;
  if (hi) c.rope_scaling.high_freq_factor = (float)*hi;
  if (orig) c.rope_scaling.original_max_position = *orig;
  c.rope_scaling.has_freq_factors_tensor = find("rope_freqs.weight") != nullptr;

  // llama.cpp's converter permutes Q/K rows for llama (and Mistral, which it writes as
  // llama) only; Qwen2/3 keep Hugging Face's layout and RoPE pairs.
  c.rope_style = c.arch == "qwen2" || c.arch == "qwen3" ? RopeStyle::neox : RopeStyle::interleaved;
  c.tied_embeddings = find("output.weight") == nullptr;
  c.qkv_bias = find("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = c.arch == "qwen3";
  if (!c.qk_norm && find("blk.0.attn_q_norm.weight") != nullptr)
    return make_error(path,
                      ": tensor 'blk.0.attn_q_norm.weight' (a q/k head norm) is not "
                      "part of architecture '",
                      c.arch, "' (only qwen3 has one)");
  if (find("blk.0.attn_output.bias") != nullptr)
    return make_error(path,
                      ": tensor 'blk.0.attn_output.bias' (a bias on the output "
                      "projection) is not supported");
  TRY_ASSIGN(std::optional<int64_t> window, opt_int(a + "attention.sliding_window"));
  if (window) {
    if (*window < 0) return make_error(path, ": '", a, "attention.sliding_window' is negative");
    c.apply_sliding_window(*window);
  }

  auto valid = c.validate();
  if (!valid.ok()) return make_error(path, ": ", valid.error().message);
  config_ = std::move(c);
  return validate_llama_tensors(*this);
}

}  // namespace infercept
