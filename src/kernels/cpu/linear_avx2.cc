// AVX2 + FMA + F16C kernels for QuantizedLinear and DenseLinear. They compute the canonical
// sequence of linear_simd.h with the 16-lane accumulator split into two 8-lane halves (lanes
// 0-7 and 8-15, reduced with the same tree), so their bits equal the AVX-512 paths'.
// Streaming tiles (M <= 6: decode, the speculative verify; up to StreamPassesMaxM rows in passes
// of at most 6) are tuned for Zen 3-class cores, where shifts and shuffles share two pipes: FP4
// decodes a whole group with byte lookups (vpshufb into per-scale bf16 tables), FP8 with 16-bit
// shifts and masks (its block scale is put on the activations, once per row block), BF16 with one
// shift or mask; accumulators stay in registers (the row and activation loops are unrolled).
// Dense tiles at M = 3-4 run one half of the accumulators at a time over 3 rows (HalfGroupTile).
// GEMM panels (more rows) decode 12 weight rows into fp32 panels, a chunk of K at a time while
// there are few activation rows, and run 4 x 3 register tiles on FMAs.
// GCC 12's _mm512_undefined_*() self-initialise and trip -Wuninitialized once inlined at -O3
// (GCC bug 105593, fixed in 13); the diagnostics point into the intrinsic headers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/compile_time_count.h"
#include "kernels/cpu/linear_simd.h"

namespace deepinfer {
namespace {

using linear_simd::ExpRange;
using linear_simd::Job;
using linear_simd::kGroup;
using linear_simd::kPanelM;
using linear_simd::kPanelN;
using linear_simd::PairK;

struct Avx2;
float Finish(float sum, bool round) { return linear_simd::Finish<Avx2>(sum, round); }

// The fixed reduction tree: (i, i+8) is the pair sums `a` (PairSums), then (i, i+4), (i, i+2),
// (i, i+1).
inline float ReducePairSums(__m256 a) {
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

// The first step of the tree on accumulators in PairLane order: lane i + lane i + 8 of the
// canonical lanes.
template <MatrixFormat F>
inline __m256 PairSums(__m256 lo, __m256 hi) {
  if constexpr (F == MatrixFormat::kFP8Block32) {
    // lo holds pairs 0, 2, ..., 14 and hi pairs 1, 3, ..., 15: interleaved back to 0-7 | 8-15.
    const __m256 first = _mm256_unpacklo_ps(lo, hi), second = _mm256_unpackhi_ps(lo, hi);
    return _mm256_add_ps(_mm256_permute2f128_ps(first, second, 0x20), _mm256_permute2f128_ps(first, second, 0x31));
  } else {
    return _mm256_add_ps(lo, hi);
  }
}

// The reduction tree of accumulators in PairLane order.
template <MatrixFormat F>
inline float ReduceLanesOf(__m256 lo, __m256 hi) {
  return ReducePairSums(PairSums<F>(lo, hi));
}

// Finish (linear_simd.h) of 8 sums at once: NaN to the canonical quiet NaN, else bf16 rounding
// (round-to-nearest-even on the bits) where asked.
inline __m256 FinishEight(__m256 sums, bool round) {
  __m256i u = _mm256_castps_si256(sums);
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  if (round) {
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    u = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)),
                         _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
  }
  return _mm256_castsi256_ps(_mm256_blendv_epi8(u, _mm256_set1_epi32(0x7fc00000), nan));
}

// Each 128-bit lane of a, b, c, d transposed as a 4 x 4 matrix: out[j] holds element j of a, b,
// c, d (in that order) in each lane, so elements j | j + 4 of the 8-element vectors.
inline void TransposeLanes4(__m256 a, __m256 b, __m256 c, __m256 d, __m256 (&out)[4]) {
  const __m256 t0 = _mm256_unpacklo_ps(a, b), t1 = _mm256_unpackhi_ps(a, b);
  const __m256 t2 = _mm256_unpacklo_ps(c, d), t3 = _mm256_unpackhi_ps(c, d);
  out[0] = _mm256_shuffle_ps(t0, t2, 0x44), out[1] = _mm256_shuffle_ps(t0, t2, 0xee);
  out[2] = _mm256_shuffle_ps(t1, t3, 0x44), out[3] = _mm256_shuffle_ps(t1, t3, 0xee);
}

// ReduceLanesOf and Finish of 8 outputs at once (accumulator halves lo[k], hi[k] of output k), with
// each output's operations in the same order: the pair sums, then the 8 x 8 transpose that puts
// lane i of every output in one vector, then (i, i + 4), (i, i + 2), (i, i + 1) across vectors.
template <MatrixFormat F>
inline __m256 ReduceFinishEight(const float* const (&lo)[8], const float* const (&hi)[8], bool round) {
  __m256 a[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) a[k] = PairSums<F>(_mm256_load_ps(lo[k]), _mm256_load_ps(hi[k]));
  // Lanes i | i + 4 of outputs 0-3 (first) and 4-7 (second).
  __m256 first[4], second[4];
  TransposeLanes4(a[0], a[1], a[2], a[3], first);
  TransposeLanes4(a[4], a[5], a[6], a[7], second);
  __m256 quarter[4];  // lane i + lane i + 4 of every output, i = 0..3
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    quarter[i] = _mm256_add_ps(_mm256_permute2f128_ps(first[i], second[i], 0x20),
                               _mm256_permute2f128_ps(first[i], second[i], 0x31));
  }
  const __m256 half0 = _mm256_add_ps(quarter[0], quarter[2]), half1 = _mm256_add_ps(quarter[1], quarter[3]);
  return FinishEight(_mm256_add_ps(half0, half1), round);
}

inline int HorizontalU8(__m128i v, bool max) {
  v = max ? _mm_max_epu8(v, _mm_srli_si128(v, 8)) : _mm_min_epu8(v, _mm_srli_si128(v, 8));
  v = max ? _mm_max_epu8(v, _mm_srli_si128(v, 4)) : _mm_min_epu8(v, _mm_srli_si128(v, 4));
  v = max ? _mm_max_epu8(v, _mm_srli_si128(v, 2)) : _mm_min_epu8(v, _mm_srli_si128(v, 2));
  v = max ? _mm_max_epu8(v, _mm_srli_si128(v, 1)) : _mm_min_epu8(v, _mm_srli_si128(v, 1));
  return _mm_cvtsi128_si32(v) & 0xff;
}

// ---- activation preparation ---------------------------------------------------------------

// FloatToE4M3 followed by E4M3ToFloat, bit for bit, on t = clamp(x / scale, -448, 448).
inline __m256 RoundE4M3(__m256 t) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 mag = _mm256_min_ps(_mm256_andnot_ps(sign, t), _mm256_set1_ps(448.0f));
  const __m256 tiny = _mm256_mul_ps(
      _mm256_round_ps(_mm256_mul_ps(mag, _mm256_set1_ps(512.0f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
      _mm256_set1_ps(1.0f / 512.0f));
  __m256i bits = _mm256_castps_si256(mag);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 20), _mm256_set1_epi32(1));
  bits = _mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7ffff)));
  bits = _mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int>(0xfff00000u)));
  __m256 q =
      _mm256_blendv_ps(_mm256_castsi256_ps(bits), tiny, _mm256_cmp_ps(mag, _mm256_set1_ps(0.015625f), _CMP_LT_OQ));
  q = _mm256_or_ps(q, _mm256_and_ps(t, sign));
  return _mm256_blendv_ps(q, t, _mm256_cmp_ps(t, t, _CMP_UNORD_Q));
}

// PowerOfTwoScaleCeil(max(amax, 1e-4), 1/448), as in QuantizeFP8PowerOfTwo.
inline float ActScale(float amax) {
  const float clamped = amax < 1e-4f ? 1e-4f : amax;
  const uint32_t bits = std::bit_cast<uint32_t>(clamped * (1.0f / 448.0f));
  const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xff);
  const int32_t log2_ceil = exponent - 127 + ((bits & 0x7fffffu) != 0 ? 1 : 0);
  return std::bit_cast<float>(static_cast<uint32_t>(log2_ceil + 127) << 23);
}

// The PairLane order: the lane (0-15; 0-7 the low accumulator, 8-15 the high one) that carries
// canonical pair i's running sum in these kernels is i, except for FP8, whose pair i runs in lane
// i % 2 * 8 + i / 2: the even pairs in the low accumulator and the odd ones in the high, as a group
// read as 16-bit words (one pair each) decodes with shifts and masks alone (DecodeFp8Codes).
// ReduceLanesOf puts the sums back in canonical order before the tree, so the operations per pair
// and the reduction are the canonical ones.

// A natural-order group (n[j] holds elements 8j..8j+7) -> [even members by lane | odd members by
// lane] (PairK, the PairLane order), in registers.
inline void StorePairs(MatrixFormat f, const __m256 (&n)[4], float* xs) {
  __m256 even_lo, even_hi, odd_lo, odd_hi;
  if (f == MatrixFormat::kF32) {  // pair i is (i, 16 + i): the memory order
    even_lo = n[0], even_hi = n[1], odd_lo = n[2], odd_hi = n[3];
  } else if (f == MatrixFormat::kFP4Row32) {
    // Pair i is (8(i%4) + i/4, that + 4): the 4 x 8 matrix of the group transposed, columns 0-1 the
    // low evens, 2-3 the high evens, 4-5 and 6-7 the odds.
    __m256 c[4];  // columns j | j + 4
    TransposeLanes4(n[0], n[1], n[2], n[3], c);
    even_lo = _mm256_permute2f128_ps(c[0], c[1], 0x20), odd_lo = _mm256_permute2f128_ps(c[0], c[1], 0x31);
    even_hi = _mm256_permute2f128_ps(c[2], c[3], 0x20), odd_hi = _mm256_permute2f128_ps(c[2], c[3], 0x31);
  } else if (f == MatrixFormat::kFP8Block32) {
    // Pairs (2i, 2i + 1), pair 2l in lane l and 2l + 1 in lane 8 + l: element 4l + j goes to lane l
    // of (even low, odd low, even high, odd high)[j], the 8 x 4 matrix of the group transposed.
    // Halves (rows l, l + 4) first, so that each 128-bit lane transposes on its own.
    const __m256 r04 = _mm256_permute2f128_ps(n[0], n[2], 0x20), r15 = _mm256_permute2f128_ps(n[0], n[2], 0x31);
    const __m256 r26 = _mm256_permute2f128_ps(n[1], n[3], 0x20), r37 = _mm256_permute2f128_ps(n[1], n[3], 0x31);
    __m256 c[4];
    TransposeLanes4(r04, r15, r26, r37, c);
    even_lo = c[0], odd_lo = c[1], even_hi = c[2], odd_hi = c[3];
  } else {  // BF16: pairs (2i, 2i + 1) in lane i: the evens and odds of the group apart
    const __m256 e01 = _mm256_shuffle_ps(n[0], n[1], 0x88), o01 = _mm256_shuffle_ps(n[0], n[1], 0xdd);
    const __m256 e23 = _mm256_shuffle_ps(n[2], n[3], 0x88), o23 = _mm256_shuffle_ps(n[2], n[3], 0xdd);
    even_lo = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e01), 0xd8));
    odd_lo = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o01), 0xd8));
    even_hi = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e23), 0xd8));
    odd_hi = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o23), 0xd8));
  }
  _mm256_store_ps(xs, even_lo);
  _mm256_store_ps(xs + 8, even_hi);
  _mm256_store_ps(xs + 16, odd_lo);
  _mm256_store_ps(xs + 24, odd_hi);
}

ExpRange PrepareQuantized(MatrixFormat f, const float* x, int64_t k, float* xs) {
  ExpRange range{1 << 20, -(1 << 20)};
  for (int64_t g = 0; g < k / kGroup; ++g) {
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(x + g * kGroup + 8 * j);
      // max_ps returns its second operand when the first is NaN: NaNs are skipped like std::max.
      amax = _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v[j]), amax);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float scale = ActScale(_mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4))));
    const int e = static_cast<int>(std::bit_cast<uint32_t>(scale) >> 23) - 127;
    range = {std::min(range.lo, e), std::max(range.hi, e)};
    // x / scale as x * (1 / scale): the scale is a power of two from 2^-22 to 2^120 (or +inf), so its
    // reciprocal is exact and each product is the quotient correctly rounded, as the division is.
    const __m256 s = _mm256_set1_ps(scale), inverse = _mm256_set1_ps(1.0f / scale);
    const __m256 lo = _mm256_set1_ps(-448.0f), hi = _mm256_set1_ps(448.0f);
    for (int j = 0; j < 4; ++j) {
      // clamp = min(hi, max(lo, t)) keeps NaN (second operand) like std::clamp.
      const __m256 q = RoundE4M3(_mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_mul_ps(v[j], inverse))));
      v[j] = _mm256_mul_ps(q, s);
    }
    StorePairs(f, v, xs + g * kGroup);
  }
  return range;
}

void PrepareDense(MatrixFormat f, const float* x, int64_t k, float* xs) {
  for (int64_t g = 0; g * kGroup < k; ++g) {
    const int64_t left = std::min<int64_t>(kGroup, k - g * kGroup);  // zero padding: exact +0 products
    alignas(32) float padded[kGroup];
    const float* natural = x + g * kGroup;
    if (left < kGroup) {
      for (int64_t i = 0; i < kGroup; ++i) padded[i] = i < left ? natural[i] : 0.0f;
      natural = padded;
    }
    const __m256 n[4] = {_mm256_loadu_ps(natural), _mm256_loadu_ps(natural + 8), _mm256_loadu_ps(natural + 16),
                         _mm256_loadu_ps(natural + 24)};
    StorePairs(f, n, xs + g * kGroup);
  }
}

// ---- weight decoding: half h (pairs 8h..8h+7) of one group of one row -------------------------

struct RowSet {
  const uint8_t* row[kPanelN];
  const float* scale[kPanelN];  // FP8: per-group block scale * 256; FP4: per-group row scale
};

template <MatrixFormat F>
struct Decoder {
  int64_t k;  // dense: valid elements, for the zero-padded last group

  void Load(const RowSet& rs, int n, int64_t g, int h, __m256& even, __m256& odd) const {
    if constexpr (F == MatrixFormat::kFP4Row32) {
      // 16 bytes in both 128-bit lanes; lane i of half h wants nibbles 8(i%4) + L and
      // 8(i%4) + 4 + L with L = 2h + i/4 (the FP4 pair order).
      const __m256i bytes =
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rs.row[n] + g * 16)));
      const __m256i base = _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0);
      const __m256i shift_even = _mm256_add_epi32(base, _mm256_set1_epi32(8 * h));
      const __m256 table =
          _mm256_mul_ps(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), _mm256_set1_ps(rs.scale[n][g]));
      even = Fp4Values(_mm256_srlv_epi32(bytes, shift_even), table);
      odd = Fp4Values(_mm256_srlv_epi32(bytes, _mm256_add_epi32(shift_even, _mm256_set1_epi32(16))), table);
    } else if constexpr (F == MatrixFormat::kFP8Block32) {
      const uint8_t* p = rs.row[n] + g * kGroup;
      alignas(16) uint8_t padded[kGroup];
      const int64_t left = k - g * kGroup;
      if (left < kGroup) {  // only dense FP8 (DenseLinear) has a partial group; zeros decode to +0
        std::memset(padded, 0, sizeof(padded));
        std::memcpy(padded, p, static_cast<size_t>(left));
        p = padded;
      }
      // Lanes 8h..8h+7: pairs h, h + 2, ..., h + 14 (PairLane), codes 4j + 2h (even) and 4j + 2h + 1
      // (odd) for j = 0..7, four from each 16-byte half, into the high bytes of 8 words.
      const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i second = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
      const auto words = [&](char c) {
        return _mm_or_si128(_mm_shuffle_epi8(first, _mm_setr_epi8(-1, c, -1, c + 4, -1, c + 8, -1, c + 12, -1, -1, -1,
                                                                  -1, -1, -1, -1, -1)),
                            _mm_shuffle_epi8(second, _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, c, -1, c + 4, -1,
                                                                   c + 8, -1, c + 12)));
      };
      const __m256 s = _mm256_set1_ps(rs.scale[n][g]);
      even = _mm256_mul_ps(E4M3Times2PowMinus8(words(static_cast<char>(2 * h))), s);
      odd = _mm256_mul_ps(E4M3Times2PowMinus8(words(static_cast<char>(2 * h + 1))), s);
    } else {
      constexpr int64_t kElemBytes = F == MatrixFormat::kBF16 ? 2 : 4;
      const uint8_t* p = rs.row[n] + g * kGroup * kElemBytes;
      alignas(32) uint8_t padded[kGroup * 4];
      const int64_t left = k - g * kGroup;
      if (left < kGroup) {  // never read past the row: copy the valid part, zeros after it
        std::memset(padded, 0, sizeof(padded));
        std::memcpy(padded, p, static_cast<size_t>(left * kElemBytes));
        p = padded;
      }
      if constexpr (F == MatrixFormat::kBF16) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h));
        even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
        odd = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
      } else {
        even = _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8 * h);
        odd = _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 16 + 8 * h);
      }
    }
  }

  // e2m1 nibble in the low 4 bits of each lane -> table[magnitude] with the sign bit 3 applied.
  static __m256 Fp4Values(__m256i idx, __m256 table) {
    const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(idx, 28), _mm256_set1_epi32(static_cast<int>(0x80000000u)));
    return _mm256_or_ps(_mm256_permutevar8x32_ps(table, idx), _mm256_castsi256_ps(sign));
  }
  // e4m3 code in the high byte of 8 words -> fp32 of code * 2^-8, exactly, via fp16 (F16C):
  // fp16 bits sign | (code & 0x7f) << 7 scale every code (subnormals included) by 2^-8.
  static __m256 E4M3Times2PowMinus8(__m128i words) {
    __m128i h = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(words, 1), _mm_set1_epi16(0x3f80)),
                             _mm_and_si128(words, _mm_set1_epi16(static_cast<int16_t>(0x8000))));
    const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(words, _mm_set1_epi16(0x7f00)), _mm_set1_epi16(0x7f00));
    h = _mm_or_si128(h, _mm_and_si128(nan, _mm_set1_epi16(0x7e00)));
    return _mm256_cvtph_ps(h);
  }
};

// ---- whole-group decoders of the streaming tiles ------------------------------------------------
//
// Each produces the group's four canonical vectors at once: even/odd members of pairs 0-7 (the
// low accumulator) and of pairs 8-15 (the high one), the same values the per-half decoders give.

// bf16 bytes of e2m1 code c times 2^(s - 127), for every scale byte s: kFp4Bf16[s] = 16 high bytes
// then 16 low bytes. Exact (and normal) for scale bytes 2..252, the FoldIsExact range; other
// scales give garbage, and their elements are recomputed by the oracle replica.
struct Fp4Bf16Tables {
  alignas(64) uint8_t bytes[256][32];
};
constexpr Fp4Bf16Tables MakeFp4Bf16Tables() {
  Fp4Bf16Tables t{};
  // e2m1 magnitude m -> (exponent offset k, mantissa bit): value = 2^k * (1 + bit / 2); 0 is zero.
  constexpr int kExponent[8] = {0, -1, 0, 0, 1, 1, 2, 2};
  constexpr int kMantissa[8] = {0, 0, 0, 1, 0, 1, 0, 1};
  for (int s = 0; s < 256; ++s) {
    for (int c = 0; c < 16; ++c) {
      const int m = c & 7, sign = c >> 3;
      const int e = m == 0 ? 0 : (s + kExponent[m]) & 0xff;
      const uint32_t bits = (static_cast<uint32_t>(sign) << 31) | (static_cast<uint32_t>(e) << 23) |
                            (static_cast<uint32_t>(m == 0 ? 0 : kMantissa[m]) << 22);
      t.bytes[s][c] = static_cast<uint8_t>(bits >> 24);
      t.bytes[s][16 + c] = static_cast<uint8_t>(bits >> 16);
    }
  }
  return t;
}
constexpr Fp4Bf16Tables kFp4Bf16 = MakeFp4Bf16Tables();

// FP4 group (16 bytes, nibble j = byte j/2, low nibble first; row scale byte `scale`).
//   1. nibbles as bytes: low 128-bit lane the low nibbles, high lane the high nibbles (one srlv);
//   2. deinterleave even/odd bytes, so that lane l, dword d sees bytes 4d, 4d+2 (low accumulator:
//      pair 4l + d is nibbles 8d + l and 8d + 4 + l) at word 2d and bytes 4d+1, 4d+3 (high one);
//   3. two vpshufb lookups give each nibble's bf16 high and low byte, two unpacks its bf16 word;
//   4. the word in the low half of each dword is the pair's even member, the high half its odd one.
inline void DecodeFp4Group(const uint8_t* bytes16, uint8_t scale, __m256& even_lo, __m256& odd_lo, __m256& even_hi,
                           __m256& odd_hi) {
  const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes16)));
  const __m256i nibbles =
      _mm256_and_si256(_mm256_srlv_epi32(raw, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0f));
  const __m256i order =
      _mm256_shuffle_epi8(nibbles, _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8,
                                                    10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const uint8_t* table = kFp4Bf16.bytes[scale];
  const __m256i high =
      _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table))), order);
  const __m256i low = _mm256_shuffle_epi8(
      _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table + 16))), order);
  const __m256i words_lo = _mm256_unpacklo_epi8(low, high), words_hi = _mm256_unpackhi_epi8(low, high);
  const __m256i upper = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  even_lo = _mm256_castsi256_ps(_mm256_slli_epi32(words_lo, 16));
  odd_lo = _mm256_castsi256_ps(_mm256_and_si256(words_lo, upper));
  even_hi = _mm256_castsi256_ps(_mm256_slli_epi32(words_hi, 16));
  odd_hi = _mm256_castsi256_ps(_mm256_and_si256(words_hi, upper));
}

// FP8 group (32 codes) as code * 2^-120, the block scale left out, in PairLane order: read as 16
// words, pair i is word i (even code in its low byte, odd in its high one), and each code becomes
// the bf16 sign | (code & 0x7f) << 4 in its word (an arithmetic shift and a mask), whose fp32 is
// code * 2^-120 (e4m3 subnormals become fp32 subnormals), exactly; the low word of dword j (pair
// 2j) goes to lane j of the low accumulator by a shift, the high one (pair 2j + 1) to lane j of
// the high accumulator by a mask. 5 shifts and 4 masks for 32 codes, no shuffle: on Zen 3 an
// FP8 GEMV tile (2 rows, hot) ran 4.3-4.9 cycles per row and group against 5.4-6.1 with the
// byte-shuffle decode that kept the canonical lanes. With kNanCheck, `nan` collects codes 0x7f /
// 0xff (this decode makes them finite; tiles that saw one are recomputed with the general
// decoder); without, the caller knows the matrix holds none (WeightMatrix::fp8_nan_free).
template <bool kNanCheck = true>
inline void DecodeFp8Codes(const uint8_t* bytes32, __m256& even_lo, __m256& odd_lo, __m256& even_hi, __m256& odd_hi,
                           __m256i& nan) {
  const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes32));
  if constexpr (kNanCheck) nan = _mm256_max_epu8(nan, _mm256_and_si256(words, _mm256_set1_epi8(0x7f)));
  const __m256i bf16_bits = _mm256_set1_epi16(static_cast<int16_t>(0x87f0));  // sign, code bits 6-0
  const __m256i odd = _mm256_and_si256(_mm256_srai_epi16(words, 4), bf16_bits);
  const __m256i even = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(words, 8), 4), bf16_bits);
  const __m256i upper = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  even_lo = _mm256_castsi256_ps(_mm256_slli_epi32(even, 16));
  odd_lo = _mm256_castsi256_ps(_mm256_slli_epi32(odd, 16));
  even_hi = _mm256_castsi256_ps(_mm256_and_si256(even, upper));
  odd_hi = _mm256_castsi256_ps(_mm256_and_si256(odd, upper));
}

// The same group times `scale` (the block scale times 2^120, a normal fp32): the canonical
// operands, exactly.
template <bool kNanCheck = true>
inline void DecodeFp8Group(const uint8_t* bytes32, __m256 scale, __m256& even_lo, __m256& odd_lo, __m256& even_hi,
                           __m256& odd_hi, __m256i& nan) {
  DecodeFp8Codes<kNanCheck>(bytes32, even_lo, odd_lo, even_hi, odd_hi, nan);
  even_lo = _mm256_mul_ps(even_lo, scale);
  odd_lo = _mm256_mul_ps(odd_lo, scale);
  even_hi = _mm256_mul_ps(even_hi, scale);
  odd_hi = _mm256_mul_ps(odd_hi, scale);
}

// BF16 group (64 bytes, pairs in memory order): each dword holds a pair, the even member in its
// low half. F32 group (128 bytes): the canonical [even 16 | odd 16] order is the memory order.
inline void DecodeBf16Group(const uint8_t* bytes64, __m256& even_lo, __m256& odd_lo, __m256& even_hi, __m256& odd_hi) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes64));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes64 + 32));
  const __m256i upper = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  even_lo = _mm256_castsi256_ps(_mm256_slli_epi32(lo, 16));
  odd_lo = _mm256_castsi256_ps(_mm256_and_si256(lo, upper));
  even_hi = _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16));
  odd_hi = _mm256_castsi256_ps(_mm256_and_si256(hi, upper));
}
inline void DecodeF32Group(const uint8_t* bytes128, __m256& even_lo, __m256& odd_lo, __m256& even_hi, __m256& odd_hi) {
  const float* p = reinterpret_cast<const float*>(bytes128);
  even_lo = _mm256_loadu_ps(p);
  even_hi = _mm256_loadu_ps(p + 8);
  odd_lo = _mm256_loadu_ps(p + 16);
  odd_hi = _mm256_loadu_ps(p + 24);
}

// Whether DecodeFp8Group's `nan` saw a NaN code.
inline bool Fp8NanSeen(__m256i nan) {
  return _mm256_movemask_epi8(_mm256_cmpeq_epi8(nan, _mm256_set1_epi8(0x7f))) != 0;
}

// Per-group fp32 scales of a ue8m0 row, times `extra` (bytes 0 and 255 give garbage here; those
// elements are recomputed by the oracle replica).
inline void ScalesOf(const uint8_t* s, int64_t groups, float extra, float* out) {
  for (int64_t g = 0; g < groups; ++g) out[g] = std::bit_cast<float>(static_cast<uint32_t>(s[g]) << 23) * extra;
}

// GEMM panels. A register tile is 4 activation rows x 3 panel rows of one half: 12 accumulator
// chains, the fewest that keep both FMA pipes busy at Zen 3's FMA latency (8 chains reach ~1.4 FMA
// per cycle, 12 reach 2), with 3 weight and 1 activation register besides. A panel holds 4 such
// row triples (fp32, triple- and half-major so that a tile streams contiguous memory). With up to
// kGemmChunkedMaxQuads activation quads it holds kGemmChunkGroups groups at a time (24 KB, L1)
// and every quad's tiles run over that chunk; with more (prefill) it holds the whole K (240 KB at
// K = 5120) and a quad's tiles run kGemmKGroups groups before their accumulators go back to the
// tile store, so the activation rows' k-block (4 x 24 groups x 128 bytes) stays in L1.
constexpr int kGemmTileRows = 3;  // panel rows per register tile
constexpr int kGemmTriples = 4;
constexpr int kGemmPanelRows = kGemmTileRows * kGemmTriples;
// 24 against 32 groups (kernel_ab, Zen 3, 2 threads, M = 192-512, two runs): FP8 5120 x 8192
// 0.90-0.98 of the time, 32768 x 1280 0.95, FP4 2304 x 5120 0.96-0.99 and 5120 x 2304 0.97, BF16
// 8192 x 5120 0.99; 16 groups 0.96-1.01, 8 groups 1.03-1.13, 64 groups 1.32-1.42.
constexpr int64_t kGemmKGroups = 24;
// 12 rows x 16 groups: 24 KB of panel, besides the quad at work's 8 KB of activations (the
// others' accumulators wait in the tile store). Fewer groups pay a tile call (12 accumulator loads
// and stores) per fewer FMAs: on Zen 3 (kernel_ab, 2 threads, weights from DRAM) 16 groups against
// 8 took FP8 5120 x 8192 at M = 8 / 16 to 0.88 / 0.90 of the time, FP4 2304 x 5120 to 0.93 / 0.94,
// FP8 32768 x 1280 at M = 12 to 0.89, the BF16 head at M = 16 even; 32 groups gave FP8 another
// 3-5% and FP4 0-4% back. (Zen 4, one thread hot: 8 and 16 alike, 32 10% slower.)
constexpr int64_t kGemmChunkedMaxQuads = 4;
constexpr int64_t kGemmChunkGroups = 16;
static_assert(kGemmChunkGroups <= kGemmKGroups, "a chunk's quad runs one block of tile calls");
// Accumulators of one activation quad against one panel: [triple][half][4 x 3] vectors.
constexpr int kGemmTileVectors = 4 * kGemmTileRows;
constexpr int kGemmAccVectors = kGemmTriples * 2 * kGemmTileVectors;
// Floats of the tile store's accumulators (the streaming tiles use them too).
constexpr int kGemmAccFloats = kGemmChunkedMaxQuads * kGemmAccVectors * 8;

struct Scratch {
  float* acc;       // [kGemmChunkedMaxQuads][kGemmAccVectors][8]
  float* panel;     // [triple][half][groups of the chunk][3][even 8 | odd 8]
  float* scales;    // [kPanelN][groups], then [groups] for the FP8 group tiles
  float* scaled_x;  // FP8 group tiles: Job::xs times one row block's scales (ScaleActivations)
  Scratch(unsigned char* base, int64_t groups)
      : acc(reinterpret_cast<float*>(base)),
        panel(acc + kGemmAccFloats),
        scales(panel + groups * kGemmPanelRows * kGroup),
        scaled_x(scales + PaddedFloats(groups * (kPanelN + 1))) {}
  // `xstride`: Job::xstride (the FP8 streaming tiles' m rows of scaled activations), else 0.
  static size_t Bytes(int64_t groups, int64_t scaled_rows, int64_t xstride) {
    return 4 * static_cast<size_t>(kGemmAccFloats + groups * kGemmPanelRows * kGroup +
                                   PaddedFloats(groups * (kPanelN + 1)) + scaled_rows * xstride);
  }
  // 64-byte alignment for the aligned loads of scaled_x.
  static constexpr int64_t PaddedFloats(int64_t n) { return (n + 15) / 16 * 16; }
};

// Half h of row triple t in a panel holding `chunk` groups ([triple][half][group][row][16]).
inline float* PanelHalf(float* panel, int64_t chunk, int t, int h) {
  return panel + (t * 2 + h) * chunk * kGemmTileRows * 16;
}

template <MatrixFormat F>
void LoadRowSet(const WeightMatrix& w, int64_t n0, int nr, int64_t groups, const Scratch& s, RowSet& rs) {
  const int64_t row_bytes = MatrixRowBytes(F, w.cols);
  for (int i = 0; i < nr; ++i) {
    rs.row[i] = w.data + (n0 + i) * row_bytes;
    rs.scale[i] = s.scales + i * groups;
    // The 2^-8 of the fp16 route is folded into the FP8 scale: the products stay the same numbers.
    if constexpr (F == MatrixFormat::kFP8Block32)
      ScalesOf(w.scales + ((n0 + i) / kQuantBlock) * w.scale_cols(), groups, 256.0f, s.scales + i * groups);
    if constexpr (F == MatrixFormat::kFP4Row32)
      ScalesOf(w.scales + (n0 + i) * w.scale_cols(), groups, 1.0f, s.scales + i * groups);
  }
}

// ---- streaming tiles (M <= 8): NR * MR <= 6 elements, two 8-lane accumulators each ---------------

// acc[r][n][h] = fma(x_even, w_even, fma(x_odd, w_odd, acc)): the canonical step for one half.
#define DI_STEP(acc, xr, we, wo) \
  acc = _mm256_fmadd_ps(_mm256_load_ps(xr), we, _mm256_fmadd_ps(_mm256_load_ps((xr) + 16), wo, acc))

// General tiles (every format; per-half decoders).
template <MatrixFormat F, int NR, int MR>
[[gnu::noinline]] void Tile(const RowSet& rs, const Decoder<F>& dec, const float* x, int64_t xstride, int64_t groups,
                            float (*out)[4]) {
  __m256 acc[MR][NR][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) acc[r][n][0] = acc[r][n][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
      for (int n = 0; n < NR; ++n) {
        __m256 we, wo;
        dec.Load(rs, n, g, h, we, wo);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) DI_STEP(acc[r][n][h], x + r * xstride + g * kGroup + 8 * h, we, wo);
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int n = 0; n < NR; ++n) out[r][n] = ReduceLanesOf<F>(acc[r][n][0], acc[r][n][1]);
}
#undef DI_STEP

// How far ahead the group tiles prefetch weights: whole tiles of the same rows, about this many
// bytes. On Zen 3 at 2 threads prefetching took wq_b (1280-byte rows) from 5.3 to 2.3-2.5 ms;
// distances of 10 KB to 128 KB measured within the host's noise of each other, so this is a
// middle value, not a tuned optimum.
constexpr int64_t kPrefetchBytes = 24 << 10;

// Whole-group tiles of every format (Decode*Group; dense matrices whose rows end in a partial
// group take the general tile) over groups [g0, g1), their accumulators loaded from and stored to
// `acc` ([row n][activation row r][half][8]: the canonical running sums, so splitting K into
// chunks changes no bits). For FP8, `x` is the activations times the rows' block scales
// (ScaleActivations) and the weights are decoded without them; `nan_seen` is set by e4m3 NaN
// codes (the caller then uses the general tile), unless kNanCheck is off (a matrix known to hold
// none). Each 64 bytes read prefetch the line `prefetch_delta` bytes further.
template <MatrixFormat F, int NR, int MR, bool kNanCheck = true>
[[gnu::noinline]] void GroupTile(const WeightMatrix& w, int64_t n0, const float* x, int64_t xstride, int64_t g0,
                                 int64_t g1, int64_t prefetch_delta, float* acc_store, bool& nan_seen) {
  constexpr int64_t kGroupBytes = MatrixRowBytes(F, kGroup);
  const uint8_t* rows[NR];
  const uint8_t* row_scales[NR];
#pragma GCC unroll 8
  for (int n = 0; n < NR; ++n) {
    rows[n] = w.data + (n0 + n) * w.row_bytes();
    row_scales[n] = F == MatrixFormat::kFP4Row32 ? w.scales + (n0 + n) * w.scale_cols() : nullptr;
  }
  const auto at = [&](int n, int r, int h) { return acc_store + ((n * MR + r) * 2 + h) * 8; };
  __m256 acc[MR][NR][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) acc[r][n][0] = _mm256_load_ps(at(n, r, 0)), acc[r][n][1] = _mm256_load_ps(at(n, r, 1));
  __m256i nan = _mm256_setzero_si256();
  for (int64_t g = g0; g < g1; ++g) {
    if ((g * kGroupBytes) % 64 == 0) {
#pragma GCC unroll 8
      for (int n = 0; n < NR; ++n) {
#pragma GCC unroll 2
        for (int64_t line = 0; line < kGroupBytes; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(rows[n] + g * kGroupBytes + line + prefetch_delta), _MM_HINT_T0);
      }
    }
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) {
      __m256 even_lo, odd_lo, even_hi, odd_hi;
      const uint8_t* group = rows[n] + g * kGroupBytes;
      if constexpr (F == MatrixFormat::kFP4Row32) {
        DecodeFp4Group(group, row_scales[n][g], even_lo, odd_lo, even_hi, odd_hi);
      } else if constexpr (F == MatrixFormat::kFP8Block32) {
        DecodeFp8Codes<kNanCheck>(group, even_lo, odd_lo, even_hi, odd_hi, nan);
      } else if constexpr (F == MatrixFormat::kBF16) {
        DecodeBf16Group(group, even_lo, odd_lo, even_hi, odd_hi);
      } else {
        DecodeF32Group(group, even_lo, odd_lo, even_hi, odd_hi);
      }
      // All odd products first, then the even ones: each accumulator's two steps stay in
      // order, and the FMAs in flight are independent.
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const float* xr = x + r * xstride + g * kGroup;
        acc[r][n][0] = _mm256_fmadd_ps(_mm256_load_ps(xr + 16), odd_lo, acc[r][n][0]);
        acc[r][n][1] = _mm256_fmadd_ps(_mm256_load_ps(xr + 24), odd_hi, acc[r][n][1]);
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const float* xr = x + r * xstride + g * kGroup;
        acc[r][n][0] = _mm256_fmadd_ps(_mm256_load_ps(xr), even_lo, acc[r][n][0]);
        acc[r][n][1] = _mm256_fmadd_ps(_mm256_load_ps(xr + 8), even_hi, acc[r][n][1]);
      }
    }
  }
  if constexpr (F == MatrixFormat::kFP8Block32 && kNanCheck) nan_seen = nan_seen || Fp8NanSeen(nan);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) _mm256_store_ps(at(n, r, 0), acc[r][n][0]), _mm256_store_ps(at(n, r, 1), acc[r][n][1]);
}

// GroupTile, without the NaN-code check on an FP8 matrix known to hold none: without the check's
// load and two integer operations per row and group, wq_b / wo_b ran 3-11% faster at M = 1 and
// 5-11% at M = 4-6 (Zen 3, 2 threads, weights from DRAM; kernel_ab B / A 0.89-0.97).
template <MatrixFormat F, int NR, int MR>
void RunGroupTile(const WeightMatrix& w, int64_t n0, const float* x, int64_t xstride, int64_t g0, int64_t g1,
                  int64_t prefetch_delta, float* acc_store, bool& nan_seen) {
  if constexpr (F == MatrixFormat::kFP8Block32) {
    if (w.fp8_nan_free)
      return GroupTile<F, NR, MR, false>(w, n0, x, xstride, g0, g1, prefetch_delta, acc_store, nan_seen);
  }
  GroupTile<F, NR, MR>(w, n0, x, xstride, g0, g1, prefetch_delta, acc_store, nan_seen);
}

// ---- half-major group tiles (dense, M = 3-4) --------------------------------------------------
//
// At M = 3-4 a GroupTile over one weight row keeps 6-8 accumulator chains of two dependent FMAs a
// group and loads every activation vector for each row. These tiles run one half of the
// accumulators over a chunk of groups, then the other, over 3 weight rows: 9-12 chains, each
// activation vector loaded once for 3 rows, each half's weights decoded straight into that half's
// even and odd vectors (from L1 the second time). Every accumulator sees the same two FMAs per
// group in the same order, so the bits are GroupTile's. On Zen 3 (kernel_ab, 2 threads) the BF16
// tile ran 0.79-0.82 of GroupTile's time with the weights in L3; streaming from DRAM it runs in
// bands of 3 rows (see StreamRowsT). The FP8 version (each half decoded by two shifts and a mask
// per member, 7 shifts per row and group against 5) ran 1.06-1.16 of GroupTile's time, hot and
// cold, so FP8 keeps GroupTile; FP4 decodes both halves at once.

// The upper word of each dword, for the odd members (DecodeHalfMember).
alignas(32) constexpr uint32_t kUpperWords[8] = {0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u,
                                                 0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u};

// The even (kOdd false) or odd members of accumulator half H's pairs in one dense group, as the
// whole-group decoders give them. `upper` points at kUpperWords; the tiles pass it through an
// empty asm so that it stays a memory operand and its register goes to an activation vector (12
// accumulators + 3 weights + 1).
template <MatrixFormat F, int H, bool kOdd>
inline __m256 DecodeHalfMember(const uint8_t* group, const uint32_t* upper) {
  if constexpr (F == MatrixFormat::kBF16) {
    const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 32 * H));
    return _mm256_castsi256_ps(kOdd
                                   ? _mm256_and_si256(pairs, _mm256_load_si256(reinterpret_cast<const __m256i*>(upper)))
                                   : _mm256_slli_epi32(pairs, 16));
  } else {
    static_assert(F == MatrixFormat::kF32, "half-major tiles are dense");
    return _mm256_loadu_ps(reinterpret_cast<const float*>(group) + (kOdd ? 16 : 0) + 8 * H);
  }
}

// Half H of NR weight rows x MR activation rows over groups [g0, g1): GroupTile's accumulators
// (same store layout) of that half only. Pass 1 finds the rows in L1; the two passes share the
// prefetches that GroupTile issues in one, so that neither bursts.
template <MatrixFormat F, int NR, int MR, int H>
[[gnu::noinline]] void HalfGroupTile(const WeightMatrix& w, int64_t n0, const float* x, int64_t xstride, int64_t g0,
                                     int64_t g1, int64_t prefetch_delta, float* acc_store) {
  constexpr int64_t kGroupBytes = MatrixRowBytes(F, kGroup);
  const uint8_t* rows[NR];
#pragma GCC unroll 8
  for (int n = 0; n < NR; ++n) rows[n] = w.data + (n0 + n) * w.row_bytes();
  const auto at = [&](int n, int r) { return acc_store + ((n * MR + r) * 2 + H) * 8; };
  __m256 acc[MR][NR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) acc[r][n] = _mm256_load_ps(at(n, r));
  for (int64_t g = g0; g < g1; ++g) {
    // Pass H takes the lines whose index is H modulo 2.
    if (kGroupBytes >= 128 || (g * kGroupBytes) % 128 == 64 * H) {
      const int64_t line = kGroupBytes >= 128 ? 64 * H : 0;
#pragma GCC unroll 8
      for (int n = 0; n < NR; ++n)
        _mm_prefetch(reinterpret_cast<const char*>(rows[n] + g * kGroupBytes + line + prefetch_delta), _MM_HINT_T0);
    }
    __m256 wv[NR];
    const uint32_t* upper = kUpperWords;
    __asm__("" : "+r"(upper));
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) wv[n] = DecodeHalfMember<F, H, true>(rows[n] + g * kGroupBytes, upper);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 xo = _mm256_load_ps(x + r * xstride + g * kGroup + 16 + 8 * H);
#pragma GCC unroll 8
      for (int n = 0; n < NR; ++n) acc[r][n] = _mm256_fmadd_ps(xo, wv[n], acc[r][n]);
    }
    __asm__("" : "+r"(upper));
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) wv[n] = DecodeHalfMember<F, H, false>(rows[n] + g * kGroupBytes, upper);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 xe = _mm256_load_ps(x + r * xstride + g * kGroup + 8 * H);
#pragma GCC unroll 8
      for (int n = 0; n < NR; ++n) acc[r][n] = _mm256_fmadd_ps(xe, wv[n], acc[r][n]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) _mm256_store_ps(at(n, r), acc[r][n]);
}

constexpr int kHalfTileRows = 3;  // weight rows of a half-major tile
// Which streaming tiles have half-major versions.
template <MatrixFormat F, int MR>
constexpr bool kHasHalfTiles = (F == MatrixFormat::kBF16 || F == MatrixFormat::kF32) && (MR == 3 || MR == 4);

// Scale bytes of one FP8 row block up to this keep scale * 2^120 a normal fp32 (every real
// checkpoint: the weights would have to exceed 448 * 2^7); above it the general tile runs.
constexpr int kFp8GroupTileMaxScaleByte = 134;

// The scales of `count` groups of an FP8 row block for the group decoders: whether every byte is
// within kFp8GroupTileMaxScaleByte, and if so their fp32 values times 2^120 (DecodeFp8Group's
// factor) in `out`.
inline bool Fp8GroupScales(const uint8_t* bytes, int64_t count, float* out) {
  if (!std::all_of(bytes, bytes + count, [](uint8_t b) { return b <= kFp8GroupTileMaxScaleByte; })) return false;
  ScalesOf(bytes, count, 0x1p120f, out);
  return true;
}

// Where the activation rows outgrow L1 (M x K x 4 bytes > kStreamL1Bytes) from 3 rows on, the
// group tiles run over bands of kStreamBandRows weight rows a chunk of kStreamChunkBytes of each
// row at a time (FP4 and FP8 32 groups, BF16 8), so that the activations' chunk stays in L1 for
// the band: run over whole rows, every row read all M activation rows from L2 (M x 20 KB at
// K = 5120), which held M = 3-6 to 39-45 GFLOP/s a core where the bands give 49-60 (Zen 4, AVX2
// code, one thread hot). Chunks of 16 groups for every format measured the same for FP8, and up to
// 20% (BF16) and 8% (FP4) slower streaming from DRAM at M = 3-4. Where the activations fit
// (K = 1280), or at M = 1-2, the bands cost 2-12% (the accumulators' loads and stores), and the
// tiles run over whole rows. FP8 takes 1 KB (32 groups): on Zen 3 (kernel_ab, 2 threads, weights
// from DRAM, against 512 bytes) wo_b at M = 3 / 4 / 5 / 6 0.98 / 0.89 / 0.87 / 0.93 of the time,
// the Engram wkv 25600 x 6144 at M = 4 0.85, the shared experts 0.92-1.02; 2 KB 1.04-1.28. FP4 at
// 1 KB (64 groups): 1.11 at M = 4.
constexpr int64_t kStreamBandRows = 16;
// Chunked FP8 bands hold 8 rows (8 KB of weights a chunk beside the activations' 16 KB at M = 4):
// on Zen 3 (kernel_ab, against 16) wo_b at M = 3 / 4 / 5 / 6 0.956 / 0.887 / 0.890 / 0.965, Engram
// wkv at M = 4 0.862, the shared experts 0.86-0.99. FP4 at 8 rows was 1.06, BF16 0.99.
constexpr int64_t kStreamFp8ChunkedBandRows = 8;
static_assert(kStreamBandRows % kStreamFp8ChunkedBandRows == 0);
template <MatrixFormat F>
constexpr int64_t kStreamChunkBytes = F == MatrixFormat::kFP8Block32 ? 1024 : 512;
// The half-major tiles (M = 3-4, activations beyond L1) run in bands of their 3 rows, 1 KB of each
// row a chunk: the 16-row bands of 512 bytes held the BF16 tile to GroupTile's speed streaming from
// DRAM (kernel_ab, Zen 3, 2 threads, 16384 x 5120: 0.97-1.02 of the time), where 3-row bands of
// 1 KB took M = 3 / 4 to 0.84 / 0.92 (5120 x 8192 at M = 4: 0.96); 2 KB chunks 0.93 / 1.14.
constexpr int64_t kHalfChunkBytes = 1024;
constexpr int kStreamChunkedMinM = 3;
constexpr int64_t kStreamL1Bytes = 32 << 10;  // L1 data cache of Zen 2-4; Intel's cores have 32-48 KB
static_assert(kQuantBlock % kStreamBandRows == 0 && kQuantBlock % kStreamFp8ChunkedBandRows == 0,
              "FP8 bands inside one scale block");

// out = x times each group's scale (a power of two), for the FP8 group tiles: taking the block
// scale out of the weights' decode saves a multiply per 8 weights and activation row, and each
// product x * s * (code * 2^-120) is the canonical x * (code * s * 2^-120) exactly, so the FMAs
// give the same bits, wherever x * s is exact. Returns whether it is for every element (checked
// by scaling back: fails on overflow, on bits lost to an fp32 subnormal and on NaN).
inline bool ScaleActivations(const float* x, int64_t m, int64_t xstride, int64_t groups, const float* scales,
                             float* out) {
  __m256 inexact = _mm256_setzero_ps();
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const __m256 scale = _mm256_set1_ps(scales[g]), back = _mm256_set1_ps(1.0f / scales[g]);
      const int64_t at = r * xstride + g * kGroup;
#pragma GCC unroll 4
      for (int i = 0; i < kGroup; i += 8) {
        const __m256 v = _mm256_load_ps(x + at + i), scaled = _mm256_mul_ps(v, scale);
        inexact = _mm256_or_ps(inexact, _mm256_cmp_ps(_mm256_mul_ps(scaled, back), v, _CMP_NEQ_UQ));
        _mm256_store_ps(out + at + i, scaled);
      }
    }
  }
  return _mm256_movemask_ps(inexact) == 0;
}

template <MatrixFormat F, int MR>
void StreamRowsT(const Job& job, int64_t n_begin, int64_t n_end, Scratch& s) {
  // FP8 at M = 1 takes 2 rows: with 4, its decode's constants and 8 accumulators overflow the 16
  // registers (3 accumulators went through the stack each group), at the same speed.
  constexpr int kNR = MR == 1 ? (F == MatrixFormat::kFP8Block32 ? 2 : 4) : MR == 2 ? 2 : 1;
  static_assert(kStreamBandRows % kNR == 0 && kStreamBandRows * MR * 2 * 8 <= kGemmAccFloats);
  constexpr int64_t kGroupBytes = MatrixRowBytes(F, kGroup);
  const WeightMatrix& w = *job.w;
  const Decoder<F> dec{w.cols};
  const int64_t groups = job.groups, xstride = job.xstride;
  const bool chunked = MR >= kStreamChunkedMinM && MR * xstride * static_cast<int64_t>(sizeof(float)) > kStreamL1Bytes;
  const bool half_tiles = kHasHalfTiles<F, MR> && chunked;
  const int64_t chunk_groups = !chunked ? groups : (half_tiles ? kHalfChunkBytes : kStreamChunkBytes<F>) / kGroupBytes;
  const int64_t chunks = (groups + chunk_groups - 1) / chunk_groups;
  const int64_t chunk_bytes = chunk_groups * kGroupBytes;
  const int64_t band_rows = half_tiles                                  ? kHalfTileRows
                            : chunked && F == MatrixFormat::kFP8Block32 ? kStreamFp8ChunkedBandRows
                                                                        : kStreamBandRows;
  // Prefetch about kPrefetchBytes of the reads ahead: whole tiles ahead where the tiles run over
  // whole rows, else later chunks of the same rows, and in the last chunks the first ones of the
  // next band's rows.
  const int64_t tile_bytes = kNR * w.row_bytes();
  const int64_t ahead_tiles = std::max<int64_t>(1, (kPrefetchBytes + tile_bytes - 1) / tile_bytes);
  const int64_t ahead_chunks =
      std::max<int64_t>(1, (kPrefetchBytes + band_rows * chunk_bytes - 1) / (band_rows * chunk_bytes));
  const auto prefetch_delta = [&](int64_t c) {
    if (chunks == 1) return ahead_tiles * tile_bytes;
    return c + ahead_chunks < chunks ? ahead_chunks * chunk_bytes
                                     : band_rows * w.row_bytes() + (ahead_chunks - chunks) * chunk_bytes;
  };
  float out[MR][4];
  int64_t fp8_block = -1;    // the row block whose scales s.scaled_x holds
  bool fp8_grouped = false;  // whether that block suits the group tile
  const float* tile_x = F == MatrixFormat::kFP8Block32 ? s.scaled_x : job.xs;
  for (int64_t band = n_begin; band < n_end;) {
    const int64_t band_end = std::min(n_end, band + band_rows - band % band_rows);
    // (Dense rows may end in a partial group, which only the general decoder pads.)
    bool general = w.cols % kGroup != 0;
    if constexpr (F == MatrixFormat::kFP8Block32) {
      if (band / kQuantBlock != fp8_block) {
        fp8_block = band / kQuantBlock;
        float* scales = s.scales + kPanelN * groups;
        fp8_grouped = Fp8GroupScales(w.scales + fp8_block * w.scale_cols(), groups, scales) &&
                      ScaleActivations(job.xs, MR, xstride, groups, scales, s.scaled_x);
      }
      general = general || !fp8_grouped;
    }
    if (!general) {
      bool nan_seen = false;
      std::memset(s.acc, 0, sizeof(float) * (band_end - band) * MR * 2 * 8);
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t g0 = c * chunk_groups, g1 = std::min(groups, g0 + chunk_groups), delta = prefetch_delta(c);
        for (int64_t n = band; n < band_end;) {
          float* acc = s.acc + (n - band) * MR * 2 * 8;
          if constexpr (kHasHalfTiles<F, MR>) {
            if (half_tiles && band_end - n >= kHalfTileRows) {
              HalfGroupTile<F, kHalfTileRows, MR, 0>(w, n, tile_x, xstride, g0, g1, delta, acc);
              HalfGroupTile<F, kHalfTileRows, MR, 1>(w, n, tile_x, xstride, g0, g1, delta, acc);
              n += kHalfTileRows;
              continue;
            }
          }
          if (band_end - n >= kNR) {
            RunGroupTile<F, kNR, MR>(w, n, tile_x, xstride, g0, g1, delta, acc, nan_seen);
            n += kNR;
          } else {
            RunGroupTile<F, 1, MR>(w, n, tile_x, xstride, g0, g1, delta, acc, nan_seen);
            n += 1;
          }
        }
      }
      general = nan_seen;
      if (!general) {
        for (int64_t n = band; n < band_end; ++n) {
          const float* acc = s.acc + (n - band) * MR * 2 * 8;
          for (int r = 0; r < MR; ++r) {
            job.y[r * w.rows + n] = Finish(
                ReduceLanesOf<F>(_mm256_load_ps(acc + r * 16), _mm256_load_ps(acc + r * 16 + 8)), job.round_to_bf16);
          }
        }
      }
    }
    for (int64_t n = band; general && n < band_end;) {
      const int nr = band_end - n >= kNR ? kNR : 1;
      RowSet rs{};
      LoadRowSet<F>(w, n, nr, groups, s, rs);
      if (nr == kNR) {
        Tile<F, kNR, MR>(rs, dec, job.xs, xstride, groups, out);
      } else {
        Tile<F, 1, MR>(rs, dec, job.xs, xstride, groups, out);
      }
      for (int r = 0; r < MR; ++r) {
        for (int i = 0; i < nr; ++i) job.y[r * w.rows + n + i] = Finish(out[r][i], job.round_to_bf16);
      }
      n += nr;
    }
    band = band_end;
  }
}

// ---- panel GEMM ----------------------------------------------------------------------------

// One half (h) of MR <= 4 activation rows x the rows of panel triple t, over groups [g0, g1)
// (`half`: that triple's half h in the panel): the accumulators live in registers between `acc`
// loads and stores (the canonical running sums, so splitting K into blocks changes no bits). Per
// group at MR = 4: 6 weight and 8 activation loads, 24 FMAs. kFirst: the sums start at +0 (the
// first groups of K) instead of being loaded, so the tile store needs no clearing.
template <int MR, bool kFirst>
[[gnu::noinline]] void GemmTile(const float* half, int h, const float* x, int64_t xstride, int64_t g0, int64_t g1,
                                float* acc) {
  __m256 a[MR][kGemmTileRows];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 3
    for (int n = 0; n < kGemmTileRows; ++n)
      a[r][n] = kFirst ? _mm256_setzero_ps() : _mm256_load_ps(acc + (kGemmTileRows * r + n) * 8);
  for (int64_t g = g0; g < g1; ++g) {
    const float* w = half + g * kGemmTileRows * 16;
    const float* xg = x + g * kGroup + 8 * h;
    __m256 wv[kGemmTileRows];
#pragma GCC unroll 3
    for (int n = 0; n < kGemmTileRows; ++n) wv[n] = _mm256_load_ps(w + n * 16 + 8);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const __m256 xo = _mm256_load_ps(xg + r * xstride + 16);
#pragma GCC unroll 3
      for (int n = 0; n < kGemmTileRows; ++n) a[r][n] = _mm256_fmadd_ps(xo, wv[n], a[r][n]);
    }
#pragma GCC unroll 3
    for (int n = 0; n < kGemmTileRows; ++n) wv[n] = _mm256_load_ps(w + n * 16);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const __m256 xe = _mm256_load_ps(xg + r * xstride);
#pragma GCC unroll 3
      for (int n = 0; n < kGemmTileRows; ++n) a[r][n] = _mm256_fmadd_ps(xe, wv[n], a[r][n]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 3
    for (int n = 0; n < kGemmTileRows; ++n) _mm256_store_ps(acc + (kGemmTileRows * r + n) * 8, a[r][n]);
}

// Decodes groups [g0, g1) of weight rows [n0, n0 + nr) into the panel, triple- and half-major
// ([triple][half][g - g0][row][even 8 | odd 8]; rows past nr are zero), with the whole-group
// decoders where they apply, else (a partial dense group, FP8 scales past the group decoder's
// range, NaN codes) the general one: both give the same numbers. Half-major, a tile's pass reads
// every line of its panel whole and in order: on Zen 3 the 4 x 3 tiles ran 10-20% faster than
// over [triple][g][row][32], whose passes read half of each line (one thread, K = 5120, panels
// from L2).
template <MatrixFormat F>
void DecodePanel(const WeightMatrix& w, const Decoder<F>& dec, int64_t n0, int nr, int64_t g0, int64_t g1,
                 int64_t groups, Scratch& s) {
  constexpr int64_t kGroupBytes = MatrixRowBytes(F, kGroup);
  const int64_t chunk = g1 - g0;
  // FP8: the chunk's group scales (Fp8GroupScales) once per scale block (kQuantBlock rows) rather
  // than per row: FP8 chunked panels at M = 8-16 ran 2-8% faster on Zen 3 (kernel_ab; those rows
  // now stream, and the whole-K panels hold one chunk).
  float* block_scales = s.scales + kPanelN * groups;
  int64_t scaled_block = -1;
  bool block_in_range = false;
  for (int i = 0; i < kGemmPanelRows; ++i) {
    float* first_lo = PanelHalf(s.panel, chunk, i / kGemmTileRows, 0) + i % kGemmTileRows * 16;
    float* first_hi = PanelHalf(s.panel, chunk, i / kGemmTileRows, 1) + i % kGemmTileRows * 16;
    const auto store = [&](int64_t g, __m256 even_lo, __m256 odd_lo, __m256 even_hi, __m256 odd_hi) {
      float* lo = first_lo + (g - g0) * kGemmTileRows * 16;
      float* hi = first_hi + (g - g0) * kGemmTileRows * 16;
      _mm256_store_ps(lo, even_lo);
      _mm256_store_ps(lo + 8, odd_lo);
      _mm256_store_ps(hi, even_hi);
      _mm256_store_ps(hi + 8, odd_hi);
    };
    if (i >= nr) {
      const __m256 zero = _mm256_setzero_ps();
      for (int64_t g = g0; g < g1; ++g) store(g, zero, zero, zero, zero);
      continue;
    }
    const int64_t row = n0 + i;
    const uint8_t* data = w.data + row * w.row_bytes();
    bool general = w.cols % kGroup != 0;
    if constexpr (F == MatrixFormat::kFP8Block32) {
      if (row / kQuantBlock != scaled_block) {
        scaled_block = row / kQuantBlock;
        block_in_range = Fp8GroupScales(w.scales + scaled_block * w.scale_cols() + g0, chunk, block_scales);
      }
      general |= !block_in_range;
      if (!general) {
        __m256i nan = _mm256_setzero_si256();
        const auto decode = [&](auto nan_check) {
          for (int64_t g = g0; g < g1; ++g) {
            __m256 even_lo, odd_lo, even_hi, odd_hi;
            DecodeFp8Group<decltype(nan_check)::value>(data + g * kGroupBytes,
                                                       _mm256_broadcast_ss(block_scales + g - g0), even_lo, odd_lo,
                                                       even_hi, odd_hi, nan);
            store(g, even_lo, odd_lo, even_hi, odd_hi);
          }
        };
        if (w.fp8_nan_free) {
          decode(std::false_type{});
        } else {
          decode(std::true_type{});
          general = Fp8NanSeen(nan);
        }
      }
    } else if (!general) {
      for (int64_t g = g0; g < g1; ++g) {
        __m256 even_lo, odd_lo, even_hi, odd_hi;
        if constexpr (F == MatrixFormat::kFP4Row32) {
          DecodeFp4Group(data + g * kGroupBytes, w.scales[row * w.scale_cols() + g], even_lo, odd_lo, even_hi, odd_hi);
        } else if constexpr (F == MatrixFormat::kBF16) {
          DecodeBf16Group(data + g * kGroupBytes, even_lo, odd_lo, even_hi, odd_hi);
        } else {
          DecodeF32Group(data + g * kGroupBytes, even_lo, odd_lo, even_hi, odd_hi);
        }
        store(g, even_lo, odd_lo, even_hi, odd_hi);
      }
    }
    if (general) {
      RowSet rs{};
      LoadRowSet<F>(w, row, 1, groups, s, rs);
      for (int64_t g = g0; g < g1; ++g) {
        __m256 even_lo, odd_lo, even_hi, odd_hi;
        dec.Load(rs, 0, g, 0, even_lo, odd_lo);
        dec.Load(rs, 0, g, 1, even_hi, odd_hi);
        store(g, even_lo, odd_lo, even_hi, odd_hi);
      }
    }
  }
}

// The most prefetches the panel loop issues back to back: a longer burst waits on the fill
// buffers. Zen 3, kernel_ab, 2 threads, chunked panels at M = 8-16: BF16 (48 lines a quad) spread
// over row triples took 0.88 of the time; FP8 (24 lines) ran even and FP4 (12) 0-2% slower spread.
constexpr int64_t kPrefetchBurstLines = 24;

// Walks the weight lines a thread's panel loop decodes, in its order (panel, chunk, row), ahead of
// the decoder, prefetching them into L2. The decoder reads a panel's lines in a burst between
// long GEMM phases, which the hardware prefetchers do not run ahead of: without this the decode
// waited on DRAM line by line (Zen 3, 2 threads: its weight loads held ~10% of a 512-token
// prefill's profile samples, and FP4 GEMMs at M = 8-16 ran 16% slower).
class PanelPrefetch {
 public:
  PanelPrefetch(const WeightMatrix& w, int64_t n_begin, int64_t n_end, int64_t chunk_bytes)
      : w_(w), n0_(n_begin), n_end_(n_end), chunk_bytes_(chunk_bytes) {}
  // Prefetches the next `lines` lines (none past the thread's last panel).
  void Advance(int64_t lines) {
    const int64_t row_bytes = w_.row_bytes();
    for (; lines > 0 && n0_ < n_end_; --lines) {
      const int64_t begin = chunk_ * chunk_bytes_, end = std::min(row_bytes, begin + chunk_bytes_);
      _mm_prefetch(reinterpret_cast<const char*>(w_.data + (n0_ + row_) * row_bytes + begin + offset_), _MM_HINT_T1);
      if ((offset_ += 64) < end - begin) continue;
      offset_ = 0;
      if (++row_ < std::min<int64_t>(kGemmPanelRows, n_end_ - n0_)) continue;
      row_ = 0;
      if (++chunk_ * chunk_bytes_ < row_bytes) continue;
      chunk_ = 0;
      n0_ += kGemmPanelRows;
    }
  }

 private:
  const WeightMatrix& w_;
  int64_t n0_, n_end_, chunk_bytes_;
  int64_t chunk_ = 0, offset_ = 0;
  int row_ = 0;
};

// `total` in `steps` near-equal parts, one per Next(), without a division per step.
class EvenSplit {
 public:
  EvenSplit(int64_t total, int64_t steps) : steps_(steps), part_(total / steps), extra_(total % steps) {}
  int64_t Next() {
    if ((carry_ += extra_) < steps_) return part_;
    carry_ -= steps_;
    return part_ + 1;
  }

 private:
  int64_t steps_, part_, extra_, carry_ = 0;
};

// Panels of kGemmPanelRows weight rows. With few activation quads (decode batches above a
// format's StreamPassesMaxM: FP4 13-16 rows, BF16 / F32 11-16; FP8 streams up to 16) a panel
// holds kGemmChunkGroups groups at a time, decoded into L1 and used by every quad before the next
// chunk, the accumulators of all quads waiting in the tile store: the weights stream from DRAM
// once and are decoded once. With more quads (prefill) a panel holds the whole K (L2) and each
// quad runs over it in blocks of kGemmKGroups, its activations' block in L1.
template <MatrixFormat F>
void PanelRowsT(const Job& job, int64_t n_begin, int64_t n_end, Scratch& s) {
  const WeightMatrix& w = *job.w;
  const int64_t groups = job.groups, xstride = job.xstride;
  const Decoder<F> dec{w.cols};
  static_assert(kPanelM == 4, "a GEMM tile takes up to 4 activation rows");
  const int64_t quads = (job.m + kPanelM - 1) / kPanelM;  // the last one may hold fewer rows
  const bool chunked = quads <= kGemmChunkedMaxQuads;
  const int64_t chunk = chunked ? kGemmChunkGroups : groups;
  const auto acc_of = [&](int64_t q, int t, int h) {
    return s.acc + ((chunked ? q : 0) * kGemmAccVectors + (t * 2 + h) * kGemmTileVectors) * 8;
  };
  constexpr int64_t kGroupBytes = MatrixRowBytes(F, kGroup);
  PanelPrefetch prefetch(w, n_begin, n_end, chunk * kGroupBytes);
  prefetch.Advance(kPrefetchBytes / 64);
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kGemmPanelRows) {
    const int nr = static_cast<int>(std::min<int64_t>(kGemmPanelRows, n_end - n0));
    const int triples = (nr + kGemmTileRows - 1) / kGemmTileRows;
    const auto finish = [&](int64_t q) {
      if (nr == kGemmPanelRows) {  // each row's 12 outputs as 8 + 4 (the 4 twice over)
        static_assert(kGemmPanelRows == 12);
        for (int64_t r = 4 * q; r < std::min(4 * q + 4, job.m); ++r) {
          const int row = static_cast<int>(r - 4 * q);
          const auto half = [&](int c, int h) {
            return acc_of(q, c / kGemmTileRows, h) + (row * kGemmTileRows + c % kGemmTileRows) * 8;
          };
          const float* const lo8[8] = {half(0, 0), half(1, 0), half(2, 0), half(3, 0),
                                       half(4, 0), half(5, 0), half(6, 0), half(7, 0)};
          const float* const hi8[8] = {half(0, 1), half(1, 1), half(2, 1), half(3, 1),
                                       half(4, 1), half(5, 1), half(6, 1), half(7, 1)};
          const float* const lo4[8] = {half(8, 0), half(9, 0), half(10, 0), half(11, 0),
                                       half(8, 0), half(9, 0), half(10, 0), half(11, 0)};
          const float* const hi4[8] = {half(8, 1), half(9, 1), half(10, 1), half(11, 1),
                                       half(8, 1), half(9, 1), half(10, 1), half(11, 1)};
          float* y = job.y + r * w.rows + n0;
          _mm256_storeu_ps(y, ReduceFinishEight<F>(lo8, hi8, job.round_to_bf16));
          _mm_storeu_ps(y + 8, _mm256_castps256_ps128(ReduceFinishEight<F>(lo4, hi4, job.round_to_bf16)));
        }
        return;
      }
      for (int t = 0; t < triples; ++t) {
        const float* lo = acc_of(q, t, 0);
        const float* hi = acc_of(q, t, 1);
        for (int64_t r = 4 * q; r < std::min(4 * q + 4, job.m); ++r) {
          for (int j = 0; j < kGemmTileRows && t * kGemmTileRows + j < nr; ++j) {
            const int v = (static_cast<int>(r - 4 * q) * kGemmTileRows + j) * 8;
            job.y[r * w.rows + n0 + t * kGemmTileRows + j] =
                Finish(ReduceLanesOf<F>(_mm256_load_ps(lo + v), _mm256_load_ps(hi + v)), job.round_to_bf16);
          }
        }
      }
    };
    for (int64_t c0 = 0; c0 < groups; c0 += chunk) {
      const int64_t c1 = std::min(groups, c0 + chunk);
      DecodePanel<F>(w, dec, n0, nr, c0, c1, groups, s);
      // Keep the prefetches kPrefetchBytes ahead: the lines just decoded, spread over the quads, or
      // over each quad's row triples where a quad's share would exceed kPrefetchBurstLines.
      const int64_t decoded_lines = nr * (((c1 - c0) * kGroupBytes + 63) / 64);
      const bool per_triple = chunked && decoded_lines > quads * kPrefetchBurstLines;
      EvenSplit prefetch_lines(decoded_lines, per_triple ? quads * triples : quads);
      for (int64_t q = 0; q < quads; ++q) {
        const float* x = job.xs + 4 * q * xstride + c0 * kGroup;
        const int64_t rows = std::min<int64_t>(4, job.m - 4 * q);
        if (!per_triple) prefetch.Advance(prefetch_lines.Next());
        for (int64_t g0 = 0; g0 < c1 - c0; g0 += kGemmKGroups) {
          const int64_t g1 = std::min(c1 - c0, g0 + kGemmKGroups);
          for (int t = 0; t < triples; ++t) {
            if (per_triple) prefetch.Advance(prefetch_lines.Next());
            // The last quad may hold fewer rows: a 1-3 row tile.
            WithCount<1, kPanelM>(rows, "AVX2 GEMM tile rows", [&]<int MR>() {
              const auto tile = c0 + g0 == 0 ? GemmTile<MR, true> : GemmTile<MR, false>;
              for (int h = 0; h < 2; ++h)
                tile(PanelHalf(s.panel, c1 - c0, t, h), h, x, xstride, g0, g1, acc_of(q, t, h));
            });
          }
        }
        if (!chunked) finish(q);
      }
    }
    if (chunked) {
      for (int64_t q = 0; q < quads; ++q) finish(q);
    }
  }
}

// Up to 6 activation rows stream the weights (12 accumulator chains at NR = 1: the speculative
// verify step is 6 tokens). Measured on Zen 4 (AVX2 code, 2 threads, weights from DRAM): at M = 5-6
// streaming is 5-10% faster than the panels.
constexpr int64_t kAvx2StreamMaxM = 6;
// Up to StreamPassesMaxM rows stream in passes of at most kAvx2StreamMaxM rows, all passes over
// one band of kStreamPassBandRows weight rows before the next (the later passes find the band in
// L2 / L3); more run the chunked panels. Passes against panels on Zen 3 (kernel_ab, 2 threads,
// weights from DRAM, B / A medians): FP8 5120 x 8192 at M = 7 / 8 / 10 / 12 / 16 0.77 / 0.73 /
// 0.69 / 0.95 / 0.96, 32768 x 1280 at M = 8 / 16 0.74 / 0.89, 1024 x 4096 at M = 8 0.71; FP4
// 2304 x 5120 at M = 8 / 10 / 12 / 16 0.86 / 0.84 / 0.99 / 1.00, 5120 x 2304 at M = 8 0.81; BF16
// 16384 x 5120 at M = 8 / 10 / 12 / 16 0.86 / 0.97 / 1.06 / 1.11, the head at M = 8 / 16 0.87 / 1.15.
constexpr int64_t StreamPassesMaxM(MatrixFormat f) {
  switch (f) {
    case MatrixFormat::kFP8Block32:
      return 16;
    case MatrixFormat::kFP4Row32:
      return 12;
    case MatrixFormat::kBF16:
    case MatrixFormat::kF32:
      return 10;
  }
  return kAvx2StreamMaxM;
}
constexpr int64_t kStreamPassBandRows = 128;  // an FP8 scale block: ScaleActivations once a pass

template <MatrixFormat F>
void Stream(const Job& job, int64_t b, int64_t e, Scratch& s) {
  const auto stream = [&](const Job& pass, int64_t band, int64_t band_end) {
    WithCount<1, kAvx2StreamMaxM>(pass.m, "AVX2 streaming tile rows",
                                  [&]<int MR>() { StreamRowsT<F, MR>(pass, band, band_end, s); });
  };
  if (job.m <= kAvx2StreamMaxM) return stream(job, b, e);
  const int64_t passes = (job.m + kAvx2StreamMaxM - 1) / kAvx2StreamMaxM;
  for (int64_t band = b; band < e;) {
    const int64_t band_end = std::min(e, (band / kStreamPassBandRows + 1) * kStreamPassBandRows);
    int64_t r0 = 0;
    for (int64_t p = 0; p < passes; ++p) {
      Job pass = job;
      pass.m = (job.m - r0) / (passes - p);  // as even as they go: 7 = 3 + 4, 13 = 4 + 4 + 5
      pass.xs = job.xs + r0 * job.xstride;
      pass.y = job.y + r0 * job.w->rows;
      stream(pass, band, band_end);
      r0 += pass.m;
    }
    band = band_end;
  }
}

struct Avx2 {
  // Activation rows K x 4 bytes apart (a multiple of 4 KB at K = 1024, 2048, 4096, 5120, ...) map
  // a group of every row to the same L1 sets; a line of padding spreads them: 4 x 3 GEMM tiles at
  // M = 256 K = 5120 run at the speed of K = 5088 (57-63 -> 62-72 GFLOP/s, one thread hot).
  static constexpr int64_t kActivationRowPad = 16;
  static constexpr int64_t StreamMaxM(const WeightMatrix& w, Bf16Dot) { return StreamPassesMaxM(w.format); }
  static ExpRange PrepareQuantizedRow(const float* x, int64_t k, MatrixFormat f, float* xs, uint32_t*) {
    return PrepareQuantized(f, x, k, xs);
  }
  static void PrepareDenseRow(const float* x, int64_t k, MatrixFormat f, float* xs) { PrepareDense(f, x, k, xs); }
  static ExpRange ScaleRange(const uint8_t* s, int64_t count) {
    __m128i lo = _mm_set1_epi8(-1), hi = _mm_setzero_si128();
    int64_t i = 0;
    for (; i + 16 <= count; i += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      lo = _mm_min_epu8(lo, v), hi = _mm_max_epu8(hi, v);
    }
    int mn = HorizontalU8(lo, false), mx = HorizontalU8(hi, true);
    for (; i < count; ++i) mn = std::min<int>(mn, s[i]), mx = std::max<int>(mx, s[i]);
    return {mn - 127, mx - 127};
  }
  static size_t ScratchBytes(MatrixFormat f, int64_t groups, int64_t m) {
    const bool scaled = f == MatrixFormat::kFP8Block32 && m <= StreamPassesMaxM(f);
    return Scratch::Bytes(groups, scaled ? std::min(m, kAvx2StreamMaxM) : 0,
                          linear_simd::Driver<Avx2>::FloatsStride(groups));
  }
  static bool UsesPairs(MatrixFormat, int64_t, Bf16Dot) { return false; }  // no vdpbf16ps
  static void StreamRows(const Job& job, int64_t b, int64_t e, unsigned char* scratch) {
    Scratch s(scratch, job.groups);
    switch (job.w->format) {
      case MatrixFormat::kFP4Row32:
        return Stream<MatrixFormat::kFP4Row32>(job, b, e, s);
      case MatrixFormat::kFP8Block32:
        return Stream<MatrixFormat::kFP8Block32>(job, b, e, s);
      case MatrixFormat::kBF16:
        return Stream<MatrixFormat::kBF16>(job, b, e, s);
      case MatrixFormat::kF32:
        return Stream<MatrixFormat::kF32>(job, b, e, s);
    }
  }
  static void PanelRows(const Job& job, int64_t b, int64_t e, unsigned char* scratch) {
    Scratch s(scratch, job.groups);
    switch (job.w->format) {
      case MatrixFormat::kFP4Row32:
        return PanelRowsT<MatrixFormat::kFP4Row32>(job, b, e, s);
      case MatrixFormat::kFP8Block32:
        return PanelRowsT<MatrixFormat::kFP8Block32>(job, b, e, s);
      case MatrixFormat::kBF16:
        return PanelRowsT<MatrixFormat::kBF16>(job, b, e, s);
      case MatrixFormat::kF32:
        return PanelRowsT<MatrixFormat::kF32>(job, b, e, s);
    }
  }
};

}  // namespace

void QuantizedLinearAvx2(const WeightMatrix& w, const float* x, int64_t m, float* y, ThreadPool& pool,
                         ThreadScratch* scratch) {
  linear_simd::Driver<Avx2>::Quantized(w, x, m, y, pool, Bf16Dot::kNone, scratch);
}

void DenseLinearAvx2(const WeightMatrix& w, const float* x, int64_t m, float* y, bool round_to_bf16, ThreadPool& pool,
                     ThreadScratch* scratch) {
  linear_simd::Driver<Avx2>::Dense(w, x, m, y, round_to_bf16, pool, Bf16Dot::kNone, scratch);
}

}  // namespace deepinfer
