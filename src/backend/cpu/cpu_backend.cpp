// The CPU backend: the correctness oracle for every other backend, and fast enough to serve
// a small model on a laptop. Activations are f32; weights stay in their file format
// (quantized blocks included) and meet activations quantized to the paired format
// (core/quant.h), the same pairing llama.cpp uses, so our logits track that reference.
// The KV cache is f16 by default: half the memory, and what llama.cpp keeps as well.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/packed_matmul.h"
#include "backend/cpu/quant_dot.h"
#include "backend/cpu/quantize_fast.h"
#include "backend/cpu/vec_math.h"
#include "core/check.h"
#include "core/fp8.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace infercept {
namespace {

class CpuKvStorage final : public KvStorage {
 public:
  explicit CpuKvStorage(const KvGeometry& g) : g_(g) {
    const size_t layer_bytes = g.bytes_per_block_per_layer() * (size_t)g.n_blocks;
    k_.resize((size_t)g.n_layers);
    v_.resize((size_t)g.n_layers);
    // Not zero-filled: every slot is written before it is read, and untouched pages of a
    // large pool then cost no resident memory until the cache actually fills.
    for (int64_t l = 0; l < g.n_layers; ++l) {
      k_[(size_t)l].reset(new uint8_t[layer_bytes]);
      v_[(size_t)l].reset(new uint8_t[layer_bytes]);
    }
  }
  const KvGeometry& geometry() const override { return g_; }
  uint8_t* k(int64_t layer) { return k_[(size_t)layer].get(); }
  uint8_t* v(int64_t layer) { return v_[(size_t)layer].get(); }
  const uint8_t* k(int64_t layer) const { return k_[(size_t)layer].get(); }
  const uint8_t* v(int64_t layer) const { return v_[(size_t)layer].get(); }
  uint8_t* host_plane(int64_t plane) const override {
    return (plane % 2 == 0 ? k_ : v_)[(size_t)(plane / 2)].get();
  }

 private:
  KvGeometry g_;
  std::vector<std::unique_ptr<uint8_t[]>> k_, v_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& o)
      : pool_(o.n_threads > 0 ? o.n_threads : default_thread_count()),
        pack_weights_(o.pack_weights) {
    // CpuNumerics::llama_cpp: llama.cpp's CPU bits where they cost speed or an invariant:
    // q4_1 products in its order (packed_matmul.h, ~2.4x those products' cost) and prompt
    // rows' attention in its batched order (attention.h, which gives up a row's bits
    // depending on its position only). Greedy decoding then follows llama.cpp token for
    // token (docs/PERF.md 2); the default keeps the speed and the invariant.
    if (o.numerics == CpuNumerics::llama_cpp) {
      q4_1_order_ = Q4_1Order::ggml;
      attention_order_ = AttentionOrder::llama_cpp;
    }
  }

  std::string name() const override { return "cpu"; }
  DType activation_dtype() const override { return DType::f32; }

  Tensor alloc_activation(int64_t rows, int64_t cols, DType dtype) override {
    CHECK(!dtype_is_quantized(dtype));
    const size_t bytes = (size_t)(rows * cols) * dtype_block_bytes(dtype);
    // 64-byte aligned so SIMD loads of row starts are aligned when cols allows it.
    auto& buf = buffers_.emplace_back(new (std::align_val_t(64)) uint8_t[bytes + 64]);
    std::memset(buf.get(), 0, bytes);
    return Tensor{buf.get(), dtype, rows, cols, cols};
  }

  Result<Weight> upload_weight(const void* data, DType dtype, int64_t rows, int64_t cols) override {
    if (cols % dtype_block_elems(dtype) != 0)
      return make_error("weight row of ", std::to_string(cols), " elements is not a multiple of ",
                        std::string(dtype_name(dtype)), "'s block size");
    Weight w;
    w.data = data;
    w.dtype = dtype;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = dtype_row_bytes(dtype, cols);
    // Matrices in q4_0/q4_1/q8_0 also get an interleaved copy for the VNNI kernels (as many
    // bytes again as the file's tensor): one weight row alone and in a batch take the same
    // kernel, so a request's tokens do not depend on what it is batched with.
    if (pack_weights_ && rows > 1 && packed_supported(dtype)) {
      const size_t bytes = packed_bytes(dtype, rows, cols);
      auto& buf = packed_.emplace_back(new (std::align_val_t(64)) uint8_t[bytes]);
      pack_weight(dtype, data, w.row_bytes, rows, cols, buf.get());
      w.packed = buf.get();
    }
    return w;
  }

  Result<std::unique_ptr<KvStorage>> create_kv_storage(const KvGeometry& g) override {
    if (g.dtype != DType::f16 && g.dtype != DType::f32 && g.dtype != DType::fp8_e4m3)
      return make_error("the CPU backend keeps the KV cache in f16, f32 or fp8, not ",
                        std::string(dtype_name(g.dtype)));
    return std::unique_ptr<KvStorage>(new CpuKvStorage(g));
  }

  void to_host_f32(const Tensor& t, float* dst) override {
    CHECK(t.dtype == DType::f32);
    for (int64_t r = 0; r < t.rows; ++r)
      std::memcpy(dst + r * t.cols, t.row<float>(r), (size_t)t.cols * sizeof(float));
  }

  void sync() override {}

  // Greedy rows are sampled here, split across threads, so the engine skips copying the
  // logits (6 MB a step at batch 32) and arg-maxing them on its one thread. Same rule as the
  // host sampler's argmax: NaN is never chosen, the lowest id wins a tie, and a row whose
  // maximum is -inf (all masked or NaN) gives 0.
  bool greedy_on_device() const override { return true; }
  bool interruptible() const override { return true; }
  void set_interrupt(const std::atomic<bool>* flag) override { interrupt_ = flag; }
  bool argmax_rows(const Tensor& logits, int32_t* out) override {
    CHECK(logits.dtype == DType::f32);
    pool_.parallel_for(
        logits.rows,
        [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) out[r] = argmax_row(logits.row<float>(r), logits.cols);
        },
        /*grain=*/4);
    return true;
  }

  // The oracle of a device backend's masking: the logits are host memory already.
  bool masks_on_device() const override { return true; }
  bool mask_rows(Tensor logits, std::span<const int32_t> rows, const uint64_t* masks,
                 int64_t words) override {
    CHECK(logits.dtype == DType::f32);
    for (size_t i = 0; i < rows.size(); ++i) {
      CHECK(rows[i] >= 0 && rows[i] < logits.rows);
      float* row = logits.row<float>(rows[i]);
      const uint64_t* mask = masks + (int64_t)i * words;
      for (int64_t w = 0; w * 64 < logits.cols; ++w) {
        const uint64_t bits = w < words ? mask[w] : 0;
        if (bits == ~uint64_t{0}) continue;  // most words of a free string's mask
        for (int64_t id = w * 64; id < std::min(logits.cols, w * 64 + 64); ++id)
          if (((bits >> (id & 63)) & 1) == 0) row[id] = -std::numeric_limits<float>::infinity();
      }
    }
    return true;
  }

  void embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) override {
    CHECK(out.dtype == DType::f32 && out.rows == (int64_t)tokens.size() && out.cols == table.cols);
    for (size_t i = 0; i < tokens.size(); ++i) {
      CHECK(tokens[i] >= 0 && tokens[i] < table.rows);
      const auto* src =
          static_cast<const uint8_t*>(table.data) + (size_t)tokens[i] * table.row_bytes;
      dequantize_row(table.dtype, src, out.row<float>((int64_t)i), table.cols);
    }
  }

  void rmsnorm(const Tensor& x, const Weight& w, float eps, Tensor out) override {
    CHECK(x.rows == out.rows && x.cols == out.cols && w.cols == x.cols && w.dtype == DType::f32);
    const auto* wv = static_cast<const float*>(w.data);
    // Rows are independent, so splitting them across threads changes nothing in a row.
    pool_.parallel_for(
        x.rows,
        [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r)
            rmsnorm_row(x.row<float>(r), wv, x.cols, eps, out.row<float>(r));
        },
        /*grain=*/4);
  }

  void head_rmsnorm(Tensor x, const Weight& w, float eps) override {
    CHECK(x.dtype == DType::f32 && w.dtype == DType::f32 && w.cols > 0 && x.cols % w.cols == 0);
    const auto* wv = static_cast<const float*>(w.data);
    const int64_t d = w.cols, heads = x.cols / d;
    pool_.parallel_for(
        x.rows,
        [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r)
            for (int64_t h = 0; h < heads; ++h) {
              float* v = x.row<float>(r) + h * d;
              rmsnorm_row(v, wv, d, eps, v);
            }
        },
        /*grain=*/4);
  }

  void add_rmsnorm(Tensor residual, const Tensor& x, const Weight& w, float eps,
                   Tensor out) override {
    CHECK(residual.rows == x.rows && residual.cols == x.cols && out.rows == x.rows);
    const auto* wv = static_cast<const float*>(w.data);
    pool_.parallel_for(
        x.rows,
        [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            float* res = residual.row<float>(r);
            const float* xr = x.row<float>(r);
            for (int64_t c = 0; c < x.cols; ++c) res[c] += xr[c];
            rmsnorm_row(res, wv, x.cols, eps, out.row<float>(r));
          }
        },
        /*grain=*/4);
  }

  void matmul(const Tensor& x, const Weight& w, const Weight* bias, Tensor out) override {
    CHECK(x.dtype == DType::f32 && out.dtype == DType::f32);
    const Product p{&w, bias, out};
    run_products(quantize_input(x, w, nullptr), x.rows, {&p, 1}, nullptr);
  }

  // The fused groups below are the default compositions (backend.h) with fewer parallel
  // regions: the input is normalized, quantized and laid out for the kernels in one region,
  // every product of the group runs in one more, and what follows a product column-wise
  // (bias, SiLU * up, the residual add) is done by the thread that computed those columns.
  // Each value is computed by the same kernel with the same operands as in the composition,
  // so the results are the same bits; at batch 32 a layer went from 19 regions to 10.
  void norm_project(const Tensor& x, const Weight& norm, float eps, Tensor h,
                    std::span<const Projection> projections) override {
    std::vector<Product>& ps = products_;  // reused: no allocation once it has grown
    ps.clear();
    for (const Projection& p : projections) ps.push_back({p.w, p.bias, p.out});
    if (!same_input_form(ps)) return Backend::norm_project(x, norm, eps, h, projections);
    const auto* wv = check_norm(x, norm, h);
    auto pre = [&](int64_t r) { rmsnorm_row(x.row<float>(r), wv, x.cols, eps, h.row<float>(r)); };
    run_products(quantize_input(h, *ps[0].w, pre), x.rows, ps, nullptr);
    for (const Projection& p : projections)
      if (p.has_head_norm()) head_rmsnorm(p.out, *p.head_norm, p.head_norm_eps);
  }

  void norm_gated_ffn(const Tensor& x, const Weight& norm, float eps, Tensor h,
                      const Weight& w_gate, const Weight& w_up, Tensor gate, Tensor up) override {
    const Product ps[] = {{&w_gate, nullptr, gate}, {&w_up, nullptr, up}};
    if (!same_input_form(ps) || w_gate.rows != w_up.rows)
      return Backend::norm_gated_ffn(x, norm, eps, h, w_gate, w_up, gate, up);
    const auto* wv = check_norm(x, norm, h);
    auto pre = [&](int64_t r) { rmsnorm_row(x.row<float>(r), wv, x.cols, eps, h.row<float>(r)); };
    // Both products split their rows the same way, so once a thread has its share of up it
    // also has the same columns of gate.
    const Epilogue silu = [&](size_t j, int64_t b, int64_t e) {
      if (j != 1) return;
      for (int64_t r = 0; r < x.rows; ++r)
        silu_mul_row(gate.row<float>(r) + b, up.row<float>(r) + b, gate.row<float>(r) + b, e - b);
    };
    run_products(quantize_input(h, w_gate, pre), x.rows, ps, &silu);
  }

  void project_add(const Tensor& x, const Weight& w, Tensor residual, Tensor scratch) override {
    CHECK(residual.rows == x.rows && residual.cols == w.rows && scratch.rows >= x.rows);
    const Product p{&w, nullptr, scratch.slice_rows(0, x.rows)};
    const Epilogue add_cols = [&](size_t, int64_t b, int64_t e) {
      for (int64_t r = 0; r < x.rows; ++r) {
        float* res = residual.row<float>(r);
        const float* o = scratch.row<float>(r);
        for (int64_t c = b; c < e; ++c) res[c] += o[c];
      }
    };
    run_products(quantize_input(x, w, nullptr), x.rows, {&p, 1}, &add_cols);
  }

  void rope(Tensor q, Tensor k, std::span<const int32_t> positions, const RopeParams& p) override {
    rope_rows(q, k, positions, p, nullptr);
  }

  // One parallel region for both: a row's k is stored by the thread that rotated it.
  void rope_store_kv(Tensor q, Tensor k, const Tensor& v, std::span<const int32_t> positions,
                     const RopeParams& p, KvStorage& kv_base, int64_t layer,
                     std::span<const int32_t> slots) override {
    auto& kv = static_cast<CpuKvStorage&>(kv_base);
    check_store(kv, k, v, slots);
    rope_rows(q, k, positions, p,
              [&](int64_t r) { store_slot(kv, layer, k, v, r, slots[(size_t)r]); });
  }

  static void check_store(const CpuKvStorage& kv, const Tensor& k, const Tensor& v,
                          std::span<const int32_t> slots) {
    const int64_t width = kv.geometry().n_kv_heads * kv.geometry().head_dim;
    CHECK(k.cols == width && v.cols == width && k.rows == (int64_t)slots.size());
  }
  // Row r of k and v into cache slot `slot` of `layer`, rounded to the cache's dtype.
  static void store_slot(CpuKvStorage& kv, int64_t layer, const Tensor& k, const Tensor& v,
                         int64_t r, int32_t slot) {
    const KvGeometry& g = kv.geometry();
    const int64_t width = g.n_kv_heads * g.head_dim;
    CHECK(slot >= 0 && slot < g.n_blocks * g.block_size);
    const size_t off = g.slot_offset(slot);
    if (g.has_scales()) {
      const size_t so = g.scale_offset(slot);
      store_fp8_heads(k.row<float>(r), kv.k(layer) + off, kv.k(layer) + so, g.n_kv_heads,
                      g.head_dim);
      store_fp8_heads(v.row<float>(r), kv.v(layer) + off, kv.v(layer) + so, g.n_kv_heads,
                      g.head_dim);
      return;
    }
    store_row(k.row<float>(r), kv.k(layer) + off, width, g.dtype);
    store_row(v.row<float>(r), kv.v(layer) + off, width, g.dtype);
  }

  // One token's heads in fp8 e4m3, each with its own scale (KvGeometry says why): the
  // definitions the CUDA backend quantizes with too (core/fp8.h).
  static void store_fp8_heads(const float* src, uint8_t* dst, uint8_t* scales, int64_t n_heads,
                              int64_t head_dim) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* x = src + h * head_dim;
      float amax = 0.0f;
      for (int64_t i = 0; i < head_dim; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float scale = fp8_e4m3_scale(amax);
      for (int64_t i = 0; i < head_dim; ++i) dst[h * head_dim + i] = fp8_e4m3_quantize(x[i], scale);
      std::memcpy(scales + h * (int64_t)sizeof(float), &scale, sizeof(float));
    }
  }

  // Rotates q and k row by row; after(r), when given, runs once row r is rotated.
  template <typename After>
  void rope_rows(Tensor q, Tensor k, std::span<const int32_t> positions, const RopeParams& p,
                 After after) {
    CHECK(q.rows == (int64_t)positions.size() && k.rows == q.rows);
    CHECK(q.cols % p.head_dim == 0 && k.cols % p.head_dim == 0);
    const int64_t half = p.rot_dim / 2;
    CHECK(p.freq_factors.empty() || (int64_t)p.freq_factors.size() == half);
    // theta_i = pos * base^(-2i/rot_dim), built by repeated float multiplication: that is
    // how llama.cpp rounds it, and near-ties in greedy decoding are sensitive to the last bit.
    const float theta_scale = std::pow(p.theta_base, -2.0f / (float)p.rot_dim);
    // Every layer of a step rotates the same positions: the cos/sin table of the first is
    // kept (~1% of a batch-32 decode step went to sincos) and reused while the positions
    // and parameters match.
    RopeTable& tab = rope_table_;
    const bool hit =
        tab.half == half && tab.theta_base == p.theta_base &&
        tab.freq_factors.data() == p.freq_factors.data() &&
        tab.freq_factors.size() == p.freq_factors.size() &&
        std::equal(positions.begin(), positions.end(), tab.positions.begin(), tab.positions.end());
    if (!hit) {
      tab.half = half;
      tab.theta_base = p.theta_base;
      tab.freq_factors = p.freq_factors;
      tab.positions.assign(positions.begin(), positions.end());
      tab.cs.resize(positions.size() * (size_t)half);
      tab.sn.resize(positions.size() * (size_t)half);
    }
    pool_.parallel_for(
        q.rows,
        [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            float* cs = tab.cs.data() + r * half;
            float* sn = tab.sn.data() + r * half;
            if (!hit) {
              float theta = (float)positions[(size_t)r];
              for (int64_t i = 0; i < half; ++i) {
                const float t = p.freq_factors.empty() ? theta : theta / p.freq_factors[(size_t)i];
                cs[i] = std::cos(t);
                sn[i] = std::sin(t);
                theta *= theta_scale;
              }
            }
            rotate_heads(q.row<float>(r), q.cols / p.head_dim, p, cs, sn);
            rotate_heads(k.row<float>(r), k.cols / p.head_dim, p, cs, sn);
            if constexpr (!std::is_same_v<After, std::nullptr_t>) after(r);
          }
        },
        /*grain=*/4);
  }

  void store_kv(KvStorage& kv_base, int64_t layer, const Tensor& k, const Tensor& v,
                std::span<const int32_t> slots) override {
    auto& kv = static_cast<CpuKvStorage&>(kv_base);
    check_store(kv, k, v, slots);
    for (size_t i = 0; i < slots.size(); ++i) store_slot(kv, layer, k, v, (int64_t)i, slots[i]);
  }

  void attention(const Tensor& q, const KvStorage& kv_base, int64_t layer,
                 const AttentionBatch& batch, int64_t n_heads, float scale, Tensor out) override {
    const auto& kv = static_cast<const CpuKvStorage&>(kv_base);
    PagedKvView view{kv.k(layer), kv.v(layer), kv.geometry()};
    paged_attention_cpu(pool_, q, view, batch, n_heads, scale, out, attention_order_, interrupt_);
  }

  void silu_mul(const Tensor& gate, const Tensor& up, Tensor out) override {
    CHECK(gate.rows == up.rows && gate.cols == up.cols && out.rows == gate.rows);
    pool_.parallel_for(
        gate.rows,
        [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            silu_mul_row(gate.row<float>(r), up.row<float>(r), out.row<float>(r), gate.cols);
          }
        },
        /*grain=*/4);
  }

  void add(Tensor a, const Tensor& b) override {
    CHECK(a.rows == b.rows && a.cols == b.cols);
    for (int64_t r = 0; r < a.rows; ++r) {
      float* ar = a.row<float>(r);
      const float* br = b.row<float>(r);
      for (int64_t c = 0; c < a.cols; ++c) ar[c] += br[c];
    }
  }

  void gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor out) override {
    CHECK(out.rows >= (int64_t)rows.size() && out.cols == x.cols);
    for (size_t i = 0; i < rows.size(); ++i) {
      CHECK(rows[i] >= 0 && rows[i] < x.rows);
      std::memcpy(out.row<float>((int64_t)i), x.row<float>(rows[i]),
                  (size_t)x.cols * sizeof(float));
    }
  }

  void copy_blocks_between(const KvStorage& from_base, KvStorage& to_base,
                           std::span<const int32_t> src, std::span<const int32_t> dst) override {
    const auto& from = static_cast<const CpuKvStorage&>(from_base);
    auto& to = static_cast<CpuKvStorage&>(to_base);
    const KvGeometry& g = from.geometry();
    CHECK(src.size() == dst.size());
    CHECK(g.n_layers == to.geometry().n_layers &&
          g.bytes_per_block_per_layer() == to.geometry().bytes_per_block_per_layer());
    const size_t bb = g.bytes_per_block_per_layer();
    for (int64_t l = 0; l < g.n_layers; ++l)
      for (size_t i = 0; i < src.size(); ++i) {
        CHECK(src[i] >= 0 && src[i] < g.n_blocks && dst[i] >= 0 && dst[i] < to.geometry().n_blocks);
        std::memcpy(to.k(l) + (size_t)dst[i] * bb, from.k(l) + (size_t)src[i] * bb, bb);
        std::memcpy(to.v(l) + (size_t)dst[i] * bb, from.v(l) + (size_t)src[i] * bb, bb);
      }
  }

  Result<std::unique_ptr<KvStorage>> create_host_kv_storage(const KvGeometry& g) override {
    return create_kv_storage(g);
  }

  void copy_blocks(KvStorage& kv_base, std::span<const int32_t> src,
                   std::span<const int32_t> dst) override {
    auto& kv = static_cast<CpuKvStorage&>(kv_base);
    const KvGeometry& g = kv.geometry();
    CHECK(src.size() == dst.size());
    const size_t bb = g.bytes_per_block_per_layer();
    for (int64_t l = 0; l < g.n_layers; ++l)
      for (size_t i = 0; i < src.size(); ++i) {
        CHECK(src[i] >= 0 && src[i] < g.n_blocks && dst[i] >= 0 && dst[i] < g.n_blocks);
        std::memcpy(kv.k(l) + (size_t)dst[i] * bb, kv.k(l) + (size_t)src[i] * bb, bb);
        std::memcpy(kv.v(l) + (size_t)dst[i] * bb, kv.v(l) + (size_t)src[i] * bb, bb);
      }
  }

 private:
  // One product of a fused group: out = input @ w^T (+ bias).
  struct Product {
    const Weight* w;
    const Weight* bias;
    Tensor out;
  };
  // Called by the thread that computed columns [b, e) of product j, for every input row.
  using Epilogue = std::function<void(size_t j, int64_t b, int64_t e)>;
  // The input rows in the form the kernels read (see quantize_input).
  struct Input {
    const void* data;
    size_t row_bytes;
  };

  // Products of one group can share one quantized input when their weights want the same
  // activation type and all or none are packed.
  static bool same_input_form(std::span<const Product> ps) {
    for (const Product& p : ps)
      if (p.w->dtype != ps[0].w->dtype || (p.w->packed == nullptr) != (ps[0].w->packed == nullptr))
        return false;
    return true;
  }

  static const float* check_norm(const Tensor& x, const Weight& norm, const Tensor& h) {
    CHECK(x.rows == h.rows && x.cols == h.cols && norm.cols == x.cols && norm.dtype == DType::f32);
    return static_cast<const float*>(norm.data);
  }

  // Quantizes x for products against weights like w (into packed_acts_ for packed weights,
  // else into act_scratch_), rows split across threads. pre(r), when given, runs
  // first for each row (it writes x's row r: the fused RMSNorm).
  template <typename Pre>
  Input quantize_input(const Tensor& x, const Weight& w, Pre pre) {
    CHECK(x.dtype == DType::f32 && x.cols == w.cols);
    const int64_t n = x.rows, k = x.cols;
    const DType act_t = activation_dtype_for(w.dtype);
    constexpr bool kHasPre = !std::is_same_v<Pre, std::nullptr_t>;
    if (act_t == DType::f32) {
      CHECK(w.packed == nullptr);
      if constexpr (kHasPre)
        pool_.parallel_for(
            n,
            [&](int64_t b, int64_t e) {
              for (int64_t r = b; r < e; ++r) pre(r);
            },
            /*grain=*/4);
      return {x.data, (size_t)x.stride * sizeof(float)};
    }
    if (w.packed != nullptr) {
      // Straight into the packed kernels' panels (no block-format copy in between).
      resize_acts(w.dtype, n, k, packed_acts_);
      pool_.parallel_for(
          n,
          [&](int64_t b, int64_t e) {
            for (int64_t r = b; r < e; ++r) {
              if constexpr (kHasPre) pre(r);
              quantize_acts_rows(w.dtype, x.row<float>(r), x.stride, r, r + 1, packed_acts_);
            }
          },
          /*grain=*/4);
      return {nullptr, 0};
    }
    const size_t rb = dtype_row_bytes(act_t, k);
    if (act_scratch_.size() < rb * (size_t)n) act_scratch_.resize(rb * (size_t)n);
    uint8_t* dst = act_scratch_.data();
    pool_.parallel_for(
        n,
        [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            if constexpr (kHasPre) pre(r);
            quantize_row_fast(act_t, x.row<float>(r), dst + (size_t)r * rb, k);
          }
        },
        /*grain=*/4);
    return {dst, rb};
  }

  // out_j = input @ w_j^T (+ bias_j) for every product, in one parallel region: each thread
  // takes a share of every product's weight rows, in multiples of 16 so tiles (and the
  // packed layout's 16-row groups) stay whole; epilogue, if any, follows each share.
  void run_products(const Input& in, int64_t n, std::span<const Product> ps,
                    const Epilogue* epilogue) {
    for (const Product& p : ps) {
      CHECK(p.out.dtype == DType::f32 && p.out.rows == n && p.out.cols == p.w->rows);
      CHECK(p.bias == nullptr || !p.bias->present() ||
            (p.bias->dtype == DType::f32 && p.bias->cols == p.out.cols));
    }
    pool_.run([&](int t, int nt) {
      for (size_t j = 0; j < ps.size(); ++j) {
        const Weight& w = *ps[j].w;
        const Tensor& out = ps[j].out;
        const int64_t m = w.rows;
        const int64_t per = ((m + nt - 1) / nt + 15) / 16 * 16;
        const int64_t b = std::min<int64_t>(m, per * t), e = std::min<int64_t>(m, b + per);
        if (b >= e) continue;
        if (w.packed != nullptr)
          matmul_packed(w.dtype, w.packed, m, b, e, packed_acts_, static_cast<float*>(out.data),
                        out.stride, q4_1_order_);
        else
          matmul_rows(w.dtype, w.data, w.row_bytes, b, e, in.data, in.row_bytes, n, w.cols,
                      static_cast<float*>(out.data), out.stride);
        if (ps[j].bias != nullptr && ps[j].bias->present()) {
          const auto* bv = static_cast<const float*>(ps[j].bias->data);
          for (int64_t r = 0; r < n; ++r) {
            float* o = out.row<float>(r);
            for (int64_t c = b; c < e; ++c) o[c] += bv[c];
          }
        }
        if (epilogue != nullptr) (*epilogue)(j, b, e);
      }
    });
  }

  // o = silu(g) * u over n columns (o may be g). The 16-lane exp of vec_math.h; every caller
  // (the silu_mul op, the fused FFN) comes here, so they agree bit for bit.
  static void silu_mul_row(const float* g, const float* u, float* o, int64_t n) {
#if INFERCEPT_VEC_AVX512
    // Element-wise, the tail masked: a column's value does not depend on where a range starts.
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t c = 0; c < n; c += 16) {
      const __mmask16 m = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1u);
      const __m512 gv = _mm512_maskz_loadu_ps(m, g + c);
      const __m512 den = _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv)));
      _mm512_mask_storeu_ps(o + c, m,
                            _mm512_mul_ps(_mm512_div_ps(gv, den), _mm512_maskz_loadu_ps(m, u + c)));
    }
#else
    for (int64_t c = 0; c < n; ++c) o[c] = g[c] / (1.0f + std::exp(-g[c])) * u[c];
#endif
  }

  static int32_t argmax_row(const float* x, int64_t n) {
    float m = -INFINITY;
    int64_t i = 0;
#if INFERCEPT_VEC_AVX512
    // max(x, m) keeps m where x is NaN (vmaxps returns its second operand then).
    __m512 m16 = _mm512_set1_ps(-INFINITY);
    for (; i + 16 <= n; i += 16) m16 = vm::max(_mm512_loadu_ps(x + i), m16);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, m16);
    for (float l : lanes) m = std::max(m, l);
#endif
    for (; i < n; ++i) m = std::max(m, x[i]);
    if (m == -INFINITY) return 0;
    i = 0;
#if INFERCEPT_VEC_AVX512
    const __m512 mv = _mm512_set1_ps(m);
    for (; i + 16 <= n; i += 16)
      if (const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), mv, _CMP_EQ_OQ); eq != 0)
        return (int32_t)(i + __builtin_ctz((unsigned)eq));
#endif
    for (; i < n; ++i)
      if (x[i] == m) return (int32_t)i;
    return 0;
  }

  static void rmsnorm_row(const float* x, const float* w, int64_t n, float eps, float* out) {
    double ss = 0.0;
    int64_t i0 = 0;
#if INFERCEPT_VEC_AVX512
    // The sum of squares in 8 double lanes (element i in lane i % 8), then the lanes in
    // order: one chain of 576 dependent double adds was ~2% of a batch-32 step. Each square
    // is rounded to float first, as ggml's rms_norm does ((double)(x * x)); in double the
    // order of the sum moves the f32 scale below only in a last-bit tie.
    if (n >= 8) {
      __m512d acc = _mm512_setzero_pd();
      for (; i0 + 8 <= n; i0 += 8) {
        const __m256 v = _mm256_loadu_ps(x + i0);
        acc = _mm512_add_pd(acc, _mm512_maskz_cvtps_pd((__mmask8)0xff, _mm256_mul_ps(v, v)));
      }
      alignas(64) double lanes[8];
      _mm512_store_pd(lanes, acc);
      for (double l : lanes) ss += l;
    }
#endif
    for (int64_t i = i0; i < n; ++i) ss += (double)(x[i] * x[i]);
    const float s = 1.0f / std::sqrt((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s * w[i];
  }

  static void rotate_heads(float* x, int64_t n_heads, const RopeParams& p, const float* cs,
                           const float* sn) {
    const int64_t half = p.rot_dim / 2;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* hx = x + h * p.head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = p.neox ? i : 2 * i;
        const int64_t b = p.neox ? i + half : 2 * i + 1;
        const float x0 = hx[a], x1 = hx[b];
        // The fused multiply-adds GCC makes of ggml's x0*cos - x1*sin and x0*sin + x1*cos
        // (its rope kernel, vectorized with vfmaddsub; read for the adjacent pairs of llama
        // GGUFs): x0's products are fused, x1's rounded. Written out so that our compiler
        // cannot choose otherwise (the other pairing alone costs 16 of 24 greedy matches
        // against llama.cpp, docs/PERF.md 2.1).
        hx[a] = std::fma(x0, cs[i], -(x1 * sn[i]));
        hx[b] = std::fma(x0, sn[i], x1 * cs[i]);
      }
    }
  }

  static void store_row(const float* src, uint8_t* dst, int64_t n, DType t) {
    if (t == DType::f32) {
      std::memcpy(dst, src, (size_t)n * sizeof(float));
    } else {
      auto* d = reinterpret_cast<uint16_t*>(dst);
      int64_t i = 0;
#if INFERCEPT_VEC_AVX512
      // The same round-to-nearest-even conversion as fp32_to_fp16, 16 at a time.
      for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                            _mm512_maskz_cvtps_ph(vm::kAll, _mm512_loadu_ps(src + i),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
      for (; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
    }
  }

  struct AlignedDelete {
    void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };

  // cos and sin of every (row, frequency) of the positions last rotated, [rows, half] each.
  struct RopeTable {
    int64_t half = -1;
    float theta_base = 0.0f;
    std::span<const float> freq_factors;
    std::vector<int32_t> positions;
    std::vector<float> cs, sn;
  };

  ThreadPool pool_;
  RopeTable rope_table_;
  bool pack_weights_ = true;
  Q4_1Order q4_1_order_ = Q4_1Order::fast;
  AttentionOrder attention_order_ = AttentionOrder::fast;
  const std::atomic<bool>* interrupt_ = nullptr;  // set_interrupt: the step may be given up
  std::vector<std::unique_ptr<uint8_t[], AlignedDelete>> buffers_;
  std::vector<std::unique_ptr<uint8_t[], AlignedDelete>> packed_;  // Weight::packed copies
  std::vector<uint8_t> act_scratch_;
  PackedActs packed_acts_;         // the current matmul's activations for matmul_packed
  std::vector<Product> products_;  // norm_project's group
};

}  // namespace

Result<CpuNumerics> parse_cpu_numerics(const std::string& name) {
  if (name == "fast") return CpuNumerics::fast;
  if (name == "llama.cpp") return CpuNumerics::llama_cpp;
  return make_error("CPU numerics must be 'fast' or 'llama.cpp', got '", name, "'");
}

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace infercept
