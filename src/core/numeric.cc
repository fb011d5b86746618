#include "core/numeric.h"

#include <algorithm>

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
  static constexpr float kMids[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  static constexpr bool kTieUp[7] = {false, true, false, true, false, true, false};
  const float magnitude = std::fabs(value);
  uint8_t code = 0;
  for (int i = 0; i < 7; ++i) {
    if (magnitude > kMids[i] || (magnitude == kMids[i] && kTieUp[i])) ++code;
  }
  return static_cast<uint8_t>(code | (std::signbit(value) ? 0x08 : 0x00));
}

void QdqFP8PowerOfTwo(std::span<float> values, size_t block) {
  DI_CHECK(values.size() % block == 0, "size ", values.size(), " not a multiple of block ", block);
  for (size_t start = 0; start < values.size(); start += block) {
    std::span<float> blk = values.subspan(start, block);
    const float scale = PowerOfTwoScaleCeil(std::max(BlockAbsMax(blk), 1e-4f), kFP8MaxInv);
    for (float& v : blk) {
      const float q = E4M3ToFloat(FloatToE4M3(std::clamp(v / scale, -kFP8Max, kFP8Max)));
      v = RoundToBF16(q * scale);
    }
  }
}

void QuantizeFP8PowerOfTwo(std::span<const float> values, size_t block, std::span<uint8_t> codes,
                           std::span<float> scales) {
  DI_CHECK(values.size() % block == 0 && codes.size() == values.size() && scales.size() == values.size() / block);
  for (size_t b = 0; b < scales.size(); ++b) {
    std::span<const float> blk = values.subspan(b * block, block);
    const float scale = PowerOfTwoScaleCeil(std::max(BlockAbsMax(blk), 1e-4f), kFP8MaxInv);
    scales[b] = scale;
    for (size_t i = 0; i < block; ++i) {
      codes[b * block + i] = FloatToE4M3(std::clamp(blk[i] / scale, -kFP8Max, kFP8Max));
    }
  }
}

void QdqFP4PowerOfTwo(std::span<float> values, size_t block) {
  DI_CHECK(values.size() % block == 0, "size ", values.size(), " not a multiple of block ", block);
  const float amax_floor = 6.0f * std::ldexp(1.0f, -126);
  for (size_t start = 0; start < values.size(); start += block) {
    std::span<float> blk = values.subspan(start, block);
    const float scale = PowerOfTwoScaleCeil(std::max(BlockAbsMax(blk), amax_floor), kFP4MaxInv);
    for (float& v : blk) {
      const float q = E2M1ToFloat(FloatToE2M1(std::clamp(v / scale, -kFP4Max, kFP4Max)));
      v = RoundToBF16(q * scale);
    }
  }
}

void QdqFP4E4M3Scale(std::span<float> values, size_t block) {
  DI_CHECK(values.size() % block == 0, "size ", values.size(), " not a multiple of block ", block);
  const float amax_floor = 6.0f * std::ldexp(1.0f, -9);
  for (size_t start = 0; start < values.size(); start += block) {
    std::span<float> blk = values.subspan(start, block);
    const float amax = std::max(BlockAbsMax(blk), amax_floor);
    const float scale = E4M3ToFloat(FloatToE4M3(amax / kFP4Max));
    for (float& v : blk) {
      const float q = E2M1ToFloat(FloatToE2M1(std::clamp(v / scale, -kFP4Max, kFP4Max)));
      v = RoundToBF16(q * scale);
    }
  }
}

}  // namespace deepinfer
