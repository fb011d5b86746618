// AVX-512 sparse attention: the scalar oracle's skeleton (SparseAttentionBlocks: online softmax
// over blocks of 64 entries, bf16 probabilities relative to the running max, per-block P.V added
// to the rescaled accumulator) with its dim-long loops vectorised. Only the summation order of
// q.k changes (16 lanes, then a fixed reduction tree), so results stay within fp32 rounding
// of the oracle and never depend on other queries or heads.
#include <immintrin.h>

#include "core/error.h"
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

namespace {

// block_acc += p * kv: multiply then add, unfused, as the oracle rounds it.
DI_AVX512 void AddScaledAvx512(float* block_acc, float p, const float* kv, int64_t dim) {
  const __m512 pv = _mm512_set1_ps(p);
  for (int64_t d = 0; d < dim; d += 16) {
    _mm512_storeu_ps(block_acc + d,
                     _mm512_add_ps(_mm512_loadu_ps(block_acc + d), _mm512_mul_ps(pv, _mm512_loadu_ps(kv + d))));
  }
}

// acc = acc * scale + block_acc, unfused.
DI_AVX512 void RescaleAddAvx512(float* acc, float scale, const float* block_acc, int64_t dim) {
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t d = 0; d < dim; d += 16) {
    _mm512_storeu_ps(acc + d,
                     _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(acc + d), sv), _mm512_loadu_ps(block_acc + d)));
  }
}

}  // namespace

void SparseAttentionWithSinkAvx512(const float* q, int heads, int64_t dim, std::span<const float* const> entries,
                                   const float* sink, float softmax_scale, float* out, float* scratch) {
  DI_CHECK(dim % 16 == 0, "AVX-512 attention needs head_dim % 16 == 0, got ", dim);
  static constexpr AttentionLoops kLoops{DotProductAvx512, AddScaledAvx512, RescaleAddAvx512};
  SparseAttentionBlocks(kLoops, q, heads, dim, entries, sink, softmax_scale, out, scratch);
}

}  // namespace deepinfer
