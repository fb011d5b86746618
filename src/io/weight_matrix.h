// A weight matrix used in place from the checkpoint mapping, in one of the released formats.
//
//   kBF16       : bf16 [rows, cols]
//   kF32        : fp32 [rows, cols]
//   kFP8Block32 : e4m3 [rows, cols] + ue8m0 scales [ceil(rows/32), ceil(cols/32)], one per 32x32 block
//   kFP4Row32   : e2m1 packed [rows, cols/2] (even column in the low nibble) + ue8m0 scales
//                 [rows, cols/32], one per 32 consecutive columns of a row
// An FP8/FP4 or BF16 matrix may also carry a row-interleaved copy made at load time
// (InterleavedTiles).
#pragma once

#include <cstdint>

#include "core/numeric.h"

namespace deepinfer {

enum class MatrixFormat { kBF16, kF32, kFP8Block32, kFP4Row32 };
constexpr int kMatrixFormats = static_cast<int>(MatrixFormat::kFP4Row32) + 1;  // the last one + 1

// "bf16", "f32", "fp8", "fp4": as reports name a format.
constexpr const char* MatrixFormatName(MatrixFormat format) {
  switch (format) {
    case MatrixFormat::kBF16:
      return "bf16";
    case MatrixFormat::kF32:
      return "f32";
    case MatrixFormat::kFP8Block32:
      return "fp8";
    case MatrixFormat::kFP4Row32:
      return "fp4";
  }
  return "?";
}

// The scale grid of a format: one ue8m0 scale per `rows` x `cols` weights; {0, 0} for the
// unscaled formats. The one place a format's block size is stated (V4's FP8 would be 128 x 128).
struct ScaleBlock {
  int64_t rows = 0;
  int64_t cols = 0;
};
constexpr ScaleBlock ScaleBlockOf(MatrixFormat format) {
  switch (format) {
    case MatrixFormat::kFP8Block32:
      return {32, 32};
    case MatrixFormat::kFP4Row32:
      return {1, 32};
    default:
      return {0, 0};
  }
}

// Payload bytes of one row of `cols` elements (FP4: two per byte; the scales are stored apart).
constexpr int64_t MatrixRowBytes(MatrixFormat format, int64_t cols) {
  switch (format) {
    case MatrixFormat::kBF16:
      return cols * 2;
    case MatrixFormat::kF32:
      return cols * 4;
    case MatrixFormat::kFP8Block32:
      return cols;
    case MatrixFormat::kFP4Row32:
      return cols / 2;
  }
  return 0;
}

// The 32-wide K blocks of V4.1's FP8/FP4 GEMMs: the activation quantization block (act_quant's
// block_size), which the quantized formats' column blocks equal, and the Engram tables' groups.
inline constexpr int64_t kQuantBlock = 32;
static_assert(ScaleBlockOf(MatrixFormat::kFP8Block32).cols == kQuantBlock &&
              ScaleBlockOf(MatrixFormat::kFP4Row32).cols == kQuantBlock);

// A copy of an FP8/FP4 or BF16 matrix with its rows interleaved in tiles of 16, for the AVX-512
// streaming tiles (M = 1 and batched steps): a tile reads one sequential stream at constant
// offsets, where in place it reads 16 row streams (and, FP4, 16 scale streams) with a pointer step
// per row and group. Tile t holds rows [16t, 16t + 16), the last one padded with zero rows; its
// block for group g (32 columns) starts at data + (t * groups + g) * BlockBytes(format):
//   kFP4Row32   bytes [0, 16)           the 16 rows' ue8m0 scales of the group
//               bytes [16 + 64q, +64)   rows 16t + 4q .. +3 as 32 little-endian 16-bit words:
//                                       word j holds element Fp4WordElement(j) of the group of
//                                       row 16t + 4q + r in bits [4r, 4r + 4), so that one load
//                                       and a shift by 4r give row r's 32 codes in the kernels'
//                                       FP4 pair order, ready for a word table lookup
//   kFP8Block32 bytes [64p, 64p + 64)   rows 16t + 2p and 16t + 2p + 1, their 32 codes of the
//                                       group in alternating 8-byte runs (first row's bytes 0-7,
//                                       second row's 0-7, first row's 8-15, ...), so that two byte
//                                       unpacks of a decoded pair give both rows in order; the
//                                       scales stay in place (a tile lies inside one 32-row scale
//                                       block)
//   kBF16       bytes [64i, 64i + 64)   row 16t + i's 32 bf16 values of the group
// The kernels compute the same operations either way (same bits); the in-place data and scales
// stay valid and are what every other path reads.
struct InterleavedTiles {
  static constexpr int64_t kRows = 16;

  const uint8_t* data = nullptr;  // null: not interleaved
  // Smallest and largest scale byte of the matrix (or of a superset of its rows), so that a
  // kernel can check scale ranges without another pass over the scales; 255 > 0 for BF16.
  uint8_t scale_min = 0;
  uint8_t scale_max = 0;

  explicit operator bool() const { return data != nullptr; }
  // One row's bytes of one group; the bytes of a tile's block.
  static constexpr int64_t GroupBytes(MatrixFormat f) {
    return f == MatrixFormat::kFP4Row32 ? 16 : f == MatrixFormat::kFP8Block32 ? 32 : 64;
  }
  // The matrices a copy can be made of: FP8/FP4/BF16 with K a multiple of the 32-column group.
  static constexpr bool Takes(MatrixFormat f, int64_t cols) {
    return (f == MatrixFormat::kFP4Row32 || f == MatrixFormat::kFP8Block32 || f == MatrixFormat::kBF16) &&
           cols % kQuantBlock == 0;
  }
  static constexpr int64_t BlockBytes(MatrixFormat f) {
    return f == MatrixFormat::kFP4Row32 ? kRows + kRows * GroupBytes(f) : kRows * GroupBytes(f);
  }
  static int64_t Tiles(int64_t rows) { return (rows + kRows - 1) / kRows; }
  static uint64_t Bytes(MatrixFormat f, int64_t rows, int64_t cols) {
    return static_cast<uint64_t>(Tiles(rows)) * static_cast<uint64_t>(cols / 32) * BlockBytes(f);
  }
  // Where byte `b` of tile row `i`'s bytes of a group sits in the block (FP8 and BF16; FP4 blocks
  // hold nibbles, below).
  static constexpr int64_t ByteOffset(MatrixFormat f, int64_t i, int64_t b) {
    if (f == MatrixFormat::kFP8Block32) return 64 * (i / 2) + 16 * (b / 8) + 8 * (i % 2) + b % 8;
    return i * GroupBytes(f) + b;
  }
  // FP4: the group element (0-31) that word j of a 4-row quad holds: word j = 8L + k of 128-bit
  // lane L takes element 4k + L (the kernels' FP4 pair order, PairK in linear_simd.h).
  static constexpr int Fp4WordElement(int j) { return 4 * (j % 8) + j / 8; }
  // FP4: the word that holds element `e` (the inverse of Fp4WordElement).
  static constexpr int Fp4ElementWord(int e) { return 8 * (e % 4) + e / 4; }
  // FP4: where the nibble of element `e` of tile row `i`'s group sits: its byte in the block past
  // the scales, and its bit shift in that byte (0 or 4).
  static constexpr int64_t Fp4NibbleByte(int64_t i, int e) {
    return 64 * (i / 4) + 2 * Fp4ElementWord(e) + (i % 4) / 2;
  }
  static constexpr int Fp4NibbleShift(int64_t i) { return 4 * (i % 2); }
};

// The unbiased exponents of a bf16 matrix's nonzero elements, found by one pass at load time
// (ScanBf16Exponents), so that a kernel can prove its products exact and normal without another
// pass over the weights. `known` is false by default, and for a matrix holding a subnormal,
// infinite or NaN element.
struct Bf16Exponents {
  bool known = false;
  int lo = 0;
  int hi = 0;
};

struct WeightMatrix {
  MatrixFormat format = MatrixFormat::kBF16;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;    // ue8m0 bytes, quantized formats only
  InterleavedTiles interleaved = {};  // FP8/FP4/BF16 only, optional
  Bf16Exponents bf16_exponents = {};  // BF16 only, optional (of a superset of the rows in a slice)
  // FP8 only, optional: true when no code is an e4m3 NaN (0x7f / 0xff), found by one pass at load
  // time (ScanFp8NanFree; of a superset of the rows in a slice). The AVX2 tiles, whose decode turns
  // those codes into finite numbers, then skip looking for them; false: unknown, or NaN codes.
  bool fp8_nan_free = false;

  bool empty() const { return data == nullptr; }
  bool quantized() const { return format == MatrixFormat::kFP8Block32 || format == MatrixFormat::kFP4Row32; }
  // Bytes of the payload plus its scales.
  uint64_t bytes() const;
  int64_t row_bytes() const { return MatrixRowBytes(format, cols); }
  ScaleBlock scale_block() const { return ScaleBlockOf(format); }
  // The scale grid, [scale_rows, scale_cols] (0 x 0 for unquantized formats).
  int64_t scale_rows() const { return quantized() ? (rows + scale_block().rows - 1) / scale_block().rows : 0; }
  int64_t scale_cols() const { return quantized() ? (cols + scale_block().cols - 1) / scale_block().cols : 0; }

  // Power-of-two scale of the block holding (row, col_block * scale_block().cols); 1 for
  // unquantized formats.
  float BlockScale(int64_t row, int64_t col_block) const {
    if (!quantized()) return 1.0f;
    return UE8M0ToFloat(scales[(row / scale_block().rows) * scale_cols() + col_block]);
  }

  // Rows [begin, begin + count) as a matrix of their own; `begin` must sit on a scale-block row
  // boundary so the scales stay aligned. The slice keeps the interleaved copy when `begin` starts
  // a tile.
  WeightMatrix RowSlice(int64_t begin, int64_t count) const;

  // The row's elements without block scales: e4m3/e2m1 code values for quantized formats,
  // the stored values otherwise. `out` has `cols` floats.
  void UnscaledRow(int64_t row, float* out) const;
  // The row fully dequantized (exact in fp32 for every format).
  void DequantizedRow(int64_t row, float* out) const;
};

// One pass over a BF16 matrix's elements (an all-zero matrix gets {true, 0, 0}).
Bf16Exponents ScanBf16Exponents(const WeightMatrix& w);

// One pass over an FP8 matrix's codes: whether none of them is an e4m3 NaN (0x7f / 0xff).
bool ScanFp8NanFree(const WeightMatrix& w);

// Writes the interleaved copy of `w` (FP8 or FP4 with K a multiple of 32, in place) to `out`,
// which holds InterleavedTiles::Bytes(w.format, w.rows, w.cols) bytes, and returns its descriptor.
InterleavedTiles Interleave(const WeightMatrix& w, uint8_t* out);

}  // namespace deepinfer
