// AVX-512 sparse attention: the scalar oracle's skeleton (SparseAttentionBlocks: online softmax
// over blocks of 64 entries, bf16 probabilities relative to the running max, per-block P.V added
// to the rescaled accumulator) with its dim-long loops vectorised. Only the summation order of
// q.k changes (16 lanes, then a fixed reduction tree), so results stay within fp32 rounding
// of the oracle and never depend on other queries or heads.
// GCC 12's _mm512_undefined_*() self-initialise and trip -Wmaybe-uninitialized once inlined
// (GCC bug 105593, fixed in 13); the diagnostics point into the intrinsic headers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "core/numeric.h"
#include "kernels/cpu/ops.h"

// Compiled for AVX-512 per function, so the library needs no special flags; callers
// dispatch here only when DetectIsa() says the CPU and OS support it.
#define DI_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma")))

namespace deepinfer {
namespace {

// The fixed reduction tree of the two 16-lane accumulators of a dot product (GCC 12 warns
// spuriously inside _mm512_reduce_add_ps).
DI_AVX512 inline float ReduceTree(__m512 acc0, __m512 acc1) {
  const __m512 v = _mm512_add_ps(acc0, acc1);
  const __m256 s8 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

}  // namespace

DI_AVX512 float DotProductAvx512(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  float sum = ReduceTree(acc0, acc1);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

namespace {

// kHeads queries x kEntries keys at once, each pair exactly DotProductAvx512 (dim % 16 == 0):
// every K=V load feeds kHeads FMAs and every q load kEntries, where one pair at a time needs two
// loads per FMA.
template <int kHeads, int kEntries>
DI_AVX512 void DotTile(const float* q, int64_t dim, const float* const* kv, float* scores) {
  __m512 acc0[kHeads][kEntries], acc1[kHeads][kEntries];
#pragma GCC unroll 16
  for (int g = 0; g < kHeads; ++g) {
#pragma GCC unroll 16
    for (int e = 0; e < kEntries; ++e) acc0[g][e] = acc1[g][e] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    __m512 k0[kEntries], k1[kEntries];
#pragma GCC unroll 16
    for (int e = 0; e < kEntries; ++e) {
      k0[e] = _mm512_loadu_ps(kv[e] + i);
      k1[e] = _mm512_loadu_ps(kv[e] + i + 16);
    }
#pragma GCC unroll 16
    for (int g = 0; g < kHeads; ++g) {
      const __m512 q0 = _mm512_loadu_ps(q + g * dim + i), q1 = _mm512_loadu_ps(q + g * dim + i + 16);
#pragma GCC unroll 16
      for (int e = 0; e < kEntries; ++e) {
        acc0[g][e] = _mm512_fmadd_ps(q0, k0[e], acc0[g][e]);
        acc1[g][e] = _mm512_fmadd_ps(q1, k1[e], acc1[g][e]);
      }
    }
  }
  if (i < dim) {  // one 16-element step into the first accumulator
#pragma GCC unroll 16
    for (int g = 0; g < kHeads; ++g) {
      const __m512 q0 = _mm512_loadu_ps(q + g * dim + i);
#pragma GCC unroll 16
      for (int e = 0; e < kEntries; ++e) acc0[g][e] = _mm512_fmadd_ps(q0, _mm512_loadu_ps(kv[e] + i), acc0[g][e]);
    }
  }
#pragma GCC unroll 16
  for (int g = 0; g < kHeads; ++g) {
#pragma GCC unroll 16
    for (int e = 0; e < kEntries; ++e) scores[g * kSparseAttentionBlock + e] = ReduceTree(acc0[g][e], acc1[g][e]);
  }
}

template <int kHeads>
DI_AVX512 void DotsForHeads(const float* q, int64_t dim, const float* const* kv, int count, float* scores) {
  int k = 0;
  for (; k + 2 <= count; k += 2) DotTile<kHeads, 2>(q, dim, kv + k, scores + k);
  if (k < count) DotTile<kHeads, 1>(q, dim, kv + k, scores + k);
}

DI_AVX512 void DotsAvx512(const float* q, int heads, int64_t dim, const float* const* kv, int count, float* scores) {
  WithHeadCount(heads, [&]<int kHeads>() { DotsForHeads<kHeads>(q, dim, kv, count, scores); });
}

// Columns [d, d + 16 kChunks) of the block's P.V for kHeads heads, their accumulators in registers
// across all entries: per entry and element, a multiply then an add, in entry order, from 0 (the
// oracle's roundings).
template <int kHeads, int kChunks>
DI_AVX512 void WeightedSumColumns(const float* p, const float* const* kv, int count, int64_t dim, int64_t d,
                                  float* block_acc) {
  __m512 acc[kHeads][kChunks];
#pragma GCC unroll 16
  for (int g = 0; g < kHeads; ++g) {
#pragma GCC unroll 16
    for (int c = 0; c < kChunks; ++c) acc[g][c] = _mm512_setzero_ps();
  }
  for (int k = 0; k < count; ++k) {
    __m512 v[kChunks];
#pragma GCC unroll 16
    for (int c = 0; c < kChunks; ++c) v[c] = _mm512_loadu_ps(kv[k] + d + 16 * c);
#pragma GCC unroll 16
    for (int g = 0; g < kHeads; ++g) {
      const __m512 pk = _mm512_set1_ps(p[g * kSparseAttentionBlock + k]);
#pragma GCC unroll 16
      for (int c = 0; c < kChunks; ++c) acc[g][c] = _mm512_add_ps(acc[g][c], _mm512_mul_ps(pk, v[c]));
    }
  }
#pragma GCC unroll 16
  for (int g = 0; g < kHeads; ++g) {
#pragma GCC unroll 16
    for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(block_acc + g * dim + d + 16 * c, acc[g][c]);
  }
}

// 64 columns at a time (16 accumulators for 4 heads), then 16 (dim % 16 == 0).
template <int kHeads>
DI_AVX512 void WeightedSumForHeads(const float* p, const float* const* kv, int count, int64_t dim, float* block_acc) {
  int64_t d = 0;
  for (; d + 64 <= dim; d += 64) WeightedSumColumns<kHeads, 4>(p, kv, count, dim, d, block_acc);
  for (; d < dim; d += 16) WeightedSumColumns<kHeads, 1>(p, kv, count, dim, d, block_acc);
}

DI_AVX512 void WeightedSumAvx512(const float* p, int heads, const float* const* kv, int count, int64_t dim,
                                 float* block_acc) {
  WithHeadCount(heads, [&]<int kHeads>() { WeightedSumForHeads<kHeads>(p, kv, count, dim, block_acc); });
}

// acc = acc * scale + block_acc, unfused.
DI_AVX512 void RescaleAddAvx512(float* acc, float scale, const float* block_acc, int64_t dim) {
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t d = 0; d < dim; d += 16) {
    _mm512_storeu_ps(acc + d,
                     _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(acc + d), sv), _mm512_loadu_ps(block_acc + d)));
  }
}

}  // namespace

const AttentionLoops& SparseAttentionLoopsAvx512() {
  static constexpr AttentionLoops kLoops{DotsAvx512, WeightedSumAvx512, RescaleAddAvx512};
  return kLoops;
}

// ---- mHC expand ----------------------------------------------------------------------------------

namespace {

// RoundToBF16 on 16 lanes: round to nearest even in the upper 16 bits, NaN made quiet (FloatToBF16).
DI_AVX512 inline __m512 RoundToBf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i rounded =
      _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                                        _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))),
                       _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)),
                                         _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(rounded, nan, quiet));
}

}  // namespace

DI_AVX512 void HcExpandRowAvx512(float* x, const float* y, const float* post, const float* comb, int hc, int64_t dim,
                                 float* mixed) {
  for (int j = 0; j < hc; ++j) {
    const __m512 p = _mm512_set1_ps(post[j]);
    for (int64_t d = 0; d < dim; d += 16) {
      __m512 acc = _mm512_mul_ps(_mm512_set1_ps(comb[j]), _mm512_loadu_ps(x + d));
      for (int i = 1; i < hc; ++i) {
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_set1_ps(comb[i * hc + j]), _mm512_loadu_ps(x + i * dim + d)));
      }
      _mm512_storeu_ps(mixed + j * dim + d, _mm512_add_ps(_mm512_mul_ps(p, _mm512_loadu_ps(y + d)), acc));
    }
  }
  for (int64_t i = 0; i < hc * dim; i += 16) _mm512_storeu_ps(x + i, RoundToBf16(_mm512_loadu_ps(mixed + i)));
}

// ---- KV cache dequantization ---------------------------------------------------------------------

namespace {

// e4m3 codes (16 dwords, each 0-255) -> their fp32 values, NaN codes excepted: magnitudes 8-127
// are normal, (mag << 20) + (120 << 23) in fp32 bits; 1-7 are mag * 2^-9; the sign is bit 7.
DI_AVX512 inline __m512 E4M3Values(__m512i codes) {
  const __m512i mag = _mm512_and_si512(codes, _mm512_set1_epi32(0x7f));
  const __mmask16 normal = _mm512_cmpge_epu32_mask(mag, _mm512_set1_epi32(8));
  __m512 value = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f));
  value = _mm512_mask_mov_ps(
      value, normal, _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23))));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(codes, _mm512_set1_epi32(0x80)), 24);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(value), sign));
}

// The 16 e2m1 codes of 8 packed bytes (element 2j: the low nibble of byte j), as dword indices
// (only the low 4 bits count for vpermps).
DI_AVX512 inline __m512i Fp4Codes(const uint8_t* packed) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed));
  const __m512i twice = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));
  return _mm512_srlv_epi32(twice, _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0));
}

}  // namespace

// Multiplies the blocks Fp8PowerOfTwoBlockMultiplies takes (ops.h), unless they hold a NaN code.
DI_AVX512 void DecodeFP8PowerOfTwoAvx512(const uint8_t* codes, const uint8_t* exponents, size_t n, size_t block,
                                         float* out) {
  for (size_t b = 0; b < n / block; ++b) {
    const uint8_t* c = codes + b * block;
    float* o = out + b * block;
    bool exact = Fp8PowerOfTwoBlockMultiplies(exponents[b]);
    const __m512 scale = _mm512_set1_ps(UE8M0ToFloat(exponents[b]));
    for (size_t i = 0; i < block && exact; i += 16) {
      const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i)));
      exact = _mm512_cmpeq_epi32_mask(_mm512_and_si512(v, _mm512_set1_epi32(0x7f)), _mm512_set1_epi32(0x7f)) == 0;
      _mm512_storeu_ps(o + i, _mm512_mul_ps(E4M3Values(v), scale));
    }
    if (!exact) DecodeFP8PowerOfTwo(c, exponents + b, block, block, o);
  }
  if (n % block != 0)
    DecodeFP8PowerOfTwo(codes + n / block * block, exponents + n / block, n % block, block, out + n / block * block);
}

namespace {

// The FP4 decoders' loop: each block is e2m1 x its scale, 16 elements per multiply, where that is
// exact (Fp4BlockMultiplies, ops.h; kPowerOfTwo: ue8m0 scales, else e4m3); else the oracle's.
template <bool kPowerOfTwo>
DI_AVX512 void DecodeFp4Blocks(const uint8_t* packed, const uint8_t* scales, size_t n, size_t block, float* out) {
  using Oracle = void (*)(const uint8_t*, const uint8_t*, size_t, size_t, float*);
  const Oracle oracle = kPowerOfTwo ? Oracle{DecodeFP4PowerOfTwo} : Oracle{DecodeFP4E4M3Scale};
  const __m512 table = _mm512_loadu_ps(kE2M1Values.data());
  for (size_t b = 0; b < n / block; ++b) {
    float* o = out + b * block;
    const bool exact = Fp4BlockMultiplies(kPowerOfTwo, scales[b]);
    if (!exact) {
      oracle(packed + b * block / 2, scales + b, block, block, o);
      continue;
    }
    const __m512 scale = _mm512_set1_ps(kPowerOfTwo ? UE8M0ToFloat(scales[b]) : E4M3ToFloat(scales[b]));
    for (size_t i = 0; i < block; i += 16) {
      _mm512_storeu_ps(o + i,
                       _mm512_mul_ps(_mm512_permutexvar_ps(Fp4Codes(packed + (b * block + i) / 2), table), scale));
    }
  }
  if (n % block != 0)
    oracle(packed + n / block * block / 2, scales + n / block, n % block, block, out + n / block * block);
}

}  // namespace

DI_AVX512 void DecodeFP4PowerOfTwoAvx512(const uint8_t* packed, const uint8_t* exponents, size_t n, size_t block,
                                         float* out) {
  DecodeFp4Blocks<true>(packed, exponents, n, block, out);
}

DI_AVX512 void DecodeFP4E4M3ScaleAvx512(const uint8_t* packed, const uint8_t* scales, size_t n, size_t block,
                                        float* out) {
  DecodeFp4Blocks<false>(packed, scales, n, block, out);
}

}  // namespace deepinfer
