// QuantizedLinear / DenseLinear at the DeepSeek-V4.1 shapes, with the two baselines that say what
// "fast" means on the machine at hand, measured in the same binary:
//   * DRAM read bandwidth: a vectorised sum (8 accumulators per thread) over a 1 GiB buffer;
//   * vdpbf16ps peak (and FP32 FMA peak): 12 independent chains per thread.
// GEMV (M = 1, 4, 16) cycles through >= 1 GiB of distinct weight copies so the weights come from
// DRAM, as in decode; M = 512 (prefill) reuses one copy. Counters: bytes/s of weights (plus scales)
// and FLOP/s, and their fractions of the baselines (of_bw, of_dp_peak).
//
// Run by hand, on an otherwise idle machine, e.g.
//   build/bench/linear_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// and read the "max" rows of the rate counters (the "min" rows of the times).
#include <benchmark/benchmark.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_operands.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "io/weight_matrix.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_simd.h"

namespace deepinfer {
namespace {

constexpr size_t kWorkingSet = size_t{1} << 30;  // > the LLC: weights stream from DRAM

// One pool per thread count for the whole run (1: the kernel alone; 2: the machine, plus the
// pool's wake-up cost that every real call pays).
ThreadPool& Pool(int threads = 2) {
  static ThreadPool one(1), two(2);
  return threads == 1 ? one : two;
}

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// ---- baselines ---------------------------------------------------------------------------------

__attribute__((target("avx512f"))) float SumAvx512(const float* p, size_t n) {
  __m512 a[8];
  for (auto& v : a) v = _mm512_setzero_ps();
  for (size_t i = 0; i + 128 <= n; i += 128) {
    for (int j = 0; j < 8; ++j) a[j] = _mm512_add_ps(a[j], _mm512_load_ps(p + i + 16 * j));
  }
  for (int j = 1; j < 8; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
  return _mm512_reduce_add_ps(a[0]);
}

__attribute__((target("avx2"))) float SumAvx2(const float* p, size_t n) {
  __m256 a[8];
  for (auto& v : a) v = _mm256_setzero_ps();
  for (size_t i = 0; i + 64 <= n; i += 64) {
    for (int j = 0; j < 8; ++j) a[j] = _mm256_add_ps(a[j], _mm256_load_ps(p + i + 8 * j));
  }
  for (int j = 1; j < 8; ++j) a[0] = _mm256_add_ps(a[0], a[j]);
  alignas(32) float l[8];
  _mm256_store_ps(l, a[0]);
  return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}

struct Buffer {
  float* data;
  size_t floats;
  explicit Buffer(size_t bytes) : data(static_cast<float*>(std::aligned_alloc(64, bytes))), floats(bytes / 4) {
    for (size_t i = 0; i < floats; ++i) data[i] = static_cast<float>(i & 1023);
  }
  ~Buffer() { std::free(data); }
};

// One pass over the buffer with `threads` threads; returns bytes per second.
double ReadPass(const Buffer& buffer, ThreadPool& pool) {
  const bool avx512 = DetectIsa() == IsaLevel::kAvx512;
  const size_t parts = static_cast<size_t>(pool.size()) * 64;
  std::vector<float> sinks(parts);
  const double start = Now();
  pool.ParallelFor(parts, [&](size_t begin, size_t end) {
    for (size_t part = begin; part < end; ++part) {
      const size_t chunk = buffer.floats / parts;
      sinks[part] = avx512 ? SumAvx512(buffer.data + part * chunk, chunk) : SumAvx2(buffer.data + part * chunk, chunk);
    }
  });
  benchmark::DoNotOptimize(sinks.data());
  return static_cast<double>(buffer.floats) * 4 / (Now() - start);
}

// Best of a few passes with `threads` threads, measured once for the of_bw counters.
double MeasuredBandwidth(int threads) {
  static double bandwidth[3] = {0, 0, 0};
  if (bandwidth[threads] == 0) {
    Buffer buffer(kWorkingSet);
    for (int i = 0; i < 5; ++i) bandwidth[threads] = std::max(bandwidth[threads], ReadPass(buffer, Pool(threads)));
  }
  return bandwidth[threads];
}

void BM_DramReadBandwidth(benchmark::State& state) {
  if (DetectIsa() < IsaLevel::kAvx2) return state.SkipWithError("needs AVX2");
  ThreadPool pool(static_cast<int>(state.range(0)));
  Buffer buffer(kWorkingSet);
  for (auto _ : state) benchmark::DoNotOptimize(ReadPass(buffer, pool));
  state.counters["bytes/s"] =
      benchmark::Counter(static_cast<double>(kWorkingSet), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DramReadBandwidth)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

constexpr int64_t kPeakIters = 20'000'000;

// Twelve named accumulators (an array would live on the stack): independent chains, so the loop
// runs at the instruction's throughput rather than its latency.
#define DI_TWELVE(X) X(c0) X(c1) X(c2) X(c3) X(c4) X(c5) X(c6) X(c7) X(c8) X(c9) X(c10) X(c11)
#define DI_INIT(c) __m512 c = _mm512_set1_ps(static_cast<float>(__LINE__ + sizeof(#c)));

__attribute__((target("avx512f,avx512bf16"))) float DpChains(int64_t iters) {
  DI_TWELVE(DI_INIT)
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x00010001);
  for (int64_t i = 0; i < iters; ++i) {
#define DI_DP(c)                 \
  c = _mm512_dpbf16_ps(c, a, b); \
  __asm__("" : "+v"(c));
    DI_TWELVE(DI_DP)
#undef DI_DP
  }
  return _mm512_reduce_add_ps(c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11);
}

__attribute__((target("avx512f"))) float FmaChains(int64_t iters) {
  DI_TWELVE(DI_INIT)
  const __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-30f);
  for (int64_t i = 0; i < iters; ++i) {
#define DI_FMA(c)               \
  c = _mm512_fmadd_ps(a, b, c); \
  __asm__("" : "+v"(c));
    DI_TWELVE(DI_FMA)
#undef DI_FMA
  }
  return _mm512_reduce_add_ps(c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11);
}
#undef DI_INIT
#undef DI_TWELVE

// FLOP/s on all pool threads: 12 chains x iters x (64 FLOP per vdpbf16ps | 32 per FMA).
double PeakRun(ThreadPool& pool, bool dp) {
  std::vector<float> sinks(pool.size());
  const double start = Now();
  pool.ParallelFor(static_cast<size_t>(pool.size()), [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) sinks[t] = dp ? DpChains(kPeakIters) : FmaChains(kPeakIters);
  });
  benchmark::DoNotOptimize(sinks.data());
  return static_cast<double>(pool.size()) * 12 * kPeakIters * (dp ? 64 : 32) / (Now() - start);
}

double MeasuredDpPeak() {
  static const double peak = [] {
    double best = 0;
    for (int i = 0; i < 3; ++i) best = std::max(best, PeakRun(Pool(), true));
    return best;
  }();
  return peak;
}

bool HasBf16() { return DetectIsa() == IsaLevel::kAvx512 && CpuHasAvx512Bf16(); }

void BM_Vdpbf16psPeak(benchmark::State& state) {
  if (!HasBf16()) return state.SkipWithError("needs AVX512-BF16");
  ThreadPool pool(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(PeakRun(pool, true));
  state.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(state.range(0)) * 12 * kPeakIters * 64,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Vdpbf16psPeak)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Fp32FmaPeak(benchmark::State& state) {
  if (DetectIsa() < IsaLevel::kAvx512) return state.SkipWithError("needs AVX-512");
  ThreadPool pool(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(PeakRun(pool, false));
  state.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(state.range(0)) * 12 * kPeakIters * 32,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Fp32FmaPeak)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// The fixed cost every 2-thread kernel call pays: an empty ParallelFor over the shared pool (the
// worker sleeps on a condition variable between calls; waking an idle vCPU is slow in a VM).
void BM_ParallelForWakeup(benchmark::State& state) {
  for (auto _ : state) Pool().ParallelFor(2, [](size_t, size_t) {});
}
BENCHMARK(BM_ParallelForWakeup)->UseRealTime()->Unit(benchmark::kMicrosecond);

// ---- operands -------------------------------------------------------------------------------------

using bench::Activations;
using bench::SplitMix;

// Eight e4m3 codes of N(0, 1) * 448 / 4 values, as a checkpoint's blocks hold them (amax near 4
// sigma at the block scale; e4m3 subnormals, which cost extra on some cores, are as rare as there).
// Drawn through a table of 2^16 such codes, so that filling a GiB stays quick.
uint64_t Fp8Codes(uint64_t& seed) {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(1 << 16);
    uint64_t s = 99;
    for (uint8_t& code : t) {
      double sum = 0;  // sum of 4 uniforms: a cheap bell curve with unit variance
      for (int j = 0; j < 4; ++j) sum += static_cast<double>(SplitMix(s) >> 11) * 0x1p-53 - 0.5;
      code = FloatToE4M3(static_cast<float>(sum * std::sqrt(3.0) * 112.0));
    }
    return t;
  }();
  uint64_t v = 0;
  for (int half = 0; half < 2; ++half) {
    const uint64_t r = SplitMix(seed);
    for (int i = 0; i < 4; ++i) v |= static_cast<uint64_t>(table[(r >> (16 * i)) & 0xffff]) << (8 * (4 * half + i));
  }
  return v;
}

// `copies` distinct copies of one random N x K matrix (realistic scales 2^-7..2^-3; FP8 codes of a bell curve, no NaN),
// each starting `offset` bytes past a 64-byte boundary (checkpoint tensors need not be aligned).
struct Weights {
  MatrixFormat format;
  int64_t n, k, offset;
  bool interleaved;
  uint8_t* data = nullptr;
  std::vector<uint8_t> scales;
  std::vector<std::vector<uint8_t>> interleaved_copies;
  std::vector<WeightMatrix> copies;

  Weights(MatrixFormat f, int64_t rows, int64_t cols, int64_t count, int64_t misalign, bool interleave)
      : format(f), n(rows), k(cols), offset(misalign), interleaved(interleave) {
    const int64_t payload = f == MatrixFormat::kBF16         ? n * k * 2
                            : f == MatrixFormat::kF32        ? n * k * 4
                            : f == MatrixFormat::kFP8Block32 ? n * k
                                                             : n * k / 2;
    const int64_t stride = (payload + 64 + 63) / 64 * 64;
    const bool quantized = f == MatrixFormat::kFP8Block32 || f == MatrixFormat::kFP4Row32;
    const int64_t scale_bytes = !quantized                       ? 0
                                : f == MatrixFormat::kFP8Block32 ? ((n + 31) / 32) * (k / 32)
                                                                 : n * (k / 32);
    const size_t total = static_cast<size_t>(stride * count);
    data = static_cast<uint8_t*>(std::aligned_alloc(64, total));
    scales.resize(scale_bytes * count);
    uint64_t seed = 42;
    for (size_t i = 0; i + 8 <= total; i += 8) {
      uint64_t v = SplitMix(seed);
      if (f == MatrixFormat::kFP8Block32) v = Fp8Codes(seed);
      if (f == MatrixFormat::kBF16) v = bench::Bf16Weights(v);
      if (f == MatrixFormat::kF32) v = 0x3c0000003c000000ull | (v & 0x807fffff807fffffull);
      std::memcpy(data + i, &v, 8);
    }
    for (auto& b : scales) b = static_cast<uint8_t>(120 + SplitMix(seed) % 5);
    for (int64_t c = 0; c < count; ++c) {
      copies.push_back(WeightMatrix{f, n, k, data + c * stride + offset,
                                    scales.empty() ? nullptr : scales.data() + c * scale_bytes});
      // As the model loader does: the exponent range lets dense BF16 calls run on vdpbf16ps, and
      // FP8 matrices without NaN codes spare the AVX2 tiles their check.
      if (f == MatrixFormat::kBF16) copies.back().bf16_exponents = ScanBf16Exponents(copies.back());
      if (f == MatrixFormat::kFP8Block32) copies.back().fp8_nan_free = ScanFp8NanFree(copies.back());
      if (interleave) {
        interleaved_copies.emplace_back(InterleavedTiles::Bytes(f, n, k));
        copies.back().interleaved = Interleave(copies.back(), interleaved_copies.back().data());
      }
    }
  }
  ~Weights() { std::free(data); }
  Weights(const Weights&) = delete;
  Weights& operator=(const Weights&) = delete;
};

// One weight set alive at a time (the benchmarks of a shape run together), to bound memory.
const Weights& GetWeights(MatrixFormat f, int64_t n, int64_t k, bool streaming, int64_t misalign, bool interleave) {
  static std::unique_ptr<Weights> current;
  const uint64_t bytes = f == MatrixFormat::kBF16         ? n * k * 2
                         : f == MatrixFormat::kF32        ? n * k * 4
                         : f == MatrixFormat::kFP8Block32 ? n * k + ((n + 31) / 32) * (k / 32)
                                                          : n * k / 2 + n * (k / 32);
  const int64_t count = streaming ? static_cast<int64_t>((kWorkingSet + bytes - 1) / bytes) : 1;
  if (!current || current->format != f || current->n != n || current->k != k || current->offset != misalign ||
      current->interleaved != interleave || static_cast<int64_t>(current->copies.size()) < count) {
    current.reset();
    current = std::make_unique<Weights>(f, n, k, count, misalign, interleave);
  }
  return *current;
}

// ---- kernels -------------------------------------------------------------------------------------

// kAvx512Fma / kAvx512Fp8Dot: the AVX-512 kernels with vdpbf16ps off / on the FP8 GEMV only (the
// Intel plan, Bf16Dot::kFp8Gemv), whatever this CPU's default plan is; kAvx512Fma on dense weights
// is DenseLinear on FMAs (the default plan on Zen 4 runs BF16 / FP8 on vdpbf16ps where exact).
// kInterleaved: the default plan on FP8/FP4/BF16 weights that carry their interleaved copy
// (InterleavedTiles). kAvx512AllDot / kInterleavedAllDot: the Zen 4 plan (Bf16Dot::kQuantized,
// every FP8/FP4 tile and panel on vdpbf16ps) whatever this CPU's default plan is, so the two plans
// are compared in one run on either CPU kind.
enum class Path {
  kDefault,
  kInterleaved,
  kAvx512Fma,
  kAvx512Fp8Dot,
  kAvx512AllDot,
  kInterleavedAllDot,
  kAvx2,
  kScalar
};

// Args: {M, threads}. `dense`: FP8 weights through DenseLinear (no activation quantization).
void RunLinear(benchmark::State& state, MatrixFormat f, int64_t n, int64_t k, Path path, bool dense_round,
               int64_t misalign = 0, bool dense = false) {
  const int64_t m = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  ThreadPool& pool = Pool(threads);
  const IsaLevel best = DetectIsa();
  if (best == IsaLevel::kScalar) return state.SkipWithError("needs AVX2");
  if (path == Path::kAvx512Fma && best < IsaLevel::kAvx512) return state.SkipWithError("needs AVX-512");
  const bool all_dot = path == Path::kAvx512AllDot || path == Path::kInterleavedAllDot;
  if ((path == Path::kAvx512Fp8Dot || all_dot) && !HasBf16()) return state.SkipWithError("needs AVX512-BF16");
  const bool streaming = m <= 16;  // GEMV: stream >= 1 GiB of weights; GEMM: one copy, compute-bound
  const bool interleave = path == Path::kInterleaved || path == Path::kInterleavedAllDot;
  if (interleave && !InterleavedTiles::Takes(f, k)) {
    return state.SkipWithError("interleaving is for FP8/FP4/BF16 with K a multiple of 32");
  }
  const Weights& weights = GetWeights(f, n, k, streaming, misalign, interleave);
  const std::vector<float> x = Activations(m, k);
  std::vector<float> y(m * n);
  const double bw = streaming ? MeasuredBandwidth(threads) : 0.0;
  const double peak = !streaming && HasBf16() && threads == 2 ? MeasuredDpPeak() : 0.0;
  const IsaLevel isa = path == Path::kAvx2 ? IsaLevel::kAvx2 : path == Path::kScalar ? IsaLevel::kScalar : best;
  const CpuContext ctx{pool, isa};
  size_t next = 0;
  for (auto _ : state) {
    const WeightMatrix& w = weights.copies[next++ % weights.copies.size()];
    if (path == Path::kAvx512Fma && (dense || !w.quantized())) {
      DenseLinearAvx512(w, x.data(), m, y.data(), dense_round, pool, Bf16Dot::kNone);
    } else if (path == Path::kAvx512Fma || path == Path::kAvx512Fp8Dot || all_dot) {
      QuantizedLinearAvx512(w, x.data(), m, y.data(), pool,
                            all_dot                       ? Bf16Dot::kQuantized
                            : path == Path::kAvx512Fp8Dot ? Bf16Dot::kFp8Gemv
                                                          : Bf16Dot::kNone);
    } else if (w.quantized() && !dense) {
      QuantizedLinear(w, x.data(), m, y.data(), ctx);
    } else {
      DenseLinear(w, x.data(), m, y.data(), dense_round, ctx);
    }
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(weights.copies[0].bytes()), flops = 2.0 * m * n * k;
  state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  if (bw > 0) state.counters["of_bw"] = benchmark::Counter(bytes / bw, benchmark::Counter::kIsIterationInvariantRate);
  if (peak > 0)
    state.counters["of_dp_peak"] = benchmark::Counter(flops / peak, benchmark::Counter::kIsIterationInvariantRate);
}

void Configure(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->Unit(benchmark::kMillisecond);
  b->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
  b->ComputeStatistics("max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
}

// ---- the registered cases -------------------------------------------------------------------------

// A matrix of the model, as the benchmarks time it.
struct Shape {
  const char* name;
  MatrixFormat format;
  int64_t n, k;
  bool round;  // bf16-rounded outputs (dense calls: where the model rounds)
  int64_t misalign = 0;
  bool dense = false;  // FP8 weights through DenseLinear (no activation quantization)
};

// V4.1 routed expert (w1/w3: 2304 x 5120; w2: 5120 x 2304), FP4.
constexpr Shape kExpertUp{"fp4_expert_2304x5120", MatrixFormat::kFP4Row32, 2304, 5120, true};
constexpr Shape kExpertDown{"fp4_expert_5120x2304", MatrixFormat::kFP4Row32, 5120, 2304, true};
// Attention projections wq_b (32768 x 1280) and wo_b (5120 x 8192), FP8.
constexpr Shape kWqB{"fp8_wq_b_32768x1280", MatrixFormat::kFP8Block32, 32768, 1280, true};
constexpr Shape kWoB{"fp8_wo_b_5120x8192", MatrixFormat::kFP8Block32, 5120, 8192, true};
// Rows 16 bytes past a cache-line boundary: every other 32-byte FP8 group load splits two lines.
constexpr Shape kWoBMisaligned{"fp8_wo_b_5120x8192_misaligned16", MatrixFormat::kFP8Block32, 5120, 8192, true, 16};
// The grouped output projection wo_a, one group (1024 x 4096) as attention calls it: DenseLinear
// with bf16 rounding, on the FP8 checkpoint bytes (decoded on the fly) vs the former bf16 copy.
constexpr Shape kWoA{"fp8_dense_wo_a_1024x4096", MatrixFormat::kFP8Block32, 1024, 4096, true, 0, true};
constexpr Shape kWoABf16{"bf16_wo_a_1024x4096", MatrixFormat::kBF16, 1024, 4096, true};
// Output head (129280 x 5120), BF16 weights, fp32 logits; prefill-sized M on an 8192-row slice.
constexpr Shape kHead{"bf16_head_129280x5120", MatrixFormat::kBF16, 129280, 5120, false};
constexpr Shape kHeadSlice{"bf16_8192x5120", MatrixFormat::kBF16, 8192, 5120, false};
// F32 weights (the small fp32 projections).
constexpr Shape kF32{"f32_4096x5120", MatrixFormat::kF32, 4096, 5120, false};

const char* PathSuffix(Path path) {
  switch (path) {
    case Path::kDefault:
      return "";
    case Path::kInterleaved:
      return "_interleaved";
    case Path::kAvx512Fma:
      return "_avx512fma";
    case Path::kAvx512Fp8Dot:
      return "_fp8dot";
    case Path::kAvx512AllDot:
      return "_alldot";
    case Path::kInterleavedAllDot:
      return "_interleaved_alldot";
    case Path::kAvx2:
      return "_avx2";
    case Path::kScalar:
      return "_scalar";
  }
  return "?";
}

// One shape on one path, at each M on 2 threads and at each M of `one_thread` on 1; registered as
// RunLinear/<shape><path suffix>/<M>/<threads>.
struct Case {
  Shape shape;
  Path path;
  std::vector<int64_t> two_threads;
  std::vector<int64_t> one_thread = {};
};

// AVX2 (Zen 2-3, Intel without AVX-512): streaming tiles to M = 6 (K chunks from M = 3 where the
// activations outgrow L1), chunked panels to M = 16, whole-K panels beyond.
const std::vector<int64_t> kAvx2Batches = {1, 3, 4, 6, 8, 16};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {kExpertUp, Path::kDefault, {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 512}, {1, 6, 16, 512}},
      {kExpertUp, Path::kInterleaved, {1, 2, 3, 4, 5, 6, 7, 8, 16, 512}, {1}},
      {kExpertUp, Path::kAvx512Fma, {1, 16}},
      {kExpertUp, Path::kAvx512Fp8Dot, {1, 512}},
      {kExpertUp, Path::kAvx512AllDot, {1, 16, 512}},
      {kExpertUp, Path::kInterleavedAllDot, {1, 16, 512}},
      {kExpertUp, Path::kAvx2, kAvx2Batches},
      {kExpertUp, Path::kScalar, {1}},
      {kExpertDown, Path::kDefault, {1, 4, 6, 8, 16, 512}},
      {kExpertDown, Path::kInterleaved, {1, 4, 6, 8, 16, 512}},
      {kExpertDown, Path::kAvx512AllDot, {1, 16, 512}},
      {kExpertDown, Path::kInterleavedAllDot, {1, 16, 512}},
      {kWqB, Path::kDefault, {1, 4, 6, 8, 16, 512}, {1}},
      {kWqB, Path::kInterleaved, {1, 4, 6, 8, 16, 512}},
      {kWoB, Path::kDefault, {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 512}, {1}},
      {kWoB, Path::kInterleaved, {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 512}, {1}},
      {kWoB, Path::kAvx512Fma, {1}},
      {kWoB, Path::kAvx512Fp8Dot, {512}},
      {kWoB, Path::kAvx512AllDot, {1, 16, 512}},
      {kWoB, Path::kInterleavedAllDot, {1, 16, 512}},
      {kWoB, Path::kAvx2, kAvx2Batches},
      {kWoBMisaligned, Path::kDefault, {1}},
      {kWoA, Path::kDefault, {1, 16, 512}},
      {kWoA, Path::kAvx512Fma, {1, 16, 512}},
      {kWoABf16, Path::kDefault, {1, 16, 512}},
      {kHead, Path::kDefault, {1, 2, 4, 5, 6, 8, 12, 16}, {1, 16}},
      // The head's GEMV on its interleaved copy (Model::InterleaveMatrices makes one on the Zen 4 plan).
      {kHead, Path::kInterleaved, {1, 2, 4, 5, 6, 7, 8, 12, 16}, {1}},
      // The dense shapes on FMAs only, for the side by side.
      {kHead, Path::kAvx512Fma, {1, 2, 4, 16}},
      {kHead, Path::kAvx2, kAvx2Batches},
      {kHeadSlice, Path::kDefault, {512}},
      {kHeadSlice, Path::kAvx512Fma, {512}},
      {kF32, Path::kDefault, {1, 16}},
  };
  return cases;
}

void RegisterLinearCases() {
  for (const Case& c : Cases()) {
    const Shape& s = c.shape;
    const std::string name = std::string("RunLinear/") + s.name + PathSuffix(c.path);
    benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark(name.c_str(), [&c](benchmark::State& state) {
      RunLinear(state, c.shape.format, c.shape.n, c.shape.k, c.path, c.shape.round, c.shape.misalign, c.shape.dense);
    });
    for (int64_t m : c.one_thread) b->Args({m, 1});
    for (int64_t m : c.two_threads) b->Args({m, 2});
    Configure(b);
  }
}

}  // namespace
}  // namespace deepinfer

int main(int argc, char** argv) {
  deepinfer::RegisterLinearCases();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
