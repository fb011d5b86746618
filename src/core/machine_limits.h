// What this machine can do at most, measured in the same run as the thing compared with it
// (`deepinfer bench`; the analytic FLOP count of a forward it compares with is io/forward_flops.h).
//
// The measurements follow /work/shared/docs/machine-notes.md: DRAM read bandwidth is a
// vectorised sum over a large array with 8 independent accumulators per thread, each thread
// reading its own contiguous slice (first touched by that same thread); the FLOP peak runs
// 12 independent dependency chains of one instruction class per thread on every thread of
// the pool. Both report the best of several passes. Nothing here asserts a threshold: shared
// machines are noisy, callers only report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "core/thread_pool.h"

namespace deepinfer {

// The median (the mean of the middle two for an even count), least and largest of repeated
// samples of one measurement; all zero for none.
struct SampleSummary {
  double median = 0.0, min = 0.0, max = 0.0;
  int count = 0;
};
SampleSummary SummarizeSamples(std::vector<double> samples);

// ---- DRAM read bandwidth --------------------------------------------------------------------

// Bytes per second read by `pool` summing `bytes` of memory (rounded up to whole 4 KiB pages;
// at least 1 GiB is what makes it a DRAM number), best of `passes` timed passes after one
// untimed pass. Uses the widest vector loads this CPU and OS support. Throws Error when the
// buffer cannot be allocated or the arguments are not positive.
double MeasureReadBandwidth(ThreadPool& pool, size_t bytes, int passes);

// The same measurement, repeated between the phases of a benchmark: the host's bandwidth to a
// VM drifts by tens of percent over minutes, so one sample can miss the level the measured
// phases saw. Holds its buffer (allocated and first touched by the pool's threads) until
// destroyed. Thread contract: one caller at a time.
class ReadBandwidthProbe {
 public:
  using Summary = SampleSummary;  // bytes per second over every timed pass
  // Throws Error as MeasureReadBandwidth.
  ReadBandwidthProbe(ThreadPool& pool, size_t bytes);
  ~ReadBandwidthProbe();
  ReadBandwidthProbe(const ReadBandwidthProbe&) = delete;
  ReadBandwidthProbe& operator=(const ReadBandwidthProbe&) = delete;

  // One untimed pass, then `passes` timed ones, each recorded.
  void Sample(int passes);
  Summary summary() const;  // of every pass so far; all zero before the first

 private:
  double Pass();
  std::pair<size_t, size_t> SliceOf(size_t thread) const;  // pages [begin, end) of a thread
  ThreadPool& pool_;
  size_t pages_ = 0;
  float* data_ = nullptr;
  std::vector<double> passes_;
};

// ---- Arithmetic peak ------------------------------------------------------------------------

enum class PeakKind {
  kScalarFp32,     // scalar fp32 multiply + add (what scalar kernels compile to): 2 FLOP per pair
  kAvx2Fma,        // vfmadd on ymm: 8 lanes x 2 = 16 FLOP per instruction
  kAvx512Fma,      // vfmadd on zmm: 16 lanes x 2 = 32 FLOP per instruction
  kAvx512Bf16Dot,  // vdpbf16ps on zmm: 16 lanes x 2 bf16 products x 2 = 64 FLOP per instruction
};

std::string_view PeakKindName(PeakKind kind);
// Whether this CPU and OS can run `kind` (the CPU flag and the saved register state).
bool PeakKindSupported(PeakKind kind);

// FLOP/s of `kind` on every thread of `pool`: 12 independent chains per thread, the loop
// length calibrated so a pass lasts about `seconds` / 4, best of 3 passes. Throws Error when
// the kind is not supported here or `seconds` is not positive.
double MeasurePeakFlops(ThreadPool& pool, PeakKind kind, double seconds);

}  // namespace deepinfer
