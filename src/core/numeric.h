// The numeric formats of DeepSeek-V4.1 checkpoints and its QAT quantizers.
//
// Bit layouts:
//   bf16   : 1 sign, 8 exponent (bias 127), 7 mantissa -- the top half of an fp32.
//   e4m3fn : 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities, 0x7F/0xFF are NaN,
//            largest finite 448, exponent field 0 is subnormal (m * 2^-9).
//   ue8m0  : 8-bit unsigned exponent, value 2^(e-127); 0xFF is NaN.
//   e2m1   : 4 bits, bit 3 = sign, bits 0-2 index {0, .5, 1, 1.5, 2, 3, 4, 6}; code 8 is -0.
//            Packed two per byte along K, the even K index in the low nibble.
//
// All conversions are exact reimplementations of the reference kernels' bit rules
// (round-to-nearest-even, saturating casts, power-of-two scale rounding by exponent bits).
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace deepinfer {

// ---- bf16 -------------------------------------------------------------------------------

using bf16_t = uint16_t;  // raw bits; arithmetic always happens in fp32

inline float BF16ToFloat(bf16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// Round-to-nearest-even, NaN stays NaN (quiet).
inline bf16_t FloatToBF16(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_t>(u >> 16);
}

// The value an fp32 takes after a round trip through bf16 storage.
inline float RoundToBF16(float value) { return BF16ToFloat(FloatToBF16(value)); }

// ---- FP8 e4m3fn ---------------------------------------------------------------------------

inline constexpr float kFP8Max = 448.0f;

extern const std::array<float, 256> kE4M3Values;

inline float E4M3ToFloat(uint8_t code) { return kE4M3Values[code]; }

// fp32 -> e4m3fn, round-to-nearest-even, saturating at +-448 (the CUDA `satfinite`
// conversion). NaN maps to the NaN code 0x7F with its sign.
uint8_t FloatToE4M3(float value);

// ---- ue8m0 scales -------------------------------------------------------------------------

inline float UE8M0ToFloat(uint8_t exponent) {
  if (exponent == 0xFF) return std::nanf("");
  if (exponent == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127, an fp32 subnormal
  return std::bit_cast<float>(static_cast<uint32_t>(exponent) << 23);
}

// 2^ceil(log2(amax * max_inv)), computed from the exponent bits exactly like the
// reference's `fast_round_scale` (exponent - 127, plus one if any mantissa bit is set).
// `amax * max_inv` must be a normal positive fp32 (callers clamp amax first).
inline float PowerOfTwoScaleCeil(float amax, float max_inv) {
  const uint32_t bits = std::bit_cast<uint32_t>(amax * max_inv);
  const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xFF);
  const int32_t log2_ceil = exponent - 127 + ((bits & 0x7FFFFFu) != 0 ? 1 : 0);
  return std::bit_cast<float>(static_cast<uint32_t>(log2_ceil + 127) << 23);
}

// ---- FP4 e2m1 -----------------------------------------------------------------------------

inline constexpr float kFP4Max = 6.0f;
inline constexpr std::array<float, 16> kE2M1Values = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                                      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

inline float E2M1ToFloat(uint8_t code) { return kE2M1Values[code & 0x0F]; }

// fp32 already clamped to [-6, 6] -> e2m1 code, round-to-nearest-even: at an exact tie the
// value moves up only onto an even code (0.75 -> 1, 1.75 -> 2, 3.5 -> 4). The sign of zero
// is kept (code 8).
uint8_t FloatToE2M1(float value);
// Its rule as data: the magnitude code is the number of midpoints below |value|, counting a
// midpoint equal to |value| where kE2M1TieUp says so.
inline constexpr std::array<float, 7> kE2M1Midpoints = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
inline constexpr std::array<bool, 7> kE2M1TieUp = {false, true, false, true, false, true, false};

// Logical element k of a packed FP4 row.
inline uint8_t PackedFP4Code(const uint8_t* row, size_t k) {
  const uint8_t byte = row[k >> 1];
  return (k & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0x0F);
}

// ---- QAT quantizers (spec section 7.1), quantize-then-dequantize in place -------------------
// Inputs are the bf16 values (as fp32) of one row; outputs are the bf16-rounded dequantized
// values, written back as fp32. Each works on consecutive blocks of `block` elements.

// act_quant(x, block, "ue8m0", inplace=True): FP8 e4m3 with power-of-two scales.
void QdqFP8PowerOfTwo(std::span<float> values, size_t block);
// fp4_act_quant(x, block, inplace=True): e2m1 with ue8m0 (power-of-two) scales.
void QdqFP4PowerOfTwo(std::span<float> values, size_t block);
// fp4_act_quant(x, block, inplace=True, scale_dtype=e4m3): e2m1 with e4m3 scales.
void QdqFP4E4M3Scale(std::span<float> values, size_t block);

// The same quantizers as encode/decode pairs, for storage that must reproduce the QDQ'd
// values exactly (the KV cache formats of spec section 4.1). Decode(Encode(x)) equals the
// Qdq* result bit for bit; the Qdq* functions are implemented that way.
//   FP8 power-of-two: `codes` [n] e4m3, `exponents` [n / block] ue8m0.
//   FP4 power-of-two: `packed` [n / 2] e2m1 (even element in the low nibble), `exponents` [n / block] ue8m0.
//   FP4 e4m3-scaled:  `packed` [n / 2], `scales` [n / block] e4m3 codes.
void EncodeFP8PowerOfTwo(std::span<const float> values, size_t block, uint8_t* codes, uint8_t* exponents);
void DecodeFP8PowerOfTwo(const uint8_t* codes, const uint8_t* exponents, size_t n, size_t block, float* out);
void EncodeFP4PowerOfTwo(std::span<const float> values, size_t block, uint8_t* packed, uint8_t* exponents);
void DecodeFP4PowerOfTwo(const uint8_t* packed, const uint8_t* exponents, size_t n, size_t block, float* out);
void EncodeFP4E4M3Scale(std::span<const float> values, size_t block, uint8_t* packed, uint8_t* scales);
void DecodeFP4E4M3Scale(const uint8_t* packed, const uint8_t* scales, size_t n, size_t block, float* out);

// The encoders' block scales from the block's amax (its largest |value|, NaNs skipped):
//   FP8 power-of-two: 2^ceil(log2(max(amax, 1e-4) / 448)), as act_quant;
//   FP4 power-of-two: 2^ceil(log2(max(amax, 6 * 2^-126) / 6));
//   FP4 e4m3-scaled:  the e4m3 code of max(amax, 6 * 2^-9) / 6.
float FP8PowerOfTwoBlockScale(float amax);
float FP4PowerOfTwoBlockScale(float amax);
uint8_t FP4E4M3BlockScaleCode(float amax);
// The ue8m0 byte of a power-of-two scale (its biased exponent).
inline uint8_t UE8M0Byte(float power_of_two) {
  return static_cast<uint8_t>(std::bit_cast<uint32_t>(power_of_two) >> 23);
}

// The FP8 activation quantization every FP8/FP4 GEMM applies to its input: codes plus one
// power-of-two scale per block (the non-inplace act_quant).
void QuantizeFP8PowerOfTwo(std::span<const float> values, size_t block, std::span<uint8_t> codes,
                           std::span<float> scales);

}  // namespace deepinfer
