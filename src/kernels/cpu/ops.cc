#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"

namespace deepinfer {

void RmsNorm(const float* x, int64_t n, const float* weight, float eps, float* out) {
  float sum_squares = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum_squares += x[i] * x[i];
  const float inv_rms = 1.0f / std::sqrt(sum_squares / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = RoundToBF16(weight[i] * (x[i] * inv_rms));
}

void ApplyRope(float* x, std::span<const float> cos, std::span<const float> sin, bool inverse) {
  for (size_t i = 0; i < cos.size(); ++i) {
    const float re = x[2 * i];
    const float im = x[2 * i + 1];
    const float c = cos[i];
    const float s = inverse ? -sin[i] : sin[i];
    x[2 * i] = RoundToBF16(re * c - im * s);
    x[2 * i + 1] = RoundToBF16(re * s + im * c);
  }
}

void SparseAttentionBlocks(const AttentionLoops& loops, const float* q, int heads, int64_t dim,
                           std::span<const float* const> entries, const float* sink, float softmax_scale, float* out,
                           float* scratch) {
  const size_t count = entries.size();
  std::vector<float> owned;
  if (scratch == nullptr) {
    owned.resize(SparseAttentionScratchFloats(dim));
    scratch = owned.data();
  }
  float* scores = scratch;
  float* acc = scores + kSparseAttentionBlock;
  float* block_acc = acc + dim;
  for (int h = 0; h < heads; ++h) {
    const float* qh = q + h * dim;
    std::fill_n(acc, dim, 0.0f);
    float running_max = -1e30f;  // finite, so a query with no entry yields zeros, not NaN
    float sum_exp = 0.0f;
    for (size_t start = 0; start < count; start += kSparseAttentionBlock) {
      const size_t block = std::min<size_t>(kSparseAttentionBlock, count - start);
      float block_max = -INFINITY;
      for (size_t k = 0; k < block; ++k) {
        const float* kv = entries[start + k];
        if (kv == nullptr) {
          scores[k] = -INFINITY;
          continue;
        }
        scores[k] = loops.dot(qh, kv, dim) * softmax_scale;
        block_max = std::max(block_max, scores[k]);
      }
      const float new_max = std::max(running_max, block_max);
      const float rescale = std::exp(running_max - new_max);
      float block_sum = 0.0f;
      for (size_t k = 0; k < block; ++k) {
        scores[k] = std::exp(scores[k] - new_max);
        block_sum += scores[k];
      }
      sum_exp = sum_exp * rescale + block_sum;
      // The block's P.V is summed on its own, then added to the rescaled accumulator.
      std::fill_n(block_acc, dim, 0.0f);
      for (size_t k = 0; k < block; ++k) {
        const float* kv = entries[start + k];
        if (kv == nullptr) continue;
        loops.add_scaled(block_acc, RoundToBF16(scores[k]), kv, dim);
      }
      loops.rescale_add(acc, rescale, block_acc, dim);
      running_max = new_max;
    }
    sum_exp += std::exp(sink[h] - running_max);
    for (int64_t d = 0; d < dim; ++d) out[h * dim + d] = RoundToBF16(acc[d] / sum_exp);
  }
}

namespace {

float SequentialDot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void AddScaled(float* block_acc, float p, const float* kv, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) block_acc[d] += p * kv[d];
}

void RescaleAdd(float* acc, float scale, const float* block_acc, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) acc[d] = acc[d] * scale + block_acc[d];
}

}  // namespace

void SparseAttentionWithSink(const float* q, int heads, int64_t dim, std::span<const float* const> entries,
                             const float* sink, float softmax_scale, float* out, float* scratch) {
  static constexpr AttentionLoops kScalar{SequentialDot, AddScaled, RescaleAdd};
  SparseAttentionBlocks(kScalar, q, heads, dim, entries, sink, softmax_scale, out, scratch);
}

}  // namespace deepinfer

namespace deepinfer {

float DotProduct(IsaLevel isa, const float* a, const float* b, int64_t n) {
  if (isa == IsaLevel::kAvx512) return DotProductAvx512(a, b, n);
  if (isa == IsaLevel::kAvx2) return DotProductAvx2(a, b, n);
  return SequentialDot(a, b, n);
}

void SparseAttentionWithSink(IsaLevel isa, const float* q, int heads, int64_t dim,
                             std::span<const float* const> entries, const float* sink, float softmax_scale, float* out,
                             float* scratch) {
  if (isa == IsaLevel::kAvx512 && dim % 16 == 0) {
    SparseAttentionWithSinkAvx512(q, heads, dim, entries, sink, softmax_scale, out, scratch);
  } else if (isa == IsaLevel::kAvx2 && dim % 16 == 0) {
    SparseAttentionWithSinkAvx2(q, heads, dim, entries, sink, softmax_scale, out, scratch);
  } else {
    SparseAttentionWithSink(q, heads, dim, entries, sink, softmax_scale, out, scratch);
  }
}

}  // namespace deepinfer
