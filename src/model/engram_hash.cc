#include "model/engram_hash.h"

#include <algorithm>

#include "core/error.h"
#include "core/numpy_random.h"

namespace deepinfer {
namespace {

uint64_t MulMod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % m);
}

uint64_t PowMod(uint64_t base, uint64_t exp, uint64_t m) {
  uint64_t result = 1;
  base %= m;
  while (exp > 0) {
    if (exp & 1) result = MulMod(result, base, m);
    base = MulMod(base, base, m);
    exp >>= 1;
  }
  return result;
}

bool IsPrime(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int r = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++r;
  }
  for (uint64_t a : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {  // deterministic for 64-bit n
    uint64_t x = PowMod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int i = 1; i < r && composite; ++i) {
      x = MulMod(x, x, n);
      if (x == n - 1) composite = false;
    }
    if (composite) return false;
  }
  return true;
}

}  // namespace

int64_t NextUnusedPrime(int64_t start, const std::vector<int64_t>& used) {
  // The config bounds engram_vocab_size to 2^32, so the search never nears the end of int64.
  DI_CHECK(start >= 0 && start < (int64_t{1} << 62), "prime search from ", start);
  int64_t candidate = start + 1;
  while (!IsPrime(static_cast<uint64_t>(candidate)) || std::find(used.begin(), used.end(), candidate) != used.end()) {
    ++candidate;
  }
  return candidate;
}

EngramHasher::EngramHasher(const ModelConfig& config, std::vector<int32_t> token_map, int64_t compressed_vocab_size)
    : max_ngram_size_(config.engram_max_ngram_size), n_heads_(config.engram_n_heads), token_map_(std::move(token_map)) {
  if (compressed_vocab_size != config.engram_compressed_vocab_size) {
    throw MakeError(config.source, ": the tokenizer's Engram compressed vocabulary has ", compressed_vocab_size,
                    " ids but engram_compressed_vocab_size is ", config.engram_compressed_vocab_size,
                    "; the hash multipliers derive from it, so the tables would be read at the wrong rows");
  }
  if (config.engram_pad_id < 0 || static_cast<size_t>(config.engram_pad_id) >= token_map_.size()) {
    throw MakeError(config.source, ": engram_pad_id ", config.engram_pad_id, " is outside the tokenizer (",
                    token_map_.size(), " ids)");
  }
  pad_id_ = token_map_[config.engram_pad_id];
  std::vector<int64_t> used;
  for (size_t l = 0; l < config.engram_layer_ids.size(); ++l) {
    multipliers_.push_back(EngramHashMultipliers(config.engram_layer_ids[l], max_ngram_size_, compressed_vocab_size));
    std::vector<int64_t> primes;
    for (int n = 0; n < max_ngram_size_ - 1; ++n) {
      int64_t current = config.engram_vocab_size - 1;
      for (int h = 0; h < n_heads_; ++h) {
        current = NextUnusedPrime(current, used);
        used.push_back(current);
        primes.push_back(current);
      }
    }
    std::vector<int64_t> offsets;
    int64_t total = 0;
    for (int64_t p : primes) {
      offsets.push_back(total);
      if (__builtin_add_overflow(total, p, &total)) {
        throw MakeError(config.source, ": engram layer ", config.engram_layer_ids[l],
                        ": the sum of its hash primes overflows (engram_vocab_size ", config.engram_vocab_size, ")");
      }
    }
    if (total > config.engram_num_embeddings[l]) {
      throw MakeError(config.source, ": engram layer ", config.engram_layer_ids[l], " hashes into ", total,
                      " rows (the sum of its primes) but engram_num_embeddings gives ",
                      config.engram_num_embeddings[l]);
    }
    primes_.push_back(std::move(primes));
    offsets_.push_back(std::move(offsets));
  }
}

int32_t EngramHasher::Compress(int64_t token_id) const {
  if (token_id < 0 || static_cast<size_t>(token_id) >= token_map_.size()) {
    throw MakeError("token id ", token_id, " is outside the tokenizer's ", token_map_.size(),
                    " ids used for the Engram token map");
  }
  return token_map_[token_id];
}

void EngramHasher::HashIds(int layer_index, std::span<const int32_t> recent, int64_t* ids) const {
  DI_CHECK(static_cast<int>(recent.size()) == max_ngram_size_);
  const std::vector<int64_t>& mult = multipliers_[layer_index];
  const std::vector<int64_t>& primes = primes_[layer_index];
  const std::vector<int64_t>& offsets = offsets_[layer_index];
  bool blocked = false;
  int64_t rolling = 0;
  for (int shift = 0; shift < max_ngram_size_; ++shift) {
    blocked = blocked || recent[shift] == kEngramDeadToken;
    const int64_t token = blocked ? pad_id_ : recent[shift];
    const int64_t product = token * mult[shift];  // bounded by construction: cannot overflow
    if (shift == 0) {
      rolling = product;
      continue;
    }
    rolling ^= product;
    for (int h = 0; h < n_heads_; ++h) {
      const int column = (shift - 1) * n_heads_ + h;
      ids[column] = rolling % primes[column] + offsets[column];
    }
  }
}

}  // namespace deepinfer
