// A weight matrix used in place from the checkpoint mapping, in one of the released formats.
//
//   kBF16       : bf16 [rows, cols]
//   kF32        : fp32 [rows, cols]
//   kFP8Block32 : e4m3 [rows, cols] + ue8m0 scales [ceil(rows/32), ceil(cols/32)], one per 32x32 block
//   kFP4Row32   : e2m1 packed [rows, cols/2] (even column in the low nibble) + ue8m0 scales
//                 [rows, cols/32], one per 32 consecutive columns of a row
#pragma once

#include <cstdint>

#include "core/numeric.h"

namespace deepinfer {

enum class MatrixFormat { kBF16, kF32, kFP8Block32, kFP4Row32 };

inline constexpr int64_t kQuantBlock = 32;  // V4.1: weight blocks, activation blocks and FP4 groups

struct WeightMatrix {
  MatrixFormat format = MatrixFormat::kBF16;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;  // ue8m0 bytes, quantized formats only

  bool empty() const { return data == nullptr; }
  bool quantized() const { return format == MatrixFormat::kFP8Block32 || format == MatrixFormat::kFP4Row32; }
  // Bytes of the payload plus its scales.
  uint64_t bytes() const;
  int64_t scale_cols() const { return (cols + kQuantBlock - 1) / kQuantBlock; }

  // Power-of-two scale of the block holding (row, col); 1 for unquantized formats.
  float BlockScale(int64_t row, int64_t col_block) const {
    switch (format) {
      case MatrixFormat::kFP8Block32:
        return UE8M0ToFloat(scales[(row / kQuantBlock) * scale_cols() + col_block]);
      case MatrixFormat::kFP4Row32:
        return UE8M0ToFloat(scales[row * scale_cols() + col_block]);
      default:
        return 1.0f;
    }
  }

  // Rows [begin, begin + count) as a matrix of their own; quantized formats need
  // `begin` on a 32-row block boundary (FP8) so the scales stay aligned.
  WeightMatrix RowSlice(int64_t begin, int64_t count) const;

  // The row's elements without block scales: e4m3/e2m1 code values for quantized formats,
  // the stored values otherwise. `out` has `cols` floats.
  void UnscaledRow(int64_t row, float* out) const;
  // The row fully dequantized (exact in fp32 for every format).
  void DequantizedRow(int64_t row, float* out) const;
};

}  // namespace deepinfer
