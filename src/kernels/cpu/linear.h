// Scalar reference linears, y[m, :] = W x[m, :], one per numeric contract of the reference.
// Activations are fp32 arrays holding the values the reference holds (bf16-exact where the
// reference keeps bf16). Every output element is computed by one thread with a fixed
// summation order, so results do not depend on the batch or on the thread count.
#pragma once

#include <cstdint>
#include <string_view>

#include "io/weight_matrix.h"
#include "kernels/cpu/cpu_context.h"

namespace deepinfer {

// FP8/FP4 weights: the input is act-quantized to e4m3 with one power-of-two scale per 32
// elements, each 32-wide K block is summed in fp32, scaled by both block scales and added
// in K order; the output is rounded to bf16 (fp8_gemm / fp4_gemm of the reference).
void QuantizedLinear(const WeightMatrix& w, const float* x, int64_t m, float* y, const CpuContext& ctx);

// Plain dot products in fp32 over dequantized weights (F.linear). With round_to_bf16 the
// output is rounded as a bf16 GEMM's would be; without, it stays fp32. FP8 weights count as
// their bf16 dequantization (what the reference's convert.py stores for wo_a): the results are
// bit-identical to DenseLinear on that bf16 matrix, while the SIMD paths read the FP8 bytes.
void DenseLinear(const WeightMatrix& w, const float* x, int64_t m, float* y, bool round_to_bf16, const CpuContext& ctx);

// Dispatches on the weight format the way the reference's `linear()` does: quantized
// weights take the quantized path, bf16 weights a bf16 GEMM.
void Linear(const WeightMatrix& w, const float* x, int64_t m, float* y, const CpuContext& ctx);

// Which kernels the calls above run at `isa` with kernel plan `dot` (CpuContext::dot), in words
// (logged by `bench`).
std::string_view LinearKernelsName(IsaLevel isa, Bf16Dot dot);

// Whether the GEMV (M = 1) of QuantizedLinear / DenseLinear at `isa` and plan `dot` reads the
// interleaved copy (InterleavedTiles) of a `format` matrix that has one, and should be given one:
// FP8 and FP4 where the GEMV runs on vdpbf16ps (AVX-512: FP8 on every plan that has it, with
// AVX512-VBMI for its decode; FP4 on the AMD one); BF16 (the output head, on FMAs) on the AMD plan,
// where it was measured faster. The AVX-512 kernels read a BF16 copy on any plan; elsewhere the
// GEMV reads the matrix in place, and a copy would only add to what is read (the bits are the
// same either way). Batched steps (M = 2-8) read the copies too where that was measured faster.
bool LinearReadsInterleaved(IsaLevel isa, Bf16Dot dot, MatrixFormat format);

}  // namespace deepinfer
