// The CPU backend: the kernels of src/kernels/cpu (SIMD linears and attention, dispatched on the
// ISA level) and the scalar loops of the small ops. Every op gives the bits of the scalar
// oracle at every ISA level (kernels/cpu/ops.h and linear.h state the oracles).
//
// Thread contract: as Backend; the ops split their work over `pool` with a static partition,
// so results do not depend on the thread count.
#pragma once

#include <array>
#include <chrono>
#include <optional>
#include <utility>

#include "backend/backend.h"
#include "core/step_parallelism.h"
#include "kernels/cpu/cpu_context.h"

namespace deepinfer {

// What `bench` times while it is attached: the fastest weight stream of the GEMV-shaped linears
// (M <= kGemvMaxRows, >= kGemvMinBytes of weights), a second denominator beside the probe's DRAM
// bandwidth that no background noise of the machine can inflate; and, in the forwards of exactly
// `step_rows` rows (one decode batch size), every linear's time and weight bytes by weight format
// and those forwards' own time: where a decode step's time goes. Also, per weight format, the
// largest matrix a one-row Linear call read and its numerics, for `bench` to time those rows in
// cache (the kernel's own speed, without DRAM).
struct LinearRecord {
  static constexpr int64_t kGemvMaxRows = 4;
  static constexpr uint64_t kGemvMinBytes = uint64_t{1} << 20;
  double best_gemv_bytes_per_s = 0.0;
  uint64_t best_gemv_bytes = 0;  // the weight bytes of that call
  int64_t gemv_calls = 0;        // GEMV-shaped calls
  struct FormatTime {
    int64_t calls = 0;
    uint64_t bytes = 0;
    double seconds = 0.0;
  };
  int64_t step_rows = 1;
  std::array<FormatTime, kMatrixFormats> by_format;  // indexed by MatrixFormat
  int64_t forwards = 0;
  double forward_seconds = 0.0;  // BeginStep to EndStep
  struct Gemv {
    WeightMatrix w;  // empty: no one-row Linear of this format
    LinearNumerics numerics = LinearNumerics::kCheckpoint;
  };
  std::array<Gemv, kMatrixFormats> largest_gemv;  // indexed by MatrixFormat
};

class CpuBackend final : public Backend {
 public:
  // `dot`: the AVX-512 linears' kernel plan (ChooseBf16Dot; the CPU's by default). `steps`: how
  // a step's threads are chosen (StepParallelism; by timing both ways by default).
  CpuBackend(ThreadPool& pool, IsaLevel isa, Bf16Dot dot = ChooseBf16Dot(), StepParallelism::Options steps = {})
      : scratch_(pool.size()), cpu_{pool, isa, &scratch_, dot}, steps_(pool, std::move(steps)) {}

  std::string_view name() const override { return "cpu"; }
  Workspace& workspace() override { return workspace_; }
  uint64_t held_bytes() const override { return workspace_.held_bytes() + scratch_.held_bytes(); }
  const CpuContext& cpu() const { return cpu_; }
  // Times the linears into `record` (nullptr: stop). Not thread-safe with a running op.
  void RecordLinears(LinearRecord* record) { linear_record_ = record; }
  // How many steps ran on one thread (StepParallelism: where the hand-offs cost more than the
  // other threads save).
  StepParallelism::Stats step_stats() const { return steps_.stats(); }

  void BeginStep(StepShape shape) override;
  void EndStep(bool completed) override;
  uint64_t one_thread_steps() const override { return steps_.stats().serial_steps; }

  void Linear(const WeightMatrix& w, const Tensor& x, const Tensor& y, LinearNumerics numerics) override;
  void GroupedLinear(const WeightMatrix& w, int groups, const Tensor& x, const Tensor& y) override;
  void Copy(const Tensor& from, const Tensor& to) override;
  void Embed(const WeightMatrix& table, std::span<const int32_t> tokens, int copies, const Tensor& streams) override;
  void RmsNorm(const Tensor& x, std::span<const float> weight, float eps, const Tensor& out) override;
  void Rope(const Tensor& x, int heads, const RopeTable& table, std::span<const int64_t> positions,
            bool inverse) override;
  void HcMixes(const Tensor& streams, const WeightMatrix& fn, std::span<const float> base, std::span<const float> scale,
               const HcParams& params, const Tensor& pre, const Tensor& post, const Tensor& comb) override;
  void HcCollapse(const Tensor& streams, const Tensor& pre, const Tensor& out) override;
  void HcExpand(const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& streams) override;
  void EncodeWindowRows(const Tensor& x, const Tensor& codes, const Tensor& exponents, const Tensor& decoded) override;
  void StoreWindowEntries(const Tensor& codes, const Tensor& exponents,
                          std::span<const WindowEntry<uint8_t>> entries) override;
  void DecodeWindowEntries(std::span<const WindowEntry<const uint8_t>> entries, const Tensor& out) override;
  void EncodeCompressedEntries(const Tensor& latents, const Tensor& keys,
                               std::span<const CompressedEntry<uint8_t>> entries) override;
  void DecodeCompressedEntries(std::span<const CompressedEntry<const uint8_t>> entries, const Tensor& out) override;
  void DecodeIndexKeys(std::span<const CompressedEntry<const uint8_t>> entries, const Tensor& out) override;
  void CompressorPool(const Tensor& kv, const Tensor& gate, int ratio, const Tensor& pooled) override;
  void IndexerSelect(const Tensor& q, const Tensor& head_weights, const RopeTable& rope, const IndexerParams& params,
                     std::span<const IndexerRow> rows) override;
  void SparseAttention(const Tensor& q, int heads, std::span<const float* const> entries,
                       std::span<const int64_t> row_begin, std::span<const float> sink, float softmax_scale,
                       const Tensor& out) override;
  void Route(const Tensor& scores, std::span<const float> bias, const RouterParams& params, const Tensor& experts,
             const Tensor& weights) override;
  void SwiGlu(const Tensor& gate, const Tensor& up, std::span<const float> route_weights, float limit,
              const Tensor& out) override;
  void GatherRows(const Tensor& x, std::span<const int64_t> rows, const Tensor& out) override;
  void ScatterAddRows(const Tensor& src, std::span<const int64_t> rows, const Tensor& acc) override;
  void AddRounded(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void EngramGather(const uint8_t* codes, const uint8_t* scales, int64_t table_rows, int64_t dim,
                    std::span<const int64_t> ids, const Tensor& out) override;
  void EngramGate(const Tensor& kv, std::span<const float> gate_weight, float eps, const Tensor& streams) override;

 private:
  // Whether a linear of `m` rows is timed for the attached LinearRecord.
  bool TimesLinear(int64_t m) const {
    return linear_record_ != nullptr && (m <= LinearRecord::kGemvMaxRows || recorded_step_start_);
  }
  // Adds one linear of `m` rows that took `seconds` to the attached LinearRecord.
  void RecordLinear(const WeightMatrix& w, int64_t m, double seconds);
  // body(row, thread) for every row < rows, split over the pool where a part's rows (each reading
  // and writing `bytes_per_row`) pay for a hand-off, else inline: a prefill's row-wise ops would
  // leave the other threads idle. A row's result must not depend on the others (so not on the
  // split); `thread` selects scratch_ buffers.
  // (A template, so that a row costs one indirect call, ThreadPool::ForEachItem's.)
  template <class Body>
  void ForEachRow(int64_t rows, size_t bytes_per_row, const Body& body);

  ThreadScratch scratch_;  // the kernels' per-thread temporaries, kept between calls
  LinearRecord* linear_record_ = nullptr;
  std::optional<std::chrono::steady_clock::time_point> recorded_step_start_;  // of a forward of step_rows under way
  CpuContext cpu_;
  StepParallelism steps_;
  Workspace workspace_;
};

}  // namespace deepinfer
