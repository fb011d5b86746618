// AVX-512 sparse attention: the scalar oracle's skeleton (SparseAttentionBlocks: online softmax
// over blocks of 64 entries, bf16 probabilities relative to the running max, per-block P.V added
// to the rescaled accumulator) with its dim-long loops vectorised. Only the summation order of
// q.k changes (16 lanes, then a fixed reduction tree), so results stay within fp32 rounding
// of the oracle and never depend on other queries or heads.
#include <immintrin.h>

#include "kernels/cpu/ops.h"

// Compiled for AVX-512 per function, so the library needs no special flags; callers
// dispatch here only when DetectIsa() says the CPU and OS support it.
#define DI_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma")))

namespace deepinfer {
namespace {

// The fixed reduction tree of the two 16-lane accumulators of a dot product (GCC 12 warns
// spuriously inside _mm512_reduce_add_ps).
DI_AVX512 inline float ReduceTree(__m512 acc0, __m512 acc1) {
  const __m512 v = _mm512_add_ps(acc0, acc1);
  const __m256 s8 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

}  // namespace

DI_AVX512 float DotProductAvx512(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  float sum = ReduceTree(acc0, acc1);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

namespace {

// kHeads queries x kEntries keys at once, each pair exactly DotProductAvx512 (dim % 16 == 0):
// every K=V load feeds kHeads FMAs and every q load kEntries, where one pair at a time needs two
// loads per FMA.
template <int kHeads, int kEntries>
DI_AVX512 void DotTile(const float* q, int64_t dim, const float* const* kv, float* scores) {
  __m512 acc0[kHeads][kEntries], acc1[kHeads][kEntries];
#pragma GCC unroll 16
  for (int g = 0; g < kHeads; ++g) {
#pragma GCC unroll 16
    for (int e = 0; e < kEntries; ++e) acc0[g][e] = acc1[g][e] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    __m512 k0[kEntries], k1[kEntries];
#pragma GCC unroll 16
    for (int e = 0; e < kEntries; ++e) {
      k0[e] = _mm512_loadu_ps(kv[e] + i);
      k1[e] = _mm512_loadu_ps(kv[e] + i + 16);
    }
#pragma GCC unroll 16
    for (int g = 0; g < kHeads; ++g) {
      const __m512 q0 = _mm512_loadu_ps(q + g * dim + i), q1 = _mm512_loadu_ps(q + g * dim + i + 16);
#pragma GCC unroll 16
      for (int e = 0; e < kEntries; ++e) {
        acc0[g][e] = _mm512_fmadd_ps(q0, k0[e], acc0[g][e]);
        acc1[g][e] = _mm512_fmadd_ps(q1, k1[e], acc1[g][e]);
      }
    }
  }
  if (i < dim) {  // one 16-element step into the first accumulator
#pragma GCC unroll 16
    for (int g = 0; g < kHeads; ++g) {
      const __m512 q0 = _mm512_loadu_ps(q + g * dim + i);
#pragma GCC unroll 16
      for (int e = 0; e < kEntries; ++e) acc0[g][e] = _mm512_fmadd_ps(q0, _mm512_loadu_ps(kv[e] + i), acc0[g][e]);
    }
  }
#pragma GCC unroll 16
  for (int g = 0; g < kHeads; ++g) {
#pragma GCC unroll 16
    for (int e = 0; e < kEntries; ++e) scores[g * kSparseAttentionBlock + e] = ReduceTree(acc0[g][e], acc1[g][e]);
  }
}

template <int kHeads>
DI_AVX512 void DotsForHeads(const float* q, int64_t dim, const float* const* kv, int count, float* scores) {
  int k = 0;
  for (; k + 2 <= count; k += 2) DotTile<kHeads, 2>(q, dim, kv + k, scores + k);
  if (k < count) DotTile<kHeads, 1>(q, dim, kv + k, scores + k);
}

DI_AVX512 void DotsAvx512(const float* q, int heads, int64_t dim, const float* const* kv, int count, float* scores) {
  WithHeadCount(heads, [&]<int kHeads>() { DotsForHeads<kHeads>(q, dim, kv, count, scores); });
}

// Columns [d, d + 16 kChunks) of the block's P.V for kHeads heads, their accumulators in registers
// across all entries: per entry and element, a multiply then an add, in entry order, from 0 (the
// oracle's roundings).
template <int kHeads, int kChunks>
DI_AVX512 void WeightedSumColumns(const float* p, const float* const* kv, int count, int64_t dim, int64_t d,
                                  float* block_acc) {
  __m512 acc[kHeads][kChunks];
#pragma GCC unroll 16
  for (int g = 0; g < kHeads; ++g) {
#pragma GCC unroll 16
    for (int c = 0; c < kChunks; ++c) acc[g][c] = _mm512_setzero_ps();
  }
  for (int k = 0; k < count; ++k) {
    __m512 v[kChunks];
#pragma GCC unroll 16
    for (int c = 0; c < kChunks; ++c) v[c] = _mm512_loadu_ps(kv[k] + d + 16 * c);
#pragma GCC unroll 16
    for (int g = 0; g < kHeads; ++g) {
      const __m512 pk = _mm512_set1_ps(p[g * kSparseAttentionBlock + k]);
#pragma GCC unroll 16
      for (int c = 0; c < kChunks; ++c) acc[g][c] = _mm512_add_ps(acc[g][c], _mm512_mul_ps(pk, v[c]));
    }
  }
#pragma GCC unroll 16
  for (int g = 0; g < kHeads; ++g) {
#pragma GCC unroll 16
    for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(block_acc + g * dim + d + 16 * c, acc[g][c]);
  }
}

// 64 columns at a time (16 accumulators for 4 heads), then 16 (dim % 16 == 0).
template <int kHeads>
DI_AVX512 void WeightedSumForHeads(const float* p, const float* const* kv, int count, int64_t dim, float* block_acc) {
  int64_t d = 0;
  for (; d + 64 <= dim; d += 64) WeightedSumColumns<kHeads, 4>(p, kv, count, dim, d, block_acc);
  for (; d < dim; d += 16) WeightedSumColumns<kHeads, 1>(p, kv, count, dim, d, block_acc);
}

DI_AVX512 void WeightedSumAvx512(const float* p, int heads, const float* const* kv, int count, int64_t dim,
                                 float* block_acc) {
  WithHeadCount(heads, [&]<int kHeads>() { WeightedSumForHeads<kHeads>(p, kv, count, dim, block_acc); });
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

const AttentionLoops& SparseAttentionLoopsAvx512() {
  static constexpr AttentionLoops kLoops{DotsAvx512, WeightedSumAvx512, RescaleAddAvx512};
  return kLoops;
}

}  // namespace deepinfer
