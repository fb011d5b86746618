// Bit-exact reimplementation of the small part of NumPy's random module that the
// DeepSeek-V4.1 Engram hash needs:
//
//   np.random.default_rng(seed).integers(low, high, size=(count,), dtype=np.int64)
//
// i.e. SeedSequence(entropy=seed) -> PCG64 (128-bit LCG, XSL-RR output) -> Generator.integers
// with endpoint=False and NumPy's default (Lemire, not masked) bounded-integer sampler. Ranges
// that fit in 32 bits draw 32-bit halves of the 64-bit outputs (low half first), exactly as NumPy
// does, so the values match NumPy for every range, not only the wide ones the hash uses.
// Verified against NumPy 1.24.2 and 2.x (tests/data/core/numpy_random_values.json).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace deepinfer {

// `count` draws from [low, high_exclusive). Throws Error when low >= high_exclusive (NumPy
// raises ValueError). Each call starts a fresh generator, like np.random.default_rng(seed).
std::vector<int64_t> NumpyDefaultRngIntegers(uint64_t seed, int64_t low, int64_t high_exclusive, size_t count);

// The Engram hash multipliers of one layer, as the reference computes them:
//   bound = max(1, (INT64_MAX // compressed_vocab_size) // 2)
//   values = default_rng(10007 * layer_id).integers(0, bound, size=(max_ngram_size,), dtype=int64)
//   multipliers = values * 2 + 1
// Throws Error for a negative layer_id or max_ngram_size, or a compressed_vocab_size <= 0.
std::vector<int64_t> EngramHashMultipliers(int layer_id, int max_ngram_size, int64_t compressed_vocab_size);

}  // namespace deepinfer
