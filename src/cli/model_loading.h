// Loading a model for the commands that run it. Model::Load (headers, validation, bindings;
// weights stay memory-mapped), then the weight layout (--weight-layout), and, for the commands
// that then answer people (serve, chat, generate), one read of every weight page with a progress
// bar, so the first request does not stall on the disk. The page-in is skipped when the weights
// exceed half of the machine's memory (they would evict each other; the mapping then streams
// them as before).
#pragma once

#include <memory>
#include <string>

#include "cli/weight_layout_flag.h"
#include "kernels/cpu/cpu_context.h"
#include "model/model.h"

namespace deepinfer {

std::unique_ptr<Model> LoadModelAndPageIn(const std::string& model_dir, const ModelOptions& options, IsaLevel isa,
                                          Bf16Dot dot, WeightLayout layout);

// Applies `layout` to a loaded model for kernels at `isa` with kernel plan `dot`; returns what was
// done, in words, for the log ("in place" or "interleaved copy of 48 matrices, 1.2 GiB, made in
// 0.8 s"). Throws when `layout` is kInterleaved and those kernels read no interleaved copy.
std::string ApplyWeightLayout(Model& model, WeightLayout layout, IsaLevel isa, Bf16Dot dot);

}  // namespace deepinfer
