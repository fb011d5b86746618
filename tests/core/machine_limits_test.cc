// src/core/machine_limits: the measurements return sane numbers (no timing thresholds: the
// machines are shared and noisy).
#include "core/machine_limits.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/thread_pool.h"

namespace deepinfer {
namespace {

TEST(MachineLimits, ReadBandwidthIsPositiveAndFinite) {
  ThreadPool pool(2);
  const double bytes_per_s = MeasureReadBandwidth(pool, size_t{4} << 20, 2);
  EXPECT_GT(bytes_per_s, 0.0);
  EXPECT_TRUE(std::isfinite(bytes_per_s));
  // A size that is not a whole number of pages, one thread.
  ThreadPool one(1);
  const double small = MeasureReadBandwidth(one, 10000, 1);
  EXPECT_GT(small, 0.0);
  EXPECT_TRUE(std::isfinite(small));
}

TEST(MachineLimits, SummarizeSamplesGivesTheMedianAndTheRange) {
  const SampleSummary even = SummarizeSamples({3.0, 10.0, 1.0, 2.0});
  EXPECT_EQ(even.median, 2.5);  // the mean of the middle two
  EXPECT_EQ(even.min, 1.0);
  EXPECT_EQ(even.max, 10.0);
  EXPECT_EQ(even.count, 4);
  const SampleSummary odd = SummarizeSamples({5.0, 4.0, 9.0});
  EXPECT_EQ(odd.median, 5.0);
  EXPECT_EQ(odd.count, 3);
  const SampleSummary none = SummarizeSamples({});
  EXPECT_EQ(none.median, 0.0);
  EXPECT_EQ(none.count, 0);
}

// The probe keeps every pass: its summary orders them and counts them across samples.
TEST(MachineLimits, ReadBandwidthProbeSummarisesEveryPass) {
  ThreadPool pool(2);
  ReadBandwidthProbe probe(pool, size_t{2} << 20);
  EXPECT_EQ(probe.summary().count, 0);
  EXPECT_EQ(probe.summary().median, 0.0);
  probe.Sample(3);
  probe.Sample(2);
  const ReadBandwidthProbe::Summary s = probe.summary();
  EXPECT_EQ(s.count, 5);
  EXPECT_GT(s.min, 0.0);
  EXPECT_LE(s.min, s.median);
  EXPECT_LE(s.median, s.max);
  EXPECT_TRUE(std::isfinite(s.max));
  EXPECT_THROW(probe.Sample(0), Error);
  EXPECT_THROW(ReadBandwidthProbe(pool, 0), Error);
}

TEST(MachineLimits, ReadBandwidthRejectsEmptyRequests) {
  ThreadPool pool(1);
  EXPECT_THROW(MeasureReadBandwidth(pool, 0, 1), Error);
  EXPECT_THROW(MeasureReadBandwidth(pool, 4096, 0), Error);
}

TEST(MachineLimits, PeakFlopsIsPositiveAndFiniteForEverySupportedKind) {
  ThreadPool pool(2);
  EXPECT_TRUE(PeakKindSupported(PeakKind::kScalarFp32));
  for (PeakKind kind : {PeakKind::kScalarFp32, PeakKind::kAvx2Fma, PeakKind::kAvx512Fma, PeakKind::kAvx512Bf16Dot}) {
    SCOPED_TRACE(std::string(PeakKindName(kind)));
    if (!PeakKindSupported(kind)) {
      EXPECT_THROW(MeasurePeakFlops(pool, kind, 0.01), Error);
      continue;
    }
    const double flops = MeasurePeakFlops(pool, kind, 0.02);
    EXPECT_GT(flops, 0.0);
    EXPECT_TRUE(std::isfinite(flops));
  }
  EXPECT_THROW(MeasurePeakFlops(pool, PeakKind::kScalarFp32, 0.0), Error);
}

}  // namespace
}  // namespace deepinfer
