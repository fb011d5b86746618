// Bit-exact checks of src/core/numeric.{h,cc} against tables computed by torch and the official
// reference's pure-torch kernels (tools/golden/numerics_tables.py writes
// tests/data/core/numerics/*.bin). The WeightMatrix dequantization tables (dequant.bin) are
// checked in tests/kernels/linear_test.cc, since WeightMatrix lives in di_kernels_cpu.
//
// Every comparison is on bit patterns. The one exception is NaN: torch's own fp32 -> bf16 NaN
// pattern depends on the code path (0xFFFF from the vectorized cast, 0x7FC0 from the scalar
// one), so for NaN the tests require a NaN (quiet, for bf16) and do not compare payload bits.
#include "core/numeric.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "golden_tables.h"

namespace deepinfer {
namespace {

static_assert(std::endian::native == std::endian::little, "tables are little endian");

using testing::Array;
using testing::Bits;
using testing::FromBits;
using testing::Get;
using testing::Hex;
using testing::ReadTables;
using testing::SameFloat;
using testing::Tables;

const Tables& Bf16Tables() {
  static const Tables t = ReadTables("core/numerics/bf16.bin");
  return t;
}
const Tables& E4M3Tables() {
  static const Tables t = ReadTables("core/numerics/e4m3.bin");
  return t;
}
const Tables& UE8M0Tables() {
  static const Tables t = ReadTables("core/numerics/ue8m0.bin");
  return t;
}
const Tables& E2M1Tables() {
  static const Tables t = ReadTables("core/numerics/e2m1.bin");
  return t;
}
const Tables& QatTables() {
  static const Tables t = ReadTables("core/numerics/qat.bin");
  return t;
}

// The spec's FP4 table (section 2.2), independent of src.
constexpr float kFP4Table[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// torch's e4m3 decode table (checked against ours in E4M3Decode.All256Codes).
float TorchE4M3(uint8_t code) {
  static const std::vector<uint32_t> table = Get(E4M3Tables(), "e4m3/decode/out").As<uint32_t>();
  return FromBits(table.at(code));
}

// ---- (1) bf16 ---------------------------------------------------------------------------------

void CheckBf16(const std::string& category) {
  const auto in = Get(Bf16Tables(), "bf16/" + category + "/in").As<uint32_t>();
  const auto out = Get(Bf16Tables(), "bf16/" + category + "/out").As<uint16_t>();
  ASSERT_EQ(in.size(), out.size());
  ASSERT_FALSE(in.empty());
  int failures = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const bf16_t ours = FloatToBF16(FromBits(in[i]));
    const bool expect_nan = (out[i] & 0x7F80) == 0x7F80 && (out[i] & 0x7F) != 0;
    const bool ok = expect_nan ? ((ours & 0x7F80) == 0x7F80 && (ours & 0x40) != 0) : ours == out[i];
    if (!ok && ++failures <= 10) {
      ADD_FAILURE() << category << " fp32 " << Hex(in[i]) << ": ours " << Hex(ours) << ", torch " << Hex(out[i]);
    }
    // RoundToBF16 is the same rounding seen as a float.
    if (!expect_nan) {
      EXPECT_EQ(Bits(RoundToBF16(FromBits(in[i]))), static_cast<uint32_t>(out[i]) << 16);
    }
  }
  EXPECT_EQ(failures, 0) << category << ": " << failures << " of " << in.size() << " differ";
}

TEST(Bf16Rounding, ExactTiesRoundToEven) { CheckBf16("ties"); }
TEST(Bf16Rounding, JustAboveAndBelowTies) { CheckBf16("near_ties"); }
TEST(Bf16Rounding, AlreadyBf16ValuesAreUnchanged) { CheckBf16("exact"); }
TEST(Bf16Rounding, SubnormalsPositiveAndNegative) { CheckBf16("subnormal"); }
TEST(Bf16Rounding, ZeroNegativeZeroInfAndOverflowToInf) { CheckBf16("zero_inf_max"); }
TEST(Bf16Rounding, RandomBitPatterns) { CheckBf16("random"); }
TEST(Bf16Rounding, NanStaysQuietNan) { CheckBf16("nan"); }

TEST(Bf16Rounding, DecodeIsTheTopHalf) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    ASSERT_EQ(Bits(BF16ToFloat(static_cast<bf16_t>(b))), b << 16);
  }
}

// ---- (2) e4m3 ---------------------------------------------------------------------------------

TEST(E4M3Decode, All256CodesIncludingNegativeZeroSubnormalsAndNan) {
  for (int code = 0; code < 256; ++code) {
    const float expected = TorchE4M3(static_cast<uint8_t>(code));
    EXPECT_TRUE(SameFloat(E4M3ToFloat(static_cast<uint8_t>(code)), expected))
        << "code " << Hex(code) << ": ours " << E4M3ToFloat(static_cast<uint8_t>(code)) << ", torch " << expected;
  }
  EXPECT_EQ(Bits(E4M3ToFloat(0x80)), 0x80000000u);  // -0
  EXPECT_EQ(E4M3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(E4M3ToFloat(0x7E), 448.0f);
}

void CheckE4M3Cast(const std::string& category) {
  const auto in = Get(E4M3Tables(), "e4m3/cast/" + category + "/in").As<uint32_t>();
  const auto out = Get(E4M3Tables(), "e4m3/cast/" + category + "/out").As<uint8_t>();
  ASSERT_EQ(in.size(), out.size());
  ASSERT_FALSE(in.empty());
  int failures = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const uint8_t ours = FloatToE4M3(FromBits(in[i]));
    const bool ok = (out[i] & 0x7F) == 0x7F ? (ours & 0x7F) == 0x7F : ours == out[i];
    if (!ok && ++failures <= 10) {
      ADD_FAILURE() << category << " x=" << FromBits(in[i]) << " (" << Hex(in[i]) << "): ours " << Hex(ours)
                    << ", torch " << Hex(out[i]);
    }
  }
  EXPECT_EQ(failures, 0) << category << ": " << failures << " of " << in.size() << " differ";
}

TEST(E4M3Cast, EveryCodeValueIsExact) { CheckE4M3Cast("codes"); }
TEST(E4M3Cast, NormalRangeExactTiesToEven) { CheckE4M3Cast("normal_ties"); }
TEST(E4M3Cast, SubnormalRangeExactTiesToEven) { CheckE4M3Cast("subnormal_ties"); }
TEST(E4M3Cast, JustAboveAndBelowNormalTies) { CheckE4M3Cast("near_normal_ties"); }
TEST(E4M3Cast, JustAboveAndBelowSubnormalTies) { CheckE4M3Cast("near_subnormal_ties"); }
TEST(E4M3Cast, MinSubnormalAndHalfOfIt) { CheckE4M3Cast("min_subnormal"); }
TEST(E4M3Cast, SaturatesAt448Including464AndInf) { CheckE4M3Cast("saturation"); }
TEST(E4M3Cast, ZeroNegativeZeroAndTinyNegatives) { CheckE4M3Cast("zero_and_tiny"); }
TEST(E4M3Cast, RandomValues) { CheckE4M3Cast("random"); }
TEST(E4M3Cast, NanMapsToNanCode) { CheckE4M3Cast("nan"); }

// ---- (3) ue8m0 --------------------------------------------------------------------------------

TEST(UE8M0Decode, All256BytesIncludingSubnormal2PowMinus127AndNan) {
  const auto out = Get(UE8M0Tables(), "ue8m0/decode/out").As<uint32_t>();
  ASSERT_EQ(out.size(), 256u);
  for (int e = 0; e < 256; ++e) {
    EXPECT_TRUE(SameFloat(UE8M0ToFloat(static_cast<uint8_t>(e)), FromBits(out[e])))
        << "byte " << e << ": ours " << Hex(Bits(UE8M0ToFloat(static_cast<uint8_t>(e)))) << ", torch " << Hex(out[e]);
  }
  EXPECT_EQ(Bits(UE8M0ToFloat(0)), 0x00400000u);
  EXPECT_TRUE(std::isnan(UE8M0ToFloat(255)));
}

// ---- (4) e2m1 ---------------------------------------------------------------------------------

void CheckE2M1(const std::string& category) {
  const auto in = Get(E2M1Tables(), "e2m1/" + category + "/in").As<uint32_t>();
  const auto out = Get(E2M1Tables(), "e2m1/" + category + "/out").As<uint8_t>();
  ASSERT_EQ(in.size(), out.size());
  ASSERT_FALSE(in.empty());
  for (size_t i = 0; i < in.size(); ++i) {
    const uint8_t ours = FloatToE2M1(FromBits(in[i]));
    EXPECT_EQ(ours, out[i]) << category << " x=" << FromBits(in[i]) << " (" << Hex(in[i]) << ")";
    EXPECT_EQ(Bits(E2M1ToFloat(ours)), Bits(kFP4Table[out[i]]));
  }
}

TEST(E2M1Rounding, EveryTiePositiveAndNegative) { CheckE2M1("ties"); }
TEST(E2M1Rounding, JustAboveAndBelowTies) { CheckE2M1("near_ties"); }
TEST(E2M1Rounding, GridValuesAndJustBelowSix) { CheckE2M1("codes"); }
TEST(E2M1Rounding, ZeroNegativeZeroAndTinyNegatives) { CheckE2M1("zero_and_tiny"); }
TEST(E2M1Rounding, RandomValues) { CheckE2M1("random"); }

TEST(E2M1Rounding, PackedNibbleOrder) {
  const uint8_t row[2] = {0x8A, 0x7F};  // k0 = 0xA, k1 = 0x8 (-0), k2 = 0xF, k3 = 0x7
  EXPECT_EQ(PackedFP4Code(row, 0), 0x0A);
  EXPECT_EQ(PackedFP4Code(row, 1), 0x08);
  EXPECT_EQ(PackedFP4Code(row, 2), 0x0F);
  EXPECT_EQ(PackedFP4Code(row, 3), 0x07);
  EXPECT_EQ(Bits(E2M1ToFloat(0x08)), 0x80000000u);
}

// ---- (5) QAT quantizers -------------------------------------------------------------------------
// The tables hold the reference's codes and fp32 scales; the reference's inplace output is
// exactly code * scale (the generator asserts it), so that product is the expected bf16 value.

struct QatCategory {
  const char* key;
  const char* test_name;
};

constexpr QatCategory kQatCategories[] = {
    {"all_zero", "AllZeroBlocks"},
    {"bf16_subnormal", "SubnormalBf16Blocks"},
    {"amax_pow2_times_max", "AmaxAtPowerOfTwoTimesMax"},
    {"ties", "TiesBetweenCodes"},
    {"saturation", "Saturation"},
    {"mixed_signs_negzero", "MixedSignsAndNegativeZero"},
    {"random_normal_scales", "RandomNormalAtScales1em30To1e30"},
};

class QatTest : public ::testing::TestWithParam<QatCategory> {
 protected:
  std::string Key(const std::string& what) const { return std::string("qat/") + GetParam().key + "/" + what; }
  std::vector<float> Inputs() const {
    const auto bits = Get(QatTables(), Key("x")).As<uint16_t>();
    std::vector<float> x(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) x[i] = BF16ToFloat(bits[i]);
    return x;
  }
  std::vector<uint16_t> InputBits() const { return Get(QatTables(), Key("x")).As<uint16_t>(); }

  // Runs `qdq` over each row of 32 and compares to code value * scale.
  template <typename Qdq, typename Decode>
  void CheckQdq(Qdq qdq, size_t block, size_t codes_per_byte, const std::string& codes_key,
                const std::string& scales_key, Decode decode) const {
    std::vector<float> x = Inputs();
    const std::vector<uint16_t> x_bits = InputBits();
    const auto scales = Get(QatTables(), Key(scales_key)).As<uint32_t>();
    ASSERT_EQ(x.size() % 32, 0u);
    ASSERT_EQ(scales.size(), x.size() / block);
    ASSERT_EQ(Get(QatTables(), Key(codes_key)).bytes.size() * codes_per_byte, x.size());
    for (size_t row = 0; row < x.size(); row += 32) qdq(std::span<float>(x.data() + row, 32), block);
    int failures = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float expected = decode(i) * FromBits(scales[i / block]);
      if (!SameFloat(x[i], expected) && ++failures <= 10) {
        ADD_FAILURE() << GetParam().key << " block " << i / block << " element " << i % block << ": input bf16 "
                      << Hex(x_bits[i]) << " (" << BF16ToFloat(x_bits[i]) << "), ours " << x[i] << " ("
                      << Hex(Bits(x[i])) << "), reference " << expected << " (" << Hex(Bits(expected)) << ")";
      }
    }
    EXPECT_EQ(failures, 0) << failures << " of " << x.size() << " elements differ";
  }
};

TEST_P(QatTest, QdqFP8PowerOfTwo) {
  const auto codes = Get(QatTables(), Key("fp8_codes")).As<uint8_t>();
  CheckQdq([](std::span<float> v, size_t b) { QdqFP8PowerOfTwo(v, b); }, 32, 1, "fp8_codes", "fp8_scales",
           [&](size_t i) { return TorchE4M3(codes[i]); });
}

TEST_P(QatTest, QdqFP4PowerOfTwo) {
  const auto packed = Get(QatTables(), Key("fp4_codes")).As<uint8_t>();
  CheckQdq([](std::span<float> v, size_t b) { QdqFP4PowerOfTwo(v, b); }, 32, 2, "fp4_codes", "fp4_scales",
           [&](size_t i) { return kFP4Table[(packed[i / 2] >> (4 * (i % 2))) & 0xF]; });
}

TEST_P(QatTest, QdqFP4E4M3Scale) {
  const auto packed = Get(QatTables(), Key("fp4e4m3_codes")).As<uint8_t>();
  CheckQdq([](std::span<float> v, size_t b) { QdqFP4E4M3Scale(v, b); }, 16, 2, "fp4e4m3_codes", "fp4e4m3_scales",
           [&](size_t i) { return kFP4Table[(packed[i / 2] >> (4 * (i % 2))) & 0xF]; });
}

// The non-inplace act_quant: codes and scales themselves.
TEST_P(QatTest, QuantizeFP8PowerOfTwoCodesAndScales) {
  const std::vector<float> x = Inputs();
  const auto codes = Get(QatTables(), Key("fp8_codes")).As<uint8_t>();
  const auto scales = Get(QatTables(), Key("fp8_scales")).As<uint32_t>();
  std::vector<uint8_t> our_codes(x.size());
  std::vector<float> our_scales(x.size() / 32);
  QuantizeFP8PowerOfTwo(x, 32, our_codes, our_scales);
  int failures = 0;
  for (size_t b = 0; b < our_scales.size(); ++b) {
    if (Bits(our_scales[b]) != scales[b] && ++failures <= 10) {
      ADD_FAILURE() << "block " << b << ": scale ours " << our_scales[b] << ", reference " << FromBits(scales[b]);
    }
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const bool ok = (codes[i] & 0x7F) == 0x7F ? (our_codes[i] & 0x7F) == 0x7F : our_codes[i] == codes[i];
    if (!ok && ++failures <= 10) {
      ADD_FAILURE() << "element " << i << " x=" << x[i] << ": code ours " << Hex(our_codes[i]) << ", reference "
                    << Hex(codes[i]);
    }
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(ReferenceTables, QatTest, ::testing::ValuesIn(kQatCategories),
                         [](const ::testing::TestParamInfo<QatCategory>& info) { return info.param.test_name; });

TEST(QatTables, EveryCategoryIsPresent) {
  size_t blocks = 0;
  for (const auto& c : kQatCategories) {
    const Array& x = Get(QatTables(), std::string("qat/") + c.key + "/x");
    ASSERT_EQ(x.shape.size(), 2u);
    EXPECT_EQ(x.shape[1], 32u);
    EXPECT_GT(x.shape[0], 0u) << c.key;
    blocks += x.shape[0];
  }
  EXPECT_GE(blocks, 700u);
}

}  // namespace
}  // namespace deepinfer
