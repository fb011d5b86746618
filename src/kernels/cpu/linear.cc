#include "kernels/cpu/linear.h"

#include <vector>

#include "core/error.h"
#include "kernels/cpu/linear_simd.h"

namespace deepinfer {

void QuantizedLinear(const WeightMatrix& w, const float* x, int64_t m, float* y, const CpuContext& ctx) {
  DI_CHECK(w.quantized(), "QuantizedLinear needs an FP8 or FP4 weight");
  DI_CHECK(w.cols % kQuantBlock == 0, "K=", w.cols, " is not a multiple of ", kQuantBlock);
  // SIMD paths (linear_simd.h): same numerics contract on every ISA level; the scalar code below
  // stays the oracle they are tested against.
  if (ctx.isa != IsaLevel::kScalar && w.cols <= linear_simd::kMaxK) {
    if (ctx.isa == IsaLevel::kAvx512) return QuantizedLinearAvx512(w, x, m, y, ctx.pool, ctx.dot, ctx.scratch);
    return QuantizedLinearAvx2(w, x, m, y, ctx.pool, ctx.scratch);
  }
  const int64_t k_blocks = w.cols / kQuantBlock;
  // Act-quantize every input row once: e4m3 code values as fp32 plus per-block scales.
  std::vector<float> x_codes(m * w.cols);
  std::vector<float> x_scales(m * k_blocks);
  {
    std::vector<uint8_t> codes(w.cols);
    for (int64_t r = 0; r < m; ++r) {
      QuantizeFP8PowerOfTwo({x + r * w.cols, static_cast<size_t>(w.cols)}, kQuantBlock, codes,
                            {x_scales.data() + r * k_blocks, static_cast<size_t>(k_blocks)});
      for (int64_t c = 0; c < w.cols; ++c) x_codes[r * w.cols + c] = E4M3ToFloat(codes[c]);
    }
  }
  ctx.pool.ParallelFor(w.rows, [&](size_t begin, size_t end) {
    std::vector<float> w_row(w.cols);
    std::vector<float> w_scales(k_blocks);
    for (size_t n = begin; n < end; ++n) {
      w.UnscaledRow(n, w_row.data());
      for (int64_t kb = 0; kb < k_blocks; ++kb) w_scales[kb] = w.BlockScale(n, kb);
      for (int64_t r = 0; r < m; ++r) {
        const float* xr = x_codes.data() + r * w.cols;
        const float* sr = x_scales.data() + r * k_blocks;
        float acc = 0.0f;
        for (int64_t kb = 0; kb < k_blocks; ++kb) {
          float partial = 0.0f;
          const int64_t k0 = kb * kQuantBlock;
          for (int64_t k = k0; k < k0 + kQuantBlock; ++k) partial += xr[k] * w_row[k];
          acc += partial * sr[kb] * w_scales[kb];
        }
        y[r * w.rows + n] = RoundToBF16(acc);
      }
    }
  });
}

void DenseLinear(const WeightMatrix& w, const float* x, int64_t m, float* y, bool round_to_bf16,
                 const CpuContext& ctx) {
  if (ctx.isa != IsaLevel::kScalar && w.format != MatrixFormat::kFP4Row32) {
    if (ctx.isa == IsaLevel::kAvx512) {
      return DenseLinearAvx512(w, x, m, y, round_to_bf16, ctx.pool, ctx.dot, ctx.scratch);
    }
    return DenseLinearAvx2(w, x, m, y, round_to_bf16, ctx.pool, ctx.scratch);
  }
  const bool fp8 = w.format == MatrixFormat::kFP8Block32;
  ctx.pool.ParallelFor(w.rows, [&](size_t begin, size_t end) {
    std::vector<float> w_row(w.cols);
    for (size_t n = begin; n < end; ++n) {
      w.DequantizedRow(n, w_row.data());
      // FP8 weights as the reference's convert.py leaves them: dequantized to bf16 (exact except
      // where a scale makes the fp32 product subnormal, overflow or NaN).
      if (fp8) {
        for (int64_t k = 0; k < w.cols; ++k) w_row[k] = RoundToBF16(w_row[k]);
      }
      for (int64_t r = 0; r < m; ++r) {
        const float* xr = x + r * w.cols;
        float acc = 0.0f;
        for (int64_t k = 0; k < w.cols; ++k) acc += xr[k] * w_row[k];
        y[r * w.rows + n] = round_to_bf16 ? RoundToBF16(acc) : acc;
      }
    }
  });
}

void Linear(const WeightMatrix& w, const float* x, int64_t m, float* y, const CpuContext& ctx) {
  if (w.quantized()) {
    QuantizedLinear(w, x, m, y, ctx);
  } else {
    DenseLinear(w, x, m, y, /*round_to_bf16=*/true, ctx);
  }
}

std::string_view LinearKernelsName(IsaLevel isa, Bf16Dot dot) {
  switch (isa) {
    case IsaLevel::kAvx512:
      switch (dot) {
        case Bf16Dot::kQuantized:
          return "avx512: fp8/fp4 gemv and gemm on vdpbf16ps, dense bf16/fp8 on vdpbf16ps where exact, else fma";
        case Bf16Dot::kFp8Gemv:
          return "avx512: fp8 gemv on vdpbf16ps, fp4 and gemm on fma";
        case Bf16Dot::kNone:
          break;
      }
      return "avx512: fma tiles and panels";
    case IsaLevel::kAvx2:
      return "avx2: fp4 gemv by vpshufb bf16 tables, fp8 gemv by shift decode, fma panels";
    case IsaLevel::kScalar:
      return "scalar oracle";
  }
  return "unknown";
}

bool LinearReadsInterleaved(IsaLevel isa, Bf16Dot dot, MatrixFormat format) {
  if (isa != IsaLevel::kAvx512) return false;
  switch (format) {
    case MatrixFormat::kFP8Block32:
      return dot != Bf16Dot::kNone && CpuHasAvx512Vbmi();
    case MatrixFormat::kFP4Row32:
    case MatrixFormat::kBF16:
      return dot == Bf16Dot::kQuantized;
    default:
      return false;
  }
}

}  // namespace deepinfer
