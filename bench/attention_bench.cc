// SparseAttentionWithSink (kernels/cpu/ops.h) at the V4.1 shapes, at every ISA level this CPU
// runs: one decode query over a window + top-k selection of entries, 64 heads of dim 512 (Flash).
// Counter: FLOP/s of q.k and P.V (4 * heads * dim per entry). Then the KV-cache decoders.
//
// Run by hand, e.g. build/bench/attention_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/ops.h"

namespace deepinfer {
namespace {

constexpr int kHeads = 64;
constexpr int64_t kDim = 512;

float Value(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return RoundToBF16(static_cast<float>(static_cast<int64_t>(state >> 40) - (int64_t{1} << 23)) * 0x1p-24f);
}

// Args: {entries, isa level}.
void BM_SparseAttention(benchmark::State& state) {
  const int64_t count = state.range(0);
  const IsaLevel isa = static_cast<IsaLevel>(state.range(1));
  if (isa > DetectIsa()) return state.SkipWithError("ISA level not supported here");
  uint64_t seed = 11;
  std::vector<float> q(kHeads * kDim), kv(count * kDim), sink(kHeads), out(kHeads * kDim);
  for (float& v : q) v = Value(seed);
  for (float& v : kv) v = Value(seed);
  for (float& v : sink) v = Value(seed);
  std::vector<const float*> entries(count);
  for (int64_t i = 0; i < count; ++i) entries[i] = kv.data() + i * kDim;
  std::vector<float> scratch(SparseAttentionScratchFloats(kDim));
  for (auto _ : state) {
    SparseAttentionWithSink(isa, q.data(), kHeads, kDim, entries, sink.data(), 0.044f, out.data(), scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(4.0 * kHeads * kDim * static_cast<double>(count),
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(IsaName(isa)));
}
// 128-entry window alone, window + 512 selected, window + 1024 selected.
BENCHMARK(BM_SparseAttention)
    ->ArgsProduct({{128, 640, 1152},
                   {static_cast<int64_t>(IsaLevel::kScalar), static_cast<int64_t>(IsaLevel::kAvx2),
                    static_cast<int64_t>(IsaLevel::kAvx512)}})
    ->Unit(benchmark::kMicrosecond);

// The KV-cache formats as the CPU backend stores them, one entry of 512 values per call, 1152
// entries (window + 1024 selected): 0 the FP8 window entries (ue8m0 scale per 32), 1 the FP4
// latents (e4m3 scale per 16), 2 the FP4 index keys (ue8m0 per 32; the indexer's queries are
// encoded the same way). Args of both benchmarks: {format, isa level}.
constexpr int64_t kKvEntries = 1152;
struct KvFormat {
  bool fp4;
  size_t block;
  const char* name;
  size_t CodeBytes() const { return fp4 ? kDim / 2 : kDim; }
  size_t ScaleBytes() const { return kDim / block; }
};
KvFormat KvFormatOf(int format) {
  return format == 0   ? KvFormat{false, 32, "fp8 window"}
         : format == 1 ? KvFormat{true, 16, "fp4 latent"}
                       : KvFormat{true, 32, "fp4 index key"};
}
void KvArgs(benchmark::internal::Benchmark* b) {
  b->ArgsProduct({{0, 1, 2},
                  {static_cast<int64_t>(IsaLevel::kScalar), static_cast<int64_t>(IsaLevel::kAvx2),
                   static_cast<int64_t>(IsaLevel::kAvx512)}})
      ->Unit(benchmark::kMicrosecond);
}
// Counter: values decoded or encoded per second.
void ReportKv(benchmark::State& state, const KvFormat& f, IsaLevel isa) {
  state.counters["values/s"] =
      benchmark::Counter(static_cast<double>(kKvEntries * kDim), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(f.name) + " " + std::string(IsaName(isa)));
}

// The KV-cache decoders that feed attention (ops.h). Scales and codes are in the range the vector
// paths take (no NaN codes).
void BM_KvDecode(benchmark::State& state) {
  const int format = static_cast<int>(state.range(0));
  const KvFormat f = KvFormatOf(format);
  const IsaLevel isa = static_cast<IsaLevel>(state.range(1));
  if (isa > DetectIsa()) return state.SkipWithError("ISA level not supported here");
  std::vector<uint8_t> codes(kKvEntries * f.CodeBytes()), scales(kKvEntries * f.ScaleBytes());
  uint64_t seed = 5;
  for (uint8_t& c : codes) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<uint8_t>(seed >> 56);
    if (!f.fp4 && (c & 0x7f) == 0x7f) c ^= 1;  // not a NaN code
  }
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(format == 1 ? 40 + i % 64 : 120 + i % 16);
  std::vector<float> out(kKvEntries * kDim);
  using Decoder = void (*)(IsaLevel, const uint8_t*, const uint8_t*, size_t, size_t, float*);
  const Decoder decode = format == 0   ? Decoder{DecodeFP8PowerOfTwo}
                         : format == 1 ? Decoder{DecodeFP4E4M3Scale}
                                       : Decoder{DecodeFP4PowerOfTwo};
  for (auto _ : state) {
    for (int64_t e = 0; e < kKvEntries; ++e) {
      decode(isa, codes.data() + e * f.CodeBytes(), scales.data() + e * f.ScaleBytes(), kDim, f.block,
             out.data() + e * kDim);
    }
    benchmark::DoNotOptimize(out.data());
  }
  ReportKv(state, f, isa);
}
BENCHMARK(BM_KvDecode)->Apply(KvArgs);

// The KV-cache encoders (ops.h), on bell-curve values of varied block magnitudes.
void BM_KvEncode(benchmark::State& state) {
  const int format = static_cast<int>(state.range(0));
  const KvFormat f = KvFormatOf(format);
  const IsaLevel isa = static_cast<IsaLevel>(state.range(1));
  if (isa > DetectIsa()) return state.SkipWithError("ISA level not supported here");
  std::vector<float> values(kKvEntries * kDim);
  uint64_t seed = 5;
  for (size_t i = 0; i < values.size(); ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const float uniform = static_cast<float>(seed >> 40) * 0x1p-24f - 0.5f;
    values[i] = std::ldexp(uniform, static_cast<int>(i / f.block % 16) - 8);
  }
  std::vector<uint8_t> codes(kKvEntries * f.CodeBytes()), scales(kKvEntries * f.ScaleBytes());
  using Encoder = void (*)(IsaLevel, std::span<const float>, size_t, uint8_t*, uint8_t*);
  const Encoder encode = format == 0   ? Encoder{EncodeFP8PowerOfTwo}
                         : format == 1 ? Encoder{EncodeFP4E4M3Scale}
                                       : Encoder{EncodeFP4PowerOfTwo};
  for (auto _ : state) {
    for (int64_t e = 0; e < kKvEntries; ++e) {
      encode(isa, {values.data() + e * kDim, static_cast<size_t>(kDim)}, f.block, codes.data() + e * f.CodeBytes(),
             scales.data() + e * f.ScaleBytes());
    }
    benchmark::DoNotOptimize(codes.data());
  }
  ReportKv(state, f, isa);
}
BENCHMARK(BM_KvEncode)->Apply(KvArgs);

}  // namespace
}  // namespace deepinfer

BENCHMARK_MAIN();
