// AVX-512 sparse attention: the scalar oracle's algorithm (online softmax over blocks of 64
// entries, bf16 probabilities relative to the running max, per-block P.V added to the
// rescaled accumulator) with the two dim-long loops vectorised. Only the summation order of
// q.k changes (16 lanes, then a fixed reduction tree), so results stay within fp32 rounding
// of the oracle and never depend on other queries or heads.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/cpu/ops.h"

// Compiled for AVX-512 per function, so the library needs no special flags; callers
// dispatch here only when DetectIsa() says the CPU and OS support it.
#define DI_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma")))

namespace deepinfer {

DI_AVX512 float DotProductAvx512(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  // A fixed reduction tree (GCC 12 warns spuriously inside _mm512_reduce_add_ps).
  const __m512 v = _mm512_add_ps(acc0, acc1);
  const __m256 s8 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  float sum = _mm_cvtss_f32(s4);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

DI_AVX512 void SparseAttentionWithSinkAvx512(const float* q, int heads, int64_t dim,
                                             std::span<const float* const> entries, const float* sink,
                                             float softmax_scale, float* out, float* scratch) {
  DI_CHECK(dim % 16 == 0, "AVX-512 attention needs head_dim % 16 == 0, got ", dim);
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
    float running_max = -1e30f;
    float sum_exp = 0.0f;
    for (size_t start = 0; start < count; start += kSparseAttentionBlock) {
      const size_t block = std::min<size_t>(kSparseAttentionBlock, count - start);
      float block_max = -INFINITY;
      for (size_t k = 0; k < block; ++k) {
        const float* kv = entries[start + k];
        scores[k] = kv == nullptr ? -INFINITY : DotProductAvx512(qh, kv, dim) * softmax_scale;
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
      std::fill_n(block_acc, dim, 0.0f);
      for (size_t k = 0; k < block; ++k) {
        const float* kv = entries[start + k];
        if (kv == nullptr) continue;
        const __m512 p = _mm512_set1_ps(RoundToBF16(scores[k]));
        for (int64_t d = 0; d < dim; d += 16) {
          // p * kv then add, unfused, as the oracle rounds it.
          const __m512 product = _mm512_mul_ps(p, _mm512_loadu_ps(kv + d));
          _mm512_storeu_ps(block_acc + d, _mm512_add_ps(_mm512_loadu_ps(block_acc + d), product));
        }
      }
      const __m512 scale = _mm512_set1_ps(rescale);
      for (int64_t d = 0; d < dim; d += 16) {
        const __m512 scaled = _mm512_mul_ps(_mm512_loadu_ps(acc + d), scale);
        _mm512_storeu_ps(acc + d, _mm512_add_ps(scaled, _mm512_loadu_ps(block_acc + d)));
      }
      running_max = new_max;
    }
    sum_exp += std::exp(sink[h] - running_max);
    for (int64_t d = 0; d < dim; ++d) out[h * dim + d] = RoundToBF16(acc[d] / sum_exp);
  }
}

}  // namespace deepinfer
