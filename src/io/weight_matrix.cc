#include "io/weight_matrix.h"

#include <cstring>

#include "core/error.h"

namespace deepinfer {

void WeightMatrix::UnscaledRow(int64_t row, float* out) const {
  switch (format) {
    case MatrixFormat::kBF16: {
      // Checkpoint tensors are not guaranteed to be 2-byte aligned: load through memcpy.
      const uint8_t* src = data + row * cols * 2;
      for (int64_t c = 0; c < cols; ++c) {
        bf16_t bits;
        std::memcpy(&bits, src + 2 * c, 2);
        out[c] = BF16ToFloat(bits);
      }
      break;
    }
    case MatrixFormat::kF32:
      std::memcpy(out, data + row * cols * sizeof(float), cols * sizeof(float));
      break;
    case MatrixFormat::kFP8Block32: {
      const uint8_t* src = data + row * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = E4M3ToFloat(src[c]);
      break;
    }
    case MatrixFormat::kFP4Row32: {
      const uint8_t* src = data + row * (cols / 2);
      for (int64_t c = 0; c < cols; ++c) out[c] = E2M1ToFloat(PackedFP4Code(src, c));
      break;
    }
  }
}

uint64_t WeightMatrix::bytes() const {
  if (empty()) return 0;
  switch (format) {
    case MatrixFormat::kBF16:
      return rows * cols * 2;
    case MatrixFormat::kF32:
      return rows * cols * 4;
    case MatrixFormat::kFP8Block32:
      return rows * cols + scale_rows() * scale_cols();
    case MatrixFormat::kFP4Row32:
      return rows * cols / 2 + scale_rows() * scale_cols();
  }
  return 0;
}

WeightMatrix WeightMatrix::RowSlice(int64_t begin, int64_t count) const {
  DI_CHECK(begin >= 0 && begin + count <= rows, "row slice [", begin, ", ", begin + count, ") of ", rows, " rows");
  WeightMatrix slice = *this;
  slice.rows = count;
  switch (format) {
    case MatrixFormat::kBF16:
      slice.data = data + begin * cols * 2;
      break;
    case MatrixFormat::kF32:
      slice.data = data + begin * cols * 4;
      break;
    case MatrixFormat::kFP8Block32:
      slice.data = data + begin * cols;
      break;
    case MatrixFormat::kFP4Row32:
      slice.data = data + begin * (cols / 2);
      break;
  }
  if (quantized()) {
    DI_CHECK(begin % scale_block().rows == 0, "row slice of a quantized matrix must start on a ", scale_block().rows,
             "-row scale block, got ", begin);
    slice.scales = scales + (begin / scale_block().rows) * scale_cols();
  }
  return slice;
}

void WeightMatrix::DequantizedRow(int64_t row, float* out) const {
  UnscaledRow(row, out);
  if (!quantized()) return;
  for (int64_t c = 0; c < cols; ++c) out[c] *= BlockScale(row, c / scale_block().cols);
}

}  // namespace deepinfer
