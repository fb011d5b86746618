#include "core/numeric.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace deepinfer {
namespace {

std::array<float, 256> BuildE4M3Table() {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) {
    const int exponent = (code >> 3) & 0x0F;
    const int mantissa = code & 0x07;
    float magnitude;
    if ((code & 0x7F) == 0x7F) {
      magnitude = std::nanf("");
    } else if (exponent == 0) {
      magnitude = std::ldexp(static_cast<float>(mantissa), -9);
    } else {
      magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
    }
    table[code] = (code & 0x80) ? -magnitude : magnitude;
  }
  return table;
}

constexpr float kFP8MaxInv = 1.0f / 448.0f;  // the kernels multiply by this fp32 constant
constexpr float kFP4MaxInv = 1.0f / 6.0f;

float BlockAbsMax(std::span<const float> block) {
  float amax = 0.0f;
  for (float v : block) amax = std::max(amax, std::fabs(v));
  return amax;
}

}  // namespace

const std::array<float, 256> kE4M3Values = BuildE4M3Table();

uint8_t FloatToE4M3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value)) return static_cast<uint8_t>(sign | 0x7F);
  const float magnitude = std::min(std::fabs(value), kFP8Max);
  if (magnitude < 0.015625f) {  // below 2^-6: subnormal grid of 2^-9, RNE via rint
    const float steps = std::nearbyint(magnitude * 512.0f);
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(steps));  // steps == 8 is 2^-6, code 0x08
  }
  // Normal: round the fp32 mantissa to 3 bits, to nearest even, on the bit pattern.
  uint32_t bits = std::bit_cast<uint32_t>(magnitude);
  bits += (1u << 19) - 1u + ((bits >> 20) & 1u);
  const int exponent = static_cast<int>(bits >> 23) - 127;
  const uint32_t mantissa = (bits >> 20) & 0x7u;
  return static_cast<uint8_t>(sign | static_cast<uint8_t>(((exponent + 7) << 3) | mantissa));
}

uint8_t FloatToE2M1(float value) {
  const float magnitude = std::fabs(value);
  uint8_t code = 0;
  for (size_t i = 0; i < kE2M1Midpoints.size(); ++i) {
    if (magnitude > kE2M1Midpoints[i] || (magnitude == kE2M1Midpoints[i] && kE2M1TieUp[i])) ++code;
  }
  return static_cast<uint8_t>(code | (std::signbit(value) ? 0x08 : 0x00));
}

float FP8PowerOfTwoBlockScale(float amax) { return PowerOfTwoScaleCeil(std::max(amax, 1e-4f), kFP8MaxInv); }

float FP4PowerOfTwoBlockScale(float amax) {
  return PowerOfTwoScaleCeil(std::max(amax, 6.0f * std::ldexp(1.0f, -126)), kFP4MaxInv);
}

uint8_t FP4E4M3BlockScaleCode(float amax) { return FloatToE4M3(std::max(amax, 6.0f * std::ldexp(1.0f, -9)) / kFP4Max); }

namespace {

void CheckBlocks(size_t n, size_t block) {
  DI_CHECK(block > 0 && n % block == 0, "size ", n, " not a multiple of block ", block);
}

void PackNibble(uint8_t* packed, size_t i, uint8_t code) {
  if (i & 1) {
    packed[i >> 1] = static_cast<uint8_t>((packed[i >> 1] & 0x0F) | (code << 4));
  } else {
    packed[i >> 1] = static_cast<uint8_t>((packed[i >> 1] & 0xF0) | code);
  }
}

}  // namespace

void EncodeFP8PowerOfTwo(std::span<const float> values, size_t block, uint8_t* codes, uint8_t* exponents) {
  CheckBlocks(values.size(), block);
  for (size_t b = 0; b < values.size() / block; ++b) {
    std::span<const float> blk = values.subspan(b * block, block);
    const float scale = FP8PowerOfTwoBlockScale(BlockAbsMax(blk));
    exponents[b] = UE8M0Byte(scale);
    for (size_t i = 0; i < block; ++i)
      codes[b * block + i] = FloatToE4M3(std::clamp(blk[i] / scale, -kFP8Max, kFP8Max));
  }
}

void DecodeFP8PowerOfTwo(const uint8_t* codes, const uint8_t* exponents, size_t n, size_t block, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = RoundToBF16(E4M3ToFloat(codes[i]) * UE8M0ToFloat(exponents[i / block]));
}

void EncodeFP4PowerOfTwo(std::span<const float> values, size_t block, uint8_t* packed, uint8_t* exponents) {
  CheckBlocks(values.size(), block);
  for (size_t b = 0; b < values.size() / block; ++b) {
    std::span<const float> blk = values.subspan(b * block, block);
    const float scale = FP4PowerOfTwoBlockScale(BlockAbsMax(blk));
    exponents[b] = UE8M0Byte(scale);
    for (size_t i = 0; i < block; ++i) {
      PackNibble(packed, b * block + i, FloatToE2M1(std::clamp(blk[i] / scale, -kFP4Max, kFP4Max)));
    }
  }
}

void DecodeFP4PowerOfTwo(const uint8_t* packed, const uint8_t* exponents, size_t n, size_t block, float* out) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = RoundToBF16(E2M1ToFloat(PackedFP4Code(packed, i)) * UE8M0ToFloat(exponents[i / block]));
  }
}

void EncodeFP4E4M3Scale(std::span<const float> values, size_t block, uint8_t* packed, uint8_t* scales) {
  CheckBlocks(values.size(), block);
  for (size_t b = 0; b < values.size() / block; ++b) {
    std::span<const float> blk = values.subspan(b * block, block);
    scales[b] = FP4E4M3BlockScaleCode(BlockAbsMax(blk));
    const float scale = E4M3ToFloat(scales[b]);
    for (size_t i = 0; i < block; ++i) {
      PackNibble(packed, b * block + i, FloatToE2M1(std::clamp(blk[i] / scale, -kFP4Max, kFP4Max)));
    }
  }
}

void DecodeFP4E4M3Scale(const uint8_t* packed, const uint8_t* scales, size_t n, size_t block, float* out) {
  for (size_t i = 0; i < n; ++i)
    out[i] = RoundToBF16(E2M1ToFloat(PackedFP4Code(packed, i)) * E4M3ToFloat(scales[i / block]));
}

void QdqFP8PowerOfTwo(std::span<float> values, size_t block) {
  CheckBlocks(values.size(), block);
  std::vector<uint8_t> codes(values.size()), exponents(values.size() / block);
  EncodeFP8PowerOfTwo(values, block, codes.data(), exponents.data());
  DecodeFP8PowerOfTwo(codes.data(), exponents.data(), values.size(), block, values.data());
}

void QuantizeFP8PowerOfTwo(std::span<const float> values, size_t block, std::span<uint8_t> codes,
                           std::span<float> scales) {
  DI_CHECK(values.size() % block == 0 && codes.size() == values.size() && scales.size() == values.size() / block);
  for (size_t b = 0; b < scales.size(); ++b) {
    std::span<const float> blk = values.subspan(b * block, block);
    scales[b] = FP8PowerOfTwoBlockScale(BlockAbsMax(blk));
    for (size_t i = 0; i < block; ++i) {
      codes[b * block + i] = FloatToE4M3(std::clamp(blk[i] / scales[b], -kFP8Max, kFP8Max));
    }
  }
}

void QdqFP4PowerOfTwo(std::span<float> values, size_t block) {
  CheckBlocks(values.size(), block);
  std::vector<uint8_t> packed((values.size() + 1) / 2), exponents(values.size() / block);
  EncodeFP4PowerOfTwo(values, block, packed.data(), exponents.data());
  DecodeFP4PowerOfTwo(packed.data(), exponents.data(), values.size(), block, values.data());
}

void QdqFP4E4M3Scale(std::span<float> values, size_t block) {
  CheckBlocks(values.size(), block);
  std::vector<uint8_t> packed((values.size() + 1) / 2), scales(values.size() / block);
  EncodeFP4E4M3Scale(values, block, packed.data(), scales.data());
  DecodeFP4E4M3Scale(packed.data(), scales.data(), values.size(), block, values.data());
}

}  // namespace deepinfer
