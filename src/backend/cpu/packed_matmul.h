// Matmuls against q4_0 / q4_1 / q8_0 weights repacked at load into groups of 16 interleaved
// rows, computed with 512-bit VNNI (vpdpbusd) register tiles.
// Why: with the file layout a 512-bit multiply needs a shuffle per block to gather one row's
// bytes, so multi-row products (prefill chunks, batched decode) ran at ~40 GMAC/s per core.
// Interleaved, one 64-byte load holds 4 quants of each of 16 weight rows, so one vpdpbusd
// against 4 broadcast activation quants advances 16 dot products at once, and an unpacked
// weight vector is reused from a register for up to 8 activation rows.
//
// Results: every (weight row, activation row) dot is computed as
//   acc = 0; for each block i: acc = fma(dx_i * dy_i, isum_i, acc) [; acc = fma(mx_i, sy_i, acc)]
// with isum_i the block's exact integer sum, in one SIMD lane, whatever the tile shape or the
// number of activation rows. So a row's result is bit-identical alone (decode) and inside a
// batch, and differs from the scalar oracle (vec_dot_scalar) only by float rounding order.
// q4_1 can instead be summed in llama.cpp's order (Q4_1Order::ggml, below), also the same
// whatever the batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace infercept {

// Whether weights of type t use this path: q4_0, q4_1 and q8_0 when the build has
// AVX512F/BW and AVX512-VNNI; false otherwise (callers keep the file layout and matmul_rows).
bool packed_supported(DType t);

// Bytes of the packed copy of a rows x k weight (rows are padded up to a multiple of 16).
size_t packed_bytes(DType t, int64_t rows, int64_t k);

// Writes the packed copy of the rows x k weight w (row r at w + r * w_row_bytes) to dst,
// which must be 64-byte aligned and packed_bytes(t, rows, k) long.
void pack_weight(DType t, const void* w, size_t w_row_bytes, int64_t rows, int64_t k, void* dst);

// Activation rows in the form the packed kernels read: panels of 8 rows (the widest tile),
// block-major inside a panel, so a tile reaches all its rows' operands from one pointer;
// block scales converted to f32 once per matmul instead of once per weight group. Slot
// j = (panel * nb + block) * 8 + row-in-panel; the last panel is padded.
struct PackedActs {
  int64_t n = 0, k = 0;
  std::vector<int8_t> qs;     // slots x 32 quants
  std::vector<float> d;       // per slot: block scale
  std::vector<float> s;       // per slot, q8_1 only: d * sum of the block's quants
  std::vector<int32_t> corr;  // per slot, q4_0/q8_0: -offset * sum of the block's quants
};

// Fills out from n activation rows quantized with quantize_row(activation_dtype_for(t), ...),
// row a at acts + a * act_row_bytes. Reuses out's storage.
void prepare_acts(DType t, const void* acts, size_t act_row_bytes, int64_t n, int64_t k,
                  PackedActs& out);
// prepare_acts in two steps, so threads can fill disjoint rows: sizes out for n rows of k,
// then fills rows [a_begin, a_end) (row a still at acts + a * act_row_bytes).
void resize_acts(DType t, int64_t n, int64_t k, PackedActs& out);
// Quantizes f32 activation rows [a_begin, a_end) (row a at x + (a - a_begin) * x_stride)
// straight into out (sized by resize_acts): the same values as quantize_row_fast to
// activation_dtype_for(t) followed by prepare_acts_rows, without the block-format copy.
void quantize_acts_rows(DType t, const float* x, int64_t x_stride, int64_t a_begin, int64_t a_end,
                        PackedActs& out);
void prepare_acts_rows(DType t, const void* acts, size_t act_row_bytes, int64_t a_begin,
                       int64_t a_end, PackedActs& out);

// How q4_1 dot products are summed. fast: as above. ggml: the order of ggml's x86
// ggml_vec_dot_q4_1_q8_1, which llama.cpp's CPU backend runs for every q4_1 product: eight
// accumulators per dot (one per group of four elements of a block), the blocks' min terms
// in a ninth, then a fixed tree. Bit-identical to llama.cpp's q4_1 products, which is what
// lets greedy decoding follow llama.cpp token for token (docs/PERF.md 2), but about 2.4x the
// instructions of `fast` where the products are compute-bound (prefill, batched decode).
// The CPU backend takes it with CpuNumerics::llama_cpp (--cpu-numerics llama.cpp).
enum class Q4_1Order { fast, ggml };

// out[a * out_stride + r] = dot(weight row r, activation row a) for r in [row_begin, row_end)
// and every activation row. row_begin must be a multiple of 16 and row_end a multiple of 16
// or `rows`, so callers split work between threads on group boundaries.
void matmul_packed(DType t, const void* packed, int64_t rows, int64_t row_begin, int64_t row_end,
                   const PackedActs& acts, float* out, int64_t out_stride,
                   Q4_1Order order = Q4_1Order::fast);

}  // namespace infercept
