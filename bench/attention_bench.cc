// SparseAttentionWithSink (kernels/cpu/ops.h) at the V4.1 shapes, at every ISA level this CPU
// runs: one decode query over a window + top-k selection of entries, 64 heads of dim 512 (Flash).
// Counter: FLOP/s of q.k and P.V (4 * heads * dim per entry).
//
// Run by hand, e.g. build/bench/attention_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdint>
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

}  // namespace
}  // namespace deepinfer

BENCHMARK_MAIN();
