#include "cli/model_loading.h"

#include <unistd.h>

#include <cstdio>

#include "core/error.h"
#include "core/progress.h"
#include "kernels/cpu/linear.h"

namespace deepinfer {
namespace {

uint64_t CheckpointBytes(const Checkpoint& checkpoint) {
  uint64_t total = 0;
  for (const std::string& name : checkpoint.Names()) total += checkpoint.Find(name)->nbytes;
  return total;
}

uint64_t MachineMemory() {
  return static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

std::string ApplyWeightLayout(Model& model, WeightLayout layout, IsaLevel isa, Bf16Dot dot) {
  const bool read = LinearReadsInterleaved(isa, dot, MatrixFormat::kFP8Block32) ||
                    LinearReadsInterleaved(isa, dot, MatrixFormat::kFP4Row32);
  if (layout == WeightLayout::kAuto) {
    const bool fits = CheckpointBytes(model.checkpoint()) <= MachineMemory() / 2;
    layout = read && fits ? WeightLayout::kInterleaved : WeightLayout::kInPlace;
  }
  if (layout == WeightLayout::kInPlace) return "in place";
  if (!read) {
    if (isa != IsaLevel::kAvx512) {
      throw MakeError("--weight-layout interleaved: no kernel at isa ", IsaName(isa),
                      " on this CPU reads the interleaved copy (it needs AVX-512 with AVX512-BF16)");
    }
    throw MakeError("--weight-layout interleaved: no kernel of kernel plan ", Bf16DotName(dot),
                    " on this CPU reads the interleaved copy (the fp8-gemv-dot and quantized-dot plans do, with "
                    "AVX512-BF16)");
  }
  // Only the formats the kernels at `isa` read interleaved: a copy of the others would be dead weight.
  const Model::InterleaveReport report =
      model.InterleaveMatrices([isa, dot](MatrixFormat f) { return LinearReadsInterleaved(isa, dot, f); });
  if (report.matrices == 0) return "in place (no FP8/FP4/BF16 matrix that the kernels read interleaved)";
  char line[160];
  std::snprintf(line, sizeof line, "interleaved copy of %lld matrices, %.3f GiB, made in %.2f s",
                static_cast<long long>(report.matrices), static_cast<double>(report.bytes) / (1 << 30), report.seconds);
  return line;
}

std::unique_ptr<Model> LoadModelAndPageIn(const std::string& model_dir, const ModelOptions& options, IsaLevel isa,
                                          Bf16Dot dot, WeightLayout layout) {
  std::unique_ptr<Model> model = Model::Load(model_dir, options);
  const Checkpoint& checkpoint = model->checkpoint();
  const uint64_t total = CheckpointBytes(checkpoint);
  if (total <= MachineMemory() / 2) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    ProgressBar bar("loading", total);
    volatile uint8_t sink = 0;
    for (const std::string& name : checkpoint.Names()) {
      const TensorInfo& t = *checkpoint.Find(name);
      for (size_t offset = 0; offset < t.nbytes; offset += page) sink = sink + t.data[offset];
      bar.Add(t.nbytes);
    }
    bar.Finish();
  }
  ApplyWeightLayout(*model, layout, isa, dot);
  return model;
}

}  // namespace deepinfer
