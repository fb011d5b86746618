#include "io/weight_matrix.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace deepinfer {

void WeightMatrix::UnscaledRow(int64_t row, float* out) const {
  switch (format) {
    case MatrixFormat::kBF16: {
      // Checkpoint tensors are not guaranteed to be 2-byte aligned: load through memcpy.
      const uint8_t* src = data + row * row_bytes();
      for (int64_t c = 0; c < cols; ++c) {
        bf16_t bits;
        std::memcpy(&bits, src + 2 * c, 2);
        out[c] = BF16ToFloat(bits);
      }
      break;
    }
    case MatrixFormat::kF32:
      std::memcpy(out, data + row * row_bytes(), cols * sizeof(float));
      break;
    case MatrixFormat::kFP8Block32: {
      const uint8_t* src = data + row * row_bytes();
      for (int64_t c = 0; c < cols; ++c) out[c] = E4M3ToFloat(src[c]);
      break;
    }
    case MatrixFormat::kFP4Row32: {
      const uint8_t* src = data + row * row_bytes();
      for (int64_t c = 0; c < cols; ++c) out[c] = E2M1ToFloat(PackedFP4Code(src, c));
      break;
    }
  }
}

Bf16Exponents ScanBf16Exponents(const WeightMatrix& w) {
  DI_CHECK(w.format == MatrixFormat::kBF16, "ScanBf16Exponents needs a BF16 matrix");
  // Zeros count as exponent 255 for the minimum, so the loop has no branch; fixed-size chunks copied to an aligned
  // buffer (checkpoint tensors may be 2-byte misaligned) let the compiler vectorise it (a 1.3 GB head takes a fraction
  // of a second).
  constexpr uint64_t kChunk = 4096;
  alignas(64) uint16_t chunk[kChunk];
  int16_t lo = 255, hi = 0;  // signed: SSE2 has 16-bit min/max only for int16
  const uint64_t count = static_cast<uint64_t>(w.rows) * static_cast<uint64_t>(w.cols);
  for (uint64_t begin = 0; begin < count; begin += kChunk) {
    const uint64_t n = std::min(kChunk, count - begin);
    std::memcpy(chunk, w.data + 2 * begin, 2 * n);
    std::fill(chunk + n, chunk + kChunk, uint16_t{0});
    for (uint64_t i = 0; i < kChunk; ++i) {
      const auto magnitude = static_cast<int16_t>(chunk[i] & 0x7fff);
      const auto exponent = static_cast<int16_t>(magnitude >> 7);  // zeros have exponent 0 anyway
      const int16_t for_lo = magnitude == 0 ? int16_t{255} : exponent;
      lo = for_lo < lo ? for_lo : lo;
      hi = exponent > hi ? exponent : hi;
    }
  }
  if (hi == 0 && lo == 255) return {true, 0, 0};  // all zeros
  if (lo == 0 || hi == 255) return {};            // subnormal, infinite or NaN elements
  return {true, lo - 127, hi - 127};
}

bool ScanFp8NanFree(const WeightMatrix& w) {
  DI_CHECK(w.format == MatrixFormat::kFP8Block32, "ScanFp8NanFree needs an FP8 matrix");
  // Eight codes at a time: a byte's low 7 bits are all ones exactly when adding 1 to them carries
  // into its bit 7, and no carry crosses into the next byte.
  constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7full, kOnes = 0x0101010101010101ull, kBit7 = 0x8080808080808080ull;
  const uint64_t count = static_cast<uint64_t>(w.rows) * static_cast<uint64_t>(w.cols);
  uint64_t nan = 0, i = 0;
  for (; i + 8 <= count; i += 8) {
    uint64_t codes;
    std::memcpy(&codes, w.data + i, 8);
    nan |= ((codes & kLow7) + kOnes) & kBit7;
  }
  for (; i < count; ++i) nan |= (w.data[i] & 0x7fu) == 0x7fu ? 1u : 0u;
  return nan == 0;
}

uint64_t WeightMatrix::bytes() const {
  if (empty()) return 0;
  return static_cast<uint64_t>(rows * row_bytes() + scale_rows() * scale_cols());
}

WeightMatrix WeightMatrix::RowSlice(int64_t begin, int64_t count) const {
  DI_CHECK(begin >= 0 && begin + count <= rows, "row slice [", begin, ", ", begin + count, ") of ", rows, " rows");
  WeightMatrix slice = *this;
  slice.rows = count;
  slice.data = data + begin * row_bytes();
  if (quantized()) {
    DI_CHECK(begin % scale_block().rows == 0, "row slice of a quantized matrix must start on a ", scale_block().rows,
             "-row scale block, got ", begin);
    slice.scales = scales + (begin / scale_block().rows) * scale_cols();
  }
  if (interleaved) {
    if (begin % InterleavedTiles::kRows == 0) {
      slice.interleaved.data +=
          begin / InterleavedTiles::kRows * (cols / kQuantBlock) * InterleavedTiles::BlockBytes(format);
    } else {
      slice.interleaved = {};
    }
  }
  return slice;
}

InterleavedTiles Interleave(const WeightMatrix& w, uint8_t* out) {
  DI_CHECK(InterleavedTiles::Takes(w.format, w.cols),
           "Interleave takes an FP8/FP4/BF16 matrix with K a multiple of 32");
  const bool fp4 = w.format == MatrixFormat::kFP4Row32;
  const int64_t groups = w.cols / kQuantBlock, group_bytes = InterleavedTiles::GroupBytes(w.format),
                row_bytes = groups * group_bytes;
  const int64_t block_bytes = InterleavedTiles::BlockBytes(w.format);
  const int64_t codes_at = fp4 ? InterleavedTiles::kRows : 0;  // FP4 blocks start with the scales
  InterleavedTiles result{out, 255, 0};
  for (int64_t t = 0; t < InterleavedTiles::Tiles(w.rows); ++t) {
    for (int64_t g = 0; g < groups; ++g) {
      uint8_t* block = out + (t * groups + g) * block_bytes;
      if (fp4) std::memset(block + codes_at, 0, block_bytes - codes_at);
      for (int64_t i = 0; i < InterleavedTiles::kRows; ++i) {
        const int64_t row = t * InterleavedTiles::kRows + i;
        if (fp4) {
          block[i] = row < w.rows ? w.scales[row * groups + g] : 0;
          if (row >= w.rows) continue;  // zero codes
          const uint8_t* codes = w.data + row * row_bytes + g * group_bytes;
          for (int e = 0; e < 2 * group_bytes; ++e) {
            const uint8_t nibble = (codes[e / 2] >> (4 * (e % 2))) & 0xf;
            block[codes_at + InterleavedTiles::Fp4NibbleByte(i, e)] |=
                static_cast<uint8_t>(nibble << InterleavedTiles::Fp4NibbleShift(i));
          }
          continue;
        }
        // FP8 rows alternate in 8-byte runs; BF16 keeps each row's bytes together.
        const int64_t run = w.format == MatrixFormat::kFP8Block32 ? 8 : group_bytes;
        for (int64_t b = 0; b < group_bytes; b += run) {
          uint8_t* to = block + codes_at + InterleavedTiles::ByteOffset(w.format, i, b);
          if (row < w.rows) {
            std::memcpy(to, w.data + row * row_bytes + g * group_bytes + b, run);
          } else {
            std::memset(to, 0, run);
          }
        }
      }
    }
  }
  for (int64_t i = 0; i < w.scale_rows() * w.scale_cols(); ++i) {
    result.scale_min = std::min(result.scale_min, w.scales[i]);
    result.scale_max = std::max(result.scale_max, w.scales[i]);
  }
  return result;
}

void WeightMatrix::DequantizedRow(int64_t row, float* out) const {
  UnscaledRow(row, out);
  if (!quantized()) return;
  for (int64_t c = 0; c < cols; ++c) out[c] *= BlockScale(row, c / scale_block().cols);
}

}  // namespace deepinfer
