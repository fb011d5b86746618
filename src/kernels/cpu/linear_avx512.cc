// AVX-512 (F/BW/VL/DQ, optionally BF16) kernels for QuantizedLinear and DenseLinear. The numeric
// contract (canonical pair order, accumulation, reduction tree, scale folding) is documented in
// linear_simd.h; every function here computes exactly that sequence.
//
// Two loop structures, chosen by M and the matrix (Job::stream_max_m; the results are the same
// bits either way):
//   * M <= 16 (FP8 in place: 8), "streaming" (GEMV): tiles of 16/8/4/3/2 weight rows x up to 8 activation rows; each
//     weight group is decoded once, in registers, and used for all the tile's rows (M > 8: two
//     passes over L2-sized blocks of weight rows). The weights are read from DRAM once per call,
//     with software prefetch ahead of every tile row.
//   * larger M, "panel GEMM": per K chunk, 4 weight rows are decoded to fp32 [group][row][even | odd]
//     (or bf16 pairs) in L1 and reused by every activation row of the block through 4x4 register
//     tiles of FMAs (M % 4 leftover rows: a 1-3 row tile, no padding work); with several activation
//     blocks the first decodes a run of panels into scratch and the later ones read it back.
// DenseLinear also takes FP8 weights (wo_a): they decode to exactly their bf16 dequantization.
// Instruction choice (Bf16Dot, cpu_context.h; the bits are the same either way):
//   * Intel Xeon (kFp8Gemv): vdpbf16ps does the work of two FMAs but runs at one per ~2 cycles
//     and keeps both vector ports busy meanwhile, so it only pays where it saves decode work: FP8
//     GEMV (bf16 words come straight out of the e4m3 decode). FP4 decodes directly to fp32 pair
//     halves and uses FMAs; the GEMM and dense paths use FMAs (2 per cycle).
//   * AMD Zen 4 (kQuantized): vdpbf16ps runs at twice the FMA rate, so FP8 and FP4 GEMV tiles and
//     the FP8/FP4 GEMM panels all use it; FP4 decodes to bf16 with one word shift and one vpermw
//     per group. Measured (linear_bench, 2 threads): FP4 expert GEMV 336 -> 265 us, FP8 wo_b 1.92
//     -> 1.64 ms, GEMM at M = 512 70% (FP4) and 63% (FP8) of the vdpbf16ps peak.
//   Dense weights use FMAs, except BF16 and FP8 ones on the Zen 4 plan where a call proves
//   vdpbf16ps exact (bf16-exact activations and safe exponent ranges, linear_simd.h).
// GCC 12's _mm512_undefined_*() self-initialise and trip -Wuninitialized once inlined at -O3
// (GCC bug 105593, fixed in 13); the diagnostics point into the intrinsic headers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <type_traits>
#include <variant>

#include "kernels/cpu/compile_time_count.h"
#include "kernels/cpu/linear_simd.h"

namespace deepinfer {
namespace {

using linear_simd::ExpRange;
using linear_simd::Job;
using linear_simd::kGroup;
using linear_simd::PairK;

struct Avx512;
float Finish(float sum, bool round) { return linear_simd::Finish<Avx512>(sum, round); }

constexpr int kMaxTileN = 16;  // weight rows per streaming tile (M = 1)

// Whether this CPU has AVX512-VBMI, which the FP8 decode of the interleaved copy needs; read once.
bool Avx512Vbmi() {
  static const bool has = CpuHasAvx512Vbmi();
  return has;
}

// Whether these kernels can read `w`'s interleaved copy: it has one, and FP8's needs VBMI.
bool CopyReadable(const WeightMatrix& w) {
  return w.interleaved && (w.format != MatrixFormat::kFP8Block32 || Avx512Vbmi());
}

// ---- small vector helpers ------------------------------------------------------------------

// The fixed reduction tree: (i, i+8), (i, i+4), (i, i+2), (i, i+1).
inline float ReduceLanes(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

// Index vectors selecting the even / odd members of the 16 pairs from two natural-order vectors.
template <MatrixFormat F, bool kOdd>
__m512i PairIndex() {
  alignas(64) int32_t idx[16];
  for (int i = 0; i < 16; ++i) idx[i] = PairK(F, i, kOdd);
  return _mm512_load_si512(idx);
}

// bf16 words (pairs in dwords) -> fp32 of the even / odd members.
inline __m512 EvenOf(__m512i words) { return _mm512_castsi512_ps(_mm512_slli_epi32(words, 16)); }
inline __m512 OddOf(__m512i words) {
  return _mm512_castsi512_ps(_mm512_and_si512(words, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline __m512i PackPairs(__m512 even, __m512 odd) {
  return _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(even), 16),
                         _mm512_and_si512(_mm512_castps_si512(odd), _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// ---- activation preparation ---------------------------------------------------------------

// FloatToE4M3 followed by E4M3ToFloat, bit for bit, on t = clamp(x / scale, -448, 448).
inline __m512 RoundE4M3(__m512 t) {
  const __m512 mag = _mm512_min_ps(_mm512_abs_ps(t), _mm512_set1_ps(448.0f));
  // Below 2^-6 the grid is 2^-9: nearbyint(mag * 512) / 512 (RNE, exact scalings).
  const __m512 tiny = _mm512_mul_ps(
      _mm512_roundscale_ps(_mm512_mul_ps(mag, _mm512_set1_ps(512.0f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
      _mm512_set1_ps(1.0f / 512.0f));
  // Otherwise round the fp32 mantissa to 3 bits, to nearest even, on the bit pattern.
  __m512i bits = _mm512_castps_si512(mag);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 20), _mm512_set1_epi32(1));
  bits = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7ffff)));
  bits = _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int>(0xfff00000u)));
  const __mmask16 is_tiny = _mm512_cmp_ps_mask(mag, _mm512_set1_ps(0.015625f), _CMP_LT_OQ);
  __m512 q = _mm512_mask_blend_ps(is_tiny, _mm512_castsi512_ps(bits), tiny);
  q = _mm512_or_ps(q, _mm512_and_ps(t, _mm512_set1_ps(-0.0f)));
  return _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q), t);
}

// PowerOfTwoScaleCeil(max(amax, 1e-4), 1/448), as in QuantizeFP8PowerOfTwo.
inline float ActScale(float amax) {
  const float clamped = amax < 1e-4f ? 1e-4f : amax;
  const uint32_t bits = std::bit_cast<uint32_t>(clamped * (1.0f / 448.0f));
  const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xff);
  const int32_t log2_ceil = exponent - 127 + ((bits & 0x7fffffu) != 0 ? 1 : 0);
  return std::bit_cast<float>(static_cast<uint32_t>(log2_ceil + 127) << 23);
}

template <MatrixFormat F>
ExpRange PrepareQuantized(const float* x, int64_t k, float* xs, uint32_t* xb) {
  const __m512i even_idx = PairIndex<F, false>(), odd_idx = PairIndex<F, true>();
  ExpRange range{1 << 20, -(1 << 20)};
  for (int64_t g = 0; g < k / kGroup; ++g) {
    const __m512 v0 = _mm512_loadu_ps(x + g * kGroup), v1 = _mm512_loadu_ps(x + g * kGroup + 16);
    // max_ps returns its second operand when the first is NaN: NaNs are skipped like std::max does.
    const __m512 amax = _mm512_max_ps(_mm512_abs_ps(v1), _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps()));
    const float scale = ActScale(_mm512_reduce_max_ps(amax));
    const int e = static_cast<int>(std::bit_cast<uint32_t>(scale) >> 23) - 127;
    range = {std::min(range.lo, e), std::max(range.hi, e)};
    const __m512 s = _mm512_set1_ps(scale), lo = _mm512_set1_ps(-448.0f), hi = _mm512_set1_ps(448.0f);
    // clamp = min(hi, max(lo, t)) keeps NaN (second operand) like std::clamp.
    const __m512 q0 = RoundE4M3(_mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_div_ps(v0, s))));
    const __m512 q1 = RoundE4M3(_mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_div_ps(v1, s))));
    const __m512 x0 = _mm512_mul_ps(q0, s), x1 = _mm512_mul_ps(q1, s);
    const __m512 even = _mm512_permutex2var_ps(x0, even_idx, x1), odd = _mm512_permutex2var_ps(x0, odd_idx, x1);
    if (xs != nullptr) {
      _mm512_store_ps(xs + g * kGroup, even);
      _mm512_store_ps(xs + g * kGroup + 16, odd);
    } else {
      _mm512_store_si512(xb + g * 16, PackPairs(even, odd));
    }
  }
  return range;
}

template <MatrixFormat F>
void PrepareDense(const float* x, int64_t k, float* xs) {
  const __m512i even_idx = PairIndex<F, false>(), odd_idx = PairIndex<F, true>();
  for (int64_t g = 0; g * kGroup < k; ++g) {
    const int64_t left = k - g * kGroup;  // zero padding past K contributes exact +0 products
    const __mmask16 m0 = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
    const __mmask16 m1 = left >= 32 ? 0xffff : left <= 16 ? 0 : static_cast<__mmask16>((1u << (left - 16)) - 1);
    const __m512 v0 = _mm512_maskz_loadu_ps(m0, x + g * kGroup), v1 = _mm512_maskz_loadu_ps(m1, x + g * kGroup + 16);
    _mm512_store_ps(xs + g * kGroup, _mm512_permutex2var_ps(v0, even_idx, v1));
    _mm512_store_ps(xs + g * kGroup + 16, _mm512_permutex2var_ps(v0, odd_idx, v1));
  }
}

// Dense activations as bf16 pairs (memory order, the BF16 / FP8 pair order), K % 32 == 0: the
// high word of each float, and what the row holds (linear_simd::DenseRow): a row with a float
// that is not bf16-exact, or is subnormal, infinite or NaN, cannot run on vdpbf16ps.
linear_simd::DenseRow PrepareDensePairs(const float* x, int64_t k, uint32_t* xb) {
  alignas(64) uint16_t high_words[32];
  for (int j = 0; j < 32; ++j) high_words[j] = static_cast<uint16_t>(2 * j + 1);
  const __m512i high = _mm512_load_si512(high_words);
  const __m512i low_bits = _mm512_set1_epi32(0xffff), magnitude = _mm512_set1_epi32(0x7fffffff);
  __m512i lo = _mm512_set1_epi32(255), hi = _mm512_setzero_si512();
  __mmask16 inexact = 0;
  for (int64_t g = 0; g < k / kGroup; ++g) {
    const __m512i v0 = _mm512_loadu_si512(x + g * kGroup), v1 = _mm512_loadu_si512(x + g * kGroup + 16);
    inexact |= _mm512_test_epi32_mask(v0, low_bits) | _mm512_test_epi32_mask(v1, low_bits);
    for (const __m512i v : {v0, v1}) {
      const __mmask16 nonzero = _mm512_test_epi32_mask(v, magnitude);
      const __m512i exponent = _mm512_and_si512(_mm512_srli_epi32(v, 23), _mm512_set1_epi32(0xff));
      lo = _mm512_mask_min_epu32(lo, nonzero, lo, exponent);
      hi = _mm512_mask_max_epu32(hi, nonzero, hi, exponent);
    }
    _mm512_store_si512(xb + g * 16, _mm512_permutex2var_epi16(v0, high, v1));
  }
  const int lo_biased = static_cast<int>(_mm512_reduce_min_epu32(lo));
  const int hi_biased = static_cast<int>(_mm512_reduce_max_epu32(hi));
  linear_simd::DenseRow row;
  if (lo_biased == 255) return row;  // all zeros (a subnormal is nonzero with exponent 0)
  row.pairs_ok = inexact == 0 && lo_biased > 0 && hi_biased < 255;
  row.exponents = {lo_biased - 127, hi_biased - 127};
  return row;
}

// ---- weight decoding: one group (32 weights) of one row ----------------------------------------

constexpr uint16_t Bf16Bits(float v) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16); }

// e4m3 * 2^(s-127) -> bf16 (exact when FoldIsExact holds), s the block's ue8m0 byte: normal codes
// are (mag << 4) + ((120 + s - 127) << 7) - the scale is just part of the exponent bias - and the
// subnormal codes (and zero) come from a per-scale 8-entry table. Both constants are loads from
// kFp8Consts, so folding the weight scale costs no instruction. NaN codes stay NaN.
struct Fp8ConstSet {
  alignas(64) uint16_t subnormal[256][32];
  uint32_t bias[256];  // the exponent bias word, twice per dword
};
constexpr Fp8ConstSet MakeFp8Consts() {
  Fp8ConstSet set{};
  for (int scale = 0; scale < 256; ++scale) {
    const int delta = (scale - 127) << 7;
    for (int m = 1; m < 8; ++m)
      set.subnormal[scale][m] = static_cast<uint16_t>((Bf16Bits(static_cast<float>(m) * 0x1p-9f) + delta) & 0xffff);
    const uint32_t bias = static_cast<uint32_t>((0x3c00 + delta) & 0xffff);
    set.bias[scale] = bias | bias << 16;
  }
  return set;
}
constexpr Fp8ConstSet kFp8Consts = MakeFp8Consts();

inline __m512i DecodeE4M3Bytes(__m256i bytes, uint8_t scale) {
  const __m512i b = _mm512_cvtepu8_epi16(bytes);
  const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi16(0x7f));
  __m512i bits =
      _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi32(static_cast<int>(kFp8Consts.bias[scale])));
  bits = _mm512_mask_permutexvar_epi16(bits, _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8)), mag,
                                       _mm512_load_si512(kFp8Consts.subnormal[scale]));
  bits = _mm512_mask_mov_epi16(bits, _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7f)),
                               _mm512_set1_epi16(0x7fc0));  // NaN codes
  // bits | (b << 8 & 0x8000): the sign.
  return _mm512_ternarylogic_epi32(bits, _mm512_slli_epi16(b, 8), _mm512_set1_epi16(static_cast<int16_t>(0x8000)),
                                   0xf8);
}
inline __m512i DecodeE4M3(const uint8_t* p, uint8_t scale) {
  return DecodeE4M3Bytes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), scale);
}

// The same decode as two byte lookups, for the interleaved copy, whose FP8 blocks hold row pairs
// with their 8-byte runs alternating (InterleavedTiles): kFp8Bf16Bytes[s] holds the high and low
// byte of DecodeE4M3's word for each of the 128 magnitudes at scale byte s (normal, subnormal and
// NaN alike), two registers each, and one 64-byte load of a pair decodes as two vpermt2b (7 index
// bits: the magnitude; the sign bit is ignored), the sign into the high bytes and two byte unpacks,
// which put the pair's runs back in order. DecodeE4M3Bytes takes 10 operations per row and group,
// a word table 6 (two vpermt2w, a mask test and a blend on the shuffle ports that vdpbf16ps also
// needs); this takes 2.5, and the unpacks and logic run beside vdpbf16ps. Measured on Zen 4, one
// core, a 16-row tile hot in L2, M = 1: 2.3 cycles per row and group, against 4.4 with the word
// table. The tables need the scale shared by the rows they decode: the 16 rows of an interleaved
// tile (64 KiB of tables; the few scale bytes a matrix uses stay hot). vpermt2b is AVX512-VBMI
// (Zen 4, Intel since Ice Lake); without it the kernels read FP8 in place (Avx512Vbmi()).
struct Fp8Bf16ByteTableSet {
  alignas(64) uint8_t high[256][128];
  alignas(64) uint8_t low[256][128];
};
constexpr Fp8Bf16ByteTableSet MakeFp8Bf16ByteTables() {
  Fp8Bf16ByteTableSet set{};
  for (int scale = 0; scale < 256; ++scale) {
    const uint16_t bias = static_cast<uint16_t>(kFp8Consts.bias[scale] & 0xffff);
    for (int mag = 0; mag < 128; ++mag) {
      const uint16_t word = mag == 0x7f ? uint16_t{0x7fc0}
                            : mag < 8   ? kFp8Consts.subnormal[scale][mag]
                                        : static_cast<uint16_t>((mag << 4) + bias);
      set.high[scale][mag] = static_cast<uint8_t>(word >> 8);
      set.low[scale][mag] = static_cast<uint8_t>(word & 0xff);
    }
  }
  return set;
}
constexpr Fp8Bf16ByteTableSet kFp8Bf16Bytes = MakeFp8Bf16ByteTables();

struct Fp8PairTable {
  explicit Fp8PairTable(uint8_t scale)
      : high0(_mm512_load_si512(kFp8Bf16Bytes.high[scale])),
        high1(_mm512_load_si512(kFp8Bf16Bytes.high[scale] + 64)),
        low0(_mm512_load_si512(kFp8Bf16Bytes.low[scale])),
        low1(_mm512_load_si512(kFp8Bf16Bytes.low[scale] + 64)) {}
  __m512i high0, high1, low0, low1;  // magnitudes 0-63, 64-127
};

// vpermt2b through the assembler: this file is compiled without -mavx512vbmi (a compiler free to
// use VBMI anywhere in it would break AVX-512 CPUs without it), and only runs this where the CPU
// has VBMI. Returns the bytes of `table0:table1` (128 entries) that bits 0-6 of `index`'s bytes pick.
inline __m512i PermuteBytes128(__m512i table0, __m512i index, __m512i table1) {
  __asm__("vpermt2b %2, %1, %0" : "+v"(table0) : "v"(index), "v"(table1));
  return table0;
}

// Rows 2p and 2p + 1 of one group of an interleaved FP8 block (their pair starts at `p`).
inline void DecodeE4M3Pair(const uint8_t* p, const Fp8PairTable& table, __m512i& first, __m512i& second) {
  const __m512i codes = _mm512_loadu_si512(p);
  const __m512i high = _mm512_ternarylogic_epi32(PermuteBytes128(table.high0, codes, table.high1), codes,
                                                 _mm512_set1_epi8(static_cast<char>(0x80)), 0xf8);  // | sign
  const __m512i low = PermuteBytes128(table.low0, codes, table.low1);
  first = _mm512_unpacklo_epi8(low, high);
  second = _mm512_unpackhi_epi8(low, high);
}

// e2m1 * 2^(s-127) -> fp32, even and odd pair members directly: the 16 bytes are broadcast to the
// four 128-bit lanes, a per-lane shift brings nibble 8 * (i % 4) + i / 4 (even) or that + 4 (odd)
// to the bottom of dword i - the FP4 pair order of linear_simd.h - and vpermps looks it up in
// kFp4Tables[s], the 16 e2m1 values with the scale already applied (16 KiB; only the few scale
// bytes a matrix uses stay hot). Measured: 2 shifts + 2 vpermps + 2 FMAs per 32 weights run at
// ~3.0 cycles, bf16 decode + vdpbf16ps at ~3.5 (vdpbf16ps keeps both vector ports busy ~2 cycles
// on this Xeon). Bytes 0 and 255 give garbage here; FoldIsExact sends those elements to the oracle.
struct Fp4TableSet {
  alignas(64) float t[256][16];
};
constexpr Fp4TableSet MakeFp4Tables() {
  constexpr uint32_t kValues[8] = {0,           0x3f000000u, 0x3f800000u, 0x3fc00000u,
                                   0x40000000u, 0x40400000u, 0x40800000u, 0x40c00000u};
  Fp4TableSet set{};
  for (int scale = 0; scale < 256; ++scale) {
    for (int code = 0; code < 16; ++code) {
      const uint32_t magnitude = kValues[code & 7];
      // Adding (s - 127) << 23 to a normal fp32's bits multiplies it by 2^(s-127).
      const uint32_t scaled = magnitude == 0 ? 0 : magnitude + (static_cast<uint32_t>(scale - 127) << 23);
      set.t[scale][code] = std::bit_cast<float>(scaled | ((code & 8) ? 0x80000000u : 0));
    }
  }
  return set;
}
constexpr Fp4TableSet kFp4Tables = MakeFp4Tables();

struct Fp4Shifts {
  __m512i even = _mm512_set_epi32(12, 12, 12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0);
  __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(16));
};

inline void DecodeFp4(const uint8_t* p, uint8_t scale, const Fp4Shifts& shifts, __m512& even, __m512& odd) {
  const __m512i bytes = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512 table = _mm512_load_ps(kFp4Tables.t[scale]);
  even = _mm512_permutexvar_ps(_mm512_srlv_epi32(bytes, shifts.even), table);
  odd = _mm512_permutexvar_ps(_mm512_srlv_epi32(bytes, shifts.odd), table);
}

// e2m1 * 2^(s-127) -> bf16 pairs in the FP4 pair order, for vdpbf16ps: with the 16 bytes in every
// 128-bit lane, word 2i of dword i holds nibbles 8(i%4)..+3 and word 2i+1 nibbles 8(i%4)+4..+7, so
// one per-lane word shift by 4 * (i / 4) brings PairK's even / odd nibble to the bottom of each
// word, and vpermw looks it up in kFp4Bf16[s] (the 16 values twice: vpermw reads 5 index bits, the
// fifth is the next nibble's). 2 shuffle-port ops per 32 weights, where the fp32 decode takes 4.
struct Fp4Bf16TableSet {
  alignas(64) uint16_t t[256][32];
};
constexpr Fp4Bf16TableSet MakeFp4Bf16Tables() {
  Fp4Bf16TableSet set{};
  for (int scale = 0; scale < 256; ++scale) {
    for (int i = 0; i < 32; ++i)
      set.t[scale][i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(kFp4Tables.t[scale][i % 16]) >> 16);
  }
  return set;
}
constexpr Fp4Bf16TableSet kFp4Bf16 = MakeFp4Bf16Tables();

inline __m512i DecodeFp4Pairs(const uint8_t* p, uint8_t scale) {
  const __m512i bytes = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i shifts = _mm512_set_epi16(12, 12, 12, 12, 12, 12, 12, 12, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4,
                                          4, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_epi16(_mm512_srlv_epi16(bytes, shifts), _mm512_load_si512(kFp4Bf16.t[scale]));
}

// One row of a 4-row quad of the interleaved FP4 copy (InterleavedTiles): its codes sit at bits
// [4r, 4r + 4) of every word, already in the pair order, so a word shift and vpermw decode it
// (the bit above the index, the next row's, is harmless: the table repeats). One load feeds four
// rows, with no broadcast and no variable shift: 1.6 against 2.5 cycles per row and group (Zen 4,
// hot, with the vdpbf16ps).
static_assert([] {
  for (int j = 0; j < 32; ++j)
    if (InterleavedTiles::Fp4WordElement(j) != linear_simd::PairK(MatrixFormat::kFP4Row32, j / 2, j % 2 == 1))
      return false;
  return true;
}());
inline __m512i DecodeFp4QuadPairs(__m512i quad, int r, uint8_t scale) {
  return _mm512_permutexvar_epi16(_mm512_srli_epi16(quad, 4 * r), _mm512_load_si512(kFp4Bf16.t[scale]));
}
// The quad in a register: left to itself GCC folds the load into each row's shift, four loads
// where one does (the table loads already keep the load port busy).
inline __m512i LoadFp4Quad(const uint8_t* codes, int q) {
  __m512i quad = _mm512_loadu_si512(codes + 64 * q);
  __asm__("" : "+v"(quad));
  return quad;
}
// The same row as fp32 even / odd pair members (the FMA panels): vpermps reads the low 4 bits of
// each dword, word 2p (even) as it stands, word 2p + 1 (odd) shifted down by 16.
inline void DecodeFp4Quad(__m512i quad, int r, uint8_t scale, __m512& even, __m512& odd) {
  const __m512 table = _mm512_load_ps(kFp4Tables.t[scale]);
  even = _mm512_permutexvar_ps(_mm512_srli_epi32(quad, 4 * r), table);
  odd = _mm512_permutexvar_ps(_mm512_srli_epi32(quad, 16 + 4 * r), table);
}

// One group of one row as bf16 pairs (FP8, BF16: memory order, FP4: its pair order); BF16 rows
// are their own pairs.
template <MatrixFormat F>
inline __m512i DecodePairs(const uint8_t* p, uint8_t scale) {
  if constexpr (F == MatrixFormat::kFP4Row32) {
    return DecodeFp4Pairs(p, scale);
  } else if constexpr (F == MatrixFormat::kBF16) {
    return _mm512_loadu_si512(p);
  } else {
    return DecodeE4M3(p, scale);
  }
}

// A tile's rows: row i starts at row0 + i * stride and its per-group ue8m0 bytes (FP4: the row's;
// FP8: its 32-row block's) at scales0 + i * scales_stride.
// (A base and a stride rather than 16 pointers: with 32 pointers the loop spilled them and the
// reloads, vmovq xmm -> gpr, competed with vdpbf16ps for port 0.)
struct TileRows {
  const uint8_t* row0;
  int64_t stride;
  const uint8_t* scales0;
  int64_t scales_stride;
};

template <MatrixFormat F>
constexpr bool kQuantized = F == MatrixFormat::kFP8Block32 || F == MatrixFormat::kFP4Row32;
// Formats whose tiles also run on vdpbf16ps (BF16: dense calls that prove it exact).
template <MatrixFormat F>
constexpr bool kPairs = kQuantized<F> || F == MatrixFormat::kBF16;

constexpr int64_t GroupBytes(MatrixFormat f) {
  return f == MatrixFormat::kFP4Row32 ? 16 : f == MatrixFormat::kFP8Block32 ? 32 : f == MatrixFormat::kBF16 ? 64 : 128;
}

// Keeps `p` opaque so that the compiler walks the rows with one register instead of keeping a
// strength-reduced pointer per row live across the loop.
template <class T>
inline void Opaque(T*& p) {
  __asm__("" : "+r"(p));
}

// FMA-path decoding of one group of one row: fp32 even / odd members of pair i in lane i.
template <MatrixFormat F>
struct FmaDecoder {
  explicit FmaDecoder(int64_t cols) : k(cols) {}
  int64_t k;  // dense: valid elements, for the zero-padded last group
  Fp4Shifts shifts;
  // `p`: the group's bytes; `ue8m0`: its scale byte (FP8, FP4).
  void Load(const uint8_t* p, uint8_t ue8m0, int64_t g, __m512& even, __m512& odd) const {
    if constexpr (F == MatrixFormat::kFP4Row32) {
      DecodeFp4(p, ue8m0, shifts, even, odd);
    } else if constexpr (F == MatrixFormat::kFP8Block32) {
      // Only dense FP8 (DenseLinear) can end in a partial group; its padding decodes to +0.
      const int64_t left = k - g * kGroup;
      const __m512i w =
          left >= kGroup ? DecodeE4M3(p, ue8m0) : DecodeE4M3Bytes(_mm256_maskz_loadu_epi8((1u << left) - 1, p), ue8m0);
      even = EvenOf(w), odd = OddOf(w);
    } else if constexpr (F == MatrixFormat::kBF16) {
      const int64_t left = k - g * kGroup;
      const __mmask32 m = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1ull << left) - 1);
      const __m512i w = _mm512_maskz_loadu_epi16(m, p);  // unaligned rows are fine
      even = EvenOf(w), odd = OddOf(w);
    } else {
      const int64_t left = k - g * kGroup;
      const __mmask16 m0 = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
      const __mmask16 m1 = left >= 32 ? 0xffff : left <= 16 ? 0 : static_cast<__mmask16>((1u << (left - 16)) - 1);
      even = _mm512_maskz_loadu_ps(m0, p), odd = _mm512_maskz_loadu_ps(m1, p + 64);
    }
  }
};

// ---- streaming tiles (M <= 8) -------------------------------------------------------------------

// Register tiles take up to kTileMaxM activation rows, so a call of up to that many streams the
// weights once. That covers the speculative verify (6 tokens) and the draft block (5): on the
// panel path M = 5-8 read the weights at a third of M = 4's speed (linear_bench, Zen 4: FP4 expert
// 2304x5120 M = 4 / 5 / 6 / 8 0.34 / 0.90 / 0.69 / 0.98 ms; BF16 head 55.6 / 92 / 90 / 101 ms).
// Up to StreamMaxRows (batched decode) the rows run in passes of at most kTileMaxM over blocks of
// weight rows small enough to stay in L2 (kPassBlockBytes), so the weights still come from DRAM
// once; more rows run the panel GEMM. FP8 stops at one pass: its decode costs as much as 3-4
// vdpbf16ps, and a second pass decoding it again ran slower than the panels, which decode once
// (wo_b 5120x8192 M = 16: 6.4 ms in two passes, 5.2 ms on panels; FP4 expert 2304x5120 M = 16:
// 1.14 ms against 1.49 ms, BF16 head M = 12: 66 ms).
constexpr int64_t kTileMaxM = 8;
constexpr int64_t kPassBlockBytes = 256 << 10;
constexpr int64_t StreamMaxRows(MatrixFormat f) { return f == MatrixFormat::kFP8Block32 ? kTileMaxM : 16; }
// On the interleaved copy (DecodeE4M3Pair: 2.5 operations a row and group) streaming is faster
// than the panels: wo_b 5120x8192 M = 12 / 16 3.80 / 4.22 ms in two passes against 4.17 / 5.02 ms,
// and 3.02-3.08 / 3.83-3.87 ms in one that decodes each group once (OnePass).
constexpr int64_t kInterleavedFp8StreamMaxM = 16;
// FP8 and BF16 on the interleaved copy stream up to this many rows in one pass over the weights
// (TileInterleavedRows' chunk passes), which covers both formats' streaming range.
constexpr int64_t kOnePassMaxM = 16;
static_assert(kInterleavedFp8StreamMaxM <= kOnePassMaxM && StreamMaxRows(MatrixFormat::kBF16) <= kOnePassMaxM);
// BF16 GEMV tiles run on FMAs up to this M (a BF16 group needs no decode, and vdpbf16ps streamed
// the head no faster at M = 1-2); beyond it 2 M FMAs per group make them core-bound, and they run
// on vdpbf16ps where a call proves it exact.
constexpr int64_t kBf16FmaMaxM = 4;

// Each tile row prefetches its own stream this many bytes ahead (one prefetch per cache line).
// The hardware prefetchers alone left the FP8 GEMV (vdpbf16ps, whose decode costs about as much
// core time as the DRAM transfer) at ~60% of the read bandwidth; measured with 2 threads on the
// V4.1 shapes: FP8 +45%, BF16 head +14%, FP4 unchanged; 512 to 2048 bytes all work.
constexpr int64_t kStreamPrefetch = 512;

// FP8 / FP4: NR weight rows x MR activation rows with vdpbf16ps; x: MR rows of bf16 pairs, stride
// xstride. Each weight group is decoded and used at once (few live registers, so NR can be 16).
// The loops are unrolled explicitly: GCC 12 left the NR loop rolled, and every accumulator went
// through the stack once per group (FP8 GEMV 52% -> ~80% of the bandwidth on Zen 4 unrolled).
template <MatrixFormat F, int NR, int MR>
void TileDp(const TileRows& t, const uint32_t* x, int64_t xstride, int64_t groups, float (*out)[kMaxTileN]) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) acc[r][n] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i xv[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) xv[r] = _mm512_load_si512(x + r * xstride + g * 16);
    const uint8_t* p = t.row0 + g * GroupBytes(F);
    const uint8_t* sc = kQuantized<F> ? t.scales0 + g : nullptr;  // BF16 rows have no scales
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) {
      if ((g * GroupBytes(F)) % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kStreamPrefetch, _MM_HINT_T0);
      const __m512i w = DecodePairs<F>(p, kQuantized<F> ? *sc : 0);
      p += t.stride;
      Opaque(p);
      if constexpr (kQuantized<F>) {
        sc += t.scales_stride;
        Opaque(sc);
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], (__m512bh)xv[r], (__m512bh)w);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int n = 0; n < NR; ++n) out[r][n] = ReduceLanes(acc[r][n]);
}

// FP8 / FP4 on the interleaved copy (InterleavedTiles), M = 1: the 16 rows of one tile with
// vdpbf16ps, the same operations as TileDp on those rows. A group's codes (and FP4 scales) of all
// 16 rows are one block, so every row sits at a constant offset from one pointer and the tile is
// a single stream, prefetched kInterleavedPrefetch ahead; FP8 rows share their scale, so its
// decode tables are loaded once per group for the tile (DecodeE4M3Pair; needs VBMI). `fp8_scales`:
// the tile's scale row (FP8).
constexpr int64_t kInterleavedPrefetch = 2048;  // bytes ahead in the stream (FP4: ~7 blocks, FP8: 4)

template <MatrixFormat F>
[[gnu::noinline]] void TileDpInterleaved(const uint8_t* tile, const uint8_t* fp8_scales, const uint32_t* x,
                                         int64_t groups, float* out) {
  constexpr bool kFp4 = F == MatrixFormat::kFP4Row32;
  constexpr int kRows = InterleavedTiles::kRows;
  constexpr int64_t kBlock = InterleavedTiles::BlockBytes(F), kCodes = InterleavedTiles::GroupBytes(F);
  constexpr int kPrefetchLines = (kBlock + 63) / 64 + (kBlock % 64 != 0 ? 1 : 0);  // a block may straddle lines
  __m512 acc[kRows];
#pragma GCC unroll 16
  for (int n = 0; n < kRows; ++n) acc[n] = _mm512_setzero_ps();
  const uint8_t* block = tile;
  for (int64_t g = 0; g < groups; ++g) {
    const __m512i xv = _mm512_load_si512(x + g * 16);
    const char* ahead = reinterpret_cast<const char*>(block) + kInterleavedPrefetch;
#pragma GCC unroll 8
    for (int line = 0; line < kPrefetchLines; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
    if constexpr (kFp4) {
#pragma GCC unroll 4
      for (int q = 0; q < kRows / 4; ++q) {
        const __m512i quad = LoadFp4Quad(block + kRows, q);
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
          const __m512i w = DecodeFp4QuadPairs(quad, r, block[4 * q + r]);
          acc[4 * q + r] = _mm512_dpbf16_ps(acc[4 * q + r], (__m512bh)xv, (__m512bh)w);
        }
      }
    } else {
      // The tile's rows share the group's scale, and so its tables.
      const Fp8PairTable table(fp8_scales[g]);
#pragma GCC unroll 8
      for (int n = 0; n < kRows; n += 2) {
        __m512i first, second;
        DecodeE4M3Pair(block + n * kCodes, table, first, second);
        acc[n] = _mm512_dpbf16_ps(acc[n], (__m512bh)xv, (__m512bh)first);
        acc[n + 1] = _mm512_dpbf16_ps(acc[n + 1], (__m512bh)xv, (__m512bh)second);
      }
    }
    block += kBlock;
  }
  for (int n = 0; n < kRows; ++n) out[n] = ReduceLanes(acc[n]);
}

// BF16 on the interleaved copy, M = 1: the 16 rows of one tile with FMAs, the same operations
// as TileFma<kBF16, 16, 1> on those rows. The in-place tile reads 16 row streams, which took the
// 129280 x 5120 head to ~85% of the read bandwidth on Zen 4; one stream reads it at ~100%
// (a standalone test, 2 threads: 38-41 against 46-48 GB/s with the probe at 43-47).
// Its prefetch runs further ahead than the FP8/FP4 tiles' (which are core-bound): one stream per
// core at ~30 GB/s needs more bytes in flight. On the slice, batch 1, in the host's fast phases
// (probe ~80 GB/s) 2 KB ahead made the step 3-5% slower than the in-place head, 8 KB as fast.
constexpr int64_t kInterleavedBf16Prefetch = 8192;
[[gnu::noinline]] void TileFmaInterleavedBf16(const uint8_t* tile, const float* x, int64_t groups, float* out) {
  constexpr int kRows = InterleavedTiles::kRows;
  constexpr int64_t kBlock = InterleavedTiles::BlockBytes(MatrixFormat::kBF16);
  constexpr int64_t kCodes = InterleavedTiles::GroupBytes(MatrixFormat::kBF16);
  __m512 acc[kRows];
#pragma GCC unroll 16
  for (int n = 0; n < kRows; ++n) acc[n] = _mm512_setzero_ps();
  const uint8_t* block = tile;
  for (int64_t g = 0; g < groups; ++g) {
    const __m512 xe = _mm512_load_ps(x + g * kGroup), xo = _mm512_load_ps(x + g * kGroup + 16);
    const char* ahead = reinterpret_cast<const char*>(block) + kInterleavedBf16Prefetch;
#pragma GCC unroll 16
    for (int line = 0; line < kBlock / 64; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
#pragma GCC unroll 16
    for (int n = 0; n < kRows; ++n) {
      const __m512i w = _mm512_loadu_si512(block + n * kCodes);
      acc[n] = _mm512_fmadd_ps(xe, EvenOf(w), _mm512_fmadd_ps(xo, OddOf(w), acc[n]));
    }
    block += kBlock;
  }
  for (int n = 0; n < kRows; ++n) out[n] = ReduceLanes(acc[n]);
}

// 2-8 activation rows on the interleaved copy. The 16 rows of a tile need 16 x MR accumulators,
// more than the registers hold, so the tile runs in sub-tiles of NR rows over K chunks of about
// 8 KiB: every sub-tile passes over the chunk's blocks (from L1 after the first) with its MR x NR
// accumulators in registers, parked between chunks. Each weight group is decoded once a pass, by the
// sub-tile that owns its row, and each accumulator lane sees the groups in K order: the same
// operations, so the same bits, as the in-place tiles. The tiles of a thread's range are one
// contiguous stream: while a chunk runs, its sub-tiles prefetch the next chunk into L1 and the one
// kInterleavedFarPrefetch beyond into L2. Without the far prefetch the first sub-tile of each chunk
// waited on DRAM (one thread, cold, M = 4: BF16 head rows 12 -> 26 GB/s, the in-place tiles' 16).
template <MatrixFormat F>
constexpr int64_t kInterleavedChunkGroups = 8192 / InterleavedTiles::BlockBytes(F);  // FP8 16, FP4 30, BF16 8
constexpr int64_t kInterleavedFarPrefetch = 16384;

// Rows per sub-tile: as many as keep MR x NR accumulators, the MR activation registers and the
// decode's (FP8: 4 table registers and ~4 temporaries) in the 32 zmm registers, or at FP8 M = 5-6
// the accumulators, the decoded rows and one activation row (rows first, in InterleavedChunk);
// even, for the FP8 row pairs.
constexpr int InterleavedSubTileRows(MatrixFormat f, int mr) {
  return mr == 2 ? 8 : mr <= 4 || (f != MatrixFormat::kFP4Row32 && mr <= 6) ? 4 : 2;
}

// Whether MR > 1 activation rows read the interleaved copy (else the in-place tiles), from
// linear_bench-style runs on Zen 4, 2 threads, cold, best of ~1.5 s (ms; interleaved / in place):
//   BF16 16384x5120  M = 2 / 4 / 8 / 16: 5.1 / 4.9 / 4.1 / 8.3 against 5.3 / 5.6 / 7.1 / 11.1
//   FP8 5120x8192    M = 1 / 2 / 3 / 4: 1.15 / 0.87 / 1.15 / 1.17 against 1.85 / 1.44 / 1.53 / 1.65 (the
//                    pair decode, DecodeE4M3Pair); M = 5 / 6 / 7 / 8, as 4 rows and the rest in two
//                    passes: 1.78 / 1.91 / 1.99 / 2.11 against 1.81 / 2.07 / 2.24 / 2.50 (in one pass,
//                    2-row sub-tiles reloading the tables per row pair: 2.19 / 2.46 / 2.92 / 2.51)
//   FP4 2304x5120    M = 2 / 8 / 16: 0.190 / 0.502 / 0.986 against 0.195 / 0.544 / 1.058;
//                    M = 4 / 6 / 12: 0.284 / 0.509 / 0.999 against 0.259 / 0.360 / 0.711
//                    (the broadcast decode); with the quads (DecodeFp4QuadPairs) M = 2 0.172 - 0.175,
//                    M = 8 0.614 (its 2-row sub-tiles shift by a count known only at run time);
//                    4-row sub-tiles and M = 8 as two passes of 4 (2026-12-05): M = 3 / 4 / 8
//                    0.199-0.204 / 0.252-0.254 / 0.487-0.510 against 0.223-0.225 / 0.254-0.257 /
//                    0.540-0.545; at M = 5 / 6 / 7 the in-place tiles run at ~90% of the vdpbf16ps
//                    peak and stay (one thread, 1024x5120, hot: 259 / 308 / 351 against 261 /
//                    330 / 371 us)
// FMAs (BF16 that does not prove vdpbf16ps exact) take at most 4 rows: 2 x MR activation registers.
constexpr bool InterleavedRowsWin(MatrixFormat f, int mr, bool dp) {
  switch (f) {
    case MatrixFormat::kBF16:
      return dp || mr <= 4;
    case MatrixFormat::kFP8Block32:
      return dp;
    case MatrixFormat::kFP4Row32:
      return dp && (mr <= 4 || mr == 8);
    case MatrixFormat::kF32:
      break;
  }
  return false;
}

// Where a chunk's sub-tiles take their weight rows from: the copy's codes, decoded, prefetching
// the next chunk; the codes again (an earlier pass over the chunk prefetched them); the codes,
// decoded and also kept in a buffer (bf16 pairs) for more activation rows; or that buffer.
enum class ChunkRows { kCodes, kCodesAgain, kCodesKept, kKept };

// Rows per sub-tile: InterleavedSubTileRows where a pass decodes; on the kept pairs (no decode
// registers) as many as MR x NR accumulators allow.
constexpr int SubTileRows(MatrixFormat f, int mr, ChunkRows from) {
  return from == ChunkRows::kKept ? (mr == 1 ? 16 : mr == 2 ? 8 : 4) : InterleavedSubTileRows(f, mr);
}

template <MatrixFormat F, int MR, ChunkRows kFrom>
using ChunkPark = __m512[InterleavedTiles::kRows / SubTileRows(F, MR, kFrom)][MR][SubTileRows(F, MR, kFrom)];

// Groups [g0, g1) of one tile for MR activation rows: FP8 / FP4, or BF16 proven exact, on
// vdpbf16ps (x: MR rows of bf16 pairs), or BF16 on FMAs (x: MR canonical fp32 rows); xstride: the
// rows' distance in elements. The accumulators start at zero where g0 = 0, else from `park`; they
// end in `park`, and where g1 = groups reduced into `out`. `kept`: (g1 - g0) x 16 bf16-pair rows.
template <MatrixFormat F, int MR, bool kDp, ChunkRows kFrom>
[[gnu::always_inline]] inline void InterleavedChunk(const uint8_t* tile, const uint8_t* fp8_scales,
                                                    const std::conditional_t<kDp, uint32_t, float>* x, int64_t xstride,
                                                    int64_t groups, int64_t g0, int64_t g1,
                                                    ChunkPark<F, MR, kFrom>& park, __m512i* kept,
                                                    float (*out)[kMaxTileN]) {
  static_assert(kDp || kFrom == ChunkRows::kCodes, "FMA tiles run in one pass");
  // FP4 sub-tiles take whole quads, so that each row's shift is a compile-time count (FirstPassRows).
  static_assert(F != MatrixFormat::kFP4Row32 || SubTileRows(F, MR, kFrom) % 4 == 0, "FP4 sub-tiles of 4k rows");
  constexpr int NR = SubTileRows(F, MR, kFrom);
  constexpr int kRows = InterleavedTiles::kRows, kSubTiles = kRows / NR;
  constexpr int64_t kBlock = InterleavedTiles::BlockBytes(F), kCodes = InterleavedTiles::GroupBytes(F);
  constexpr int64_t kRowGroup = kDp ? 16 : kGroup;
  // Prefetches per group and sub-tile: the next chunk's lines, spread evenly over the chunk (the
  // first pass only).
  constexpr bool kFirstPass = kFrom == ChunkRows::kCodes || kFrom == ChunkRows::kCodesKept;
  constexpr int kPrefetches = kFirstPass ? static_cast<int>((kBlock + 64 * kSubTiles - 1) / (64 * kSubTiles)) : 0;
  // Rows first, then each activation row once: FP8 at 5-6 activation rows (one pass), whose
  // MR x 4 accumulators leave no registers for the activation rows (GCC reloaded them for every
  // row: 24 loads a group), and BF16 at M = 7 (one pass of 2-row sub-tiles). One thread, hot,
  // FP8 1024x4096 M = 5 / 6: 315 / 358 -> 263 / 301 us; BF16 2048x5120 M = 7: 1214-1255 ->
  // 928-960 us. Not at BF16 M = 5, 6 or 8 (5-7% slower), nor in BF16's later passes (at -O2 the
  // 7-row pass of M = 15 spilled), nor FP8 M = 7-8 in 2-row sub-tiles (11-13% slower than 4 rows
  // and a second pass).
  constexpr bool kRowsFirst = kDp && ((F == MatrixFormat::kFP8Block32 && kFrom == ChunkRows::kCodes && MR > 4) ||
                                      (F == MatrixFormat::kBF16 && kFrom == ChunkRows::kCodes && MR == 7));
  const char* next = reinterpret_cast<const char*>(tile + g1 * kBlock);
  for (int s = 0; s < kSubTiles; ++s) {
    __m512 acc[MR][NR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) acc[r][n] = g0 == 0 ? _mm512_setzero_ps() : park[s][r][n];
    const uint8_t* block = tile + g0 * kBlock;
    for (int64_t g = g0; g < g1; ++g, block += kBlock) {
#pragma GCC unroll 16
      for (int i = 0; i < kPrefetches; ++i) {
        _mm_prefetch(next + 64 * i, _MM_HINT_T0);
        _mm_prefetch(next + kInterleavedFarPrefetch + 64 * i, _MM_HINT_T1);
      }
      next += 64 * kPrefetches;
      // vdpbf16ps: xe holds the pairs; FMAs: the even and odd members (rows first loads its own).
      __m512 xe[MR], xo[MR];
#pragma GCC unroll 8
      for (int r = 0; r < MR && !kRowsFirst; ++r) {
        xe[r] = _mm512_load_ps(reinterpret_cast<const float*>(x + r * xstride + g * kRowGroup));
        if constexpr (!kDp) xo[r] = _mm512_load_ps(x + r * xstride + g * kGroup + 16);
      }
      // FP8 decodes a row pair at a time (NR is even), when its first row comes; FP4 loads the
      // sub-tile's quads once.
      constexpr bool kDecode = kFrom != ChunkRows::kKept;
      const Fp8PairTable table(kDecode && F == MatrixFormat::kFP8Block32 ? fp8_scales[g] : 0);
      __m512i pair[2], quad[(NR + 3) / 4];
      if constexpr (kDecode && F == MatrixFormat::kFP4Row32) {
#pragma GCC unroll 4
        for (int q = 0; q < NR / 4; ++q) quad[q] = LoadFp4Quad(block + kRows, s * NR / 4 + q);
      }
      if constexpr (kRowsFirst) {
        __m512i rows[NR];
        if constexpr (F == MatrixFormat::kFP8Block32) {
#pragma GCC unroll 16
          for (int n = 0; n < NR; n += 2) DecodeE4M3Pair(block + (s * NR + n) * kCodes, table, rows[n], rows[n + 1]);
        } else {
#pragma GCC unroll 16
          for (int n = 0; n < NR; ++n) rows[n] = _mm512_loadu_si512(block + (s * NR + n) * kCodes);
        }
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m512bh xr = (__m512bh)_mm512_load_si512(x + r * xstride + g * kRowGroup);
#pragma GCC unroll 16
          for (int n = 0; n < NR; ++n) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], xr, (__m512bh)rows[n]);
        }
        continue;
      }
#pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) {
        const int row = s * NR + n;
        __m512i w;
        if constexpr (!kDecode) {
          w = _mm512_load_si512(kept + (g - g0) * kRows + row);
        } else if constexpr (F == MatrixFormat::kFP8Block32) {
          if (n % 2 == 0) DecodeE4M3Pair(block + row * kCodes, table, pair[0], pair[1]);
          w = pair[n % 2];
        } else if constexpr (F == MatrixFormat::kFP4Row32) {
          w = DecodeFp4QuadPairs(quad[n / 4], n % 4, block[row]);
        } else {
          w = _mm512_loadu_si512(block + row * kCodes);
        }
        if constexpr (kFrom == ChunkRows::kCodesKept) _mm512_store_si512(kept + (g - g0) * kRows + row, w);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          if constexpr (kDp) {
            acc[r][n] = _mm512_dpbf16_ps(acc[r][n], (__m512bh)_mm512_castps_si512(xe[r]), (__m512bh)w);
          } else {
            acc[r][n] = _mm512_fmadd_ps(xe[r], EvenOf(w), _mm512_fmadd_ps(xo[r], OddOf(w), acc[r][n]));
          }
        }
      }
    }
    // Parked even after the last chunk, and reduced from there: reducing the registers needed
    // temporaries that 24 accumulators (BF16, 6 x 4) left no room for, and GCC then copied the
    // whole tile through the stack at every chunk's end (BF16 512x5120 M = 6, one thread, hot:
    // 241 -> 170 us).
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) park[s][r][n] = acc[r][n];
    if (g1 == groups) {
      for (int r = 0; r < MR; ++r)
        for (int n = 0; n < NR; ++n) out[r][s * NR + n] = ReduceLanes(park[s][r][n]);
    }
  }
}

// Activation rows of a tile's first pass: all of them, or as many as MR x NR accumulators and the
// decode's registers allow (FP8 beyond 6 rows; FP4 at 6-8, whose 2-row sub-tiles would shift by a
// count known only at run time; BF16 beyond 8, whose 2-row sub-tiles beat 6-7-row passes:
// 16384x5120 M = 12 / 14 6.25 / 8.3 against 8.3 / 9.4 ms); the rest follow in more passes of as
// many rows, which read each chunk as LaterPasses says.
constexpr int FirstPassRows(MatrixFormat f, int mr, bool dp) {
  if (dp && f == MatrixFormat::kBF16 && mr > 8) return 8;
  const bool split = dp && ((f == MatrixFormat::kFP8Block32 && mr > 6) || (f == MatrixFormat::kFP4Row32 && mr > 5));
  return split ? 4 : mr;
}
// FP8 decodes a row pair with 5 shuffles, about 1.8 vdpbf16ps issue slots a row, and storing a
// decoded row costs about as much (Zen 4 splits a zmm store in two), so the first pass keeps
// each chunk's decoded rows for the others (kKept) except at M = 8, where the second pass decodes
// the whole tile again, from L2 (kCodes: passes over the whole tile, as FP4's). FP8 5120x8192,
// 2 threads, cold, decoding again / keeping: M = 5 1.80 / 1.62, M = 6 1.92 / 1.82, M = 7 2.01 /
// 1.94 ms, M = 12 3.18-3.27 / 3.02-3.08 ms, M = 16 4.19-4.24 / 3.83-3.87 ms (before: passes of 8
// rows, each decoding twice); one thread, hot: M = 8 834 / 860 us; chunk by chunk without keeping
// ran 2% slower than passes over the whole tile. BF16 runs its passes chunk by chunk (kCodesAgain):
// while the later passes compute, the first one's prefetches keep DRAM busy; passes over blocks
// of whole tiles (InPasses, 8 rows and the rest) left it idle in the later ones: BF16 16384x5120,
// 2 threads, cold, M = 12 6.19-6.26 against 6.55-6.57 ms, M = 16 8.07-8.32 against 8.31-8.52 ms.
constexpr ChunkRows LaterPasses(MatrixFormat f, int mr) {
  return f == MatrixFormat::kBF16                    ? ChunkRows::kCodesAgain
         : f == MatrixFormat::kFP8Block32 && mr != 8 ? ChunkRows::kKept
                                                     : ChunkRows::kCodes;
}

// The later passes over a chunk for MR activation rows, kStep at a time, each with its parked
// accumulators.
template <MatrixFormat F, int MR, int kStep, ChunkRows kFrom>
struct ChunkPasses {
  static constexpr int kHere = MR < kStep ? MR : kStep;
  ChunkPark<F, kHere, kFrom> park;
  [[no_unique_address]] std::conditional_t<(MR > kHere), ChunkPasses<F, MR - kHere, kStep, kFrom>, std::monostate> rest;

  [[gnu::always_inline]] void Run(const uint8_t* tile, const uint32_t* x, int64_t xstride, int64_t groups, int64_t g0,
                                  int64_t g1, __m512i* kept, float (*out)[kMaxTileN]) {
    InterleavedChunk<F, kHere, true, kFrom>(tile, nullptr, x, xstride, groups, g0, g1, park, kept, out);
    if constexpr (MR > kHere) rest.Run(tile, x + kHere * xstride, xstride, groups, g0, g1, kept, out + kHere);
  }
};

// One tile's 16 rows for MR activation rows, chunk by chunk, in one pass or more (FirstPassRows).
template <MatrixFormat F, int MR, bool kDp>
[[gnu::noinline]] void TileInterleavedRows(const uint8_t* tile, const uint8_t* fp8_scales,
                                           const std::conditional_t<kDp, uint32_t, float>* x, int64_t xstride,
                                           int64_t groups, float (*out)[kMaxTileN]) {
  constexpr int64_t kChunk = kInterleavedChunkGroups<F>;
  constexpr int kFirst = FirstPassRows(F, MR, kDp);
  constexpr ChunkRows kLater = LaterPasses(F, MR);
  if constexpr (kFirst == MR) {
    ChunkPark<F, MR, ChunkRows::kCodes> park;
    for (int64_t g0 = 0; g0 < groups; g0 += kChunk) {
      InterleavedChunk<F, MR, kDp, ChunkRows::kCodes>(tile, fp8_scales, x, xstride, groups, g0,
                                                      std::min(groups, g0 + kChunk), park, nullptr, out);
    }
  } else if constexpr (kLater == ChunkRows::kCodes) {
    TileInterleavedRows<F, kFirst, kDp>(tile, fp8_scales, x, xstride, groups, out);
    TileInterleavedRows<F, MR - kFirst, kDp>(tile, fp8_scales, x + kFirst * xstride, xstride, groups, out + kFirst);
  } else {
    constexpr bool kKeep = kLater == ChunkRows::kKept;
    constexpr ChunkRows kFirstFrom = kKeep ? ChunkRows::kCodesKept : ChunkRows::kCodes;
    alignas(64) __m512i kept[kKeep ? kChunk * InterleavedTiles::kRows : 1];
    ChunkPark<F, kFirst, kFirstFrom> first;
    ChunkPasses<F, MR - kFirst, kFirst, kLater> rest;
    for (int64_t g0 = 0; g0 < groups; g0 += kChunk) {
      const int64_t g1 = std::min(groups, g0 + kChunk);
      InterleavedChunk<F, kFirst, kDp, kFirstFrom>(tile, fp8_scales, x, xstride, groups, g0, g1, first, kept, out);
      rest.Run(tile, x + kFirst * xstride, xstride, groups, g0, g1, kept, out + kFirst);
    }
  }
}

// NR weight rows x MR activation rows with FMAs; x: MR canonical fp32 rows, stride xstride.
template <MatrixFormat F, int NR, int MR>
void TileFma(const TileRows& t, const FmaDecoder<F>& dec, const float* x, int64_t xstride, int64_t groups,
             float (*out)[kMaxTileN]) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) acc[r][n] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512 xe[MR], xo[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      xe[r] = _mm512_load_ps(x + r * xstride + g * kGroup), xo[r] = _mm512_load_ps(x + r * xstride + g * kGroup + 16);
    }
    const uint8_t* p = t.row0 + g * GroupBytes(F);
    const uint8_t* sc = kQuantized<F> ? t.scales0 + g : nullptr;  // bf16/f32 rows have no scales
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) {
      if ((g * GroupBytes(F)) % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kStreamPrefetch, _MM_HINT_T0);
      __m512 we, wo;
      dec.Load(p, kQuantized<F> ? *sc : 0, g, we, wo);
      p += t.stride;
      Opaque(p);
      if constexpr (kQuantized<F>) {
        sc += t.scales_stride;
        Opaque(sc);
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) acc[r][n] = _mm512_fmadd_ps(xe[r], we, _mm512_fmadd_ps(xo[r], wo, acc[r][n]));
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int n = 0; n < NR; ++n) out[r][n] = ReduceLanes(acc[r][n]);
}

// Weight rows [n_begin, n_end) for m <= kTileMaxM activation rows, in "strided" tiles of kNR rows:
// tile t takes row t of each of kNR equal slices of the range, so every tile row continues where
// the previous tile's row ended - kNR long sequential streams, which the hardware prefetchers
// follow (contiguous tiles of 2.5 KB FP4 rows ran ~25% slower). FP8 slices are multiples of 32
// rows, so that the rows of a tile walk their blocks' scales with one stride as well.
// Weight rows [n_begin, n_end) of an interleaved matrix (n_begin starts a tile): at M = 1 FP8/FP4
// on vdpbf16ps (TileDpInterleaved) and BF16 on FMAs (TileFmaInterleavedBf16), at M = 2-8
// TileInterleavedRows.
template <MatrixFormat F, int MR, bool kDp>
void StreamInterleaved(const Job& job, int64_t n_begin, int64_t n_end) {
  constexpr int64_t kRows = InterleavedTiles::kRows;
  const WeightMatrix& w = *job.w;
  const int64_t groups = job.groups, tile_bytes = groups * InterleavedTiles::BlockBytes(F);
  float out[MR][kMaxTileN];
  for (int64_t first = n_begin; first < n_end; first += kRows) {
    const uint8_t* tile = w.interleaved.data + first / kRows * tile_bytes;
    const uint8_t* fp8_scales = kQuantized<F> ? w.scales + first / kQuantBlock * w.scale_cols() : nullptr;
    if constexpr (MR == 1 && F == MatrixFormat::kBF16 && !kDp) {
      TileFmaInterleavedBf16(tile, job.xs, groups, out[0]);
    } else if constexpr (MR == 1 && kDp) {
      TileDpInterleaved<F>(tile, fp8_scales, job.xb, groups, out[0]);
    } else if constexpr (kDp) {
      TileInterleavedRows<F, MR, true>(tile, fp8_scales, job.xb, job.xstride, groups, out);
    } else {
      TileInterleavedRows<F, MR, false>(tile, fp8_scales, job.xs, job.xstride, groups, out);
    }
    for (int r = 0; r < MR; ++r) {
      for (int64_t i = 0; i < kRows && first + i < n_end; ++i) {
        job.y[r * w.rows + first + i] = Finish(out[r][i], job.round_to_bf16);
      }
    }
  }
}

// Weight rows per streaming tile for MR activation rows. Up to 4 rows, as many as keep 16 chains
// of accumulators; beyond, the most for which MR x NR accumulators, the MR activation registers
// (two each on FMAs) and the decode's constants and temporaries fit the 32 zmm registers without
// a spill (register_residency.py): FP4 on vdpbf16ps needs 3 of them, FP8 about 8, BF16 one.
template <MatrixFormat F, bool kDp>
constexpr int StreamTileRows(int mr) {
  if (mr <= 4) return mr == 1 ? 16 : mr == 2 ? 8 : 4;
  if (!kDp) return mr <= 6 ? 2 : 1;
  if (F == MatrixFormat::kFP8Block32) return mr == 5 ? 3 : 2;
  if (F == MatrixFormat::kBF16) return mr <= 6 ? 4 : mr == 7 ? 3 : 2;
  return mr == 5 ? 4 : mr <= 7 ? 3 : 2;
}

template <MatrixFormat F, int MR, bool kDp>
void StreamRowsT(const Job& job, int64_t n_begin, int64_t n_end) {
  // The interleaved copy, where it has one and is faster (InterleavedRowsWin). Earlier versions
  // of the multi-row tiles on it ran slower than in place (2026-12-02: FP4 M = 2 / 4 0.378 / 0.435
  // against 0.386 / 0.410 ms; 2026-12-04, passes of 8 / 4 / 2 tile rows: FP4 M = 2 / 4 / 8
  // 0.30 / 0.45 / 0.84 against 0.25 / 0.29 / 0.60 ms): their first pass over a tile waited on DRAM,
  // which TileInterleavedRows' far prefetch into L2 removed.
  if constexpr (MR == 1 ? (kDp ? kQuantized<F> : F == MatrixFormat::kBF16) : InterleavedRowsWin(F, MR, kDp)) {
    if (CopyReadable(*job.w)) return StreamInterleaved<F, MR, kDp>(job, n_begin, n_end);
  }
  constexpr int kNR = StreamTileRows<F, kDp>(MR);
  constexpr bool kFp8 = F == MatrixFormat::kFP8Block32;
  const WeightMatrix& w = *job.w;
  const int64_t groups = job.groups, xstride = job.xstride, row_bytes = MatrixRowBytes(F, w.cols);
  constexpr int kMidNR = kNR > 4 ? 4 : 1;  // the tail's tiles: kNR, kMidNR or 1 rows
  const FmaDecoder<F> dec{w.cols};
  float out[MR][kMaxTileN];
  // Tile of nr rows: first, first + stride_rows, ...
  auto run_tile = [&](int64_t first, int64_t stride_rows, int nr) {
    const int64_t scale_row = kFp8 ? first / kQuantBlock : first;
    const int64_t scale_stride = kFp8 ? stride_rows / kQuantBlock * w.scale_cols() : stride_rows * w.scale_cols();
    const TileRows t{w.data + first * row_bytes, stride_rows * row_bytes,
                     kQuantized<F> ? w.scales + scale_row * w.scale_cols() : nullptr, scale_stride};
    auto tile = [&]<int NR>() {
      if constexpr (kDp) {
        TileDp<F, NR, MR>(t, job.xb, xstride, groups, out);
      } else {
        TileFma<F, NR, MR>(t, dec, job.xs, xstride, groups, out);
      }
    };
    if (nr == kNR) {
      tile.template operator()<kNR>();
    } else if constexpr (kMidNR > 1) {
      nr == kMidNR ? tile.template operator()<kMidNR>() : tile.template operator()<1>();
    } else {
      tile.template operator()<1>();
    }
    for (int r = 0; r < MR; ++r) {
      for (int i = 0; i < nr; ++i) job.y[r * w.rows + first + i * stride_rows] = Finish(out[r][i], job.round_to_bf16);
    }
  };
  const int64_t unit = kFp8 ? kQuantBlock : 1;
  const int64_t slice = (n_end - n_begin) / kNR / unit * unit;
  for (int64_t t = 0; t < slice; ++t) run_tile(n_begin + t, slice, kNR);
  // The rest (all of it when the range is under kNR * 32 FP8 rows, e.g. wkv's 256 rows a thread):
  // contiguous tiles, inside one 32-row block for FP8 so that their rows share its scales (one
  // row at a time would leave the accumulator chain latency-bound).
  for (int64_t n = n_begin + kNR * slice; n < n_end;) {
    const int64_t stop = kFp8 ? std::min(n_end, (n / kQuantBlock + 1) * kQuantBlock) : n_end;
    const int nr = stop - n >= kNR ? kNR : stop - n >= kMidNR ? kMidNR : 1;
    run_tile(n, 1, nr);
    n += nr;
  }
}

// ---- panel GEMM (M > StreamMaxRows) -------------------------------------------------------------------

using linear_simd::kPanelM;
using linear_simd::kPanelN;

// GEMM K chunk: the 4 panel rows' decoded groups, 16 KiB in L1 either way (fp32 [even | odd] or
// bf16 pairs). The longer bf16 chunk halves the accumulators' parking per vdpbf16ps. Measured with
// the bf16 block length below (linear_bench, Zen 4, 2 threads, M = 512): FP4 experts 283 / 251 ->
// 340 / 326 GFLOP/s, FP8 wq_b 271 -> 294, wo_b 285 -> 327 (the vdpbf16ps peak: 455).
template <bool kDp>
constexpr int64_t kChunkGroups = kDp ? 64 : 32;

// Activation rows per GEMM block: their prepared rows (fp32: 128 bytes a group, bf16 pairs: 64)
// should stay in L2 (~1 MiB) while a run of panels passes over them, half of it: the run's decoded
// chunks pass through L2 too.
template <bool kDp>
int64_t MBlock(int64_t groups) {
  constexpr int64_t kBytesPerGroup = kDp ? 64 : kGroup * 4;
  return std::clamp<int64_t>((int64_t{1} << 19) / (groups * kBytesPerGroup) / kPanelM * kPanelM, kPanelM, 128);
}

// With more than one activation block, the first block decodes a run of panels into the thread's
// scratch, chunk after chunk in the order the micro-kernels read them, and the later blocks read
// that back (from L2 / L3, a chunk prefetched ahead) instead of decoding each chunk once per block:
// M = 512 has 4-16 blocks. Its activation blocks are read once per run. Measured (linear_bench,
// Zen 4, 2 threads, M = 512, three rounds against decoding per block with 1 MiB blocks, ms): FP8
// wo_b 5120x8192 122-126 -> 112-115, BF16 8192x5120 121-123 -> 110-111, FP4 expert 2304x5120
// (copy) 33.7-34.3 -> 31.6-33.0; FP4 5120x2304, FP8 wq_b (K = 1280) and wo_a (K = 4096) within
// noise; the slice's 512-token prefill 6.17-6.35 -> 6.06-6.11 s. Runs of 256 KiB - 2 MiB and
// 1 MiB activation blocks did as well or up to 5% worse.
constexpr int64_t kPanelRunBytes = int64_t{1} << 20;

// One K chunk of one panel, decoded (fp32 [even | odd] or bf16 pairs): 16 KiB either way.
constexpr int64_t kChunkFloats = kChunkGroups<false> * kPanelN * kGroup;
static_assert(kChunkGroups<true> * kPanelN * 16 == kChunkFloats);

// Panels per run (1 when there is one M block: its chunks are decoded into one reused slot).
template <bool kDp>
int64_t RunPanels(int64_t groups, int64_t m) {
  const int64_t m_pad = (m + kPanelM - 1) / kPanelM * kPanelM;
  if (m_pad <= MBlock<kDp>(groups)) return 1;
  const int64_t chunks = (groups + kChunkGroups<kDp> - 1) / kChunkGroups<kDp>;
  return std::max<int64_t>(1, kPanelRunBytes / (chunks * kChunkFloats * int64_t{sizeof(float)}));
}

// Per-thread scratch of the GEMM path (the streaming tiles need none): the parked accumulators
// [m_block / 4][16] zmm, then the decoded chunks (one, or a panel run's).
struct Scratch {
  template <bool kDp>
  static size_t BytesFor(int64_t groups, int64_t m) {
    const int64_t panels = RunPanels<kDp>(groups, m);
    const int64_t chunks = panels == 1 ? 1 : (groups + kChunkGroups<kDp> - 1) / kChunkGroups<kDp>;
    return AccBytes(groups) + sizeof(float) * static_cast<size_t>(panels * chunks * kChunkFloats);
  }
  static size_t AccBytes(int64_t groups) {
    const int64_t m_block = std::max(MBlock<true>(groups), MBlock<false>(groups));
    return sizeof(__m512) * static_cast<size_t>(m_block / kPanelM * 16);
  }
  static size_t Bytes(MatrixFormat f, int64_t groups, int64_t m) {
    if (m <= StreamMaxRows(f)) return 0;
    return std::max(BytesFor<true>(groups, m), BytesFor<false>(groups, m));
  }
};

// A micro tile's accumulators to and from their parking place between K chunks, written as
// nested unrolled loops: for the flat `acc[i / 4][i % 4]` form GCC 12 kept a stack copy of the
// whole tile beside the registers, 30 extra zmm moves per call (Zen 4, 2 threads, M = 512: FP8
// wq_b 323 -> 356 GFLOP/s, FP4 expert 355 -> 380 without them). The micro-kernels' own loops
// carry unroll pragmas too: at -O2 (the default RelWithDebInfo build) GCC left them rolled, the
// tile in a stack array, at 125-130 GFLOP/s. register_residency.py checks both.
template <int MR>
inline void Unpark(const __m512* parked, __m512 (&acc)[MR][4]) {
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int n = 0; n < 4; ++n) acc[r][n] = parked[r * 4 + n];
}

template <int MR>
inline void Park(const __m512 (&acc)[MR][4], __m512* parked) {
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int n = 0; n < 4; ++n) parked[r * 4 + n] = acc[r][n];
}

// MR (1-4) activation rows x 4 panel rows over groups [0, groups) of a K chunk; the accumulators
// are carried across chunks in `acc_io` ([MR][4] zmm; zero for the first chunk), so each lane
// still sees one chain. Meanwhile it prefetches `prefetch_lines` cache lines from `prefetch` (one
// per group), the next panel's weights, so that small M does not wait for DRAM in the next
// panel's decode. A tail tile of M % 4 rows runs MR < 4 instead of zero-padded rows: the routed
// experts of a batch-16 decode step see M ~ 2-10, where padding to 8 cost up to 37% of the FMAs.
template <int MR>
void MicroMx4(const float* panel, const float* x, int64_t xstride, int64_t groups, __m512* acc_io, const char* prefetch,
              int64_t prefetch_lines) {
  __m512 acc[MR][4];
  Unpark<MR>(acc_io, acc);
  for (int64_t g = 0; g < groups; ++g) {
    if (g < prefetch_lines) _mm_prefetch(prefetch + g * 64, _MM_HINT_T1);
    const float* p = panel + g * kPanelN * kGroup;
    __m512 xe[MR], xo[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
      xe[r] = _mm512_load_ps(x + r * xstride + g * kGroup), xo[r] = _mm512_load_ps(x + r * xstride + g * kGroup + 16);
#pragma GCC unroll 4
    for (int n = 0; n < 4; ++n) {
      const __m512 wo = _mm512_load_ps(p + n * kGroup + 16);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) acc[r][n] = _mm512_fmadd_ps(xo[r], wo, acc[r][n]);
      const __m512 we = _mm512_load_ps(p + n * kGroup);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) acc[r][n] = _mm512_fmadd_ps(xe[r], we, acc[r][n]);
    }
  }
  Park<MR>(acc, acc_io);
}

// The same tile on vdpbf16ps: panel [group][row][16 bf16 pairs], x rows of bf16 pairs (stride in
// dwords). One instruction per pair vector where MicroMx4 takes two FMAs.
template <int MR>
void MicroDpMx4(const uint32_t* panel, const uint32_t* x, int64_t xstride, int64_t groups, __m512* acc_io,
                const char* prefetch, int64_t prefetch_lines) {
  __m512 acc[MR][4];
  Unpark<MR>(acc_io, acc);
  for (int64_t g = 0; g < groups; ++g) {
    if (g < prefetch_lines) _mm_prefetch(prefetch + g * 64, _MM_HINT_T1);
    const uint32_t* p = panel + g * kPanelN * 16;
    __m512i xv[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) xv[r] = _mm512_load_si512(x + r * xstride + g * 16);
#pragma GCC unroll 4
    for (int n = 0; n < 4; ++n) {
      const __m512i w = _mm512_load_si512(p + n * 16);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], (__m512bh)xv[r], (__m512bh)w);
    }
  }
  Park<MR>(acc, acc_io);
}

// One register tile of mr (1-4) activation rows; T is float (FMA panels) or uint32_t (bf16 pairs).
template <class T>
void Micro(int64_t mr, const T* panel, const T* x, int64_t xstride, int64_t groups, __m512* acc, const char* prefetch,
           int64_t prefetch_lines) {
  WithCount<1, kPanelM>(mr, "GEMM micro-kernel rows", [&]<int MR>() {
    if constexpr (std::is_same_v<T, float>) {
      MicroMx4<MR>(panel, x, xstride, groups, acc, prefetch, prefetch_lines);
    } else {
      MicroDpMx4<MR>(panel, x, xstride, groups, acc, prefetch, prefetch_lines);
    }
  });
}

// Where group g of one weight row is: its bytes and its scale byte (0 for unscaled formats), in
// the interleaved copy when an FP4 matrix has one (so a prefill reads the same copy as decode
// does), else in place (FP8 too: its interleaved blocks hold row pairs for DecodeE4M3Pair).
template <MatrixFormat F>
struct RowGroups {
  RowGroups(const WeightMatrix& w, int64_t n, int64_t row_bytes) {
    const int64_t scale_row = F == MatrixFormat::kFP8Block32 ? n / kQuantBlock : n;
    scales = kQuantized<F> ? w.scales + scale_row * w.scale_cols() : nullptr;
    codes = w.data + n * row_bytes;
    step = GroupBytes(F);
    if (F == MatrixFormat::kFP4Row32 && w.interleaved) {
      const int64_t tile = n / InterleavedTiles::kRows, i = n % InterleavedTiles::kRows;
      const uint8_t* block0 = w.interleaved.data + tile * w.scale_cols() * InterleavedTiles::BlockBytes(F);
      step = scale_step = InterleavedTiles::BlockBytes(F);
      scales = block0 + i;
      codes = block0 + InterleavedTiles::kRows + 64 * (i / 4);
      quad_row = static_cast<int>(i % 4);
    }
  }
  // Group g as bf16 pairs (the vdpbf16ps panels) or as fp32 even / odd members (the FMA panels).
  __m512i Pairs(int64_t g) const {
    if constexpr (F == MatrixFormat::kFP4Row32) {
      if (quad_row >= 0) return DecodeFp4QuadPairs(LoadFp4Quad(Codes(g), 0), quad_row, Scale(g));
    }
    return DecodePairs<F>(Codes(g), Scale(g));
  }
  void Load(const FmaDecoder<F>& dec, int64_t g, __m512& even, __m512& odd) const {
    if constexpr (F == MatrixFormat::kFP4Row32) {
      if (quad_row >= 0) return DecodeFp4Quad(LoadFp4Quad(Codes(g), 0), quad_row, Scale(g), even, odd);
    }
    dec.Load(Codes(g), Scale(g), g, even, odd);
  }

 private:
  const uint8_t* Codes(int64_t g) const { return codes + g * step; }
  uint8_t Scale(int64_t g) const { return scales != nullptr ? scales[g * scale_step] : 0; }

  const uint8_t* codes;
  const uint8_t* scales;
  int64_t step;
  int64_t scale_step = 1;
  int quad_row = -1;  // FP4 copy: the row's place in its quad
};

// Decodes groups [g0, g0 + gc) of the panel's weight rows n0 .. n0 + 3 into `panel` ([group][row]
// of kRowGroup T); rows at or past n_end stay zero.
template <MatrixFormat F, bool kDp, class T>
void DecodeChunk(const WeightMatrix& w, const FmaDecoder<F>& dec, int64_t n0, int64_t n_end, int64_t g0, int64_t gc,
                 T* panel) {
  constexpr int64_t kRowGroup = kDp ? 16 : kGroup;
  const int64_t row_bytes = MatrixRowBytes(F, w.cols);
  for (int i = 0; i < kPanelN; ++i) {
    const bool real = n0 + i < n_end;
    const RowGroups<F> rg(w, real ? n0 + i : n0, row_bytes);
    for (int64_t g = g0; g < g0 + gc; ++g) {
      T* p = panel + ((g - g0) * kPanelN + i) * kRowGroup;
      if constexpr (kDp) {
        _mm512_store_si512(p, real ? rg.Pairs(g) : _mm512_setzero_si512());
      } else {
        __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
        if (real) rg.Load(dec, g, even, odd);
        _mm512_store_ps(p, even);
        _mm512_store_ps(p + 16, odd);
      }
    }
  }
}

// The weight bytes of the panel after the one at n0 (in place its rows are contiguous;
// interleaved, each panel of a tile takes a quarter of the next tile): the lines to prefetch while
// decoding this one.
template <MatrixFormat F>
std::pair<const char*, int64_t> NextPanelLines(const WeightMatrix& w, int64_t groups, int64_t n0, int64_t n_end) {
  if (F == MatrixFormat::kFP4Row32 && w.interleaved) {
    const int64_t tile_bytes = groups * InterleavedTiles::BlockBytes(F);
    const int64_t next_tile = n0 / InterleavedTiles::kRows + 1, quarter = (tile_bytes + 3) / 4;
    const bool last = next_tile * InterleavedTiles::kRows >= n_end;
    return {reinterpret_cast<const char*>(w.interleaved.data + next_tile * tile_bytes +
                                          n0 % InterleavedTiles::kRows / kPanelN * quarter),
            last ? 0 : (quarter + 63) / 64};
  }
  const int64_t row_bytes = MatrixRowBytes(F, w.cols);
  return {reinterpret_cast<const char*>(w.data + std::min(n0 + kPanelN, n_end) * row_bytes),
          (std::min<int64_t>(kPanelN, std::max<int64_t>(0, n_end - n0 - kPanelN)) * row_bytes + 63) / 64};
}

// Weight rows [n_begin, n_end), m > StreamMaxRows. Per run of panels (RunPanels), per block of
// activation rows (MBlock: their canonical rows stay in L2) and per 4-row panel, K chunk by K
// chunk: the first block decodes the chunk of the 4 weight rows to fp32 [group][row][even | odd]
// - or, with kDp, to bf16 pairs [group][row][16] - (16 KiB, in L1 for its micro-kernels), the
// later blocks read it back from the run's buffer; every 4-row activation tile of the block runs
// 4x4 register tiles of FMAs (vdpbf16ps) on it, its accumulators parked in `acc` between chunks.
// The operations per output element are the same whichever block decoded the chunk.
template <MatrixFormat F, bool kDp>
void PanelRowsT(const Job& job, int64_t n_begin, int64_t n_end, unsigned char* scratch) {
  using T = std::conditional_t<kDp, uint32_t, float>;
  constexpr int64_t kRowGroup = kDp ? 16 : kGroup;  // T elements per row and group
  constexpr int64_t kChunk = kChunkGroups<kDp>;
  const T* xs;
  if constexpr (kDp) {
    xs = job.xb;
  } else {
    xs = job.xs;
  }
  const WeightMatrix& w = *job.w;
  const int64_t groups = job.groups, xstride = job.xstride;
  const FmaDecoder<F> dec{w.cols};
  const int64_t m_pad = (job.m + kPanelM - 1) / kPanelM * kPanelM;
  const int64_t m_block = MBlock<kDp>(groups);
  const int64_t chunks = (groups + kChunk - 1) / kChunk;
  const int64_t run_panels = RunPanels<kDp>(groups, job.m);
  const bool keep = run_panels > 1;  // later M blocks read the run's decoded chunks
  __m512* acc = reinterpret_cast<__m512*>(scratch);
  T* const decoded = reinterpret_cast<T*>(scratch + Scratch::AccBytes(groups));
  for (int64_t run0 = n_begin; run0 < n_end; run0 += run_panels * kPanelN) {
    const int64_t run1 = std::min(n_end, run0 + run_panels * kPanelN);
    for (int64_t m0 = 0; m0 < m_pad; m0 += m_block) {
      const int64_t m1 = std::min(m_pad, m0 + m_block), tiles = (m1 - m0) / kPanelM;
      const bool decode = m0 == 0 || !keep;
      for (int64_t n0 = run0; n0 < run1; n0 += kPanelN) {
        for (int64_t i = 0; i < tiles * 16; ++i) acc[i] = _mm512_setzero_ps();
        // The Micro calls prefetch, their lines spread over the calls: while decoding, the next
        // panel's weights (over the whole panel); reading the run back, the next decoded chunk.
        auto [next, next_lines] = decode ? NextPanelLines<F>(w, groups, n0, n_end) : std::pair<const char*, int64_t>{};
        const int64_t calls = decode ? chunks * tiles : tiles;
        for (int64_t c = 0; c < chunks; ++c) {
          const int64_t g0 = c * kChunk, gc = std::min(kChunk, groups - g0);
          T* const panel = keep ? decoded + ((n0 - run0) / kPanelN * chunks + c) * kChunkFloats : decoded;
          if (decode) {
            DecodeChunk<F, kDp>(w, dec, n0, n_end, g0, gc, panel);
          } else {
            const bool last = n0 + kPanelN >= run1 && c + 1 == chunks;  // the run's last chunk
            next = reinterpret_cast<const char*>(panel + kChunkFloats);
            next_lines = last ? 0 : kChunkFloats * static_cast<int64_t>(sizeof(T)) / 64;
          }
          const int64_t per_call = (next_lines + calls - 1) / calls;
          for (int64_t t = 0; t < tiles; ++t) {
            const int64_t r0 = m0 + t * kPanelM, call = decode ? c * tiles + t : t;
            const int64_t first_line = std::min(call * per_call, next_lines);
            Micro<T>(std::min(kPanelM, job.m - r0), panel, xs + r0 * xstride + g0 * kRowGroup, xstride, gc,
                     acc + t * 16, next + first_line * 64, std::min(per_call, next_lines - first_line));
          }
        }
        const int nr = static_cast<int>(std::min<int64_t>(kPanelN, n_end - n0));
        for (int64_t r = m0; r < std::min(m1, job.m); ++r) {
          const __m512* a = acc + (r - m0) / kPanelM * 16 + (r - m0) % kPanelM * 4;
          for (int i = 0; i < nr; ++i) job.y[r * w.rows + n0 + i] = Finish(ReduceLanes(a[i]), job.round_to_bf16);
        }
      }
    }
  }
}

// ---- the ISA interface used by linear_simd::Driver ---------------------------------------------

template <template <MatrixFormat> class Fn, class... Args>
auto ByFormat(MatrixFormat f, Args&&... args) {
  switch (f) {
    case MatrixFormat::kFP4Row32:
      return Fn<MatrixFormat::kFP4Row32>::Call(args...);
    case MatrixFormat::kFP8Block32:
      return Fn<MatrixFormat::kFP8Block32>::Call(args...);
    case MatrixFormat::kBF16:
      return Fn<MatrixFormat::kBF16>::Call(args...);
    case MatrixFormat::kF32:
      break;
  }
  return Fn<MatrixFormat::kF32>::Call(args...);
}

template <MatrixFormat F>
struct StreamFn {
  static void Call(const Job& job, int64_t b, int64_t e) {
    if constexpr (kPairs<F>) {
      if (job.xb != nullptr) return InPasses<true>(job, b, e);
    }
    InPasses<false>(job, b, e);
  }
  // More than kTileMaxM rows: FP8 and BF16 on the interleaved copy in one pass (OnePass); else
  // ceil(m / kTileMaxM) passes of near-equal row counts over each block of weight rows (a multiple
  // of 32 rows, so that FP8 blocks and the FP4 copy's tiles stay whole).
  template <bool kDp>
  static void InPasses(const Job& job, int64_t b, int64_t e) {
    if (job.m <= kTileMaxM) return ByRows<kDp>(job, b, e);
    if constexpr (kDp && (F == MatrixFormat::kFP8Block32 || F == MatrixFormat::kBF16)) {
      if (CopyReadable(*job.w) && job.m <= kOnePassMaxM) return OnePass(job, b, e);
    }
    const WeightMatrix& w = *job.w;
    const int64_t row_bytes = MatrixRowBytes(F, w.cols) + (kQuantized<F> ? w.scale_cols() : 0);
    const int64_t block = std::max<int64_t>(kQuantBlock, kPassBlockBytes / row_bytes / kQuantBlock * kQuantBlock);
    const int64_t passes = (job.m + kTileMaxM - 1) / kTileMaxM;
    for (int64_t n = b; n < e; n += block) {
      for (int64_t p = 0, r0 = 0; p < passes; ++p) {
        const int64_t rows = (job.m - r0) / (passes - p);
        Job part = job;
        part.m = rows;
        if (kDp) {
          part.xb = job.xb + r0 * job.xstride;
        } else {
          part.xs = job.xs + r0 * job.xstride;
        }
        part.y = job.y + r0 * w.rows;
        ByRows<kDp>(part, n, std::min(e, n + block));
        r0 += rows;
      }
    }
  }
  // FP8 and BF16 on the interleaved copy, 9-16 rows: one pass over the weights, its later passes
  // over each chunk from L1 (LaterPasses).
  static void OnePass(const Job& job, int64_t b, int64_t e) {
    WithCount<kTileMaxM + 1, kOnePassMaxM>(job.m, "one-pass tile rows",
                                           [&]<int MR>() { StreamInterleaved<F, MR, true>(job, b, e); });
  }
  template <bool kDp>
  static void ByRows(const Job& job, int64_t b, int64_t e) {
    WithCount<1, kTileMaxM>(job.m, "streaming tile rows", [&]<int MR>() { StreamRowsT<F, MR, kDp>(job, b, e); });
  }
};
template <MatrixFormat F>
struct PanelFn {
  static void Call(const Job& job, int64_t b, int64_t e, unsigned char* scratch) {
    if constexpr (kPairs<F>) {
      if (job.xb != nullptr) return PanelRowsT<F, true>(job, b, e, scratch);
    }
    PanelRowsT<F, false>(job, b, e, scratch);
  }
};
template <MatrixFormat F>
struct PrepQuantFn {
  static ExpRange Call(const float* x, int64_t k, float* xs, uint32_t* xb) {
    if constexpr (F == MatrixFormat::kFP8Block32 || F == MatrixFormat::kFP4Row32)
      return PrepareQuantized<F>(x, k, xs, xb);
    return {};
  }
};
template <MatrixFormat F>
struct PrepDenseFn {
  static int Call(const float* x, int64_t k, float* xs) {
    if constexpr (F != MatrixFormat::kFP4Row32) PrepareDense<F>(x, k, xs);
    return 0;
  }
};

struct Avx512 {
  static constexpr int64_t kActivationRowPad = 0;  // its tiles measured no L1 set conflicts between rows
  // FP8 with an interleaved copy that its decode reads streams up to 16 rows too, in one pass
  // (OnePass), on the Zen 4 plan.
  static int64_t StreamMaxM(const WeightMatrix& w, Bf16Dot dot) {
    if (w.format == MatrixFormat::kFP8Block32 && dot == Bf16Dot::kQuantized && CopyReadable(w)) {
      return kInterleavedFp8StreamMaxM;
    }
    return StreamMaxRows(w.format);
  }
  static ExpRange PrepareQuantizedRow(const float* x, int64_t k, MatrixFormat f, float* xs, uint32_t* xb) {
    return ByFormat<PrepQuantFn>(f, x, k, xs, xb);
  }
  static void PrepareDenseRow(const float* x, int64_t k, MatrixFormat f, float* xs) {
    ByFormat<PrepDenseFn>(f, x, k, xs);
  }
  static ExpRange ScaleRange(const uint8_t* s, int64_t count) {
    __m512i lo = _mm512_set1_epi8(-1), hi = _mm512_setzero_si512();
    for (int64_t i = 0; i < count; i += 64) {
      const __mmask64 m = count - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (count - i)) - 1;
      lo = _mm512_mask_min_epu8(lo, m, lo, _mm512_maskz_loadu_epi8(m, s + i));
      hi = _mm512_mask_max_epu8(hi, m, hi, _mm512_maskz_loadu_epi8(m, s + i));
    }
    const __m256i lo32 = _mm256_min_epu8(_mm512_castsi512_si256(lo), _mm512_extracti64x4_epi64(lo, 1));
    const __m256i hi32 = _mm256_max_epu8(_mm512_castsi512_si256(hi), _mm512_extracti64x4_epi64(hi, 1));
    __m128i l = _mm_min_epu8(_mm256_castsi256_si128(lo32), _mm256_extracti128_si256(lo32, 1));
    __m128i h = _mm_max_epu8(_mm256_castsi256_si128(hi32), _mm256_extracti128_si256(hi32, 1));
    l = _mm_min_epu8(l, _mm_srli_si128(l, 8)), h = _mm_max_epu8(h, _mm_srli_si128(h, 8));
    l = _mm_min_epu8(l, _mm_srli_si128(l, 4)), h = _mm_max_epu8(h, _mm_srli_si128(h, 4));
    l = _mm_min_epu8(l, _mm_srli_si128(l, 2)), h = _mm_max_epu8(h, _mm_srli_si128(h, 2));
    l = _mm_min_epu8(l, _mm_srli_si128(l, 1)), h = _mm_max_epu8(h, _mm_srli_si128(h, 1));
    const int mn = _mm_cvtsi128_si32(l) & 0xff, mx = _mm_cvtsi128_si32(h) & 0xff;
    return {mn - 127, mx - 127};
  }
  static size_t ScratchBytes(MatrixFormat f, int64_t groups, int64_t m) { return Scratch::Bytes(f, groups, m); }
  // On the Zen 4 plan (vdpbf16ps at twice the FMA rate) dense FP8 weights, and BF16 ones in the GEMM,
  // run on it too wherever a call proves it exact; the Xeon plan keeps them on FMAs (not measured
  // there). Measured on Zen 4 (linear_bench, 2 threads): BF16 8192x5120 at M = 512 352 -> 166 ms,
  // FP8 wo_a 1024x4096 at M = 1 / 16 / 512 0.283 / 1.23 / 30.2 -> 0.210 / 0.69 / 16.5 ms; but the
  // BF16 head GEMV (M = 1, 2), which needs no decode, streamed DRAM no faster, often slower
  // (50-52 ms on FMAs, 58-71 ms on vdpbf16ps), so BF16 streaming tiles stay on FMAs.
  static bool DenseUsesPairs(MatrixFormat f, int64_t m, Bf16Dot dot) {
    if (dot != Bf16Dot::kQuantized) return false;
    return f == MatrixFormat::kFP8Block32 || (f == MatrixFormat::kBF16 && m > kBf16FmaMaxM);
  }
  static linear_simd::DenseRow PrepareDensePairsRow(const float* x, int64_t k, uint32_t* xb) {
    return PrepareDensePairs(x, k, xb);
  }
  static bool UsesPairs(MatrixFormat f, int64_t m, Bf16Dot dot) {
    switch (f) {
      case MatrixFormat::kFP8Block32:
        return dot == Bf16Dot::kQuantized || (dot == Bf16Dot::kFp8Gemv && m <= StreamMaxRows(f));
      case MatrixFormat::kFP4Row32:
        return dot == Bf16Dot::kQuantized;
      default:
        return false;
    }
  }
  static void StreamRows(const Job& job, int64_t b, int64_t e, unsigned char*) {
    ByFormat<StreamFn>(job.w->format, job, b, e);
  }
  static void PanelRows(const Job& job, int64_t b, int64_t e, unsigned char* scratch) {
    ByFormat<PanelFn>(job.w->format, job, b, e, scratch);
  }
};

}  // namespace

void QuantizedLinearAvx512(const WeightMatrix& w, const float* x, int64_t m, float* y, ThreadPool& pool, Bf16Dot dot,
                           ThreadScratch* scratch) {
  linear_simd::Driver<Avx512>::Quantized(w, x, m, y, pool, dot, scratch);
}

void DenseLinearAvx512(const WeightMatrix& w, const float* x, int64_t m, float* y, bool round_to_bf16, ThreadPool& pool,
                       Bf16Dot dot, ThreadScratch* scratch) {
  linear_simd::Driver<Avx512>::Dense(w, x, m, y, round_to_bf16, pool, dot, scratch);
}

}  // namespace deepinfer
