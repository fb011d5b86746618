// Scalar reference implementations of the small V4.1 ops. Inputs hold bf16-exact values as
// fp32 unless stated; each op rounds its output where the reference stores bf16.
#pragma once

#include <cstdint>
#include <span>

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
constexpr int64_t SparseAttentionScratchFloats(int64_t dim) { return kSparseAttentionBlock + 2 * dim; }
void SparseAttentionWithSink(const float* q, int heads, int64_t dim, std::span<const float* const> entries,
                             const float* sink, float softmax_scale, float* out, float* scratch = nullptr);

// The same on the SIMD level `isa` allows. At kAvx512 and kAvx2 (head_dim % 16 == 0) only the
// summation order of each q.k dot product differs from the scalar oracle (P.V is elementwise and
// rounds identically), so outputs stay within fp32 rounding of it, independent of other queries
// and heads; the two SIMD levels give the same bits.
void SparseAttentionWithSink(IsaLevel isa, const float* q, int heads, int64_t dim,
                             std::span<const float* const> entries, const float* sink, float softmax_scale, float* out,
                             float* scratch = nullptr);
// The online-softmax skeleton every level runs (the oracle's algorithm above); the levels differ
// only in its three dim-long loops, which must keep the oracle's roundings apart from the q.k
// summation order: block_acc += p * kv and acc = acc * scale + block_acc, each a multiply then
// an add (the build has -ffp-contract=off, so the skeleton's own arithmetic is the same in every
// translation unit).
struct AttentionLoops {
  float (*dot)(const float* q, const float* kv, int64_t dim);
  void (*add_scaled)(float* block_acc, float p, const float* kv, int64_t dim);
  void (*rescale_add)(float* acc, float scale, const float* block_acc, int64_t dim);
};
void SparseAttentionBlocks(const AttentionLoops& loops, const float* q, int heads, int64_t dim,
                           std::span<const float* const> entries, const float* sink, float softmax_scale, float* out,
                           float* scratch);
void SparseAttentionWithSinkAvx512(const float* q, int heads, int64_t dim, std::span<const float* const> entries,
                                   const float* sink, float softmax_scale, float* out, float* scratch = nullptr);
void SparseAttentionWithSinkAvx2(const float* q, int heads, int64_t dim, std::span<const float* const> entries,
                                 const float* sink, float softmax_scale, float* out, float* scratch = nullptr);

// sum_i a[i] * b[i] in fp32: sequential at kScalar; 2x16 lanes and a fixed reduction tree
// at kAvx512 and kAvx2 (the same bits). Deterministic for a given level.
float DotProduct(IsaLevel isa, const float* a, const float* b, int64_t n);
float DotProductAvx512(const float* a, const float* b, int64_t n);
float DotProductAvx2(const float* a, const float* b, int64_t n);

inline float Sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

}  // namespace deepinfer
