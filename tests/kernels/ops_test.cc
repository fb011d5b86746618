// SparseAttentionWithSink against the official reference's pure-torch sparse_attn
// (tools/golden/kernel_cases.py writes tests/data/kernels/sparse_attn.bin).
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"
#include "golden_tables.h"

namespace deepinfer {
namespace {

static_assert(std::endian::native == std::endian::little, "tables are little endian");

using testing::Array;
using testing::Bf16ToFloats;
using testing::Bf16UlpDistance;
using testing::Bits;
using testing::Get;
using testing::ReadTables;
using testing::Tables;

const Tables& AttnTables() {
  static const Tables t = ReadTables("kernels/sparse_attn.bin");
  return t;
}

struct AttnCase {
  std::string name;
  int m = 0, heads = 0, n = 0, topk = 0;
  int64_t dim = 0;
  std::vector<float> q, kv, sink, expected;
  std::vector<int32_t> idx;
  float scale = 0;

  // The KV rows of query `t` in index order; nullptr for -1.
  std::vector<const float*> Entries(int t) const {
    std::vector<const float*> entries(topk);
    for (int j = 0; j < topk; ++j) {
      const int32_t i = idx[static_cast<size_t>(t) * topk + j];
      entries[j] = i < 0 ? nullptr : kv.data() + static_cast<int64_t>(i) * dim;
    }
    return entries;
  }
  std::vector<float> Run(int t, IsaLevel isa = IsaLevel::kScalar) const {
    const auto entries = Entries(t);
    std::vector<float> out(heads * dim, std::nanf(""));
    SparseAttentionWithSink(isa, q.data() + static_cast<int64_t>(t) * heads * dim, heads, dim, entries, sink.data(),
                            scale, out.data());
    return out;
  }
};

AttnCase LoadAttnCase(const std::string& name) {
  AttnCase c;
  c.name = name;
  const auto dims = Get(AttnTables(), name + "/dims").As<int32_t>();
  c.m = dims.at(0);
  c.heads = dims.at(1);
  c.dim = dims.at(2);
  c.n = dims.at(3);
  c.topk = dims.at(4);
  c.q = Bf16ToFloats(Get(AttnTables(), name + "/q").As<uint16_t>());
  c.kv = Bf16ToFloats(Get(AttnTables(), name + "/kv").As<uint16_t>());
  c.sink = Get(AttnTables(), name + "/sink").As<float>();
  c.idx = Get(AttnTables(), name + "/idx").As<int32_t>();
  c.scale = Get(AttnTables(), name + "/scale").As<float>().at(0);
  c.expected = Bf16ToFloats(Get(AttnTables(), name + "/out").As<uint16_t>());
  EXPECT_EQ(c.q.size(), static_cast<size_t>(c.m * c.heads * c.dim));
  EXPECT_EQ(c.kv.size(), static_cast<size_t>(c.n * c.dim));
  EXPECT_EQ(c.sink.size(), static_cast<size_t>(c.heads));
  EXPECT_EQ(c.idx.size(), static_cast<size_t>(c.m * c.topk));
  EXPECT_EQ(c.expected.size(), c.q.size());
  return c;
}

// short: 24 indices (one partial block); long: 150 indices (blocks of 64, 64, 22) with query 0's
// whole second block -1; wide: dim 128, 70 indices. Every case has scattered -1 entries and its
// last query has no valid index at all.
const std::vector<std::string> kAttnCases = {"short", "long", "wide"};

// Tolerance: at most 1 bf16 ulp per element, in at most 1% of the elements. Not bit-exact
// because the reference's q.k and P.V are torch einsums (BLAS, its own summation order), its
// exp is torch's vectorized exp rather than libm's expf, and its p.sum() order differs; each
// moves fp32 results by an ulp or so, which the bf16 output rounding almost always absorbs.
// Measured on the committed cases (see the printed summary).
constexpr int kMaxUlp = 1;
constexpr double kMaxDifferingFraction = 0.01;

TEST(SparseAttentionWithSink, MatchesReferenceWithMinusOneEntriesAndMultipleBlocks) {
  for (const IsaLevel isa : SupportedIsaLevels()) {
    SCOPED_TRACE(IsaName(isa));
    size_t total = 0, differing = 0;
    int worst = 0;
    for (const std::string& name : kAttnCases) {
      SCOPED_TRACE(name);
      const AttnCase c = LoadAttnCase(name);
      size_t case_differing = 0;
      int case_worst = 0;
      for (int t = 0; t < c.m; ++t) {
        const std::vector<float> out = c.Run(t, isa);
        for (int64_t i = 0; i < c.heads * c.dim; ++i) {
          const float expected = c.expected[t * c.heads * c.dim + i];
          ASSERT_TRUE(std::isfinite(out[i])) << "query " << t << " element " << i;
          EXPECT_EQ(Bits(out[i]) & 0xFFFFu, 0u) << "output is not bf16-rounded";
          const int ulp = Bf16UlpDistance(out[i], expected);
          case_worst = std::max(case_worst, ulp);
          if (ulp != 0) ++case_differing;
          EXPECT_LE(ulp, kMaxUlp) << "query " << t << " head " << i / c.dim << " d " << i % c.dim << ": ours " << out[i]
                                  << ", reference " << expected;
        }
      }
      total += static_cast<size_t>(c.m * c.heads * c.dim);
      differing += case_differing;
      worst = std::max(worst, case_worst);
      std::cout << "[ attn     ] " << name << " topk=" << c.topk << " dim=" << c.dim << ": worst " << case_worst
                << " ulp, " << case_differing << " of " << c.m * c.heads * c.dim << " elements differ\n";
    }
    std::cout << "[ attn     ] " << IsaName(isa) << ": worst " << worst << " bf16 ulp, " << differing << " of " << total
              << " elements differ\n";
    EXPECT_LE(static_cast<double>(differing), kMaxDifferingFraction * static_cast<double>(total));
  }
}

// A query whose indices are all -1 yields exact +0 (the reference's finite -1e30 initial max).
TEST(SparseAttentionWithSink, QueryWithNoValidIndexGivesZeros) {
  for (const std::string& name : kAttnCases) {
    SCOPED_TRACE(name);
    const AttnCase c = LoadAttnCase(name);
    const int t = c.m - 1;
    for (int j = 0; j < c.topk; ++j) ASSERT_EQ(c.idx[t * c.topk + j], -1);
    const std::vector<float> out = c.Run(t);
    for (float v : out) ASSERT_EQ(Bits(v), 0u);
  }
}

// Each head is computed on its own: a head run alone equals the same head of the multi-head
// call bit for bit, and repeated calls are identical (the op's analogue of batch invariance;
// it has no thread pool, so thread-count invariance does not apply).
TEST(SparseAttentionWithSink, HeadInvariantAndDeterministicBitwise) {
  for (const std::string& name : kAttnCases) {
    SCOPED_TRACE(name);
    const AttnCase c = LoadAttnCase(name);
    for (int t = 0; t < c.m; ++t) {
      const auto entries = c.Entries(t);
      const std::vector<float> all = c.Run(t);
      ASSERT_EQ(0, std::memcmp(all.data(), c.Run(t).data(), all.size() * sizeof(float)));
      for (int h = 0; h < c.heads; ++h) {
        std::vector<float> one(c.dim);
        SparseAttentionWithSink(c.q.data() + (static_cast<int64_t>(t) * c.heads + h) * c.dim, 1, c.dim, entries,
                                c.sink.data() + h, c.scale, one.data());
        ASSERT_EQ(0, std::memcmp(one.data(), all.data() + h * c.dim, c.dim * sizeof(float)))
            << "query " << t << " head " << h;
      }
    }
  }
}

// The SIMD dot product's order, written out: two 16-lane FMA accumulators over 32-element
// steps, one more 16-element step into the first, the fixed tree (v = acc0 + acc1, then halves
// of 8, 4, 2, 1), a sequential tail. Every SIMD level must give exactly these bits.
float SimdDotOrder(const float* a, const float* b, int64_t n) {
  float acc0[16] = {}, acc1[16] = {};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int l = 0; l < 16; ++l) {
      acc0[l] = std::fma(a[i + l], b[i + l], acc0[l]);
      acc1[l] = std::fma(a[i + 16 + l], b[i + 16 + l], acc1[l]);
    }
  }
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) acc0[l] = std::fma(a[i + l], b[i + l], acc0[l]);
  }
  float v[16], s8[8], s4[4];
  for (int l = 0; l < 16; ++l) v[l] = acc0[l] + acc1[l];
  for (int l = 0; l < 8; ++l) s8[l] = v[l] + v[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  float sum = (s4[0] + s4[2]) + (s4[1] + s4[3]);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

TEST(DotProduct, EverySimdLevelFollowsTheStatedOrderBitwise) {
  std::vector<float> a(1000), b(1000);
  uint64_t state = 5;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(state >> 40) - (int64_t{1} << 23)) * 0x1p-20f;
  };
  for (float& v : a) v = next();
  for (float& v : b) v = next();
  // The data tells the orders apart: the sequential sum has other bits.
  EXPECT_NE(std::bit_cast<uint32_t>(DotProduct(IsaLevel::kScalar, a.data(), b.data(), 1000)),
            std::bit_cast<uint32_t>(SimdDotOrder(a.data(), b.data(), 1000)));
  for (const IsaLevel isa : SupportedIsaLevels()) {
    if (isa == IsaLevel::kScalar) continue;
    for (int64_t n : {0, 7, 16, 31, 32, 48, 64, 100, 512, 1000}) {
      const float expected = SimdDotOrder(a.data(), b.data(), n);
      EXPECT_EQ(std::bit_cast<uint32_t>(DotProduct(isa, a.data(), b.data(), n)), std::bit_cast<uint32_t>(expected))
          << IsaName(isa) << " n " << n;
    }
  }
}

// HcExpandRow at every level gives the oracle's bits, rounding ties, overflow to infinity and NaN
// included.
TEST(HcExpandRow, EveryLevelGivesTheOraclesBits) {
  uint64_t state = 3;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(state >> 40) - (int64_t{1} << 23)) * 0x1p-21f;
  };
  for (const int hc : {1, 4}) {
    for (const int64_t dim : {int64_t{16}, int64_t{48}, int64_t{40}}) {
      std::vector<float> x(hc * dim), y(dim), post(hc), comb(hc * hc);
      for (float& v : x) v = RoundToBF16(next());
      for (float& v : y) v = RoundToBF16(next());
      for (float& v : post) v = next();
      for (float& v : comb) v = next();
      y[1] = std::nanf("");
      y[2] = 3e38f, post[0] = 2.5f;  // overflows to infinity in copy 0
      x[3] = 1.0f + 0x1p-8f;         // bf16 ties through y = 0 and comb
      // A NaN whose payload would carry into the sign when rounded like a number.
      x[5] = std::bit_cast<float>(0x7fffffffu);
      std::vector<float> expected = x, mixed(hc * dim);
      HcExpandRow(IsaLevel::kScalar, expected.data(), y.data(), post.data(), comb.data(), hc, dim, mixed.data());
      for (const IsaLevel isa : SupportedIsaLevels()) {
        std::vector<float> ours = x;
        HcExpandRow(isa, ours.data(), y.data(), post.data(), comb.data(), hc, dim, mixed.data());
        for (int64_t i = 0; i < hc * dim; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(ours[i]), std::bit_cast<uint32_t>(expected[i]))
              << IsaName(isa) << " hc " << hc << " dim " << dim << " element " << i;
        }
      }
    }
  }
}

// IndexScores gives the bits of its stated formula (each q.k as DotProduct(isa), heads added in
// order) at every level, for head counts around the groups of 4 and key counts around blocks of 64.
TEST(IndexScores, EveryLevelGivesItsFormulasBits) {
  uint64_t state = 11;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(state >> 40) - (int64_t{1} << 23)) * 0x1p-22f;
  };
  for (const IsaLevel isa : SupportedIsaLevels()) {
    for (const int64_t dim : {int64_t{16}, int64_t{24}, int64_t{64}, int64_t{128}}) {
      for (const int heads : {1, 3, 4, 5, 9}) {
        for (const int64_t count : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{130}}) {
          std::vector<float> q(heads * dim), keys(count * dim), weights(heads);
          for (float& v : q) v = next();
          for (float& v : keys) v = next();
          for (float& v : weights) v = next();
          std::vector<float> ours(count);
          IndexScores(isa, q.data(), heads, dim, keys.data(), count, weights.data(), 0.125f, ours.data());
          for (int64_t t = 0; t < count; ++t) {
            float expected = 0.0f;
            for (int h = 0; h < heads; ++h) {
              expected += std::max(DotProduct(isa, q.data() + h * dim, keys.data() + t * dim, dim), 0.0f) *
                          (weights[h] * 0.125f);
            }
            ASSERT_EQ(std::bit_cast<uint32_t>(ours[t]), std::bit_cast<uint32_t>(expected))
                << IsaName(isa) << " dim " << dim << " heads " << heads << " count " << count << " key " << t;
          }
        }
      }
    }
  }
}

// The KV-cache decoders at every level give the scalar oracle's bits for every code under every
// scale byte, NaN codes and scales and the ends of the exponent range included, in whole blocks
// and in a partial last block.
TEST(KvDecode, EveryLevelGivesTheOraclesBitsForEveryCodeAndScale) {
  struct Format {
    const char* name;
    size_t block;
    bool fp4;
    void (*simd)(IsaLevel, const uint8_t*, const uint8_t*, size_t, size_t, float*);
    void (*oracle)(const uint8_t*, const uint8_t*, size_t, size_t, float*);
  };
  const Format formats[] = {{"fp8 pow2", 32, false, DecodeFP8PowerOfTwo, DecodeFP8PowerOfTwo},
                            {"fp4 pow2", 32, true, DecodeFP4PowerOfTwo, DecodeFP4PowerOfTwo},
                            {"fp4 e4m3", 16, true, DecodeFP4E4M3Scale, DecodeFP4E4M3Scale}};
  for (const Format& f : formats) {
    // Every scale byte, each with a block of codes: all 256 e4m3 codes over 8 blocks (with the
    // NaN codes in the last), or all 16 e2m1 codes twice (every byte pair of nibbles over time).
    const size_t blocks = 256 * 8;
    const size_t n = blocks * f.block + (f.block / 2);  // a partial last block
    std::vector<uint8_t> codes(f.fp4 ? (n + 1) / 2 : n), scales(blocks + 1);
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(f.fp4 ? (i * 7 + i / 16) : i);
    for (size_t b = 0; b < scales.size(); ++b) scales[b] = static_cast<uint8_t>(b / 8 + b % 8 * 32);
    std::vector<float> expected(n);
    f.oracle(codes.data(), scales.data(), n, f.block, expected.data());
    for (const IsaLevel isa : SupportedIsaLevels()) {
      std::vector<float> ours(n, 1234.5f);
      f.simd(isa, codes.data(), scales.data(), n, f.block, ours.data());
      size_t mismatches = 0;
      for (size_t i = 0; i < n; ++i) {
        if (std::bit_cast<uint32_t>(ours[i]) != std::bit_cast<uint32_t>(expected[i]) && mismatches++ < 3) {
          ADD_FAILURE() << f.name << " " << IsaName(isa) << " element " << i << ": " << ours[i] << " vs "
                        << expected[i];
        }
      }
      EXPECT_EQ(mismatches, 0u) << f.name << " " << IsaName(isa);
    }
  }
}

// Values that exercise every branch of the KV encoders, a block of `block` at a time: ordinary
// bell-curve blocks at scales from fp32 subnormals to near overflow; values exactly on the e2m1
// midpoints and on e4m3 rounding ties (after the block's own scale); the e4m3 subnormal boundary
// and saturation; zeros of both signs; NaN and infinities inside otherwise ordinary blocks.
std::vector<float> EncoderInputs(size_t blocks, size_t block, uint64_t seed) {
  std::vector<float> v(blocks * block);
  auto next = [&] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(seed >> 33);
  };
  auto uniform = [&] { return static_cast<float>(next() & 0xffffff) * 0x1p-24f; };
  for (size_t b = 0; b < blocks; ++b) {
    float* x = v.data() + b * block;
    const float magnitude = std::ldexp(1.0f, static_cast<int>(next() % 250) - 140);
    const float sign_flip = (next() & 1) ? -1.0f : 1.0f;
    switch (b % 8) {
      case 0:
      case 1:  // bell curve at this block's magnitude
        for (size_t i = 0; i < block; ++i) x[i] = (uniform() + uniform() + uniform() - 1.5f) * magnitude;
        break;
      case 2: {  // e2m1 midpoints times a power of two (the FP4 power-of-two scale of amax 6 * m)
        const float m = std::ldexp(1.0f, static_cast<int>(next() % 60) - 30);
        for (size_t i = 0; i < block; ++i) {
          x[i] = (i % 8 == 7 ? 6.0f : kE2M1Midpoints[i % 7]) * m * ((next() & 1) ? -1.0f : 1.0f);
        }
        break;
      }
      case 3: {  // e4m3 ties: 4-bit mantissas halfway between codes, around the subnormal edge too
        const float m = std::ldexp(1.0f, static_cast<int>(next() % 40) - 20);
        for (size_t i = 0; i < block; ++i) {
          const float tie = (8.0f + static_cast<float>(next() % 8) + 0.5f) / 8.0f;
          x[i] = std::ldexp(tie, static_cast<int>(next() % 16) - 10) * m * sign_flip;
        }
        x[0] = 448.0f * m;      // the block's amax: scale m
        x[1] = 0.0156249f * m;  // either side of 2^-6, where the subnormal grid begins
        x[2] = 0.015625f * m;
        x[3] = 2.5f / 512.0f * m;  // subnormal-grid ties (to 2 and 4 steps)
        x[4] = -3.5f / 512.0f * m;
        break;
      }
      case 4:  // zeros of both signs, and a tiny value
        for (size_t i = 0; i < block; ++i) x[i] = (i % 2) ? -0.0f : 0.0f;
        x[block - 1] = std::ldexp(1.0f, -149);
        break;
      case 5:  // a NaN among ordinary values (skipped by amax; its code is the NaN rule's)
        for (size_t i = 0; i < block; ++i) x[i] = (uniform() - 0.5f) * magnitude;
        x[next() % block] = (next() & 1) ? std::nanf("") : -std::nanf("");
        break;
      case 6:  // an infinity among ordinary values
        for (size_t i = 0; i < block; ++i) x[i] = (uniform() - 0.5f) * magnitude;
        x[next() % block] = sign_flip * INFINITY;
        break;
      default:  // e4m3-scaled FP4: products of e2m1 midpoints and an e4m3 value
        for (size_t i = 0; i < block; ++i) {
          x[i] = kE2M1Midpoints[next() % 7] * E4M3ToFloat(static_cast<uint8_t>(next() % 0x7f)) * sign_flip;
        }
        break;
    }
  }
  return v;
}

// The KV-cache encoders at every level give the scalar oracle's codes and scale bytes (the SIMD
// ones where block % 8 == 0 and the size is a multiple of 32, the oracle elsewhere).
TEST(KvEncode, EveryLevelGivesTheOraclesCodesAndScales) {
  struct Format {
    const char* name;
    bool fp4;
    void (*simd)(IsaLevel, std::span<const float>, size_t, uint8_t*, uint8_t*);
    void (*oracle)(std::span<const float>, size_t, uint8_t*, uint8_t*);
  };
  const Format formats[] = {{"fp8 pow2", false, EncodeFP8PowerOfTwo, EncodeFP8PowerOfTwo},
                            {"fp4 pow2", true, EncodeFP4PowerOfTwo, EncodeFP4PowerOfTwo},
                            {"fp4 e4m3", true, EncodeFP4E4M3Scale, EncodeFP4E4M3Scale}};
  for (const Format& f : formats) {
    for (const size_t block : {8, 16, 32, 64, 12}) {
      for (const size_t blocks : {size_t{96} * 8, size_t{3}}) {  // 3 blocks of 8 or 12: not 32-aligned
        const std::vector<float> x = EncoderInputs(blocks, block, 7 + block + blocks);
        const size_t n = x.size();
        std::vector<uint8_t> codes(f.fp4 ? n / 2 : n), scales(blocks);
        f.oracle(x, block, codes.data(), scales.data());
        for (const IsaLevel isa : SupportedIsaLevels()) {
          SCOPED_TRACE(std::string(f.name) + " " + std::string(IsaName(isa)) + " block " + std::to_string(block) +
                       " n " + std::to_string(n));
          std::vector<uint8_t> our_codes(codes.size(), 0xaa), our_scales(blocks, 0xaa);
          f.simd(isa, x, block, our_codes.data(), our_scales.data());
          size_t mismatches = 0;
          for (size_t i = 0; i < codes.size(); ++i) {
            if (our_codes[i] != codes[i] && mismatches++ < 3) {
              const size_t element = f.fp4 ? 2 * i : i;
              ADD_FAILURE() << "code byte " << i << ": " << int{our_codes[i]} << " vs " << int{codes[i]} << " (values "
                            << x[element] << (f.fp4 ? ", " + std::to_string(x[element + 1]) : "") << ")";
            }
          }
          EXPECT_EQ(mismatches, 0u);
          EXPECT_EQ(our_scales, scales);
        }
      }
    }
    std::vector<uint8_t> codes(64), scales(8);
    const std::vector<float> x(96, 1.0f);
    for (const IsaLevel isa : SupportedIsaLevels()) {
      EXPECT_THROW(f.simd(isa, x, 64, codes.data(), scales.data()), Error) << f.name << ": 96 values in blocks of 64";
    }
  }
}

// The SIMD attention levels agree bit for bit (they differ from the oracle only in the q.k
// order, which DotProduct pins down), and each head is computed on its own.
TEST(SparseAttentionWithSink, SimdLevelsAgreeBitwiseAndAreHeadInvariant) {
  for (const std::string& name : kAttnCases) {
    SCOPED_TRACE(name);
    const AttnCase c = LoadAttnCase(name);
    ASSERT_EQ(c.dim % 16, 0) << "the SIMD attention paths need head_dim % 16 == 0";
    std::vector<IsaLevel> simd;
    for (const IsaLevel isa : SupportedIsaLevels()) {
      if (isa != IsaLevel::kScalar) simd.push_back(isa);
    }
    for (int t = 0; t < c.m; ++t) {
      const auto entries = c.Entries(t);
      std::vector<float> first;
      for (const IsaLevel isa : simd) {
        const std::vector<float> all = c.Run(t, isa);
        if (first.empty()) first = all;
        ASSERT_EQ(0, std::memcmp(all.data(), first.data(), all.size() * sizeof(float))) << IsaName(isa);
        for (int h = 0; h < c.heads; ++h) {
          std::vector<float> one(c.dim);
          SparseAttentionWithSink(isa, c.q.data() + (static_cast<int64_t>(t) * c.heads + h) * c.dim, 1, c.dim, entries,
                                  c.sink.data() + h, c.scale, one.data());
          ASSERT_EQ(0, std::memcmp(one.data(), all.data() + h * c.dim, c.dim * sizeof(float)))
              << IsaName(isa) << " query " << t << " head " << h;
        }
      }
    }
  }
}

// Heads are computed in groups of kSparseAttentionHeadGroup that share each K=V load. Every
// group size (the last group of a call may be partial), dims that exercise the P.V tails, empty
// slots and several blocks of 64: each head equals the same head run alone, bit for bit, at every
// level, and the SIMD levels agree with each other.
TEST(SparseAttentionWithSink, HeadGroupsOfEverySizeMatchOneHeadAtATime) {
  uint64_t state = 17;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return RoundToBF16(static_cast<float>(static_cast<int64_t>(state >> 40) - (int64_t{1} << 23)) * 0x1p-21f);
  };
  for (const int64_t dim : {16, 48, 80, 512}) {
    for (const int count : {0, 1, 5, 64, 150}) {
      std::vector<float> kv(static_cast<size_t>(std::max(count, 1)) * dim);
      for (float& v : kv) v = next();
      std::vector<const float*> entries(count);
      for (int k = 0; k < count; ++k) entries[k] = (k % 7 == 3) ? nullptr : kv.data() + k * dim;
      for (int heads = 1; heads <= 9; ++heads) {
        std::vector<float> q(heads * dim), sink(heads);
        for (float& v : q) v = next();
        for (float& v : sink) v = next() * 8.0f;
        std::vector<float> simd_first;
        for (const IsaLevel isa : SupportedIsaLevels()) {
          SCOPED_TRACE(::testing::Message()
                       << IsaName(isa) << " dim " << dim << " entries " << count << " heads " << heads);
          std::vector<float> all(heads * dim, -1.0f);
          SparseAttentionWithSink(isa, q.data(), heads, dim, entries, sink.data(), 0.06f, all.data());
          for (int h = 0; h < heads; ++h) {
            std::vector<float> one(dim);
            SparseAttentionWithSink(isa, q.data() + h * dim, 1, dim, entries, sink.data() + h, 0.06f, one.data());
            ASSERT_EQ(0, std::memcmp(one.data(), all.data() + h * dim, dim * sizeof(float))) << "head " << h;
          }
          if (isa == IsaLevel::kScalar) continue;
          if (simd_first.empty()) simd_first = all;
          ASSERT_EQ(0, std::memcmp(all.data(), simd_first.data(), all.size() * sizeof(float)));
        }
      }
    }
  }
}

// The loops themselves, on data where summation orders give other bits: each SIMD level's
// grouped dots equal DotProduct at that level pair by pair, and every level's weighted sum
// equals the oracle's, bit for bit (the attention's bf16 output alone would hide an fp32 slip).
TEST(SparseAttentionLoops, GroupedDotsAndWeightedSumsKeepThePairOrder) {
  uint64_t state = 23;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(state >> 40) - (int64_t{1} << 23)) * 0x1p-20f;
  };
  const AttentionLoops& oracle = SparseAttentionLoops(IsaLevel::kScalar, 16);
  for (const IsaLevel isa : SupportedIsaLevels()) {
    for (const int64_t dim : {16, 48, 80, 512}) {
      const AttentionLoops& loops = SparseAttentionLoops(isa, dim);
      const int count = kSparseAttentionBlock - 1;
      std::vector<float> kv(count * dim), q(kSparseAttentionHeadGroup * dim);
      std::vector<float> p(kSparseAttentionHeadGroup * kSparseAttentionBlock);
      for (float& v : kv) v = next();
      for (float& v : q) v = next();
      for (float& v : p) v = next();
      std::vector<const float*> rows(count);
      for (int k = 0; k < count; ++k) rows[k] = kv.data() + k * dim;
      for (int heads = 1; heads <= kSparseAttentionHeadGroup; ++heads) {
        for (const int used : {0, 1, 2, 5, count}) {
          SCOPED_TRACE(::testing::Message()
                       << IsaName(isa) << " dim " << dim << " heads " << heads << " entries " << used);
          std::vector<float> scores(kSparseAttentionHeadGroup * kSparseAttentionBlock, -1.0f);
          loops.dots(q.data(), heads, dim, rows.data(), used, scores.data());
          for (int g = 0; g < heads; ++g) {
            for (int k = 0; k < used; ++k) {
              ASSERT_EQ(Bits(scores[g * kSparseAttentionBlock + k]),
                        Bits(DotProduct(isa, q.data() + g * dim, rows[k], dim)))
                  << "head " << g << " entry " << k;
            }
          }
          std::vector<float> got(heads * dim, -1.0f), want(heads * dim, -2.0f);
          loops.weighted_sum(p.data(), heads, rows.data(), used, dim, got.data());
          oracle.weighted_sum(p.data(), heads, rows.data(), used, dim, want.data());
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
        }
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer
