// Single-thread matvec speed of the CPU dot kernels, in GB/s of weight bytes streamed, next
// to the memory bandwidth of plain memcpy / read loops on the same machine. Why: decode is
// memory-bound, so the number that matters is how close a matvec gets to the read bandwidth.
// "hot" runs reuse one matrix (cache-resident when it fits); "cold" cycles through copies
// totalling more than the last-level cache so every weight byte comes from DRAM.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <random>
#include <vector>

#include "backend/cpu/packed_matmul.h"
#include "backend/cpu/quant_dot.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/quant_blocks.h"

namespace infercept {
namespace {

constexpr size_t kColdBytes = size_t(256) << 20;  // well above a 32 MiB L3

struct Matrix {
  DType wt;
  int64_t rows, k;
  size_t row_bytes;
  std::vector<uint8_t> w;  // `copies` consecutive copies of the matrix
  int64_t copies;
  std::vector<uint8_t> act;
  std::vector<float> out;
};

Matrix make_matrix(DType wt, int64_t rows, int64_t k, bool cold) {
  Matrix m{wt, rows, k, dtype_row_bytes(wt, k), {}, 1, {}, {}};
  const size_t bytes = m.row_bytes * (size_t)rows;
  m.copies = cold ? (int64_t)std::max<size_t>(1, kColdBytes / bytes) : 1;
  m.w.resize(bytes * (size_t)m.copies);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> row((size_t)k);
  if (wt == DType::q4_k || wt == DType::q6_k) {
    // no k-quant quantizer: random quants and scales, sane fp16 super-block scales
    std::uniform_int_distribution<int> byte(0, 255);
    for (size_t i = 0; i < bytes; ++i) m.w[i] = (uint8_t)byte(rng);
    const uint16_t d = fp32_to_fp16(0.01f);
    for (int64_t b = 0; b < rows * k / kQKK; ++b) {
      if (wt == DType::q4_k) {
        auto* blk = reinterpret_cast<BlockQ4_K*>(m.w.data()) + b;
        blk->d = blk->dmin = d;
      } else {
        reinterpret_cast<BlockQ6_K*>(m.w.data())[b].d = d;
      }
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      for (float& e : row) e = dist(rng);
      quantize_row(wt, row.data(), m.w.data() + (size_t)r * m.row_bytes, k);
    }
  }
  for (int64_t c = 1; c < m.copies; ++c) std::memcpy(m.w.data() + c * bytes, m.w.data(), bytes);
  const DType at = activation_dtype_for(wt);
  for (float& e : row) e = dist(rng);
  m.act.resize(dtype_row_bytes(at, k));
  quantize_row(at, row.data(), m.act.data(), k);
  m.out.resize((size_t)rows);
  return m;
}

void BM_Matvec(benchmark::State& state, DType wt, int64_t rows, int64_t k, bool cold) {
  Matrix m = make_matrix(wt, rows, k, cold);
  const size_t bytes = m.row_bytes * (size_t)rows;
  int64_t c = 0;
  for (auto _ : state) {
    matmul_rows(wt, m.w.data() + (size_t)c * bytes, m.row_bytes, 0, rows, m.act.data(),
                m.act.size(), 1, k, m.out.data(), rows);
    benchmark::DoNotOptimize(m.out.data());
    if (++c == m.copies) c = 0;
  }
  state.counters["weight_GB/s"] = benchmark::Counter(
      (double)bytes * (double)state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// Prefill-shaped: n_act activation rows against the whole matrix; reports activation-row x
// weight-row dot products per second, in GMAC/s (k multiply-adds each).
void BM_Matmul(benchmark::State& state, DType wt, int64_t rows, int64_t k, int64_t n_act) {
  Matrix m = make_matrix(wt, rows, k, false);
  const size_t arb = m.act.size();
  std::vector<uint8_t> acts(arb * (size_t)n_act);
  for (int64_t a = 0; a < n_act; ++a) std::memcpy(acts.data() + a * arb, m.act.data(), arb);
  std::vector<float> out((size_t)(rows * n_act));
  for (auto _ : state) {
    matmul_rows(wt, m.w.data(), m.row_bytes, 0, rows, acts.data(), arb, n_act, k, out.data(), rows);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GMAC/s"] = benchmark::Counter(
      (double)rows * (double)k * (double)n_act * (double)state.iterations() / 1e9,
      benchmark::Counter::kIsRate);
}

// The same two shapes through the packed (interleaved-row VNNI) kernels the CPU backend uses
// for q4_0/q4_1/q8_0: n_act == 1 is decode's matvec (weight GB/s), more is a batch (GMAC/s).
// The activation preparation is timed with the matmul, as the backend pays it per call.
void BM_Packed(benchmark::State& state, DType wt, int64_t rows, int64_t k, int64_t n_act, bool cold,
               Q4_1Order order = Q4_1Order::fast) {
  if (!packed_supported(wt)) {
    state.SkipWithError("no AVX512-VNNI in this build");
    return;
  }
  Matrix m = make_matrix(wt, rows, k, false);
  const size_t one = packed_bytes(wt, rows, k);
  const int64_t copies = cold ? (int64_t)std::max<size_t>(1, kColdBytes / one) : 1;
  auto* packed = static_cast<uint8_t*>(::operator new(one*(size_t)copies, std::align_val_t(64)));
  pack_weight(wt, m.w.data(), m.row_bytes, rows, k, packed);
  for (int64_t c = 1; c < copies; ++c) std::memcpy(packed + c * one, packed, one);
  const size_t arb = m.act.size();
  std::vector<uint8_t> acts(arb * (size_t)n_act);
  for (int64_t a = 0; a < n_act; ++a) std::memcpy(acts.data() + a * arb, m.act.data(), arb);
  std::vector<float> out((size_t)(rows * n_act));
  PackedActs pa;
  int64_t c = 0;
  for (auto _ : state) {
    prepare_acts(wt, acts.data(), arb, n_act, k, pa);
    matmul_packed(wt, packed + (size_t)c * one, rows, 0, rows, pa, out.data(), rows, order);
    benchmark::DoNotOptimize(out.data());
    if (++c == copies) c = 0;
  }
  const double it = (double)state.iterations();
  if (n_act == 1)
    state.counters["weight_GB/s"] = benchmark::Counter(
        (double)m.row_bytes * (double)rows * it / 1e9, benchmark::Counter::kIsRate);
  else
    state.counters["GMAC/s"] = benchmark::Counter(
        (double)rows * (double)k * (double)n_act * it / 1e9, benchmark::Counter::kIsRate);
  ::operator delete(packed, std::align_val_t(64));
}

void BM_Memcpy(benchmark::State& state) {
  std::vector<uint8_t> a(kColdBytes / 2, 1), b(kColdBytes / 2);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), a.size());
    benchmark::ClobberMemory();
  }
  // bytes read (the same as bytes written)
  state.counters["read_GB/s"] = benchmark::Counter(
      (double)a.size() * (double)state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void BM_ReadSum(benchmark::State& state) {
  std::vector<uint64_t> a(kColdBytes / 8, 1);
  for (auto _ : state) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < a.size(); i += 4) {
      s0 += a[i];
      s1 += a[i + 1];
      s2 += a[i + 2];
      s3 += a[i + 3];
    }
    benchmark::DoNotOptimize(s0 + s1 + s2 + s3);
  }
  state.counters["read_GB/s"] = benchmark::Counter(
      (double)kColdBytes * (double)state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadSum)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Matvec, q4_1_1536x576_hot, DType::q4_1, 1536, 576, false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Matvec, q4_1_1536x576_cold, DType::q4_1, 1536, 576, true)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Matvec, q8_0_49152x576_hot, DType::q8_0, 49152, 576, false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Matvec, q8_0_49152x576_cold, DType::q8_0, 49152, 576, true)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Matvec, q4_0_1536x576_hot, DType::q4_0, 1536, 576, false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Matvec, q4_k_1536x2048_hot, DType::q4_k, 1536, 2048, false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Matvec, q6_k_1536x2048_hot, DType::q6_k, 1536, 2048, false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Matmul, q4_1_1536x576_x64, DType::q4_1, 1536, 576, 64)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Matmul, q8_0_1536x576_x64, DType::q8_0, 1536, 576, 64)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Matmul, q4_k_1536x2048_x64, DType::q4_k, 1536, 2048, 64)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Matmul, q4_1_1536x576_x32, DType::q4_1, 1536, 576, 32)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Packed, q4_1_1536x576_hot, DType::q4_1, 1536, 576, 1, false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Packed, q4_1_1536x576_cold, DType::q4_1, 1536, 576, 1, true)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Packed, q8_0_49152x576_cold, DType::q8_0, 49152, 576, 1, true)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Packed, q4_1_1536x576_x32, DType::q4_1, 1536, 576, 32, false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Packed, q4_1_1536x576_x64, DType::q4_1, 1536, 576, 64, false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Packed, q8_0_1536x576_x64, DType::q8_0, 1536, 576, 64, false)
    ->Unit(benchmark::kMillisecond);
// q4_1 summed in llama.cpp's order (--cpu-numerics llama.cpp).
BENCHMARK_CAPTURE(BM_Packed, q4_1_ggml_1536x576_hot, DType::q4_1, 1536, 576, 1, false,
                  Q4_1Order::ggml)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Packed, q4_1_ggml_1536x576_cold, DType::q4_1, 1536, 576, 1, true,
                  Q4_1Order::ggml)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Packed, q4_1_ggml_1536x576_x32, DType::q4_1, 1536, 576, 32, false,
                  Q4_1Order::ggml)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Matvec, f16_1536x576_hot, DType::f16, 1536, 576, false)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace infercept

BENCHMARK_MAIN();
