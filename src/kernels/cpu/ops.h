// Scalar reference implementations of the small V4.1 ops. Inputs hold bf16-exact values as
// fp32 unless stated; each op rounds its output where the reference stores bf16.
#pragma once

#include <cstdint>
#include <span>

#include "core/error.h"
#include "kernels/cpu/compile_time_count.h"
#include "kernels/cpu/cpu_context.h"

namespace deepinfer {

// RMSNorm: bf16(weight * (x * rsqrt(mean(x^2) + eps))), statistics in fp32.
void RmsNorm(const float* x, int64_t n, const float* weight, float eps, float* out);

// Rotates adjacent pairs (x[2i], x[2i+1]) of `x` (length 2 * cos.size()) by the angle whose
// cos/sin are given (the conjugate when `inverse`), in fp32, rounding the results to bf16.
void ApplyRope(float* x, std::span<const float> cos, std::span<const float> sin, bool inverse);

// Sparse attention of one query over gathered K=V rows with a per-head sink logit, the
// reference kernel's numerics: online softmax over blocks of 64 entries, probabilities
// rounded to bf16 relative to the running maximum before P.V, fp32 denominator, bf16 output.
// `entries` lists the KV rows in order; nullptr marks an empty slot (it still occupies its
// place in a block of 64). q is [heads, dim], out is [heads, dim].
// `scratch` (optional) holds SparseAttentionScratchFloats(dim) floats; without it the call
// allocates its own.
inline constexpr int kSparseAttentionBlock = 64;
// Heads computed together over each block of entries (they share every K=V load); a head's
// result does not depend on which heads share its group.
inline constexpr int kSparseAttentionHeadGroup = 4;
constexpr int64_t SparseAttentionScratchFloats(int64_t dim) {
  return kSparseAttentionHeadGroup * (2 * kSparseAttentionBlock + 2 * dim);
}
void SparseAttentionWithSink(const float* q, int heads, int64_t dim, std::span<const float* const> entries,
                             const float* sink, float softmax_scale, float* out, float* scratch = nullptr);

// The same on the SIMD level `isa` allows. At kAvx512 and kAvx2 (head_dim % 16 == 0) only the
// summation order of each q.k dot product differs from the scalar oracle (P.V is elementwise and
// rounds identically), so outputs stay within fp32 rounding of it, independent of other queries
// and heads; the two SIMD levels give the same bits.
void SparseAttentionWithSink(IsaLevel isa, const float* q, int heads, int64_t dim,
                             std::span<const float* const> entries, const float* sink, float softmax_scale, float* out,
                             float* scratch = nullptr);
// The online-softmax skeleton every level runs (the oracle's algorithm above) on groups of up to
// kSparseAttentionHeadGroup heads; the levels differ only in its three loops, which must keep
// the oracle's roundings apart from the q.k summation order (the build has -ffp-contract=off, so
// the skeleton's own arithmetic is the same in every translation unit). Within a block the
// skeleton passes only the non-empty entries, in order, and 1..kSparseAttentionHeadGroup heads.
struct AttentionLoops {
  // scores[g * kSparseAttentionBlock + k] = q_g . kv[k] for g < heads, k < count, where q_g is
  // q + g * dim; each dot product on its own, in the level's order (DotProduct).
  void (*dots)(const float* q, int heads, int64_t dim, const float* const* kv, int count, float* scores);
  // block_acc[g * dim + d] = sum over k = 0, 1, ... of p[g * kSparseAttentionBlock + k] * kv[k][d],
  // starting from 0 and adding each product (a multiply, then an add) in k order.
  void (*weighted_sum)(const float* p, int heads, const float* const* kv, int count, int64_t dim, float* block_acc);
  // acc = acc * scale + block_acc over dim elements: a multiply, then an add.
  void (*rescale_add)(float* acc, float scale, const float* block_acc, int64_t dim);
};
// Runs run.template operator()<kHeads>() for `heads` in 1..kSparseAttentionHeadGroup: the SIMD
// levels' loops are templates on the head count of a group.
template <class Run>
void WithHeadCount(int heads, const Run& run) {
  WithCount<1, kSparseAttentionHeadGroup>(heads, "attention loops: heads in a group", run);
}
void SparseAttentionBlocks(const AttentionLoops& loops, const float* q, int heads, int64_t dim,
                           std::span<const float* const> entries, const float* sink, float softmax_scale, float* out,
                           float* scratch);
// The loops SparseAttentionWithSink(isa, ...) runs: the scalar oracle's where `isa` is kScalar or
// dim % 16 != 0. The SIMD levels' dots equal DotProduct(isa) pair by pair, and every level's
// weighted_sum and rescale_add give the oracle's bits.
const AttentionLoops& SparseAttentionLoops(IsaLevel isa, int64_t dim);
const AttentionLoops& SparseAttentionLoopsAvx512();
const AttentionLoops& SparseAttentionLoopsAvx2();

// sum_i a[i] * b[i] in fp32: sequential at kScalar; 2x16 lanes and a fixed reduction tree
// at kAvx512 and kAvx2 (the same bits). Deterministic for a given level.
float DotProduct(IsaLevel isa, const float* a, const float* b, int64_t n);
float DotProductAvx512(const float* a, const float* b, int64_t n);
float DotProductAvx2(const float* a, const float* b, int64_t n);

// One row of the mHC expand (spec 3.4): the row's hc copies x[i] (dim floats each) become
//   x[j][d] = bf16(post[j] * y[d] + (comb[0][j] * x[0][d] + comb[1][j] * x[1][d] + ...)),
// comb row-major [hc][hc], every product a multiply and every sum an add, the copies in i order.
// `mixed`: hc * dim floats of scratch. kAvx512 (dim % 16 == 0) and kAvx2 (dim % 8 == 0) run 16 or
// 8 elements at a time with the same operations; other levels run the oracle.
void HcExpandRow(IsaLevel isa, float* x, const float* y, const float* post, const float* comb, int hc, int64_t dim,
                 float* mixed);
void HcExpandRowAvx512(float* x, const float* y, const float* post, const float* comb, int hc, int64_t dim,
                       float* mixed);
void HcExpandRowAvx2(float* x, const float* y, const float* post, const float* comb, int hc, int64_t dim, float* mixed);

// The indexer's scores of one query over `count` keys (rows of `keys`, `dim` floats apart):
//   scores[t] = sum over h = 0, 1, ... of max(q_h . k_t, 0) * (weights[h] * weight_scale),
// each q_h . k_t exactly DotProduct(isa), the heads added in order. Where the level's attention
// dots give those bits (SparseAttentionLoops: dim % 16 == 0) it runs them on blocks of 64 keys
// and groups of 4 heads, which share every key load.
void IndexScores(IsaLevel isa, const float* q, int heads, int64_t dim, const float* keys, int64_t count,
                 const float* weights, float weight_scale, float* scores);

// Dequantization of the KV cache's QAT formats (core/numeric.h) on the SIMD level `isa`: exactly
// the bits of the scalar DecodeFP8PowerOfTwo / DecodeFP4PowerOfTwo / DecodeFP4E4M3Scale, which
// stay the oracle. A block whose every value is code * scale exactly, a normal fp32 (or zero) with
// at most 6 significant bits, so that the oracle's bf16 rounding changes nothing, is one vector
// multiply per 16 elements; any other block (scale bytes near the ends of their range, NaN codes
// or scales) goes to the oracle. kAvx512 (block % 16 == 0) and kAvx2 (8 elements per multiply,
// block % 8 == 0); other levels and block sizes run the oracle.
void DecodeFP8PowerOfTwo(IsaLevel isa, const uint8_t* codes, const uint8_t* exponents, size_t n, size_t block,
                         float* out);
// The blocks the SIMD decoders multiply (the rest go to the oracle):
// - FP8 with a ue8m0 byte of 10-245: e4m3 magnitudes 2^-9 .. 448 times 2^(e-127) stay normal and
//   finite, with at most 4 significant bits; a block with a NaN code (checked per vector) does not.
// - FP4 with a ue8m0 byte of 2-252: e2m1 magnitudes 0.5 .. 6 times 2^(e-127).
// - FP4 with an e4m3 scale that is not NaN: e2m1 (<= 2 significant bits) times any finite e4m3
//   (<= 4 bits, 2^-9 .. 448) is exact and normal or zero.
inline bool Fp8PowerOfTwoBlockMultiplies(uint8_t exponent) { return exponent >= 10 && exponent <= 245; }
inline bool Fp4BlockMultiplies(bool power_of_two_scale, uint8_t scale) {
  return power_of_two_scale ? scale >= 2 && scale <= 252 : (scale & 0x7f) != 0x7f;
}
void DecodeFP4PowerOfTwo(IsaLevel isa, const uint8_t* packed, const uint8_t* exponents, size_t n, size_t block,
                         float* out);
void DecodeFP4E4M3Scale(IsaLevel isa, const uint8_t* packed, const uint8_t* scales, size_t n, size_t block, float* out);
void DecodeFP8PowerOfTwoAvx512(const uint8_t* codes, const uint8_t* exponents, size_t n, size_t block, float* out);
void DecodeFP4PowerOfTwoAvx512(const uint8_t* packed, const uint8_t* exponents, size_t n, size_t block, float* out);
void DecodeFP4E4M3ScaleAvx512(const uint8_t* packed, const uint8_t* scales, size_t n, size_t block, float* out);
void DecodeFP8PowerOfTwoAvx2(const uint8_t* codes, const uint8_t* exponents, size_t n, size_t block, float* out);
void DecodeFP4PowerOfTwoAvx2(const uint8_t* packed, const uint8_t* exponents, size_t n, size_t block, float* out);
void DecodeFP4E4M3ScaleAvx2(const uint8_t* packed, const uint8_t* scales, size_t n, size_t block, float* out);

// Encoding into the KV cache's QAT formats on the SIMD level `isa`: exactly the codes and scales
// of the scalar EncodeFP8PowerOfTwo / EncodeFP4PowerOfTwo / EncodeFP4E4M3Scale (core/numeric.h),
// which stay the oracle. Each block's scale is the oracle's function of the block's amax (a vector
// maximum, NaNs skipped as std::max skips them); every element is divided by it, clamped and
// rounded to its code as the oracle does, 8 at a time. kAvx2 and kAvx512 (whose CPUs have AVX2)
// run the AVX2 code where block % 8 == 0 and values.size() % 32 == 0; the rest runs the oracle.
void EncodeFP8PowerOfTwo(IsaLevel isa, std::span<const float> values, size_t block, uint8_t* codes, uint8_t* exponents);
void EncodeFP4PowerOfTwo(IsaLevel isa, std::span<const float> values, size_t block, uint8_t* packed,
                         uint8_t* exponents);
void EncodeFP4E4M3Scale(IsaLevel isa, std::span<const float> values, size_t block, uint8_t* packed, uint8_t* scales);
void EncodeFP8PowerOfTwoAvx2(std::span<const float> values, size_t block, uint8_t* codes, uint8_t* exponents);
void EncodeFP4PowerOfTwoAvx2(std::span<const float> values, size_t block, uint8_t* packed, uint8_t* exponents);
void EncodeFP4E4M3ScaleAvx2(std::span<const float> values, size_t block, uint8_t* packed, uint8_t* scales);

inline float Sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

}  // namespace deepinfer
