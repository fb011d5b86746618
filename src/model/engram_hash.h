// Engram n-gram hash ids (spec section 3.3): compressed token ids, per-layer odd
// multipliers from numpy's default_rng(10007 * layer), and prime-sized bucket ranges drawn
// in order above engram_vocab_size.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "io/model_config.h"

namespace deepinfer {

inline constexpr int32_t kEngramDeadToken = -1;  // image tokens: an n-gram never spans one

class EngramHasher {
 public:
  // `token_map` maps every tokenizer id to its compressed id; `compressed_vocab_size` is the
  // number of distinct compressed ids (it seeds the multiplier bound and must match the config).
  EngramHasher(const ModelConfig& config, std::vector<int32_t> token_map, int64_t compressed_vocab_size);

  int lookback() const { return max_ngram_size_ - 1; }
  int columns() const { return (max_ngram_size_ - 1) * n_heads_; }
  int32_t Compress(int64_t token_id) const;

  // Hash ids of the n-grams ending at a position. `recent` holds the compressed ids of the
  // position itself and the `lookback()` before it, newest first, with entries before the
  // sequence start or at a dead token given as kEngramDeadToken. Writes columns() ids.
  void HashIds(int layer_index, std::span<const int32_t> recent, int64_t* ids) const;

  // The primes of one engram layer, in (n-gram, head) order.
  const std::vector<int64_t>& primes(int layer_index) const { return primes_[layer_index]; }

 private:
  int max_ngram_size_;
  int n_heads_;
  int64_t pad_id_;
  std::vector<int32_t> token_map_;
  std::vector<std::vector<int64_t>> multipliers_;  // [layer][max_ngram_size]
  std::vector<std::vector<int64_t>> primes_;       // [layer][(n-1) * heads]
  std::vector<std::vector<int64_t>> offsets_;      // exclusive prefix sums of primes_
};

// The smallest prime above `start` not already in `used` (64-bit deterministic Miller-Rabin).
int64_t NextUnusedPrime(int64_t start, const std::vector<int64_t>& used);

}  // namespace deepinfer
