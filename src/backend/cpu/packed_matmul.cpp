// Packed-weight matmuls (see packed_matmul.h for why). Layout of one group of 16 weight rows
// with nb blocks of 32 elements each:
//   quants: nb x Q bytes, Q = 256 (q4) or 512 (q8). Block i's quants are Q/64 vectors of 64
//           bytes; byte 4r+j of vector v is byte 4v+j of row r's block i (for q4 that byte holds
//           elements 4v+j in its low nibble and 16+4v+j in its high nibble; for q8 it is
//           element 4v+j plus 128, so it is an unsigned vpdpbusd operand).
//   d:      nb x 16 fp16 (block scale of each row), then for q4_1 m: nb x 16 fp16 (block min).
// The group is padded to a multiple of 64 bytes; rows past the matrix end are zero.
// Offsets of the unsigned weight operand are taken out exactly with the activation block's
// integer sum: q4_0 (nibble - 8) and q8_0 (byte - 128) start each block's integer sum at
// -offset * sum(activation quants); q4_1's min is a float term, as in the scalar kernel.
#include "backend/cpu/packed_matmul.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/quantize_fast.h"
#include "core/check.h"
#include "core/half.h"
#include "core/quant_blocks.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define INFERCEPT_PACKED_VNNI 1
#include <immintrin.h>
#endif

namespace infercept {
namespace {

constexpr int kGroup = 16;  // weight rows per group: one int32 lane each of a 512-bit vector
constexpr int kPanel = 8;   // activation rows per panel of PackedActs (= the widest tile)

struct Geometry {
  int64_t nb = 0;        // blocks per row
  int qs_bytes = 0;      // quant bytes per block of a group
  bool has_min = false;  // q4_1
  size_t d_offset = 0;   // from the group start
  size_t m_offset = 0;
  size_t group_bytes = 0;  // multiple of 64
};

Geometry geometry(DType t, int64_t k) {
  Geometry g;
  g.nb = k / kQK;
  g.qs_bytes = t == DType::q8_0 ? kGroup * kQK : kGroup * kQK / 2;
  g.has_min = t == DType::q4_1;
  g.d_offset = (size_t)g.nb * (size_t)g.qs_bytes;
  g.m_offset = g.d_offset + (size_t)g.nb * kGroup * sizeof(uint16_t);
  const size_t end = g.m_offset + (g.has_min ? (size_t)g.nb * kGroup * sizeof(uint16_t) : 0);
  g.group_bytes = (end + 63) / 64 * 64;
  return g;
}

int64_t n_groups(int64_t rows) {
  return (rows + kGroup - 1) / kGroup;
}

#if INFERCEPT_PACKED_VNNI

#define INFERCEPT_UNROLL _Pragma("GCC unroll 16")

enum class Kind { q4_0, q4_1, q8_0 };

// _mm512_cvtph_ps / _mm512_cvtepi32_ps start from _mm512_undefined_ps(), which GCC 12 reports
// as maybe-uninitialized; the zero-masked forms with a full mask are the same instructions.
inline __m512 f16x16_to_f32(const uint16_t* p) {
  return _mm512_maskz_cvtph_ps((__mmask16)0xffff,
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 i32_to_f32(__m512i v) {
  return _mm512_maskz_cvt_roundepi32_ps((__mmask16)0xffff, v, _MM_FROUND_CUR_DIRECTION);
}

// The parts of G consecutive weight groups: quants, block scales and (q4_1) block mins.
template <int G>
struct GroupParts {
  const uint8_t* qs[G];
  const uint16_t* dd[G];
  const uint16_t* mm[G];
  GroupParts(const uint8_t* grp, const Geometry& geo) {
    INFERCEPT_UNROLL
    for (int g = 0; g < G; ++g) {
      qs[g] = grp + (size_t)g * geo.group_bytes;
      dd[g] = reinterpret_cast<const uint16_t*>(qs[g] + geo.d_offset);
      mm[g] = reinterpret_cast<const uint16_t*>(qs[g] + geo.m_offset);
    }
  }
};

// The groups of one product: where group g starts, and which of its 16 rows exist.
struct GroupWalk {
  const uint8_t* packed;
  Geometry geo;
  int64_t row_end;
  const uint8_t* ptr(int64_t g) const { return packed + (size_t)g * geo.group_bytes; }
  __mmask16 mask(int64_t g) const {
    const int64_t live = std::min<int64_t>(kGroup, row_end - g * kGroup);
    return (__mmask16)((1u << live) - 1u);
  }
};

// First element of activation row a0's panel (kPanel rows, block-major) in PackedActs' arrays.
inline size_t panel_start(int64_t a0, int64_t nb) {
  return (size_t)(a0 / kPanel) * (size_t)nb * kPanel;
}

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// G consecutive groups (16 G weight rows) against C activation rows starting at a0; writes the
// 16 G x C results. Register budget: G*C float accumulators, G*C*S integer block sums, 2G
// unpacked weight vectors; the shapes used stay within the 32 vector registers.
// S splits a block's integer sum over two accumulators when G*C is small, so the dependent
// vpdpbusd chain per block is halved (integer, so the split cannot change the result).
template <Kind K, int G, int C>
void tile(const uint8_t* grp, const Geometry& geo, const PackedActs& A, int64_t a0,
          const __mmask16* masks, float* out, int64_t out_stride, int64_t r0) {
  constexpr bool kQ4 = K != Kind::q8_0;
  constexpr int NV = kQ4 ? 4 : 8;  // 64-byte quant vectors per block of a group
  constexpr int S = G * C < 4 ? 2 : 1;
  const int64_t nb = geo.nb;
  static_assert(C <= kPanel);
  // The tile's rows are one panel: every activation operand is one base pointer plus a
  // constant offset (row c's block i at (i * kPanel + c) * kQK quants, i * kPanel + c
  // scales), so the 8 rows do not take 32 general registers.
  const size_t panel = panel_start(a0, nb);
  const int8_t* const aq = A.qs.data() + panel * kQK;
  const float* const ad = A.d.data() + panel;
  const float* const as = K == Kind::q4_1 ? A.s.data() + panel : nullptr;
  const int32_t* const ac = K == Kind::q4_1 ? nullptr : A.corr.data() + panel;
  const GroupParts<G> parts(grp, geo);
  const auto& qs = parts.qs;
  const auto& dd = parts.dd;
  const auto& mm = parts.mm;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m512 acc[G][C];
  INFERCEPT_UNROLL
  for (int g = 0; g < G; ++g) {
    INFERCEPT_UNROLL
    for (int c = 0; c < C; ++c) acc[g][c] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < nb; ++i) {
    __m512i isum[G][C][S];
    INFERCEPT_UNROLL
    for (int g = 0; g < G; ++g) {
      INFERCEPT_UNROLL
      for (int c = 0; c < C; ++c) {
        isum[g][c][0] =
            K == Kind::q4_1 ? _mm512_setzero_si512() : _mm512_set1_epi32(ac[i * kPanel + c]);
        if constexpr (S == 2) isum[g][c][1] = _mm512_setzero_si512();
      }
    }
    INFERCEPT_UNROLL
    for (int v = 0; v < NV; ++v) {
      __m512i wl[G], wh[G];
      INFERCEPT_UNROLL
      for (int g = 0; g < G; ++g) {
        const __m512i w = _mm512_load_si512(qs[g] + (size_t)i * (NV * 64) + 64 * v);
        if constexpr (kQ4) {
          wl[g] = _mm512_and_si512(w, m4);
          wh[g] = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
        } else {
          wl[g] = w;
        }
      }
      INFERCEPT_UNROLL
      for (int c = 0; c < C; ++c) {
        const int8_t* a = aq + (i * kPanel + c) * kQK;
        if constexpr (kQ4) {
          const __m512i al = _mm512_set1_epi32(load_i32(a + 4 * v));
          const __m512i ah = _mm512_set1_epi32(load_i32(a + 16 + 4 * v));
          INFERCEPT_UNROLL
          for (int g = 0; g < G; ++g) {
            isum[g][c][0] = _mm512_dpbusd_epi32(isum[g][c][0], wl[g], al);
            isum[g][c][S - 1] = _mm512_dpbusd_epi32(isum[g][c][S - 1], wh[g], ah);
          }
        } else {
          const __m512i al = _mm512_set1_epi32(load_i32(a + 4 * v));
          INFERCEPT_UNROLL
          for (int g = 0; g < G; ++g)
            isum[g][c][v % S] = _mm512_dpbusd_epi32(isum[g][c][v % S], wl[g], al);
        }
      }
    }
    // The block's float step; the same instructions for every lane whatever G and C.
    INFERCEPT_UNROLL
    for (int g = 0; g < G; ++g) {
      const __m512 dx = f16x16_to_f32(dd[g] + i * kGroup);
      __m512 mx = _mm512_setzero_ps();
      if constexpr (K == Kind::q4_1) mx = f16x16_to_f32(mm[g] + i * kGroup);
      INFERCEPT_UNROLL
      for (int c = 0; c < C; ++c) {
        __m512i s = isum[g][c][0];
        if constexpr (S == 2) s = _mm512_add_epi32(s, isum[g][c][1]);
        const __m512 scale = _mm512_mul_ps(dx, _mm512_set1_ps(ad[i * kPanel + c]));
        acc[g][c] = _mm512_fmadd_ps(scale, i32_to_f32(s), acc[g][c]);
        if constexpr (K == Kind::q4_1)
          acc[g][c] = _mm512_fmadd_ps(mx, _mm512_set1_ps(as[i * kPanel + c]), acc[g][c]);
      }
    }
  }
  INFERCEPT_UNROLL
  for (int g = 0; g < G; ++g) {
    INFERCEPT_UNROLL
    for (int c = 0; c < C; ++c)
      _mm512_mask_storeu_ps(out + (a0 + c) * out_stride + r0 + kGroup * g, masks[g], acc[g][c]);
  }
}

// q4_1 in the order of ggml's x86 ggml_vec_dot_q4_1_q8_1, which llama.cpp's CPU backend uses
// for every q4_1 product (prompt and decode alike): per (weight row, activation row) eight
// float accumulators, accumulator L taking dx*dy times the integer dot of elements
// 4L..4L+3 of each block (one 32-bit lane of its 256-bit vpdpbusd) by an FMA, the min term
// dm * s in a ninth (a scalar FMA there), and at the end
//   ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) + min term
// (its hsum_float_8, then the min). Here a vector holds one accumulator of 16 weight rows, so
// a group needs eight vectors per activation row where `tile` needs one: about twice the
// instructions per MAC, the price of llama.cpp's exact bits (a block's low-nibble vector v
// is accumulator v, its high-nibble vector accumulator 4 + v). Same instructions for every
// lane whatever G, C or c0, so results stay independent of the batch.
template <int G, int C>
void tile_q4_1_ggml(const uint8_t* grp, const Geometry& geo, const PackedActs& A, int64_t a0,
                    const __mmask16* masks, float* out, int64_t out_stride, int64_t r0) {
  const int64_t nb = geo.nb;
  const int c0 = (int)(a0 % kPanel);
  const size_t panel = panel_start(a0, nb);
  const int8_t* const aq = A.qs.data() + panel * kQK;
  const float* const ad = A.d.data() + panel;
  const float* const as = A.s.data() + panel;
  const GroupParts<G> parts(grp, geo);
  const auto& qs = parts.qs;
  const auto& dd = parts.dd;
  const auto& mm = parts.mm;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[G][C][8], macc[G][C];
  INFERCEPT_UNROLL
  for (int g = 0; g < G; ++g) {
    INFERCEPT_UNROLL
    for (int c = 0; c < C; ++c) {
      macc[g][c] = _mm512_setzero_ps();
      INFERCEPT_UNROLL
      for (int l = 0; l < 8; ++l) acc[g][c][l] = _mm512_setzero_ps();
    }
  }
  for (int64_t i = 0; i < nb; ++i) {
    __m512 scale[G][C];
    INFERCEPT_UNROLL
    for (int g = 0; g < G; ++g) {
      const __m512 dx = f16x16_to_f32(dd[g] + i * kGroup);
      const __m512 mx = f16x16_to_f32(mm[g] + i * kGroup);
      INFERCEPT_UNROLL
      for (int c = 0; c < C; ++c) {
        const int64_t slot = i * kPanel + c0 + c;
        scale[g][c] = _mm512_mul_ps(dx, _mm512_set1_ps(ad[slot]));
        macc[g][c] = _mm512_fmadd_ps(mx, _mm512_set1_ps(as[slot]), macc[g][c]);
      }
    }
    INFERCEPT_UNROLL
    for (int v = 0; v < 4; ++v) {
      __m512i wl[G], wh[G];
      INFERCEPT_UNROLL
      for (int g = 0; g < G; ++g) {
        const __m512i w = _mm512_load_si512(qs[g] + (size_t)i * 256 + 64 * v);
        wl[g] = _mm512_and_si512(w, m4);
        wh[g] = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
      }
      INFERCEPT_UNROLL
      for (int c = 0; c < C; ++c) {
        const int8_t* a = aq + (i * kPanel + c0 + c) * kQK;
        const __m512i al = _mm512_set1_epi32(load_i32(a + 4 * v));
        const __m512i ah = _mm512_set1_epi32(load_i32(a + 16 + 4 * v));
        INFERCEPT_UNROLL
        for (int g = 0; g < G; ++g) {
          acc[g][c][v] = _mm512_fmadd_ps(
              scale[g][c], i32_to_f32(_mm512_dpbusd_epi32(zero, wl[g], al)), acc[g][c][v]);
          acc[g][c][4 + v] = _mm512_fmadd_ps(
              scale[g][c], i32_to_f32(_mm512_dpbusd_epi32(zero, wh[g], ah)), acc[g][c][4 + v]);
        }
      }
    }
  }
  INFERCEPT_UNROLL
  for (int g = 0; g < G; ++g) {
    INFERCEPT_UNROLL
    for (int c = 0; c < C; ++c) {
      const __m512(&a)[8] = acc[g][c];
      const __m512 r =
          _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                        _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])));
      _mm512_mask_storeu_ps(out + (a0 + c) * out_stride + r0 + kGroup * g, masks[g],
                            _mm512_add_ps(r, macc[g][c]));
    }
  }
}

// q4_1 products: groups of two (decode) or one group against two activation rows at a time.
void run_q4_1_ggml(const uint8_t* packed, int64_t row_begin, int64_t row_end, const PackedActs& A,
                   float* out, int64_t out_stride) {
  const GroupWalk w{packed, geometry(DType::q4_1, A.k), row_end};
  const Geometry& geo = w.geo;
  const int64_t g0 = row_begin / kGroup, g1 = n_groups(row_end);
  if (A.n == 1) {
    int64_t g = g0;
    for (; g + 2 <= g1; g += 2) {
      const __mmask16 masks[2] = {w.mask(g), w.mask(g + 1)};
      tile_q4_1_ggml<2, 1>(w.ptr(g), geo, A, 0, masks, out, out_stride, g * kGroup);
    }
    for (; g < g1; ++g) {
      const __mmask16 m = w.mask(g);
      tile_q4_1_ggml<1, 1>(w.ptr(g), geo, A, 0, &m, out, out_stride, g * kGroup);
    }
    return;
  }
  for (int64_t g = g0; g < g1; ++g) {
    const __mmask16 m = w.mask(g);
    int64_t a = 0;
    for (; a + 2 <= A.n; a += 2)
      tile_q4_1_ggml<1, 2>(w.ptr(g), geo, A, a, &m, out, out_stride, g * kGroup);
    if (a < A.n) tile_q4_1_ggml<1, 1>(w.ptr(g), geo, A, a, &m, out, out_stride, g * kGroup);
  }
}

template <Kind K, int C>
void tile_rest(int c, const uint8_t* grp, const Geometry& geo, const PackedActs& A, int64_t a0,
               const __mmask16* masks, float* out, int64_t out_stride, int64_t r0) {
  if constexpr (C > 0) {
    if (c == C) return tile<K, 1, C>(grp, geo, A, a0, masks, out, out_stride, r0);
    tile_rest<K, C - 1>(c, grp, geo, A, a0, masks, out, out_stride, r0);
  }
}

template <Kind K>
void run(const uint8_t* packed, int64_t rows, int64_t row_begin, int64_t row_end,
         const PackedActs& A, float* out, int64_t out_stride) {
  const GroupWalk w{packed,
                    geometry(K == Kind::q8_0   ? DType::q8_0
                             : K == Kind::q4_0 ? DType::q4_0
                                               : DType::q4_1,
                             A.k),
                    row_end};
  const Geometry& geo = w.geo;
  const int64_t g0 = row_begin / kGroup, g1 = n_groups(row_end);
  // Decode (one activation row) streams the weights: four groups per pass give the core
  // independent dependency chains to overlap with the loads.
  constexpr int kDecodeGroups = 4;
  constexpr int kActTile = kPanel;
  if (A.n == 1) {
    int64_t g = g0;
    for (; g + kDecodeGroups <= g1; g += kDecodeGroups) {
      __mmask16 masks[kDecodeGroups];
      for (int j = 0; j < kDecodeGroups; ++j) masks[j] = w.mask(g + j);
      tile<K, kDecodeGroups, 1>(w.ptr(g), geo, A, 0, masks, out, out_stride, g * kGroup);
    }
    for (; g < g1; ++g) {
      const __mmask16 m = w.mask(g);
      tile<K, 1, 1>(w.ptr(g), geo, A, 0, &m, out, out_stride, g * kGroup);
    }
    return;
  }
  // Several activation rows: one group (L1-resident while re-read) meets every activation
  // row, kActTile at a time, each unpacked weight vector serving kActTile rows.
  for (int64_t g = g0; g < g1; ++g) {
    const __mmask16 m = w.mask(g);
    int64_t a = 0;
    for (; a + kActTile <= A.n; a += kActTile)
      tile<K, 1, kActTile>(w.ptr(g), geo, A, a, &m, out, out_stride, g * kGroup);
    if (a < A.n)
      tile_rest<K, kActTile - 1>((int)(A.n - a), w.ptr(g), geo, A, a, &m, out, out_stride,
                                 g * kGroup);
  }
}

#endif  // INFERCEPT_PACKED_VNNI

}  // namespace

bool packed_supported(DType t) {
#if INFERCEPT_PACKED_VNNI
  return t == DType::q4_0 || t == DType::q4_1 || t == DType::q8_0;
#else
  (void)t;
  return false;
#endif
}

size_t packed_bytes(DType t, int64_t rows, int64_t k) {
  CHECK(packed_supported(t) && k % kQK == 0 && rows >= 0);
  return (size_t)n_groups(rows) * geometry(t, k).group_bytes;
}

void pack_weight(DType t, const void* w, size_t w_row_bytes, int64_t rows, int64_t k, void* dst) {
  CHECK(packed_supported(t) && k % kQK == 0);
  CHECK(reinterpret_cast<uintptr_t>(dst) % 64 == 0);
  const Geometry geo = geometry(t, k);
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, packed_bytes(t, rows, k));
  const auto* src = static_cast<const uint8_t*>(w);
  for (int64_t row = 0; row < rows; ++row) {
    uint8_t* grp = out + (size_t)(row / kGroup) * geo.group_bytes;
    const int r = (int)(row % kGroup);
    const uint8_t* wr = src + (size_t)row * w_row_bytes;
    auto* d = reinterpret_cast<uint16_t*>(grp + geo.d_offset);
    auto* m = reinterpret_cast<uint16_t*>(grp + geo.m_offset);
    for (int64_t i = 0; i < geo.nb; ++i) {
      uint8_t* q = grp + (size_t)i * (size_t)geo.qs_bytes;
      const uint8_t* bq = nullptr;  // the block's quant bytes
      if (t == DType::q4_0) {
        const auto* b = reinterpret_cast<const BlockQ4_0*>(wr) + i;
        d[i * kGroup + r] = b->d;
        bq = b->qs;
      } else if (t == DType::q4_1) {
        const auto* b = reinterpret_cast<const BlockQ4_1*>(wr) + i;
        d[i * kGroup + r] = b->d;
        m[i * kGroup + r] = b->m;
        bq = b->qs;
      } else {
        const auto* b = reinterpret_cast<const BlockQ8_0*>(wr) + i;
        d[i * kGroup + r] = b->d;
        bq = reinterpret_cast<const uint8_t*>(b->qs);
      }
      const int nv = geo.qs_bytes / 64;
      for (int v = 0; v < nv; ++v)
        for (int j = 0; j < 4; ++j) {
          const uint8_t byte = bq[4 * v + j];
          // q8_0: int8 q stored as q + 128 (flipping the sign bit), an unsigned operand.
          q[64 * v + 4 * r + j] = t == DType::q8_0 ? (uint8_t)(byte ^ 0x80u) : byte;
        }
    }
  }
}

void resize_acts(DType t, int64_t n, int64_t k, PackedActs& out) {
  CHECK(packed_supported(t) && k % kQK == 0 && n >= 0);
  const int64_t nb = k / kQK;
  out.n = n;
  out.k = k;
  const size_t slots = (size_t)((n + kPanel - 1) / kPanel * kPanel * nb);  // padded panels
  out.qs.resize(slots * kQK);
  out.d.resize(slots);
  const bool q8_1 = t == DType::q4_1;
  out.s.resize(q8_1 ? slots : 0);
  out.corr.resize(q8_1 ? 0 : slots);
}

void prepare_acts_rows(DType t, const void* acts, size_t act_row_bytes, int64_t a_begin,
                       int64_t a_end, PackedActs& out) {
  CHECK(a_begin >= 0 && a_end <= out.n);
  const int64_t nb = out.k / kQK;
  const bool q8_1 = t == DType::q4_1;
  const int offset = t == DType::q4_0 ? 8 : 128;  // the weight operand's bias (q4_0, q8_0)
  const auto* base = static_cast<const uint8_t*>(acts);
  for (int64_t a = a_begin; a < a_end; ++a) {
    const uint8_t* row = base + (size_t)a * act_row_bytes;
    const size_t row0 = (size_t)(a / kPanel * nb * kPanel + a % kPanel);  // block 0's slot
    for (int64_t i = 0; i < nb; ++i) {
      const size_t j = row0 + (size_t)i * kPanel;
      int8_t* qs = out.qs.data() + j * kQK;
      if (q8_1) {
        const auto* b = reinterpret_cast<const BlockQ8_1*>(row) + i;
        out.d[j] = fp16_to_fp32(b->d);
        out.s[j] = fp16_to_fp32(b->s);
        std::memcpy(qs, b->qs, kQK);
      } else {
        const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + i;
        out.d[j] = fp16_to_fp32(b->d);
        int sum = 0;
        for (int e = 0; e < kQK; ++e) sum += b->qs[e];
        out.corr[j] = -offset * sum;
        std::memcpy(qs, b->qs, kQK);
      }
    }
  }
}

void quantize_acts_rows(DType t, const float* x, int64_t x_stride, int64_t a_begin, int64_t a_end,
                        PackedActs& out) {
  CHECK(a_begin >= 0 && a_end <= out.n);
  const int64_t nb = out.k / kQK;
  const bool q8_1 = t == DType::q4_1;
  const int offset = t == DType::q4_0 ? 8 : 128;  // the weight operand's bias (q4_0, q8_0)
  for (int64_t a = a_begin; a < a_end; ++a, x += x_stride) {
    const size_t row0 = (size_t)(a / kPanel * nb * kPanel + a % kPanel);  // block 0's slot
    for (int64_t i = 0; i < nb; ++i) {
      const size_t j = row0 + (size_t)i * kPanel;
      int sum = 0;
      const float d = quantize_block32_fast(x + i * kQK, out.qs.data() + j * kQK, &sum);
      // The values prepare_acts_rows reads back from the f16 fields of the block.
      out.d[j] = fp16_to_fp32(fp32_to_fp16(d));
      if (q8_1)
        out.s[j] = fp16_to_fp32(fp32_to_fp16((float)sum * d));
      else
        out.corr[j] = -offset * sum;
    }
  }
}

void prepare_acts(DType t, const void* acts, size_t act_row_bytes, int64_t n, int64_t k,
                  PackedActs& out) {
  resize_acts(t, n, k, out);
  prepare_acts_rows(t, acts, act_row_bytes, 0, n, out);
}

void matmul_packed(DType t, const void* packed, int64_t rows, int64_t row_begin, int64_t row_end,
                   const PackedActs& acts, float* out, int64_t out_stride, Q4_1Order order) {
  CHECK(packed_supported(t));
  CHECK(row_begin % kGroup == 0 && (row_end % kGroup == 0 || row_end == rows));
  CHECK(row_begin >= 0 && row_end <= rows);
  if (row_begin >= row_end || acts.n <= 0) return;
#if INFERCEPT_PACKED_VNNI
  const auto* p = static_cast<const uint8_t*>(packed);
  switch (t) {
    case DType::q4_0:
      return run<Kind::q4_0>(p, rows, row_begin, row_end, acts, out, out_stride);
    case DType::q4_1:
      if (order == Q4_1Order::ggml)
        return run_q4_1_ggml(p, row_begin, row_end, acts, out, out_stride);
      return run<Kind::q4_1>(p, rows, row_begin, row_end, acts, out, out_stride);
    default:
      return run<Kind::q8_0>(p, rows, row_begin, row_end, acts, out, out_stride);
  }
#endif
}

}  // namespace infercept
