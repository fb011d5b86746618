// AVX2 sparse attention and dot product: the AVX-512 versions' arithmetic on 8-lane registers.
// The q.k dot product keeps the AVX-512 lane structure (two 16-lane accumulators, each as two
// ymm halves, then the same fixed reduction tree) and P.V is elementwise, so the results are
// bit-identical to the AVX-512 path's; both differ from the scalar oracle only in the summation
// order of q.k.
#include <immintrin.h>

#include "core/error.h"
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

// block_acc += p * kv: multiply then add, unfused, as the oracle rounds it.
DI_AVX2 void AddScaledAvx2(float* block_acc, float p, const float* kv, int64_t dim) {
  const __m256 pv = _mm256_set1_ps(p);
  for (int64_t d = 0; d < dim; d += 8) {
    _mm256_storeu_ps(block_acc + d,
                     _mm256_add_ps(_mm256_loadu_ps(block_acc + d), _mm256_mul_ps(pv, _mm256_loadu_ps(kv + d))));
  }
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

void SparseAttentionWithSinkAvx2(const float* q, int heads, int64_t dim, std::span<const float* const> entries,
                                 const float* sink, float softmax_scale, float* out, float* scratch) {
  DI_CHECK(dim % 16 == 0, "AVX2 attention needs head_dim % 16 == 0, got ", dim);
  static constexpr AttentionLoops kLoops{DotProductAvx2, AddScaledAvx2, RescaleAddAvx2};
  SparseAttentionBlocks(kLoops, q, heads, dim, entries, sink, softmax_scale, out, scratch);
}

}  // namespace deepinfer
