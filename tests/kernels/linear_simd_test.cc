// The SIMD paths of QuantizedLinear / DenseLinear (linear_simd.h) against the scalar oracle, on
// every SIMD target this CPU runs (AVX2, AVX-512 with FMA, AVX-512 with vdpbf16ps):
//   * accuracy on random and odd shapes, with the tolerances stated below;
//   * batch invariance, bitwise: a row's outputs do not depend on M, on the other rows of the
//     call (GEMV streaming tiles vs GEMM panels), on the thread count - nor on the ISA level;
//   * the vdpbf16ps semantics the shared contract relies on;
//   * scales outside the exact-folding range fall back to the oracle's exact bits.
#include <gtest/gtest.h>

// GCC 12 bug 105593: the intrinsic headers trip -Wuninitialized once inlined at -O3.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "core/thread_pool.h"
#include "golden_tables.h"
#include "io/weight_matrix.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_simd.h"

namespace deepinfer {
namespace {

using testing::Bf16UlpDistance;
using testing::Bits;

// ---- the SIMD targets available here ---------------------------------------------------------

struct Target {
  std::string name;
  IsaLevel isa;
  Bf16Dot dot;
  bool interleave = false;  // FP8/FP4/BF16 matrices carry their interleaved copy (InterleavedTiles)
};

std::vector<Target> Targets() {
  std::vector<Target> targets;
  const IsaLevel best = DetectIsa();
  if (best >= IsaLevel::kAvx2) targets.push_back({"avx2", IsaLevel::kAvx2, Bf16Dot::kNone});
  if (best >= IsaLevel::kAvx512) targets.push_back({"avx512-fma", IsaLevel::kAvx512, Bf16Dot::kNone});
  if (best >= IsaLevel::kAvx512 && CpuHasAvx512Bf16()) {
    // Both vdpbf16ps plans, whichever this CPU's vendor picks.
    targets.push_back({"avx512-bf16-fp8gemv", IsaLevel::kAvx512, Bf16Dot::kFp8Gemv});
    targets.push_back({"avx512-bf16-fp8gemv-interleaved", IsaLevel::kAvx512, Bf16Dot::kFp8Gemv, true});
    targets.push_back({"avx512-bf16", IsaLevel::kAvx512, Bf16Dot::kQuantized});
    targets.push_back({"avx512-bf16-interleaved", IsaLevel::kAvx512, Bf16Dot::kQuantized, true});
  }
  if (best >= IsaLevel::kAvx512) targets.push_back({"avx512-fma-interleaved", IsaLevel::kAvx512, Bf16Dot::kNone, true});
  return targets;
}

#define SKIP_WITHOUT_SIMD() \
  if (Targets().empty()) GTEST_SKIP() << "no AVX2 on this CPU";

// `w` with the interleaved copy the target asks for (made in `storage`), where the format and K
// allow one.
WeightMatrix ForTarget(const Target& t, const WeightMatrix& in_place, std::vector<uint8_t>& storage) {
  WeightMatrix w = in_place;
  if (t.interleave && InterleavedTiles::Takes(w.format, w.cols) && !w.interleaved) {
    storage.resize(InterleavedTiles::Bytes(w.format, w.rows, w.cols));
    w.interleaved = Interleave(w, storage.data());
  }
  return w;
}

std::vector<float> RunQuantized(const Target& t, const WeightMatrix& in_place, const float* x, int64_t m, int threads) {
  ThreadPool pool(threads);
  std::vector<float> y(m * in_place.rows, std::nanf(""));
  std::vector<uint8_t> interleaved;
  const WeightMatrix w = ForTarget(t, in_place, interleaved);
  if (t.isa == IsaLevel::kAvx512) {
    QuantizedLinearAvx512(w, x, m, y.data(), pool, t.dot);
  } else {
    QuantizedLinearAvx2(w, x, m, y.data(), pool);
  }
  return y;
}

std::vector<float> RunDense(const Target& t, const WeightMatrix& in_place, const float* x, int64_t m, bool round,
                            int threads) {
  ThreadPool pool(threads);
  std::vector<float> y(m * in_place.rows, std::nanf(""));
  std::vector<uint8_t> interleaved;
  const WeightMatrix w = ForTarget(t, in_place, interleaved);
  if (t.isa == IsaLevel::kAvx512) {
    DenseLinearAvx512(w, x, m, y.data(), round, pool, t.dot);
  } else {
    DenseLinearAvx2(w, x, m, y.data(), round, pool);
  }
  return y;
}

std::vector<float> RunScalar(const WeightMatrix& w, const float* x, int64_t m, bool dense, bool round) {
  ThreadPool pool(2);
  std::vector<float> y(m * w.rows, std::nanf(""));
  const CpuContext ctx{pool, IsaLevel::kScalar};
  if (dense) {
    DenseLinear(w, x, m, y.data(), round, ctx);
  } else {
    QuantizedLinear(w, x, m, y.data(), ctx);
  }
  return y;
}

// ---- random operands -----------------------------------------------------------------------------

struct TestMatrix {
  std::vector<uint8_t> data, scales;
  WeightMatrix w;
};

// Scale bytes uniform in [scale_lo, scale_hi] (127 = 2^0); e4m3 NaN codes are avoided.
// `offset` > 0 starts the rows that many bytes into the buffer (unaligned loads).
TestMatrix MakeQuantized(MatrixFormat format, int64_t n, int64_t k, std::mt19937_64& rng, int scale_lo = 118,
                         int scale_hi = 130, int64_t offset = 0) {
  TestMatrix t;
  const bool fp8 = format == MatrixFormat::kFP8Block32;
  t.data.resize((fp8 ? n * k : n * k / 2) + offset);
  for (uint8_t& b : t.data) {
    b = static_cast<uint8_t>(rng());
    if (fp8 && (b & 0x7f) == 0x7f) b ^= 0x01;
  }
  const int64_t scale_rows = fp8 ? (n + kQuantBlock - 1) / kQuantBlock : n;
  t.scales.resize(scale_rows * (k / kQuantBlock));
  std::uniform_int_distribution<int> scale(scale_lo, scale_hi);
  for (uint8_t& s : t.scales) s = static_cast<uint8_t>(scale(rng));
  t.w = WeightMatrix{format, n, k, t.data.data() + offset, t.scales.data()};
  return t;
}

// bf16 rows start at an odd address (checkpoint tensors need not be aligned).
TestMatrix MakeDense(MatrixFormat format, int64_t n, int64_t k, std::mt19937_64& rng) {
  TestMatrix t;
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const bool bf16 = format == MatrixFormat::kBF16;
  t.data.resize(n * k * (bf16 ? 2 : 4) + 1);
  uint8_t* base = t.data.data() + (bf16 ? 1 : 0);
  for (int64_t i = 0; i < n * k; ++i) {
    const float v = normal(rng);
    if (bf16) {
      const bf16_t b = FloatToBF16(v);
      std::memcpy(base + 2 * i, &b, 2);
    } else {
      std::memcpy(base + 4 * i, &v, 4);
    }
  }
  t.w = WeightMatrix{format, n, k, base, nullptr};
  return t;
}

// bf16-exact activations, N(0, 1) times a per-32 magnitude 2^[-6, 6] so act scales vary per block.
std::vector<float> MakeActivations(int64_t m, int64_t k, std::mt19937_64& rng) {
  std::vector<float> x(m * k);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-6, 6);
  for (int64_t i = 0; i < m * k; i += kQuantBlock) {
    const float magnitude = std::ldexp(1.0f, exponent(rng));
    for (int64_t j = i; j < std::min(i + kQuantBlock, m * k); ++j) x[j] = RoundToBF16(normal(rng) * magnitude);
  }
  return x;
}

// ---- tolerances ---------------------------------------------------------------------------------
//
// Quantized (bf16 outputs): the SIMD paths compute the same exact products as the oracle but add
// them in a different order (one running sum over K in 16 lanes instead of per-32 partials scaled
// and added in K order), so the fp32 sums differ by a few fp32 ulps of the largest partial sums and
// the bf16 outputs agree except where the fp32 value sits next to a bf16 rounding boundary. We
// assert: every element within 1 bf16 ulp of the oracle, unless the element is the result of heavy
// cancellation (|y| < 2^-8 of the row's max |y|), where the bound is 2^-16 of the row's max |y|;
// and at most 0.5% of the elements differ at all.
// Dense, fp32 outputs: |ours - oracle| <= 1e-5 * max_row |y| (FMA chains in 16 lanes + a tree vs one
// sequential non-fused sum); with round_to_bf16 the quantized rule applies.

constexpr double kMaxDifferingFraction = 0.005;

struct Stats {
  int64_t total = 0, differing = 0;
  int worst_ulp = 0;               // elements not produced by heavy cancellation
  double worst_cancelled_rel = 0;  // |diff| / row max, elements with |y| < 2^-8 row max
};

void CompareBf16(const std::vector<float>& ours, const std::vector<float>& oracle, int64_t m, int64_t n, Stats& stats,
                 const std::string& what) {
  int failures = 0;
  for (int64_t r = 0; r < m; ++r) {
    float row_max = 0;
    for (int64_t c = 0; c < n; ++c) row_max = std::max(row_max, std::fabs(oracle[r * n + c]));
    for (int64_t c = 0; c < n; ++c) {
      const float a = ours[r * n + c], e = oracle[r * n + c];
      ++stats.total;
      ASSERT_EQ(Bits(a) & 0xffffu, 0u) << what << ": not bf16-rounded";
      if (Bits(a) == Bits(e) || (a == 0 && e == 0)) continue;
      ++stats.differing;
      const int ulp = Bf16UlpDistance(a, e);
      const double rel = std::fabs(static_cast<double>(a) - e) / std::max(row_max, 1e-30f);
      const bool cancelled = std::fabs(e) < row_max * 0x1p-8f;
      if (cancelled) {
        stats.worst_cancelled_rel = std::max(stats.worst_cancelled_rel, rel);
      } else {
        stats.worst_ulp = std::max(stats.worst_ulp, ulp);
      }
      const bool ok = ulp <= 1 || (cancelled && rel <= 0x1p-16);
      if (!ok && ++failures <= 5) {
        ADD_FAILURE() << what << " (" << r << ", " << c << "): ours " << a << ", oracle " << e << " (" << ulp
                      << " bf16 ulp, " << rel << " of the row max)";
      }
    }
  }
}

// ---- accuracy ----------------------------------------------------------------------------------

struct Shape {
  MatrixFormat format;
  int64_t n, k;
};

TEST(LinearSimd, QuantizedMatchesScalarOracleOnOddShapes) {
  SKIP_WITHOUT_SIMD();
  // N not a multiple of 16/32 (the last FP8 row block is partial); K multiples of 32, including
  // the V4.1 expert sizes for FP4.
  const std::vector<Shape> shapes = {
      {MatrixFormat::kFP8Block32, 1, 32},    {MatrixFormat::kFP8Block32, 45, 96}, {MatrixFormat::kFP8Block32, 77, 1280},
      {MatrixFormat::kFP8Block32, 100, 544}, {MatrixFormat::kFP4Row32, 1, 64},    {MatrixFormat::kFP4Row32, 37, 2304},
      {MatrixFormat::kFP4Row32, 19, 5120},   {MatrixFormat::kFP4Row32, 70, 288},
  };
  const std::vector<int64_t> ms = {1, 2, 3, 7, 16, 33};
  std::mt19937_64 rng(7);
  for (const Target& t : Targets()) {
    Stats stats;
    int64_t offset = 0;
    for (const Shape& s : shapes) {
      const TestMatrix w = MakeQuantized(s.format, s.n, s.k, rng, 118, 130, offset++ % 3 * 7);
      for (int64_t m : ms) {
        const std::vector<float> x = MakeActivations(m, s.k, rng);
        const std::string what = t.name + " " + (s.format == MatrixFormat::kFP4Row32 ? "fp4" : "fp8") +
                                 " M=" + std::to_string(m) + " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k);
        CompareBf16(RunQuantized(t, w.w, x.data(), m, 2), RunScalar(w.w, x.data(), m, false, true), m, s.n, stats,
                    what);
      }
    }
    // One prefill-sized call (the GEMM panel path with several activation blocks).
    for (MatrixFormat f : {MatrixFormat::kFP8Block32, MatrixFormat::kFP4Row32}) {
      const TestMatrix w = MakeQuantized(f, 41, 1024, rng);
      const std::vector<float> x = MakeActivations(512, 1024, rng);
      CompareBf16(RunQuantized(t, w.w, x.data(), 512, 2), RunScalar(w.w, x.data(), 512, false, true), 512, 41, stats,
                  t.name + " M=512");
    }
    std::cout << "[ simd     ] " << t.name << " quantized: " << stats.differing << " of " << stats.total
              << " elements differ from the oracle; worst " << stats.worst_ulp
              << " bf16 ulp (|y| >= 2^-8 row max), worst " << stats.worst_cancelled_rel
              << " of the row max where |y| < 2^-8 row max\n";
    EXPECT_LE(static_cast<double>(stats.differing), kMaxDifferingFraction * static_cast<double>(stats.total)) << t.name;
  }
}

TEST(LinearSimd, DenseMatchesScalarOracle) {
  SKIP_WITHOUT_SIMD();
  const std::vector<Shape> shapes = {{MatrixFormat::kBF16, 33, 5},    {MatrixFormat::kBF16, 50, 100},
                                     {MatrixFormat::kBF16, 17, 4113}, {MatrixFormat::kBF16, 37, 2048},
                                     {MatrixFormat::kF32, 21, 31},    {MatrixFormat::kF32, 40, 1000},
                                     {MatrixFormat::kF32, 9, 4096}};
  std::mt19937_64 rng(11);
  for (const Target& t : Targets()) {
    double worst = 0;
    Stats rounded;
    for (const Shape& s : shapes) {
      const TestMatrix w = MakeDense(s.format, s.n, s.k, rng);
      for (int64_t m : {1, 3, 4, 5, 16, 35}) {
        std::vector<float> x(m * s.k);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (float& v : x) v = normal(rng);  // fp32, not bf16-exact
        const std::vector<float> ours = RunDense(t, w.w, x.data(), m, false, 2);
        const std::vector<float> oracle = RunScalar(w.w, x.data(), m, true, false);
        for (int64_t r = 0; r < m; ++r) {
          float row_max = 0;
          for (int64_t c = 0; c < s.n; ++c) row_max = std::max(row_max, std::fabs(oracle[r * s.n + c]));
          for (int64_t c = 0; c < s.n; ++c) {
            const double err = std::fabs(static_cast<double>(ours[r * s.n + c]) - oracle[r * s.n + c]) / row_max;
            worst = std::max(worst, err);
            ASSERT_LE(err, 1e-5) << t.name << " K=" << s.k << " (" << r << ", " << c << ")";
          }
        }
        CompareBf16(RunDense(t, w.w, x.data(), m, true, 1), RunScalar(w.w, x.data(), m, true, true), m, s.n, rounded,
                    t.name + " dense rounded K=" + std::to_string(s.k));
      }
    }
    std::cout << "[ simd     ] " << t.name << " dense: worst |diff| " << worst
              << " of the row max (fp32); rounded: " << rounded.differing << " of " << rounded.total
              << " differ, worst " << rounded.worst_ulp << " ulp\n";
    EXPECT_LE(static_cast<double>(rounded.differing), kMaxDifferingFraction * static_cast<double>(rounded.total));
  }
}

// ---- dense FP8: the bf16 dequantization, read as FP8 ----------------------------------------------

// FP8 [n, k] (k need not be a multiple of 32) with scale bytes drawn from `scale_bytes`, every
// code including NaN, rows `offset` bytes into the buffer.
TestMatrix MakeFp8Any(int64_t n, int64_t k, const std::vector<uint8_t>& scale_bytes, std::mt19937_64& rng,
                      int64_t offset) {
  TestMatrix t;
  t.data.resize(n * k + offset);
  for (uint8_t& b : t.data) b = static_cast<uint8_t>(rng());
  t.scales.resize(((n + kQuantBlock - 1) / kQuantBlock) * ((k + kQuantBlock - 1) / kQuantBlock));
  for (uint8_t& s : t.scales) s = scale_bytes[rng() % scale_bytes.size()];
  t.w = WeightMatrix{MatrixFormat::kFP8Block32, n, k, t.data.data() + offset, t.scales.data()};
  return t;
}

// The weights and activations of one invariance case: dense FP8 with usual scales at `offset`,
// dense bf16/f32, or quantized with scale bytes in [scale_lo, scale_hi] (60..190: most sums
// inexact, so an order change would show); dense activations are fp32 N(0, 1), quantized ones
// MakeActivations'.
struct CaseOperands {
  TestMatrix w;
  std::vector<float> x;
};
CaseOperands MakeCaseOperands(MatrixFormat format, int64_t n, int64_t k, bool dense, int64_t m, std::mt19937_64& rng,
                              int64_t offset, int scale_lo = 60, int scale_hi = 190) {
  CaseOperands c;
  if (dense && format == MatrixFormat::kFP8Block32) {
    c.w = MakeFp8Any(n, k, {118, 121, 124, 127}, rng, offset);
  } else if (dense) {
    c.w = MakeDense(format, n, k, rng);
  } else {
    c.w = MakeQuantized(format, n, k, rng, scale_lo, scale_hi, offset);
  }
  c.x = MakeActivations(m, k, rng);
  if (dense) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : c.x) v = normal(rng);
  }
  return c;
}

// What the reference's convert.py stores: FloatToBF16 of every dequantized element.
TestMatrix Bf16Dequantization(const WeightMatrix& w) {
  TestMatrix t;
  t.data.resize(w.rows * w.cols * 2 + 1);  // odd address, like MakeDense
  std::vector<float> row(w.cols);
  for (int64_t n = 0; n < w.rows; ++n) {
    w.DequantizedRow(n, row.data());
    for (int64_t c = 0; c < w.cols; ++c) {
      const bf16_t b = FloatToBF16(row[c]);
      std::memcpy(t.data.data() + 1 + 2 * (n * w.cols + c), &b, 2);
    }
  }
  t.w = WeightMatrix{MatrixFormat::kBF16, w.rows, w.cols, t.data.data() + 1, nullptr};
  return t;
}

// Equal bits, except that any NaN equals any NaN (the scalar oracle does not canonicalise NaN).
void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  int failures = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Bits(a[i]) == Bits(b[i]) || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
    if (++failures <= 5) ADD_FAILURE() << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

// DenseLinear on FP8 weights gives exactly the bits of DenseLinear on their bf16 dequantization,
// on every target and the scalar level, for M = 1..17, 1..3 threads, ragged shapes, row slices,
// NaN codes and scales outside the range the decoders handle (which take the bf16 route).
TEST(LinearSimd, DenseFp8IsBitIdenticalToItsBf16Dequantization) {
  std::mt19937_64 rng(13);
  const std::vector<uint8_t> usual = {118, 120, 121, 124, 127, 130};
  const std::vector<uint8_t> extreme = {0, 1, 9, 10, 120, 245, 246, 254, 255};
  struct Case {
    int64_t n, k;
    const std::vector<uint8_t>* scales;
  };
  const std::vector<Case> cases = {{1, 32, &usual},    {45, 96, &usual}, {77, 100, &usual},   {100, 544, &usual},
                                   {64, 4096, &usual}, {33, 5, &usual},  {40, 130, &extreme}, {96, 256, &extreme}};
  std::vector<IsaLevel> levels = SupportedIsaLevels();
  int64_t offset = 0;
  for (const Case& c : cases) {
    const TestMatrix fp8 = MakeFp8Any(c.n, c.k, *c.scales, rng, offset++ % 3 * 5);
    const TestMatrix bf16 = Bf16Dequantization(fp8.w);
    std::vector<float> x(17 * c.k);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);  // fp32, not bf16-exact
    for (IsaLevel isa : levels) {
      for (int threads = 1; threads <= 3; ++threads) {
        ThreadPool pool(threads);
        const CpuContext ctx{pool, isa};
        for (int64_t m = 1; m <= 17; ++m) {
          if (threads == 3 && m % 4 != 1) continue;  // bound the run time
          for (bool round : {true, false}) {
            std::vector<float> ours(m * c.n), expected(m * c.n);
            DenseLinear(fp8.w, x.data(), m, ours.data(), round, ctx);
            DenseLinear(bf16.w, x.data(), m, expected.data(), round, ctx);
            ExpectSameBits(ours, expected,
                           std::string(IsaName(isa)) + " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k) +
                               " M=" + std::to_string(m) + " threads=" + std::to_string(threads) +
                               (round ? " rounded" : " fp32"));
          }
        }
      }
    }
  }
  // wo_a's use: 32-row-aligned slices of a bigger matrix.
  const TestMatrix fp8 = MakeFp8Any(256, 512, usual, rng, 3);
  const TestMatrix bf16 = Bf16Dequantization(fp8.w);
  std::vector<float> x(5 * 512);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = RoundToBF16(normal(rng));
  ThreadPool pool(2);
  for (IsaLevel isa : levels) {
    const CpuContext ctx{pool, isa};
    for (int64_t g = 0; g < 4; ++g) {
      std::vector<float> ours(5 * 64), expected(5 * 64);
      DenseLinear(fp8.w.RowSlice(g * 64, 64), x.data(), 5, ours.data(), true, ctx);
      DenseLinear(bf16.w.RowSlice(g * 64, 64), x.data(), 5, expected.data(), true, ctx);
      ExpectSameBits(ours, expected, std::string(IsaName(isa)) + " slice " + std::to_string(g));
    }
  }
}

// ---- batch invariance ----------------------------------------------------------------------------

void ExpectRowsEqual(const std::vector<float>& a, int64_t ra, const std::vector<float>& b, int64_t rb, int64_t n,
                     const std::string& what) {
  ASSERT_EQ(0, std::memcmp(a.data() + ra * n, b.data() + rb * n, n * sizeof(float))) << what;
}

// Row r of a 37-row call (GEMM panels) equals the row alone (GEMV streaming tile), in a 3-row
// call (another streaming tile), in a 6-row call at another position (other panels), with 1 or 3
// threads, and on every SIMD target.
void CheckInvariance(const WeightMatrix& w, const std::vector<float>& x, int64_t m, bool dense,
                     const std::string& what) {
  const int64_t k = w.cols, n = w.rows;
  std::vector<float> reference;
  for (const Target& t : Targets()) {
    auto run = [&](const float* xr, int64_t rows, int threads) {
      return dense ? RunDense(t, w, xr, rows, false, threads) : RunQuantized(t, w, xr, rows, threads);
    };
    const std::vector<float> all = run(x.data(), m, 2);
    if (reference.empty()) reference = all;
    ASSERT_EQ(0, std::memcmp(all.data(), reference.data(), all.size() * sizeof(float)))
        << what << " " << t.name << " vs " << Targets()[0].name;
    ASSERT_EQ(0, std::memcmp(all.data(), run(x.data(), m, 3).data(), all.size() * sizeof(float)))
        << what << " 3 threads";
    for (int64_t r : {int64_t{0}, int64_t{5}, m - 1}) {
      ExpectRowsEqual(run(x.data() + r * k, 1, 1), 0, all, r, n, what + " alone " + t.name);
      ExpectRowsEqual(run(x.data() + r * k, 1, 3), 0, all, r, n, what + " alone, 3 threads " + t.name);
      if (r >= 2) ExpectRowsEqual(run(x.data() + (r - 2) * k, 3, 1), 2, all, r, n, what + " in 3 " + t.name);
      if (r + 6 <= m) ExpectRowsEqual(run(x.data() + r * k, 6, 2), 0, all, r, n, what + " first of 6 " + t.name);
    }
  }
}

TEST(LinearSimd, BatchAndThreadInvariantBitwiseAcrossPathsAndTargets) {
  SKIP_WITHOUT_SIMD();
  std::mt19937_64 rng(3);
  for (const Shape& s : std::vector<Shape>{{MatrixFormat::kFP8Block32, 70, 640}, {MatrixFormat::kFP4Row32, 45, 2304}}) {
    // Wide weight scales (2^-67 .. 2^63) make most sums inexact, so any order change would show.
    const TestMatrix w = MakeQuantized(s.format, s.n, s.k, rng, 60, 190);
    CheckInvariance(w.w, MakeActivations(37, s.k, rng), 37, false, s.format == MatrixFormat::kFP4Row32 ? "fp4" : "fp8");
  }
  for (const Shape& s : std::vector<Shape>{{MatrixFormat::kBF16, 29, 1000}, {MatrixFormat::kF32, 23, 333}}) {
    const TestMatrix w = MakeDense(s.format, s.n, s.k, rng);
    std::vector<float> x(37 * s.k);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    CheckInvariance(w.w, x, 37, true, s.format == MatrixFormat::kBF16 ? "bf16" : "f32");
  }
}

// Every loop structure (GEMV tiles of 16/8/4 rows, their FP8 remainder tiles inside 32-row blocks,
// GEMM panels with 1-3-row tail tiles) on every format and target: for M = 1..17 and 1..3
// threads, each output row has the bits of that row computed alone, on one thread, by the first
// target. The shapes give each thread strided tiles plus remainders (FP8: 1094 rows = 2 x 547);
// wide weight scales make most quantized sums inexact, so an order change would show.
TEST(LinearSimd, EveryRowMatchesItselfAloneForM1To17AndThreads1To3) {
  SKIP_WITHOUT_SIMD();
  std::mt19937_64 rng(17);
  struct Case {
    MatrixFormat format;
    int64_t n, k;
    bool dense;
  };
  const std::vector<Case> cases = {
      {MatrixFormat::kFP8Block32, 1094, 128, false}, {MatrixFormat::kFP8Block32, 70, 1280, false},
      {MatrixFormat::kFP4Row32, 75, 2304, false},    {MatrixFormat::kBF16, 53, 333, true},
      {MatrixFormat::kF32, 21, 100, true},           {MatrixFormat::kFP8Block32, 101, 200, true}};
  for (const Case& c : cases) {
    // Named references, not a structured binding: clang 14 cannot capture those in a lambda.
    const CaseOperands operands = MakeCaseOperands(c.format, c.n, c.k, c.dense, 17, rng, c.dense ? 1 : 0);
    const TestMatrix& w = operands.w;
    const std::vector<float>& x = operands.x;
    auto run = [&](const Target& t, const float* xr, int64_t rows, int threads) {
      // Dense outputs stay fp32, so that any change of operation order shows.
      return c.dense ? RunDense(t, w.w, xr, rows, false, threads) : RunQuantized(t, w.w, xr, rows, threads);
    };
    std::vector<std::vector<float>> alone;
    for (int64_t r = 0; r < 17; ++r) alone.push_back(run(Targets()[0], x.data() + r * c.k, 1, 1));
    for (const Target& t : Targets()) {
      for (int threads = 1; threads <= 3; ++threads) {
        for (int64_t m = 1; m <= 17; ++m) {
          const std::vector<float> all = run(t, x.data(), m, threads);
          for (int64_t r = 0; r < m; ++r) {
            ExpectRowsEqual(alone[r], 0, all, r, c.n,
                            t.name + " format " + std::to_string(static_cast<int>(c.format)) +
                                (c.dense ? " dense" : "") + " N=" + std::to_string(c.n) + " M=" + std::to_string(m) +
                                " row " + std::to_string(r) + " threads " + std::to_string(threads));
          }
        }
      }
    }
  }
}

// The dispatch: QuantizedLinear / DenseLinear / Linear with ctx.isa reach the SIMD paths.
TEST(LinearSimd, DispatchFromCpuContext) {
  SKIP_WITHOUT_SIMD();
  std::mt19937_64 rng(5);
  const TestMatrix w = MakeQuantized(MatrixFormat::kFP4Row32, 20, 256, rng);
  const std::vector<float> x = MakeActivations(2, 256, rng);
  const Target t = Targets().back();
  ThreadPool pool(2);
  std::vector<float> y(2 * 20);
  Linear(w.w, x.data(), 2, y.data(), CpuContext{pool, t.isa});
  const std::vector<float> direct = RunQuantized(t, w.w, x.data(), 2, 1);
  EXPECT_EQ(0, std::memcmp(y.data(), direct.data(), y.size() * sizeof(float)));
}

// A small matrix (the embedded model's FP8 wo_a, 128 x 128, 17 KB) is not worth a hand-off for
// one activation row, but is for 16: the split counts each row's work, not only its bytes.
TEST(LinearSimd, SmallMatricesSplitByTheirWork) {
  SKIP_WITHOUT_SIMD();
  std::mt19937_64 rng(6);
  const TestMatrix w = MakeQuantized(MatrixFormat::kFP8Block32, 128, 128, rng);
  const std::vector<float> x = MakeActivations(16, 128, rng);
  for (const Target& t : Targets()) {
    ThreadPool pool(2);
    std::vector<float> y(16 * 128);
    std::vector<uint8_t> interleaved;
    const WeightMatrix target_w = ForTarget(t, w.w, interleaved);
    auto hand_offs = [&](int64_t m) {
      const uint64_t before = pool.hand_offs().calls;
      Linear(target_w, x.data(), m, y.data(), CpuContext{pool, t.isa, nullptr, t.dot});
      return pool.hand_offs().calls - before;
    };
    EXPECT_EQ(hand_offs(1), 0u) << t.name;
    EXPECT_GE(hand_offs(16), 1u) << t.name;
  }
}

// ---- the instruction semantics the contract relies on -----------------------------------------

// vdpbf16ps lane i: fl(fl(acc + a[2i+1] * b[2i+1]) + a[2i] * b[2i]) (odd product first, two
// roundings), i.e. exactly two FMAs when the products are exact.
__attribute__((target("avx512f,avx512bf16"))) float Dpbf16Lane0(float acc, float even_a, float odd_a) {
  const uint32_t pair = (Bits(odd_a) & 0xffff0000u) | (Bits(even_a) >> 16);
  const uint32_t one = 0x3f803f80u;  // bf16 1.0 in both halves
  const __m512 r = _mm512_dpbf16_ps(_mm512_set1_ps(acc), (__m512bh)_mm512_set1_epi32(static_cast<int>(pair)),
                                    (__m512bh)_mm512_set1_epi32(static_cast<int>(one)));
  return _mm512_cvtss_f32(r);
}

TEST(LinearSimd, Vdpbf16psAddsTheOddProductFirstWithTwoRoundings) {
  if (DetectIsa() < IsaLevel::kAvx512 || !CpuHasAvx512Bf16()) GTEST_SKIP() << "no AVX512-BF16";
  const float tiny = 0x1p-24f;
  // Fused would give 1 + 2^-23; sequential rounding loses both halves of an ulp.
  EXPECT_EQ(Dpbf16Lane0(1.0f, tiny, tiny), 1.0f);
  // Odd first: (1 + -1) + 3*2^-24 = 3*2^-24; even first would give fl(1 + 3*2^-24) - 1 = 2^-22.
  EXPECT_EQ(Dpbf16Lane0(1.0f, 3 * tiny, -1.0f), 3 * tiny);
  EXPECT_EQ(Dpbf16Lane0(1.0f, -1.0f, 3 * tiny), 0x1p-22f);
}

// ---- the canonical operation sequence, emulated --------------------------------------------------

// linear_simd.h's contract written out in scalar code: operands x' and w' in natural K order
// (zero-padded to whole groups), 16 lanes, odd product first, the fixed reduction tree, Finish.
// Every product of quantized operands is exact, so std::fma is the same operation as the kernels'
// FMA or vdpbf16ps step; for dense formats it is the kernels' FMA.
float CanonicalElement(MatrixFormat f, const float* x, const float* w, int64_t groups, bool round) {
  float lane[16] = {};
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * linear_simd::kGroup;
    const float* wg = w + g * linear_simd::kGroup;
    for (int i = 0; i < 16; ++i) {
      const int odd = linear_simd::PairK(f, i, true), even = linear_simd::PairK(f, i, false);
      lane[i] = std::fma(xg[odd], wg[odd], lane[i]);
      lane[i] = std::fma(xg[even], wg[even], lane[i]);
    }
  }
  float a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i) a[i] = lane[i] + lane[i + 8];
  for (int i = 0; i < 4; ++i) b[i] = a[i] + a[i + 4];
  for (int i = 0; i < 2; ++i) c[i] = b[i] + b[i + 2];
  uint32_t u = Bits(c[0] + c[1]);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::bit_cast<float>(0x7fc00000u);
  if (round) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  return std::bit_cast<float>(u);
}

// y = canonical(x W^T): quantized (activations act-quantized as the oracle does, scales folded
// into both operands) or dense (FP8 standing for its bf16 dequantization).
std::vector<float> CanonicalLinear(const WeightMatrix& w, const float* x, int64_t m, bool dense, bool round) {
  const int64_t k = w.cols, groups = (k + kQuantBlock - 1) / kQuantBlock, padded = groups * kQuantBlock;
  std::vector<float> y(m * w.rows), xr(padded, 0.0f), wr(padded, 0.0f), row(k);
  std::vector<uint8_t> codes(k);
  std::vector<float> act_scales(groups);
  for (int64_t r = 0; r < m; ++r) {
    const float* xs = x + r * k;
    if (dense) {
      std::copy(xs, xs + k, xr.begin());
    } else {
      QuantizeFP8PowerOfTwo({xs, static_cast<size_t>(k)}, kQuantBlock, {codes.data(), codes.size()},
                            {act_scales.data(), act_scales.size()});
      for (int64_t c = 0; c < k; ++c) xr[c] = E4M3ToFloat(codes[c]) * act_scales[c / kQuantBlock];
    }
    for (int64_t n = 0; n < w.rows; ++n) {
      if (dense) {
        w.DequantizedRow(n, row.data());
        for (int64_t c = 0; c < k; ++c) wr[c] = w.quantized() ? BF16ToFloat(FloatToBF16(row[c])) : row[c];
      } else {
        w.UnscaledRow(n, row.data());
        for (int64_t c = 0; c < k; ++c) wr[c] = row[c] * w.BlockScale(n, c / kQuantBlock);
      }
      y[r * w.rows + n] = CanonicalElement(w.format, xr.data(), wr.data(), groups, round);
    }
  }
  return y;
}

// Every target at 1 and 2 threads gives `expected` bit for bit (QuantizedLinear, or DenseLinear
// unrounded where `dense`); `what` names the case in failures.
void ExpectEveryTargetGives(const WeightMatrix& w, const std::vector<float>& x, int64_t m, bool dense,
                            const std::vector<float>& expected, const std::string& what) {
  for (const Target& t : Targets()) {
    for (int threads : {1, 2}) {
      const std::vector<float> ours =
          dense ? RunDense(t, w, x.data(), m, false, threads) : RunQuantized(t, w, x.data(), m, threads);
      ExpectSameBits(ours, expected, t.name + " " + what + " threads " + std::to_string(threads));
    }
  }
}

// Every target, every loop structure (M = 1..6 streaming tiles, the GEMM panels beyond), 1 and 2
// threads: the bits of the emulated canonical sequence. Wide weight scales make most sums
// inexact, so any change of order, pairing or reduction would show.
TEST(LinearSimd, EveryTargetComputesTheCanonicalSequence) {
  SKIP_WITHOUT_SIMD();
  std::mt19937_64 rng(23);
  struct Case {
    MatrixFormat format;
    int64_t n, k;
    bool dense;
    int scale_lo = 60, scale_hi = 190;  // quantized: weight scale bytes
    bool nan_codes = false;             // FP8: a few e4m3 NaN codes
  };
  // FP8 scale bytes up to 134 take the AVX2 group tiles, larger ones and NaN codes the general
  // tiles: both are covered.
  const std::vector<Case> cases = {{MatrixFormat::kFP8Block32, 70, 640, false},
                                   {MatrixFormat::kFP8Block32, 70, 640, false, 96, 134},
                                   {MatrixFormat::kFP8Block32, 67, 320, false, 100, 134, true},
                                   // M >= 3 at this K: the AVX2 tiles' K chunks, NaN codes included
                                   {MatrixFormat::kFP8Block32, 40, 3200, false, 100, 134, true},
                                   // and without them, scales low enough that the activations take
                                   // them (ScaleActivations), over scale blocks of 32 rows
                                   {MatrixFormat::kFP8Block32, 70, 2560, false, 60, 100},
                                   {MatrixFormat::kFP8Block32, 33, 96, false},
                                   {MatrixFormat::kFP4Row32, 45, 2304, false},
                                   {MatrixFormat::kFP4Row32, 9, 64, false},
                                   {MatrixFormat::kBF16, 29, 1000, true},
                                   {MatrixFormat::kBF16, 45, 640, true},   // K % 32 == 0: interleaved copies
                                   {MatrixFormat::kBF16, 31, 3072, true},  // M >= 3: the AVX2 tiles' K chunks
                                   {MatrixFormat::kF32, 23, 333, true},
                                   {MatrixFormat::kFP8Block32, 41, 200, true}};
  for (const Case& c : cases) {
    CaseOperands operands =
        MakeCaseOperands(c.format, c.n, c.k, c.dense, 37, rng, c.dense ? 3 : 5, c.scale_lo, c.scale_hi);
    TestMatrix& w = operands.w;
    const std::vector<float>& x = operands.x;
    if (c.nan_codes) {
      for (int64_t i = 0; i < 6; ++i) w.data[5 + (i * 7919) % (c.n * c.k)] = i % 2 == 0 ? 0x7f : 0xff;
    }
    // FP8 without NaN codes also runs as the loader marks it (WeightMatrix::fp8_nan_free: the AVX2
    // tiles without their NaN check).
    const bool scanned_nan_free = c.format == MatrixFormat::kFP8Block32 && ScanFp8NanFree(w.w);
    if (c.format == MatrixFormat::kFP8Block32 && !c.dense) {
      EXPECT_EQ(scanned_nan_free, !c.nan_codes);
    }
    for (const bool nan_free : scanned_nan_free ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
      w.w.fp8_nan_free = nan_free;
      // AVX2: 7-16 stream in passes up to a format's StreamPassesMaxM (FP8 16, FP4 12, BF16 10),
      // then the chunked panels (13, 14: a partial last quad); 37: the whole-K panels.
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 16, 37}) {
        ExpectEveryTargetGives(w.w, x, m, c.dense, CanonicalLinear(w.w, x.data(), m, c.dense, !c.dense),
                               "format " + std::to_string(static_cast<int>(c.format)) + (c.dense ? " dense" : "") +
                                   (nan_free ? " nan-free" : "") + " M=" + std::to_string(m));
      }
    }
  }
}

// The AVX2 panels take an FP8 row's scales and route (group decoder or general) once per scale
// block (32 rows) and K chunk: 12-row panels straddle the block boundaries (rows 24-35, ...), the
// first block's scales are in the group decoder's range and the second's not, or the other way
// round; whole-K panels (M = 37) against the canonical sequence, and the streaming passes (M = 7,
// 14: FP8 streams up to 16 rows, its bands of 128 rows leaving a partial one).
TEST(LinearSimd, Fp8PanelsTakeEachScaleBlocksRoute) {
  SKIP_WITHOUT_SIMD();
  std::mt19937_64 rng(31);
  constexpr int64_t kN = 150, kK = 1280;
  for (const int64_t wide_block : {0, 1}) {
    CaseOperands operands = MakeCaseOperands(MatrixFormat::kFP8Block32, kN, kK, false, 37, rng, 5, 100, 134);
    TestMatrix& w = operands.w;
    const int64_t scale_cols = w.w.scale_cols();
    // One group of the second K chunk beyond the group decoder's range.
    w.scales[wide_block * scale_cols + 21] = 140;
    w.w.fp8_nan_free = ScanFp8NanFree(w.w);
    ASSERT_TRUE(w.w.fp8_nan_free);
    for (const int64_t m : {7, 14, 37}) {
      ExpectEveryTargetGives(w.w, operands.x, m, false, CanonicalLinear(w.w, operands.x.data(), m, false, true),
                             "wide block " + std::to_string(wide_block) + " M=" + std::to_string(m));
    }
  }
}

// The GEMM path with several activation blocks, whose later blocks read back the panels the first
// decoded (AVX-512: several runs of panels per thread, each K chunk kept), against the canonical
// sequence: K = 4160 is 130 groups (a partial last K chunk for both panel kinds), M = 130 rows
// several blocks ending in a short one, N = 190 rows a partial last panel on each thread's part
// (and a partial FP8 scale block).
TEST(LinearSimd, GemmBlocksReadingKeptPanelsComputeTheCanonicalSequence) {
  SKIP_WITHOUT_SIMD();
  std::mt19937_64 rng(29);
  constexpr int64_t kN = 190, kK = 4160, kM = 130;
  for (const auto& [format, dense] : std::vector<std::pair<MatrixFormat, bool>>{
           {MatrixFormat::kFP8Block32, false}, {MatrixFormat::kFP4Row32, false}, {MatrixFormat::kBF16, true}}) {
    CaseOperands operands = MakeCaseOperands(format, kN, kK, dense, kM, rng, 5);
    ExpectEveryTargetGives(operands.w.w, operands.x, kM, dense,
                           CanonicalLinear(operands.w.w, operands.x.data(), kM, dense, !dense),
                           "format " + std::to_string(static_cast<int>(format)));
  }
}

// Sums whose value depends on the order of their terms: in every weight row the first column of
// each group holds 0, +-1 or +-2^26 (at scale 2^0 or 2^26), the rest are zero, and the activations
// are all 1. A row's +-2^26 terms cancel in total, and each +-1 survives only where the running
// sum of them is 0 when it comes (2^26 + 1 rounds back to 2^26), so the row's result is a small
// integer that depends on the order of the groups; random operands make nearly every fp32 sum
// exact or bury a reordering under the bf16 rounding. Any change of the group order inside a lane,
// across K chunks, tiles, passes or M, shows here. 64 groups give the interleaved multi-row tiles
// several K chunks, 80 rows five tiles and a partial FP8 scale block.
TEST(LinearSimd, CancellingSumsPinTheGroupOrder) {
  SKIP_WITHOUT_SIMD();
  std::mt19937_64 rng(29);
  constexpr int64_t kN = 80, kGroups = 64, kBigGroups = 8, kK = kGroups * kQuantBlock, kM = 16;
  // Which groups of a row hold +-2^26: kBigGroups of them, half of each sign.
  auto big_groups = [&] {
    std::vector<int> sign(kGroups, 0);
    for (int64_t i = 0; i < kBigGroups; ++i) sign[i] = i % 2 == 0 ? 1 : -1;
    std::shuffle(sign.begin(), sign.end(), rng);
    return sign;
  };
  for (const MatrixFormat format : {MatrixFormat::kFP8Block32, MatrixFormat::kFP4Row32, MatrixFormat::kBF16}) {
    const bool fp8 = format == MatrixFormat::kFP8Block32, dense = format == MatrixFormat::kBF16;
    TestMatrix t;
    const int64_t scale_rows = fp8 ? (kN + kQuantBlock - 1) / kQuantBlock : kN;
    t.scales.assign(dense ? 0 : scale_rows * kGroups, 127);
    t.data.assign(fp8 ? kN * kK : dense ? kN * kK * 2 : kN * kK / 2, 0);
    std::vector<int> big;
    for (int64_t n = 0; n < kN; ++n) {
      // FP8 rows share their block's scales, so the block's rows share the big groups too.
      if (!fp8 || n % kQuantBlock == 0) big = big_groups();
      for (int64_t g = 0; g < kGroups; ++g) {
        const int64_t col = g * kQuantBlock;  // pair 0's even member in every format
        int sign = big[g];
        if (!dense && big[g] != 0) t.scales[(fp8 ? n / kQuantBlock : n) * kGroups + g] = 127 + 26;
        if (sign == 0) {
          if (rng() % 5 < 2) continue;
          sign = rng() % 2 == 0 ? 1 : -1;
        }
        if (fp8) {
          t.data[n * kK + col] = sign < 0 ? 0xb8 : 0x38;  // e4m3 -+1
        } else if (!dense) {
          t.data[(n * kK + col) / 2] = sign < 0 ? 0xa : 0x2;  // e2m1 -+1 in the low nibble
        } else {
          const bf16_t b = FloatToBF16(static_cast<float>(sign) * (big[g] != 0 ? 0x1p26f : 1.0f));
          std::memcpy(t.data.data() + 2 * (n * kK + col), &b, 2);
        }
      }
    }
    t.w = WeightMatrix{format, kN, kK, t.data.data(), dense ? nullptr : t.scales.data()};
    if (dense) t.w.bf16_exponents = ScanBf16Exponents(t.w);
    const std::vector<float> x(kM * kK, 1.0f);
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16}) {
      const std::vector<float> expected = CanonicalLinear(t.w, x.data(), m, dense, !dense);
      // The operands did what they are for: small integer results, many of them nonzero.
      const int64_t nonzero = std::count_if(expected.begin(), expected.end(), [](float v) { return v != 0; });
      ASSERT_GT(nonzero, static_cast<int64_t>(expected.size()) / 5);
      for (const float v : expected) ASSERT_LT(std::fabs(v), 1024.0f);
      ExpectEveryTargetGives(t.w, x, m, dense, expected,
                             "format " + std::to_string(static_cast<int>(format)) + " M=" + std::to_string(m));
    }
  }
}

// Dense BF16 / FP8 weights with bf16-exact activations: on the Zen 4 plan they run on vdpbf16ps
// where the exponent ranges prove it exact, on FMAs otherwise, and every target gives the canonical
// sequence's bits either way. The tiny operands below make products subnormal in fp32, which FMAs
// keep and vdpbf16ps would flush: a range check that let them through would fail here, as would a
// call that takes the pairs on activations that are not bf16-exact, or on unscanned weights.
TEST(LinearSimd, DenseOnPairsWhereExactGivesTheCanonicalSequence) {
  SKIP_WITHOUT_SIMD();
  std::mt19937_64 rng(41);
  enum class Twist { kNone, kTinyProducts, kNotBf16Exact, kUnscanned, kSubnormalRow };
  struct Case {
    MatrixFormat format;
    int64_t n, k;
    Twist twist;
  };
  const std::vector<Case> cases = {
      {MatrixFormat::kBF16, 70, 640, Twist::kNone},         {MatrixFormat::kBF16, 37, 5120, Twist::kNone},
      {MatrixFormat::kFP8Block32, 70, 640, Twist::kNone},   {MatrixFormat::kBF16, 37, 320, Twist::kTinyProducts},
      {MatrixFormat::kBF16, 37, 320, Twist::kNotBf16Exact}, {MatrixFormat::kBF16, 37, 320, Twist::kUnscanned},
      {MatrixFormat::kBF16, 37, 320, Twist::kSubnormalRow}};
  for (const Case& c : cases) {
    TestMatrix w = c.format == MatrixFormat::kBF16 ? MakeDense(c.format, c.n, c.k, rng)
                                                   : MakeQuantized(c.format, c.n, c.k, rng, 100, 150);
    std::vector<float> x = MakeActivations(37, c.k, rng);
    if (c.twist == Twist::kTinyProducts) {
      // Row 0 of the weights is zero but for columns 5 and 10, ~2^-65, and so are those columns
      // of every activation row: row 0 of y sums two subnormal products (~2^-130).
      for (int64_t i = 0; i < c.k; ++i) {
        const bf16_t b = FloatToBF16(i == 5 || i == 10 ? 0x1.7p-65f : 0.0f);
        std::memcpy(w.data.data() + 1 + 2 * i, &b, 2);  // MakeDense's rows start 1 byte in
      }
      for (int64_t r = 0; r < 37; ++r) x[r * c.k + 5] = x[r * c.k + 10] = 0x1.3p-65f;
    }
    if (c.twist == Twist::kNotBf16Exact) x[3 * c.k + 7] += 0x1p-12f * std::fabs(x[3 * c.k + 7]);
    if (c.twist == Twist::kSubnormalRow) {
      // Activation row 0 holds only zeros and bf16 subnormals, which vdpbf16ps would read as 0.
      for (int64_t i = 0; i < c.k; ++i) x[i] = i % 3 == 0 ? BF16ToFloat(static_cast<bf16_t>(0x0045 + i % 7)) : 0.0f;
    }
    if (c.format == MatrixFormat::kBF16 && c.twist != Twist::kUnscanned) w.w.bf16_exponents = ScanBf16Exponents(w.w);
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 37}) {
      for (const bool round : {false, true}) {
        const std::vector<float> expected = CanonicalLinear(w.w, x.data(), m, /*dense=*/true, round);
        for (const Target& t : Targets()) {
          for (int threads : {1, 2}) {
            ExpectSameBits(RunDense(t, w.w, x.data(), m, round, threads), expected,
                           t.name + " format " + std::to_string(static_cast<int>(c.format)) + " twist " +
                               std::to_string(static_cast<int>(c.twist)) + " M=" + std::to_string(m) +
                               (round ? " rounded" : "") + " threads " + std::to_string(threads));
          }
        }
      }
    }
  }
}

TEST(LinearSimd, ScanBf16ExponentsFindsTheNonzeroRangeAndRefusesSpecialValues) {
  auto scan = [](std::vector<float> values) {
    std::vector<bf16_t> bits;
    for (float v : values) bits.push_back(FloatToBF16(v));
    const WeightMatrix w{MatrixFormat::kBF16, 1, static_cast<int64_t>(bits.size()),
                         reinterpret_cast<const uint8_t*>(bits.data())};
    return ScanBf16Exponents(w);
  };
  const Bf16Exponents e = scan({0.0f, -0.0f, 0.75f, -3.0f, 0x1p-40f});
  EXPECT_TRUE(e.known);
  EXPECT_EQ(e.lo, -40);
  EXPECT_EQ(e.hi, 1);
  EXPECT_TRUE(scan({0.0f, -0.0f}).known);
  EXPECT_FALSE(scan({1.0f, 0x1p-130f}).known);  // subnormal
  EXPECT_FALSE(scan({1.0f, INFINITY}).known);
  EXPECT_FALSE(scan({1.0f, std::nanf("")}).known);
}

TEST(LinearSimd, ScanFp8NanFreeFindsEveryNanCode) {
  // 8-byte words and a tail: a NaN code at the first, a middle and the last byte of either.
  const auto scan = [](int64_t n, int64_t k, int64_t at, uint8_t code) {
    std::vector<uint8_t> codes(static_cast<size_t>(n * k));
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 37) % 256) & 0xf7;  // no NaN
    if (at >= 0) codes[static_cast<size_t>(at)] = code;
    return ScanFp8NanFree(WeightMatrix{MatrixFormat::kFP8Block32, n, k, codes.data()});
  };
  EXPECT_TRUE(scan(3, 37, -1, 0));
  for (const uint8_t code : {uint8_t{0x7f}, uint8_t{0xff}}) {
    for (const int64_t at : {0, 7, 8, 60, 103, 104, 110})
      EXPECT_FALSE(scan(3, 37, at, code)) << int{code} << " at " << at;
  }
  // The codes next to NaN are numbers: 448, -448, and the largest subnormal-exponent codes.
  for (const uint8_t code : {uint8_t{0x7e}, uint8_t{0xfe}, uint8_t{0x80}, uint8_t{0x77}, uint8_t{0xf7}}) {
    EXPECT_TRUE(scan(3, 37, 110, code)) << int{code};
  }
}

// ---- the interleaved copy ---------------------------------------------------------------------

// Interleave keeps every row's codes and scales, and its tiles pad with zero rows; a row slice
// keeps the copy when it starts a tile, drops it otherwise, and computes the same bits either way.
TEST(LinearSimd, InterleavedCopyAndItsRowSlices) {
  std::mt19937_64 rng(31);
  for (MatrixFormat f : {MatrixFormat::kFP4Row32, MatrixFormat::kFP8Block32}) {
    const bool fp4 = f == MatrixFormat::kFP4Row32;
    const TestMatrix t = MakeQuantized(f, 75, 96, rng);
    std::vector<uint8_t> copy(InterleavedTiles::Bytes(f, 75, 96));
    WeightMatrix w = t.w;
    w.interleaved = Interleave(w, copy.data());
    ASSERT_EQ(copy.size(), 5u * 3u * InterleavedTiles::BlockBytes(f));  // 5 tiles of 16 rows, 3 groups
    const int64_t group_bytes = InterleavedTiles::GroupBytes(f), block = InterleavedTiles::BlockBytes(f);
    for (int64_t row : {0, 15, 16, 74, 79}) {
      for (int64_t g = 0; g < 3; ++g) {
        const uint8_t* b = copy.data() + (row / 16 * 3 + g) * block;
        const int64_t i = row % 16;
        for (int64_t byte = 0; byte < group_bytes && !fp4; ++byte) {
          // FP8: row pairs in alternating 8-byte runs.
          const int64_t at = 64 * (i / 2) + 16 * (byte / 8) + 8 * (i % 2) + byte % 8;
          ASSERT_EQ(InterleavedTiles::ByteOffset(f, i, byte), at);
          const uint8_t expected = row < 75 ? t.w.data[row * 96 + g * group_bytes + byte] : 0;
          ASSERT_EQ(b[at], expected) << "row " << row << " group " << g;
        }
        for (int e = 0; e < 32 && fp4; ++e) {
          // FP4: after the 16 scales, quads of 4 rows as 32 words; word j holds element
          // 4 (j % 8) + j / 8 of the quad's row r in bits [4r, 4r + 4).
          int word = -1;
          for (int j = 0; j < 32; ++j) word = 4 * (j % 8) + j / 8 == e ? j : word;
          ASSERT_EQ(InterleavedTiles::Fp4WordElement(word), e);
          const uint16_t bits =
              static_cast<uint16_t>(b[16 + 64 * (i / 4) + 2 * word] | b[16 + 64 * (i / 4) + 2 * word + 1] << 8);
          const int expected = row < 75 ? (t.w.data[row * 48 + g * 16 + e / 2] >> (4 * (e % 2))) & 0xf : 0;
          ASSERT_EQ((bits >> (4 * (i % 4))) & 0xf, expected) << "row " << row << " group " << g << " element " << e;
        }
        if (fp4) {
          ASSERT_EQ(b[row % 16], row < 75 ? t.w.scales[row * 3 + g] : 0) << "scale of row " << row;
        }
      }
    }
    EXPECT_EQ(w.interleaved.scale_min, *std::min_element(t.scales.begin(), t.scales.end()));
    EXPECT_EQ(w.interleaved.scale_max, *std::max_element(t.scales.begin(), t.scales.end()));

    const std::vector<float> x = MakeActivations(1, 96, rng);
    for (const Target& target : Targets()) {
      const std::vector<float> all = RunQuantized(target, w, x.data(), 1, 2);
      for (int64_t begin : {int64_t{0}, int64_t{32}, int64_t{8}}) {
        if (!fp4 && begin % 32 != 0) continue;  // FP8 slices start on a scale block
        const WeightMatrix slice = w.RowSlice(begin, 75 - begin);
        EXPECT_EQ(static_cast<bool>(slice.interleaved), begin % 16 == 0);
        ExpectSameBits(RunQuantized(target, slice, x.data(), 1, 2), std::vector<float>(all.begin() + begin, all.end()),
                       target.name + " rows from " + std::to_string(begin));
      }
    }
  }
}

// The same for a BF16 matrix (the output head's copy): 64 bytes per row and group, no scales.
TEST(LinearSimd, InterleavedBf16CopyAndItsRowSlices) {
  std::mt19937_64 rng(37);
  const TestMatrix t = MakeDense(MatrixFormat::kBF16, 75, 96, rng);
  std::vector<uint8_t> copy(InterleavedTiles::Bytes(MatrixFormat::kBF16, 75, 96));
  WeightMatrix w = t.w;
  w.interleaved = Interleave(w, copy.data());
  const int64_t block = InterleavedTiles::BlockBytes(MatrixFormat::kBF16);
  ASSERT_EQ(block, 16 * 64);
  ASSERT_EQ(copy.size(), 5u * 3u * block);
  for (int64_t row : {0, 15, 16, 74, 79}) {
    for (int64_t g = 0; g < 3; ++g) {
      const uint8_t* values = copy.data() + (row / 16 * 3 + g) * block + row % 16 * 64;
      for (int64_t i = 0; i < 64; ++i) {
        ASSERT_EQ(values[i], row < 75 ? t.w.data[row * 192 + g * 64 + i] : 0) << "row " << row << " group " << g;
      }
    }
  }
  const std::vector<float> x = MakeActivations(1, 96, rng);
  for (const Target& target : Targets()) {
    const std::vector<float> all = RunDense(target, w, x.data(), 1, true, 2);
    ExpectSameBits(all, RunDense(target, t.w, x.data(), 1, true, 2), target.name + " in place");
    for (int64_t begin : {int64_t{0}, int64_t{32}, int64_t{8}}) {
      const WeightMatrix slice = w.RowSlice(begin, 75 - begin);
      EXPECT_EQ(static_cast<bool>(slice.interleaved), begin % 16 == 0);
      ExpectSameBits(RunDense(target, slice, x.data(), 1, true, 2), std::vector<float>(all.begin() + begin, all.end()),
                     target.name + " rows from " + std::to_string(begin));
    }
  }
}

// ---- scales where folding is not exact -----------------------------------------------------

// Scale bytes 0 (2^-127), 255 (NaN), 1 and 254 make folding inexact; those elements must carry
// the oracle's bits, the others stay within tolerance, and the call stays batch invariant.
TEST(LinearSimd, ExtremeScalesFallBackToTheOracle) {
  SKIP_WITHOUT_SIMD();
  std::mt19937_64 rng(9);
  for (MatrixFormat f : {MatrixFormat::kFP8Block32, MatrixFormat::kFP4Row32}) {
    TestMatrix w = MakeQuantized(f, 96, 256, rng);
    const std::vector<uint8_t> extreme = {0, 255, 1, 254, 10, 245};
    for (size_t i = 0; i < extreme.size(); ++i) w.scales[(i * 7) % w.scales.size()] = extreme[i];
    std::vector<float> x = MakeActivations(6, 256, rng);
    for (int i = 0; i < 32; ++i) x[256 + i] *= 0x1p-100f;  // row 1: one absurdly small block
    const std::vector<float> oracle = RunScalar(w.w, x.data(), 6, false, true);
    for (const Target& t : Targets()) {
      const std::vector<float> ours = RunQuantized(t, w.w, x.data(), 6, 2);
      Stats stats;
      for (size_t i = 0; i < ours.size(); ++i) {
        if (std::isnan(oracle[i])) {
          EXPECT_TRUE(std::isnan(ours[i])) << t.name << " element " << i;
        } else if (Bits(ours[i]) != Bits(oracle[i])) {
          ++stats.differing;
          EXPECT_LE(Bf16UlpDistance(ours[i], oracle[i]), 1) << t.name << " element " << i;
        }
      }
      for (int64_t r = 0; r < 6; ++r) {
        const std::vector<float> alone = RunQuantized(t, w.w, x.data() + r * 256, 1, 1);
        ExpectRowsEqual(alone, 0, ours, r, 96, t.name + " extreme scales, row alone");
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer
