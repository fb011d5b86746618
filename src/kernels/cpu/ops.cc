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
  constexpr int kBlock = kSparseAttentionBlock;
  constexpr int kGroup = kSparseAttentionHeadGroup;
  const size_t count = entries.size();
  std::vector<float> owned;
  if (scratch == nullptr) {
    owned.resize(SparseAttentionScratchFloats(dim));
    scratch = owned.data();
  }
  float* dots = scratch;                  // [group][block]: q.k of the block's live entries
  float* probs = dots + kGroup * kBlock;  // [group][block]: their bf16 probabilities
  float* acc = probs + kGroup * kBlock;   // [group][dim]
  float* block_acc = acc + kGroup * dim;  // [group][dim]
  const float* live[kBlock];              // the block's non-empty entries, in order
  int live_slot[kBlock];                  // and their places in the block
  float scores[kBlock];
  for (int h0 = 0; h0 < heads; h0 += kGroup) {
    const int group = std::min(kGroup, heads - h0);
    float running_max[kGroup], sum_exp[kGroup], rescale[kGroup];
    for (int g = 0; g < group; ++g) {
      running_max[g] = -1e30f;  // finite, so a query with no entry yields zeros, not NaN
      sum_exp[g] = 0.0f;
    }
    std::fill_n(acc, group * dim, 0.0f);
    for (size_t start = 0; start < count; start += kBlock) {
      const int block = static_cast<int>(std::min<size_t>(kBlock, count - start));
      int live_count = 0;
      for (int k = 0; k < block; ++k) {
        if (entries[start + k] == nullptr) continue;
        live[live_count] = entries[start + k];
        live_slot[live_count++] = k;
      }
      loops.dots(q + h0 * dim, group, dim, live, live_count, dots);
      for (int g = 0; g < group; ++g) {
        std::fill_n(scores, block, -INFINITY);
        float block_max = -INFINITY;
        for (int i = 0; i < live_count; ++i) {
          const float score = dots[g * kBlock + i] * softmax_scale;
          scores[live_slot[i]] = score;
          block_max = std::max(block_max, score);
        }
        const float new_max = std::max(running_max[g], block_max);
        rescale[g] = std::exp(running_max[g] - new_max);
        float block_sum = 0.0f;
        for (int k = 0; k < block; ++k) {
          scores[k] = std::exp(scores[k] - new_max);
          block_sum += scores[k];
        }
        sum_exp[g] = sum_exp[g] * rescale[g] + block_sum;
        running_max[g] = new_max;
        for (int i = 0; i < live_count; ++i) probs[g * kBlock + i] = RoundToBF16(scores[live_slot[i]]);
      }
      // The block's P.V is summed on its own, then added to the rescaled accumulator.
      loops.weighted_sum(probs, group, live, live_count, dim, block_acc);
      for (int g = 0; g < group; ++g) loops.rescale_add(acc + g * dim, rescale[g], block_acc + g * dim, dim);
    }
    for (int g = 0; g < group; ++g) {
      const float denominator = sum_exp[g] + std::exp(sink[h0 + g] - running_max[g]);
      float* out_h = out + (h0 + g) * dim;
      for (int64_t d = 0; d < dim; ++d) out_h[d] = RoundToBF16(acc[g * dim + d] / denominator);
    }
  }
}

namespace {

float SequentialDot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void SequentialDots(const float* q, int heads, int64_t dim, const float* const* kv, int count, float* scores) {
  for (int g = 0; g < heads; ++g) {
    for (int k = 0; k < count; ++k) scores[g * kSparseAttentionBlock + k] = SequentialDot(q + g * dim, kv[k], dim);
  }
}

void WeightedSum(const float* p, int heads, const float* const* kv, int count, int64_t dim, float* block_acc) {
  for (int g = 0; g < heads; ++g) {
    float* acc = block_acc + g * dim;
    std::fill_n(acc, dim, 0.0f);
    for (int k = 0; k < count; ++k) {
      const float pk = p[g * kSparseAttentionBlock + k];
      for (int64_t d = 0; d < dim; ++d) acc[d] += pk * kv[k][d];
    }
  }
}

void RescaleAdd(float* acc, float scale, const float* block_acc, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) acc[d] = acc[d] * scale + block_acc[d];
}

const AttentionLoops& ScalarAttentionLoops() {
  static constexpr AttentionLoops kScalar{SequentialDots, WeightedSum, RescaleAdd};
  return kScalar;
}

}  // namespace

void SparseAttentionWithSink(const float* q, int heads, int64_t dim, std::span<const float* const> entries,
                             const float* sink, float softmax_scale, float* out, float* scratch) {
  SparseAttentionBlocks(ScalarAttentionLoops(), q, heads, dim, entries, sink, softmax_scale, out, scratch);
}

}  // namespace deepinfer

namespace deepinfer {

float DotProduct(IsaLevel isa, const float* a, const float* b, int64_t n) {
  if (isa == IsaLevel::kAvx512) return DotProductAvx512(a, b, n);
  if (isa == IsaLevel::kAvx2) return DotProductAvx2(a, b, n);
  return SequentialDot(a, b, n);
}

void HcExpandRow(IsaLevel isa, float* x, const float* y, const float* post, const float* comb, int hc, int64_t dim,
                 float* mixed) {
  if (isa == IsaLevel::kAvx512 && dim % 16 == 0) return HcExpandRowAvx512(x, y, post, comb, hc, dim, mixed);
  if (isa == IsaLevel::kAvx2 && dim % 8 == 0) return HcExpandRowAvx2(x, y, post, comb, hc, dim, mixed);
  for (int j = 0; j < hc; ++j) {
    for (int64_t d = 0; d < dim; ++d) {
      float acc = comb[j] * x[d];
      for (int i = 1; i < hc; ++i) acc += comb[i * hc + j] * x[i * dim + d];
      mixed[j * dim + d] = post[j] * y[d] + acc;
    }
  }
  for (int64_t i = 0; i < hc * dim; ++i) x[i] = RoundToBF16(mixed[i]);
}

void IndexScores(IsaLevel isa, const float* q, int heads, int64_t dim, const float* keys, int64_t count,
                 const float* weights, float weight_scale, float* scores) {
  if (isa == IsaLevel::kScalar || dim % 16 != 0) {
    for (int64_t t = 0; t < count; ++t) {
      float total = 0.0f;
      for (int h = 0; h < heads; ++h) {
        total += std::max(DotProduct(isa, q + h * dim, keys + t * dim, dim), 0.0f) * (weights[h] * weight_scale);
      }
      scores[t] = total;
    }
    return;
  }
  const AttentionLoops& loops = SparseAttentionLoops(isa, dim);
  float dots[kSparseAttentionHeadGroup * kSparseAttentionBlock];
  const float* rows[kSparseAttentionBlock];
  for (int64_t t0 = 0; t0 < count; t0 += kSparseAttentionBlock) {
    const int n = static_cast<int>(std::min<int64_t>(kSparseAttentionBlock, count - t0));
    for (int k = 0; k < n; ++k) rows[k] = keys + (t0 + k) * dim;
    float* total = scores + t0;
    std::fill_n(total, n, 0.0f);
    for (int h0 = 0; h0 < heads; h0 += kSparseAttentionHeadGroup) {
      const int group = std::min(kSparseAttentionHeadGroup, heads - h0);
      loops.dots(q + h0 * dim, group, dim, rows, n, dots);
      for (int g = 0; g < group; ++g) {
        const float weight = weights[h0 + g] * weight_scale;
        for (int k = 0; k < n; ++k) total[k] += std::max(dots[g * kSparseAttentionBlock + k], 0.0f) * weight;
      }
    }
  }
}

void DecodeFP8PowerOfTwo(IsaLevel isa, const uint8_t* codes, const uint8_t* exponents, size_t n, size_t block,
                         float* out) {
  if (isa == IsaLevel::kAvx512 && block % 16 == 0) return DecodeFP8PowerOfTwoAvx512(codes, exponents, n, block, out);
  if (isa == IsaLevel::kAvx2 && block % 8 == 0) return DecodeFP8PowerOfTwoAvx2(codes, exponents, n, block, out);
  DecodeFP8PowerOfTwo(codes, exponents, n, block, out);
}

void DecodeFP4PowerOfTwo(IsaLevel isa, const uint8_t* packed, const uint8_t* exponents, size_t n, size_t block,
                         float* out) {
  if (isa == IsaLevel::kAvx512 && block % 16 == 0) return DecodeFP4PowerOfTwoAvx512(packed, exponents, n, block, out);
  if (isa == IsaLevel::kAvx2 && block % 8 == 0) return DecodeFP4PowerOfTwoAvx2(packed, exponents, n, block, out);
  DecodeFP4PowerOfTwo(packed, exponents, n, block, out);
}

void DecodeFP4E4M3Scale(IsaLevel isa, const uint8_t* packed, const uint8_t* scales, size_t n, size_t block,
                        float* out) {
  if (isa == IsaLevel::kAvx512 && block % 16 == 0) return DecodeFP4E4M3ScaleAvx512(packed, scales, n, block, out);
  if (isa == IsaLevel::kAvx2 && block % 8 == 0) return DecodeFP4E4M3ScaleAvx2(packed, scales, n, block, out);
  DecodeFP4E4M3Scale(packed, scales, n, block, out);
}

namespace {
// Whether the AVX2 encoders take the call; the blocks must tile the values either way.
bool EncodesOnAvx2(IsaLevel isa, std::span<const float> values, size_t block) {
  DI_CHECK(block > 0 && values.size() % block == 0, "KV encoder: size ", values.size(), " not a multiple of block ",
           block);
  return (isa == IsaLevel::kAvx2 || isa == IsaLevel::kAvx512) && block % 8 == 0 && values.size() % 32 == 0;
}
}  // namespace

void EncodeFP8PowerOfTwo(IsaLevel isa, std::span<const float> values, size_t block, uint8_t* codes,
                         uint8_t* exponents) {
  if (EncodesOnAvx2(isa, values, block)) return EncodeFP8PowerOfTwoAvx2(values, block, codes, exponents);
  EncodeFP8PowerOfTwo(values, block, codes, exponents);
}

void EncodeFP4PowerOfTwo(IsaLevel isa, std::span<const float> values, size_t block, uint8_t* packed,
                         uint8_t* exponents) {
  if (EncodesOnAvx2(isa, values, block)) return EncodeFP4PowerOfTwoAvx2(values, block, packed, exponents);
  EncodeFP4PowerOfTwo(values, block, packed, exponents);
}

void EncodeFP4E4M3Scale(IsaLevel isa, std::span<const float> values, size_t block, uint8_t* packed, uint8_t* scales) {
  if (EncodesOnAvx2(isa, values, block)) return EncodeFP4E4M3ScaleAvx2(values, block, packed, scales);
  EncodeFP4E4M3Scale(values, block, packed, scales);
}

const AttentionLoops& SparseAttentionLoops(IsaLevel isa, int64_t dim) {
  if (dim % 16 != 0) return ScalarAttentionLoops();
  if (isa == IsaLevel::kAvx512) return SparseAttentionLoopsAvx512();
  if (isa == IsaLevel::kAvx2) return SparseAttentionLoopsAvx2();
  return ScalarAttentionLoops();
}

void SparseAttentionWithSink(IsaLevel isa, const float* q, int heads, int64_t dim,
                             std::span<const float* const> entries, const float* sink, float softmax_scale, float* out,
                             float* scratch) {
  SparseAttentionBlocks(SparseAttentionLoops(isa, dim), q, heads, dim, entries, sink, softmax_scale, out, scratch);
}

}  // namespace deepinfer
