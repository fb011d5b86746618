// AVX2 sparse attention and dot product: the AVX-512 versions' arithmetic on 8-lane registers.
// The q.k dot product keeps the AVX-512 lane structure (two 16-lane accumulators, each as two
// ymm halves, then the same fixed reduction tree) and P.V is elementwise, so the results are
// bit-identical to the AVX-512 path's; both differ from the scalar oracle only in the summation
// order of q.k. The KV-cache decoders are the AVX-512 ones on 8 lanes: the oracle's bits; the
// KV-cache encoders (AVX2 only, also run at the AVX-512 level) give the oracle's codes and scales.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <span>

#include "core/numeric.h"
#include "kernels/cpu/ops.h"

// Compiled for AVX2 per function, so the library needs no special flags; callers dispatch here
// only when DetectIsa() says the CPU supports it.
#define DI_AVX2 __attribute__((target("avx2,fma")))

namespace deepinfer {

namespace {

// DotProductAvx512's reduction tree on the four 8-lane quarters of its accumulators (acc0's lanes
// 0-7 and 8-15, then acc1's): v = acc0 + acc1, then halves of 8, 4, 2, 1.
DI_AVX2 inline float ReduceQuarters(__m256 acc0_lo, __m256 acc0_hi, __m256 acc1_lo, __m256 acc1_hi) {
  const __m256 s8 = _mm256_add_ps(_mm256_add_ps(acc0_lo, acc1_lo), _mm256_add_ps(acc0_hi, acc1_hi));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

}  // namespace

DI_AVX2 float DotProductAvx2(const float* a, const float* b, int64_t n) {
  // acc0 = lanes 0-15 of DotProductAvx512's first accumulator (lo, hi halves), acc1 its second.
  __m256 acc0_lo = _mm256_setzero_ps(), acc0_hi = _mm256_setzero_ps();
  __m256 acc1_lo = _mm256_setzero_ps(), acc1_hi = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0_lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0_lo);
    acc0_hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc0_hi);
    acc1_lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc1_lo);
    acc1_hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc1_hi);
  }
  for (; i + 16 <= n; i += 16) {
    acc0_lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0_lo);
    acc0_hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc0_hi);
  }
  float sum = ReduceQuarters(acc0_lo, acc0_hi, acc1_lo, acc1_hi);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

namespace {

// Quarter c (elements 8c to 8c + 7 of every 32, the accumulator DotProductAvx2 names by c) of
// kHeads queries x kEntries keys' dot products, with dim % 16 == 0: the quarters' chains are
// independent, so running one quarter at a time for 12 pairs keeps 12 chains in registers, and
// every key load feeds kHeads FMAs and every query load kEntries (one pair at a time: 2 loads
// per FMA, 4 chains).
template <int kHeads, int kEntries>
DI_AVX2 void DotQuarter(const float* q, int64_t dim, const float* const* kv, int c, __m256* sums) {
  __m256 acc[kHeads][kEntries];
#pragma GCC unroll 4
  for (int g = 0; g < kHeads; ++g) {
#pragma GCC unroll 4
    for (int e = 0; e < kEntries; ++e) acc[g][e] = _mm256_setzero_ps();
  }
  // dim % 32 == 16 leaves one 16-element step, into acc0's quarters (c = 0, 1).
  const int64_t end = c < 2 ? dim : dim / 32 * 32;
  for (int64_t i = 8 * c; i < end; i += 32) {
    __m256 k[kEntries];
#pragma GCC unroll 4
    for (int e = 0; e < kEntries; ++e) k[e] = _mm256_loadu_ps(kv[e] + i);
#pragma GCC unroll 4
    for (int g = 0; g < kHeads; ++g) {
      const __m256 qg = _mm256_loadu_ps(q + g * dim + i);
#pragma GCC unroll 4
      for (int e = 0; e < kEntries; ++e) acc[g][e] = _mm256_fmadd_ps(qg, k[e], acc[g][e]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < kHeads; ++g) {
#pragma GCC unroll 4
    for (int e = 0; e < kEntries; ++e) sums[g * kEntries + e] = acc[g][e];
  }
}

// kHeads queries x kEntries keys, each pair exactly DotProductAvx2 (dim % 16 == 0).
template <int kHeads, int kEntries>
DI_AVX2 void DotTile(const float* q, int64_t dim, const float* const* kv, float* scores) {
  __m256 quarters[4][kHeads * kEntries];
  for (int c = 0; c < 4; ++c) DotQuarter<kHeads, kEntries>(q, dim, kv, c, quarters[c]);
  for (int g = 0; g < kHeads; ++g) {
    for (int e = 0; e < kEntries; ++e) {
      const int pair = g * kEntries + e;
      scores[g * kSparseAttentionBlock + e] =
          ReduceQuarters(quarters[0][pair], quarters[1][pair], quarters[2][pair], quarters[3][pair]);
    }
  }
}

template <int kHeads>
DI_AVX2 void DotsForHeads(const float* q, int64_t dim, const float* const* kv, int count, float* scores) {
  int k = 0;
  for (; k + 3 <= count; k += 3) DotTile<kHeads, 3>(q, dim, kv + k, scores + k);
  if (count - k == 2) DotTile<kHeads, 2>(q, dim, kv + k, scores + k);
  if (count - k == 1) DotTile<kHeads, 1>(q, dim, kv + k, scores + k);
}

DI_AVX2 void DotsAvx2(const float* q, int heads, int64_t dim, const float* const* kv, int count, float* scores) {
  WithHeadCount(heads, [&]<int kHeads>() { DotsForHeads<kHeads>(q, dim, kv, count, scores); });
}

// The block's P.V with kHeads heads x 16 elements of accumulators in registers across all
// entries: a multiply then an add per entry, in entry order, from 0 (the oracle's roundings).
template <int kHeads>
DI_AVX2 void WeightedSumForHeads(const float* p, const float* const* kv, int count, int64_t dim, float* block_acc) {
  for (int64_t d = 0; d < dim; d += 16) {
    __m256 acc[kHeads][2];
#pragma GCC unroll 8
    for (int g = 0; g < kHeads; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
    for (int k = 0; k < count; ++k) {
      const __m256 v0 = _mm256_loadu_ps(kv[k] + d), v1 = _mm256_loadu_ps(kv[k] + d + 8);
#pragma GCC unroll 8
      for (int g = 0; g < kHeads; ++g) {
        const __m256 pk = _mm256_set1_ps(p[g * kSparseAttentionBlock + k]);
        acc[g][0] = _mm256_add_ps(acc[g][0], _mm256_mul_ps(pk, v0));
        acc[g][1] = _mm256_add_ps(acc[g][1], _mm256_mul_ps(pk, v1));
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < kHeads; ++g) {
      _mm256_storeu_ps(block_acc + g * dim + d, acc[g][0]);
      _mm256_storeu_ps(block_acc + g * dim + d + 8, acc[g][1]);
    }
  }
}

DI_AVX2 void WeightedSumAvx2(const float* p, int heads, const float* const* kv, int count, int64_t dim,
                             float* block_acc) {
  WithHeadCount(heads, [&]<int kHeads>() { WeightedSumForHeads<kHeads>(p, kv, count, dim, block_acc); });
}

// acc = acc * scale + block_acc, unfused.
DI_AVX2 void RescaleAddAvx2(float* acc, float scale, const float* block_acc, int64_t dim) {
  const __m256 sv = _mm256_set1_ps(scale);
  for (int64_t d = 0; d < dim; d += 8) {
    _mm256_storeu_ps(acc + d,
                     _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(acc + d), sv), _mm256_loadu_ps(block_acc + d)));
  }
}

}  // namespace

const AttentionLoops& SparseAttentionLoopsAvx2() {
  static constexpr AttentionLoops kLoops{DotsAvx2, WeightedSumAvx2, RescaleAddAvx2};
  return kLoops;
}

// ---- mHC expand (ops.h HcExpandRow: the AVX-512 version's operations on 8 lanes) ----------------

namespace {

// RoundToBF16 on 8 lanes: round to nearest even in the upper 16 bits, NaN made quiet (FloatToBF16).
DI_AVX2 inline __m256 RoundToBf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i rounded =
      _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
                                        _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))),
                       high);
  // |u| as a signed integer is non-negative, so the signed compare is the unsigned one.
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), high);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, quiet, nan));
}

}  // namespace

DI_AVX2 void HcExpandRowAvx2(float* x, const float* y, const float* post, const float* comb, int hc, int64_t dim,
                             float* mixed) {
  for (int j = 0; j < hc; ++j) {
    const __m256 p = _mm256_set1_ps(post[j]);
    for (int64_t d = 0; d < dim; d += 8) {
      __m256 acc = _mm256_mul_ps(_mm256_set1_ps(comb[j]), _mm256_loadu_ps(x + d));
      for (int i = 1; i < hc; ++i) {
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(comb[i * hc + j]), _mm256_loadu_ps(x + i * dim + d)));
      }
      _mm256_storeu_ps(mixed + j * dim + d, _mm256_add_ps(_mm256_mul_ps(p, _mm256_loadu_ps(y + d)), acc));
    }
  }
  for (int64_t i = 0; i < hc * dim; i += 8) _mm256_storeu_ps(x + i, RoundToBf16(_mm256_loadu_ps(mixed + i)));
}

// ---- KV cache dequantization (ops.h; the AVX-512 versions' exactness conditions) ----------------

namespace {

// 8 e4m3 codes (dwords, each 0-255) -> their fp32 values, NaN codes excepted: magnitudes 8-127
// are normal, (mag << 20) + (120 << 23) in fp32 bits; 1-7 are mag * 2^-9; the sign is bit 7.
DI_AVX2 inline __m256 E4M3Values(__m256i codes) {
  const __m256i mag = _mm256_and_si256(codes, _mm256_set1_epi32(0x7f));
  const __m256i normal = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(7));
  const __m256 subnormal = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f));
  const __m256 normal_value =
      _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23)));
  const __m256 value = _mm256_blendv_ps(subnormal, normal_value, _mm256_castsi256_ps(normal));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(codes, _mm256_set1_epi32(0x80)), 24);
  return _mm256_or_ps(value, _mm256_castsi256_ps(sign));
}

// The 8 e2m1 values of 4 packed bytes (element 2j: the low nibble of byte j): the magnitude from
// the table's first half by the code's low 3 bits (vpermps reads only those), the sign from bit 3
// (kE2M1Values' second half is the first negated, -0 included).
DI_AVX2 inline __m256 Fp4Values(const uint8_t* packed, __m256 magnitudes) {
  uint32_t word;
  std::memcpy(&word, packed, sizeof(word));
  const __m128i bytes = _mm_cvtsi32_si128(static_cast<int>(word));
  const __m256i twice = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));
  const __m256i codes = _mm256_srlv_epi32(twice, _mm256_set_epi32(4, 0, 4, 0, 4, 0, 4, 0));
  const __m256 magnitude = _mm256_permutevar8x32_ps(magnitudes, codes);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(codes, _mm256_set1_epi32(8)), 28);
  return _mm256_or_ps(magnitude, _mm256_castsi256_ps(sign));
}

// The FP4 decoders' loop (ops_avx512.cc's DecodeFp4Blocks on 8 lanes).
template <bool kPowerOfTwo>
DI_AVX2 void DecodeFp4Blocks(const uint8_t* packed, const uint8_t* scales, size_t n, size_t block, float* out) {
  using Oracle = void (*)(const uint8_t*, const uint8_t*, size_t, size_t, float*);
  const Oracle oracle = kPowerOfTwo ? Oracle{DecodeFP4PowerOfTwo} : Oracle{DecodeFP4E4M3Scale};
  const __m256 magnitudes = _mm256_loadu_ps(kE2M1Values.data());
  for (size_t b = 0; b < n / block; ++b) {
    float* o = out + b * block;
    const bool exact = Fp4BlockMultiplies(kPowerOfTwo, scales[b]);
    if (!exact) {
      oracle(packed + b * block / 2, scales + b, block, block, o);
      continue;
    }
    const __m256 scale = _mm256_set1_ps(kPowerOfTwo ? UE8M0ToFloat(scales[b]) : E4M3ToFloat(scales[b]));
    for (size_t i = 0; i < block; i += 8) {
      _mm256_storeu_ps(o + i, _mm256_mul_ps(Fp4Values(packed + (b * block + i) / 2, magnitudes), scale));
    }
  }
  if (n % block != 0) {
    oracle(packed + n / block * block / 2, scales + n / block, n % block, block, out + n / block * block);
  }
}

}  // namespace

DI_AVX2 void DecodeFP8PowerOfTwoAvx2(const uint8_t* codes, const uint8_t* exponents, size_t n, size_t block,
                                     float* out) {
  for (size_t b = 0; b < n / block; ++b) {
    const uint8_t* c = codes + b * block;
    float* o = out + b * block;
    bool exact = Fp8PowerOfTwoBlockMultiplies(exponents[b]);
    const __m256 scale = _mm256_set1_ps(UE8M0ToFloat(exponents[b]));
    for (size_t i = 0; i < block && exact; i += 8) {
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + i)));
      const __m256i nan = _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7f)), _mm256_set1_epi32(0x7f));
      exact = _mm256_testz_si256(nan, nan) != 0;
      _mm256_storeu_ps(o + i, _mm256_mul_ps(E4M3Values(v), scale));
    }
    if (!exact) DecodeFP8PowerOfTwo(c, exponents + b, block, block, o);
  }
  if (n % block != 0) {
    DecodeFP8PowerOfTwo(codes + n / block * block, exponents + n / block, n % block, block, out + n / block * block);
  }
}

DI_AVX2 void DecodeFP4PowerOfTwoAvx2(const uint8_t* packed, const uint8_t* exponents, size_t n, size_t block,
                                     float* out) {
  DecodeFp4Blocks<true>(packed, exponents, n, block, out);
}

DI_AVX2 void DecodeFP4E4M3ScaleAvx2(const uint8_t* packed, const uint8_t* scales, size_t n, size_t block, float* out) {
  DecodeFp4Blocks<false>(packed, scales, n, block, out);
}

// ---- KV cache encoders (ops.h: the scalar encoders' codes and scales) ---------------------------

namespace {

// The largest |value| of n (a multiple of 8) floats: max_ps returns its second operand when the
// first is NaN, so NaNs are skipped as the oracle's std::max skips them.
DI_AVX2 inline float AbsMax(const float* values, size_t n) {
  __m256 amax = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 8) {
    amax = _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_loadu_ps(values + i)), amax);
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// std::clamp(values / scale, -limit, limit): the division rounds as the scalar one does, and
// min/max return their second operand for NaN, so a NaN quotient stays NaN as std::clamp keeps it.
DI_AVX2 inline __m256 ScaledClamped(const float* values, __m256 scale, float limit) {
  const __m256 q = _mm256_div_ps(_mm256_loadu_ps(values), scale);
  return _mm256_min_ps(_mm256_set1_ps(limit), _mm256_max_ps(_mm256_set1_ps(-limit), q));
}

// FloatToE4M3 of each lane, a code per dword.
DI_AVX2 inline __m256i E4M3Codes(__m256 t) {
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(t), 24), _mm256_set1_epi32(0x80));
  const __m256 mag = _mm256_min_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), t), _mm256_set1_ps(kFP8Max));
  // Below 2^-6 the subnormal grid of 2^-9: nearbyint(mag * 512) in the current (nearest-even) mode.
  const __m256i steps = _mm256_cvtps_epi32(_mm256_mul_ps(mag, _mm256_set1_ps(512.0f)));
  // Normal: the mantissa rounded to 3 bits on the bit pattern; (bits >> 20) is exponent << 3 |
  // mantissa, so the code is that minus the exponent bias difference (127 - 7) << 3.
  __m256i bits = _mm256_castps_si256(mag);
  bits = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32((1 << 19) - 1),
                                                 _mm256_and_si256(_mm256_srli_epi32(bits, 20), _mm256_set1_epi32(1))));
  const __m256i normal = _mm256_sub_epi32(_mm256_srli_epi32(bits, 20), _mm256_set1_epi32(120 << 3));
  __m256i code =
      _mm256_blendv_epi8(normal, steps, _mm256_castps_si256(_mm256_cmp_ps(mag, _mm256_set1_ps(0.015625f), _CMP_LT_OQ)));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7f), _mm256_castps_si256(_mm256_cmp_ps(t, t, _CMP_UNORD_Q)));
  return _mm256_or_si256(code, sign);
}

// FloatToE2M1 of each lane (already clamped to [-6, 6]), a code per dword: one step per midpoint
// below the magnitude (or equal to it, where the tie goes up), the sign in bit 3.
DI_AVX2 inline __m256i E2M1Codes(__m256 t) {
  const __m256 mag = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), t);
  __m256i code = _mm256_slli_epi32(_mm256_srli_epi32(_mm256_castps_si256(t), 31), 3);
  for (size_t i = 0; i < kE2M1Midpoints.size(); ++i) {
    const __m256 mid = _mm256_set1_ps(kE2M1Midpoints[i]);
    const __m256 above = kE2M1TieUp[i] ? _mm256_cmp_ps(mag, mid, _CMP_GE_OQ) : _mm256_cmp_ps(mag, mid, _CMP_GT_OQ);
    code = _mm256_sub_epi32(code, _mm256_castps_si256(above));  // a true compare is -1
  }
  return code;
}

// 32 codes (one per dword, 0-255) as 32 bytes in order: the two packs interleave the 128-bit
// lanes, the permutation puts the dwords back.
DI_AVX2 inline __m256i CodeBytes(const __m256i (&codes)[4]) {
  const __m256i bytes =
      _mm256_packus_epi16(_mm256_packs_epi32(codes[0], codes[1]), _mm256_packs_epi32(codes[2], codes[3]));
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// 32 e2m1 codes (bytes in order) as 16 packed bytes, the even element in the low nibble.
DI_AVX2 inline void StoreNibbles(__m256i code_bytes, uint8_t* packed) {
  const __m256i pairs = _mm256_maddubs_epi16(code_bytes, _mm256_set1_epi16(0x1001));  // even + 16 * odd
  _mm_storeu_si128(reinterpret_cast<__m128i*>(packed),
                   _mm_packus_epi16(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1)));
}

enum class KvCode { kE4M3PowerOfTwo, kE2M1PowerOfTwo, kE2M1E4M3Scale };

// The encoders' common walk: 32 elements at a time, 8 per vector, each divided by its block's
// scale (computed when the walk enters the block, its byte stored in `block_scales`); the codes go
// to `out` as bytes (e4m3) or packed nibbles (e2m1).
template <KvCode kCode>
DI_AVX2 void EncodeBlocks(std::span<const float> values, size_t block, uint8_t* out, uint8_t* block_scales) {
  constexpr bool kE2M1 = kCode != KvCode::kE4M3PowerOfTwo;
  size_t current = SIZE_MAX;
  __m256 scale = _mm256_setzero_ps();
  for (size_t i = 0; i < values.size(); i += 32) {
    __m256i codes[4];
    for (int j = 0; j < 4; ++j) {
      const size_t at = i + 8 * static_cast<size_t>(j);
      if (at / block != current) {
        current = at / block;
        const float amax = AbsMax(values.data() + current * block, block);
        float divisor;
        if constexpr (kCode == KvCode::kE4M3PowerOfTwo) {
          divisor = FP8PowerOfTwoBlockScale(amax);
          block_scales[current] = UE8M0Byte(divisor);
        } else if constexpr (kCode == KvCode::kE2M1PowerOfTwo) {
          divisor = FP4PowerOfTwoBlockScale(amax);
          block_scales[current] = UE8M0Byte(divisor);
        } else {
          block_scales[current] = FP4E4M3BlockScaleCode(amax);
          divisor = E4M3ToFloat(block_scales[current]);
        }
        scale = _mm256_set1_ps(divisor);
      }
      const __m256 t = ScaledClamped(values.data() + at, scale, kE2M1 ? kFP4Max : kFP8Max);
      codes[j] = kE2M1 ? E2M1Codes(t) : E4M3Codes(t);
    }
    const __m256i bytes = CodeBytes(codes);
    if constexpr (kE2M1) {
      StoreNibbles(bytes, out + i / 2);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bytes);
    }
  }
}

}  // namespace

DI_AVX2 void EncodeFP8PowerOfTwoAvx2(std::span<const float> values, size_t block, uint8_t* codes, uint8_t* exponents) {
  EncodeBlocks<KvCode::kE4M3PowerOfTwo>(values, block, codes, exponents);
}

DI_AVX2 void EncodeFP4PowerOfTwoAvx2(std::span<const float> values, size_t block, uint8_t* packed, uint8_t* exponents) {
  EncodeBlocks<KvCode::kE2M1PowerOfTwo>(values, block, packed, exponents);
}

DI_AVX2 void EncodeFP4E4M3ScaleAvx2(std::span<const float> values, size_t block, uint8_t* packed, uint8_t* scales) {
  EncodeBlocks<KvCode::kE2M1E4M3Scale>(values, block, packed, scales);
}

}  // namespace deepinfer
