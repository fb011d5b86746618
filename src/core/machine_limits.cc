#include "core/machine_limits.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"

namespace deepinfer {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// ---- Read bandwidth ----------------------------------------------------------------------------

constexpr size_t kPageBytes = 4096;
constexpr size_t kPageFloats = kPageBytes / sizeof(float);

// Horizontal sums through memory (GCC 12's _mm512_reduce_add_ps trips -Wuninitialized).
__attribute__((target("avx512f"))) float LaneSum512(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float total = 0.0f;
  for (float x : lanes) total += x;
  return total;
}

// Each sums `pages` whole 4 KiB pages with 8 independent vector accumulators.
__attribute__((target("avx512f"))) float SumPagesAvx512(const float* p, size_t pages) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const float* end = p + pages * kPageFloats;
  for (; p < end; p += 128) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + 48));
    a4 = _mm512_add_ps(a4, _mm512_load_ps(p + 64));
    a5 = _mm512_add_ps(a5, _mm512_load_ps(p + 80));
    a6 = _mm512_add_ps(a6, _mm512_load_ps(p + 96));
    a7 = _mm512_add_ps(a7, _mm512_load_ps(p + 112));
  }
  const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                 _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  return LaneSum512(s);
}

__attribute__((target("avx2"))) float SumPagesAvx2(const float* p, size_t pages) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const float* end = p + pages * kPageFloats;
  for (; p < end; p += 64) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + 24));
    a4 = _mm256_add_ps(a4, _mm256_load_ps(p + 32));
    a5 = _mm256_add_ps(a5, _mm256_load_ps(p + 40));
    a6 = _mm256_add_ps(a6, _mm256_load_ps(p + 48));
    a7 = _mm256_add_ps(a7, _mm256_load_ps(p + 56));
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0.0f;
  for (float v : lanes) total += v;
  return total;
}

float SumPagesSse2(const float* p, size_t pages) {  // SSE2 is part of x86-64
  __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const float* end = p + pages * kPageFloats;
  for (; p < end; p += 32) {
    a0 = _mm_add_ps(a0, _mm_load_ps(p));
    a1 = _mm_add_ps(a1, _mm_load_ps(p + 4));
    a2 = _mm_add_ps(a2, _mm_load_ps(p + 8));
    a3 = _mm_add_ps(a3, _mm_load_ps(p + 12));
    a4 = _mm_add_ps(a4, _mm_load_ps(p + 16));
    a5 = _mm_add_ps(a5, _mm_load_ps(p + 20));
    a6 = _mm_add_ps(a6, _mm_load_ps(p + 24));
    a7 = _mm_add_ps(a7, _mm_load_ps(p + 28));
  }
  __m128 s = _mm_add_ps(_mm_add_ps(_mm_add_ps(a0, a1), _mm_add_ps(a2, a3)),
                        _mm_add_ps(_mm_add_ps(a4, a5), _mm_add_ps(a6, a7)));
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// ---- Peak chains -------------------------------------------------------------------------------

constexpr int kChains = 12;

// Each runs `iters` rounds of kChains independent dependent chains and returns a value that
// depends on all of them (so nothing is optimized away). Chains start at distinct values so
// no two can be merged.
__attribute__((target("avx512f"))) float ChainsAvx512Fma(int64_t iters) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  __m512 c[kChains];
  for (int k = 0; k < kChains; ++k) c[k] = _mm512_set1_ps(0.01f * static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kChains; ++k) c[k] = _mm512_fmadd_ps(c[k], a, b);
  }
  __m512 s = c[0];
  for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, c[k]);
  return LaneSum512(s);
}

__attribute__((target("avx512f,avx512bf16"))) float ChainsAvx512Bf16(int64_t iters) {
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(-0.5f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.25f), _mm512_set1_ps(0.25f));
  __m512 c[kChains];
  for (int k = 0; k < kChains; ++k) c[k] = _mm512_set1_ps(0.01f * static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kChains; ++k) c[k] = _mm512_dpbf16_ps(c[k], a, b);
  }
  __m512 s = c[0];
  for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, c[k]);
  return LaneSum512(s);
}

__attribute__((target("avx2,fma"))) float ChainsAvx2Fma(int64_t iters) {
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  __m256 c[kChains];
  for (int k = 0; k < kChains; ++k) c[k] = _mm256_set1_ps(0.01f * static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kChains; ++k) c[k] = _mm256_fmadd_ps(c[k], a, b);
  }
  __m256 s = c[0];
  for (int k = 1; k < kChains; ++k) s = _mm256_add_ps(s, c[k]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0.0f;
  for (float v : lanes) total += v;
  return total;
}

float ChainsScalar(int64_t iters) {
  const float a = 0.999f, b = 0.001f;
  float c[kChains];
  for (int k = 0; k < kChains; ++k) c[k] = 0.01f * static_cast<float>(k);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kChains; ++k) {
      c[k] = c[k] * a + b;                // -ffp-contract=off: a multiply and an add, as in the scalar kernels
      __asm__ volatile("" : "+x"(c[k]));  // keeps each chain scalar (no SLP packing)
    }
  }
  float s = 0.0f;
  for (int k = 0; k < kChains; ++k) s += c[k];
  return s;
}

double FlopsPerRound(PeakKind kind) {
  switch (kind) {
    case PeakKind::kScalarFp32:
      return 2.0 * kChains;
    case PeakKind::kAvx2Fma:
      return 16.0 * kChains;
    case PeakKind::kAvx512Fma:
      return 32.0 * kChains;
    case PeakKind::kAvx512Bf16Dot:
      return 64.0 * kChains;
  }
  return 0.0;
}

float RunChains(PeakKind kind, int64_t iters) {
  switch (kind) {
    case PeakKind::kScalarFp32:
      return ChainsScalar(iters);
    case PeakKind::kAvx2Fma:
      return ChainsAvx2Fma(iters);
    case PeakKind::kAvx512Fma:
      return ChainsAvx512Fma(iters);
    case PeakKind::kAvx512Bf16Dot:
      return ChainsAvx512Bf16(iters);
  }
  return 0.0f;
}

// Seconds for every thread of the pool to run `iters` rounds.
double TimeChains(ThreadPool& pool, PeakKind kind, int64_t iters) {
  const size_t threads = static_cast<size_t>(pool.size());
  std::vector<float> sinks(threads * 16, 0.0f);  // one cache line per thread
  const Clock::time_point start = Clock::now();
  pool.ParallelFor(threads, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) sinks[t * 16] = RunChains(kind, iters);
  });
  const double seconds = SecondsSince(start);
  volatile float keep = 0.0f;
  for (size_t t = 0; t < threads; ++t) keep = keep + sinks[t * 16];
  return seconds;
}

}  // namespace

double MeasureReadBandwidth(ThreadPool& pool, size_t bytes, int passes) {
  if (bytes == 0 || passes <= 0) throw MakeError("read bandwidth: bytes and passes must be positive");
  ReadBandwidthProbe probe(pool, bytes);
  probe.Sample(passes);
  return probe.summary().max;
}

ReadBandwidthProbe::ReadBandwidthProbe(ThreadPool& pool, size_t bytes) : pool_(pool) {
  if (bytes == 0) throw MakeError("read bandwidth: bytes must be positive");
  pages_ = (bytes + kPageBytes - 1) / kPageBytes;
  const size_t total = pages_ * kPageBytes;
  data_ = static_cast<float*>(std::aligned_alloc(kPageBytes, total));
  if (data_ == nullptr) throw MakeError("read bandwidth: cannot allocate ", total, " bytes");
  // One contiguous slice of pages per thread, first touched by the thread that reads it.
  pool_.ParallelFor(static_cast<size_t>(pool_.size()), [&](size_t first, size_t last) {
    for (size_t t = first; t < last; ++t) {
      const auto [begin, end] = SliceOf(t);
      std::fill(data_ + begin * kPageFloats, data_ + end * kPageFloats, 1.0f);
    }
  });
}

ReadBandwidthProbe::~ReadBandwidthProbe() { std::free(data_); }

std::pair<size_t, size_t> ReadBandwidthProbe::SliceOf(size_t thread) const {
  const size_t threads = static_cast<size_t>(pool_.size());
  const size_t base = pages_ / threads, extra = pages_ % threads;
  const size_t begin = thread * base + std::min(thread, extra);
  return {begin, begin + base + (thread < extra ? 1 : 0)};
}

double ReadBandwidthProbe::Pass() {
  float (*sum)(const float*, size_t) = SumPagesSse2;
  if (__builtin_cpu_supports("avx512f")) {
    sum = SumPagesAvx512;
  } else if (__builtin_cpu_supports("avx2")) {
    sum = SumPagesAvx2;
  }
  const size_t threads = static_cast<size_t>(pool_.size());
  std::vector<float> sinks(threads * 16, 0.0f);  // one cache line per thread
  const Clock::time_point start = Clock::now();
  pool_.ParallelFor(threads, [&](size_t first, size_t last) {
    for (size_t t = first; t < last; ++t) {
      const auto [begin, end] = SliceOf(t);
      sinks[t * 16] += sum(data_ + begin * kPageFloats, end - begin);
    }
  });
  const double seconds = SecondsSince(start);
  volatile float keep = 0.0f;
  for (size_t t = 0; t < threads; ++t) keep = keep + sinks[t * 16];
  return seconds > 0.0 ? static_cast<double>(pages_ * kPageBytes) / seconds : 0.0;
}

void ReadBandwidthProbe::Sample(int passes) {
  if (passes <= 0) throw MakeError("read bandwidth: passes must be positive");
  Pass();  // untimed: brings the pages back into the TLB and the threads out of sleep
  for (int i = 0; i < passes; ++i) passes_.push_back(Pass());
}

SampleSummary SummarizeSamples(std::vector<double> samples) {
  SampleSummary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  s.median = n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  s.min = samples.front();
  s.max = samples.back();
  s.count = static_cast<int>(n);
  return s;
}

ReadBandwidthProbe::Summary ReadBandwidthProbe::summary() const { return SummarizeSamples(passes_); }

std::string_view PeakKindName(PeakKind kind) {
  switch (kind) {
    case PeakKind::kScalarFp32:
      return "fp32 mul+add (scalar)";
    case PeakKind::kAvx2Fma:
      return "fp32 FMA (AVX2)";
    case PeakKind::kAvx512Fma:
      return "fp32 FMA (AVX-512)";
    case PeakKind::kAvx512Bf16Dot:
      return "vdpbf16ps (AVX512-BF16)";
  }
  return "?";
}

bool PeakKindSupported(PeakKind kind) {
  switch (kind) {
    case PeakKind::kScalarFp32:
      return true;
    case PeakKind::kAvx2Fma:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case PeakKind::kAvx512Fma:
      return __builtin_cpu_supports("avx512f");
    case PeakKind::kAvx512Bf16Dot:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  }
  return false;
}

double MeasurePeakFlops(ThreadPool& pool, PeakKind kind, double seconds) {
  if (!PeakKindSupported(kind)) throw MakeError("FLOP peak: ", PeakKindName(kind), " is not supported on this CPU");
  if (!(seconds > 0.0)) throw MakeError("FLOP peak: the duration must be positive");
  // Calibrate: grow the loop until one pass lasts about a quarter of the budget.
  const double target = seconds / 4.0;
  int64_t iters = 1024;
  for (;;) {
    const double t = TimeChains(pool, kind, iters);
    if (t >= target || iters >= (int64_t{1} << 40)) break;
    const double scale = t > 1e-4 ? target / t * 1.1 : 16.0;
    iters = static_cast<int64_t>(static_cast<double>(iters) * std::clamp(scale, 1.5, 16.0));
  }
  double best = 0.0;
  for (int pass = 0; pass < 3; ++pass) {
    const double t = TimeChains(pool, kind, iters);
    if (t > 0.0) {
      best = std::max(best, static_cast<double>(pool.size()) * static_cast<double>(iters) * FlopsPerRound(kind) / t);
    }
  }
  return best;
}

}  // namespace deepinfer
