// AVX2 sparse attention and dot product: the AVX-512 versions' arithmetic on 8-lane registers.
// The q.k dot product keeps the AVX-512 lane structure (two 16-lane accumulators, each as two
// ymm halves, then the same fixed reduction tree) and P.V is elementwise, so the results are
// bit-identical to the AVX-512 path's; both differ from the scalar oracle only in the summation
// order of q.k.
#include <immintrin.h>

#include "kernels/cpu/ops.h"

// Compiled for AVX2 per function, so the library needs no special flags; callers dispatch here
// only when DetectIsa() says the CPU supports it.
#define DI_AVX2 __attribute__((target("avx2,fma")))

namespace deepinfer {

DI_AVX2 float DotProductAvx2(const float* a, const float* b, int64_t n) {
  // acc0 = lanes 0-15 of DotProductAvx512's first accumulator (lo, hi halves), acc1 its second.
  __m256 acc0_lo = _mm256_setzero_ps(), acc0_hi = _mm256_setzero_ps();
  __m256 acc1_lo = _mm256_setzero_ps(), acc1_hi = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0_lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0_lo);
    acc0_hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc0_hi);
    acc1_lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc1_lo);
    acc1_hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc1_hi);
  }
  for (; i + 16 <= n; i += 16) {
    acc0_lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0_lo);
    acc0_hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc0_hi);
  }
  // The AVX-512 tree: v = acc0 + acc1, then halves of 8, 4, 2, 1.
  const __m256 s8 = _mm256_add_ps(_mm256_add_ps(acc0_lo, acc1_lo), _mm256_add_ps(acc0_hi, acc1_hi));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  float sum = _mm_cvtss_f32(s4);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

namespace {

DI_AVX2 void DotsAvx2(const float* q, int heads, int64_t dim, const float* const* kv, int count, float* scores) {
  for (int g = 0; g < heads; ++g) {
    for (int k = 0; k < count; ++k) scores[g * kSparseAttentionBlock + k] = DotProductAvx2(q + g * dim, kv[k], dim);
  }
}

// The block's P.V with kHeads heads x 16 elements of accumulators in registers across all
// entries: a multiply then an add per entry, in entry order, from 0 (the oracle's roundings).
template <int kHeads>
DI_AVX2 void WeightedSumForHeads(const float* p, const float* const* kv, int count, int64_t dim, float* block_acc) {
  for (int64_t d = 0; d < dim; d += 16) {
    __m256 acc[kHeads][2];
#pragma GCC unroll 8
    for (int g = 0; g < kHeads; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
    for (int k = 0; k < count; ++k) {
      const __m256 v0 = _mm256_loadu_ps(kv[k] + d), v1 = _mm256_loadu_ps(kv[k] + d + 8);
#pragma GCC unroll 8
      for (int g = 0; g < kHeads; ++g) {
        const __m256 pk = _mm256_set1_ps(p[g * kSparseAttentionBlock + k]);
        acc[g][0] = _mm256_add_ps(acc[g][0], _mm256_mul_ps(pk, v0));
        acc[g][1] = _mm256_add_ps(acc[g][1], _mm256_mul_ps(pk, v1));
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < kHeads; ++g) {
      _mm256_storeu_ps(block_acc + g * dim + d, acc[g][0]);
      _mm256_storeu_ps(block_acc + g * dim + d + 8, acc[g][1]);
    }
  }
}

DI_AVX2 void WeightedSumAvx2(const float* p, int heads, const float* const* kv, int count, int64_t dim,
                             float* block_acc) {
  WithHeadCount(heads, [&]<int kHeads>() { WeightedSumForHeads<kHeads>(p, kv, count, dim, block_acc); });
}

// acc = acc * scale + block_acc, unfused.
DI_AVX2 void RescaleAddAvx2(float* acc, float scale, const float* block_acc, int64_t dim) {
  const __m256 sv = _mm256_set1_ps(scale);
  for (int64_t d = 0; d < dim; d += 8) {
    _mm256_storeu_ps(acc + d,
                     _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(acc + d), sv), _mm256_loadu_ps(block_acc + d)));
  }
}

}  // namespace

const AttentionLoops& SparseAttentionLoopsAvx2() {
  static constexpr AttentionLoops kLoops{DotsAvx2, WeightedSumAvx2, RescaleAddAvx2};
  return kLoops;
}

}  // namespace deepinfer
