// --weight-layout, declared once for every command that runs the model. Options must have a
// `WeightLayout weight_layout` member (default kAuto).
#pragma once

#include <string>

#include "cli/flags.h"
#include "core/error.h"

namespace deepinfer {

// How the FP8/FP4 matrices of the quantized GEMMs (and a BF16 output head) are held while the
// model runs (Model::InterleaveMatrices):
//   kInPlace     read from the checkpoint mapping, so a model larger than memory pages from disk;
//   kInterleaved copied at load time into the row-interleaved layout (InterleavedTiles), which
//                the AVX-512 GEMV reads at up to twice the speed: anonymous memory as large
//                as those matrices, and one pass over them at load;
//   kAuto        interleaved where this CPU's kernels read the copy (LinearReadsInterleaved, per
//                format) and the checkpoint takes at most half of the machine's memory, else in
//                place.
// The outputs are the same bits either way.
enum class WeightLayout { kAuto, kInPlace, kInterleaved };

inline WeightLayout ParseWeightLayoutFlag(const std::string& value) {
  if (value == "auto") return WeightLayout::kAuto;
  if (value == "in-place") return WeightLayout::kInPlace;
  if (value == "interleaved") return WeightLayout::kInterleaved;
  throw MakeError("--weight-layout: expected auto, in-place or interleaved, got '", value, "'");
}

template <typename Options>
Flag<Options> WeightLayoutFlag() {
  return {"--weight-layout", "LAYOUT",
          "FP8/FP4 GEMM weights and a BF16 head: in-place (read from the checkpoint mapping), interleaved (a "
          "load-time copy the AVX-512 kernels read up to 2x faster) or auto (default: interleaved where the kernels "
          "read it and the model fits in half of memory)",
          [](Options& o, const std::string& v) { o.weight_layout = ParseWeightLayoutFlag(v); }};
}

}  // namespace deepinfer
