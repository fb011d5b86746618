#include "core/numpy_random.h"

#include <algorithm>
#include <array>
#include <limits>
#include <vector>

#include "core/error.h"

namespace deepinfer {
namespace {

__extension__ typedef unsigned __int128 Uint128;

// ---- SeedSequence (numpy/random/bit_generator.pyx) ----------------------------------------
// A 4-word uint32 entropy pool built by hashing and cross-mixing the entropy words; output
// words are produced by hashing the pool words in a cycle with a second hash constant.

constexpr size_t kPoolWords = 4;
constexpr uint32_t kHashInitA = 0x43b0d7e5u;
constexpr uint32_t kHashMultA = 0x931e8875u;
constexpr uint32_t kHashInitB = 0x8b51f9ddu;
constexpr uint32_t kHashMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu;
constexpr uint32_t kMixMultR = 0x4973f715u;
constexpr int kXorShift = 16;

// Hashes one word with a running constant that advances on every use.
class RunningHash {
 public:
  RunningHash(uint32_t init, uint32_t mult) : constant_(init), mult_(mult) {}

  uint32_t operator()(uint32_t value) {
    value ^= constant_;
    constant_ *= mult_;
    value *= constant_;
    return value ^ (value >> kXorShift);
  }

 private:
  uint32_t constant_;
  uint32_t mult_;
};

uint32_t Mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  return result ^ (result >> kXorShift);
}

// The pool of SeedSequence(entropy=seed) with no spawn key. A Python int becomes its base-2^32
// digits, least significant first; zero is the single word [0].
std::array<uint32_t, kPoolWords> SeedSequencePool(uint64_t seed) {
  std::vector<uint32_t> entropy;
  do {
    entropy.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed != 0);

  RunningHash hash(kHashInitA, kHashMultA);
  std::array<uint32_t, kPoolWords> pool{};
  for (size_t i = 0; i < kPoolWords; ++i) pool[i] = hash(i < entropy.size() ? entropy[i] : 0u);
  for (size_t src = 0; src < kPoolWords; ++src) {
    for (size_t dst = 0; dst < kPoolWords; ++dst) {
      if (src != dst) pool[dst] = Mix(pool[dst], hash(pool[src]));
    }
  }
  // Entropy longer than the pool (never for a uint64 seed, kept for fidelity) is folded in too.
  for (size_t src = kPoolWords; src < entropy.size(); ++src) {
    for (size_t dst = 0; dst < kPoolWords; ++dst) pool[dst] = Mix(pool[dst], hash(entropy[src]));
  }
  return pool;
}

// SeedSequence.generate_state(n, np.uint64): 2n uint32 words viewed as little-endian uint64.
template <size_t N>
std::array<uint64_t, N> GenerateState64(const std::array<uint32_t, kPoolWords>& pool) {
  RunningHash hash(kHashInitB, kHashMultB);
  std::array<uint64_t, N> out{};
  for (size_t i = 0; i < 2 * N; ++i) {
    const uint64_t word = hash(pool[i % kPoolWords]);
    out[i / 2] |= word << (32 * (i % 2));
  }
  return out;
}

// ---- PCG64 (numpy/random/src/pcg64) --------------------------------------------------------
// 128-bit LCG; each output advances the state and then applies XSL-RR to the new state.
// next_uint32 hands out the low half of a 64-bit output and keeps the high half for the next call.

constexpr Uint128 kPcgMultiplier = (Uint128{2549297995355413924ull} << 64) | Uint128{4865540595714422341ull};

class Pcg64 {
 public:
  explicit Pcg64(uint64_t seed) {
    const std::array<uint64_t, 4> words = GenerateState64<4>(SeedSequencePool(seed));
    const Uint128 initstate = (Uint128{words[0]} << 64) | words[1];
    const Uint128 initseq = (Uint128{words[2]} << 64) | words[3];
    increment_ = (initseq << 1) | 1u;
    state_ = 0;
    Step();
    state_ += initstate;
    Step();
  }

  uint64_t Next64() {
    Step();
    const uint64_t folded = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    const unsigned rotation = static_cast<unsigned>(state_ >> 122);
    return (folded >> rotation) | (folded << ((64u - rotation) & 63u));
  }

  uint32_t Next32() {
    if (has_high_half_) {
      has_high_half_ = false;
      return high_half_;
    }
    const uint64_t value = Next64();
    has_high_half_ = true;
    high_half_ = static_cast<uint32_t>(value >> 32);
    return static_cast<uint32_t>(value);
  }

 private:
  void Step() { state_ = state_ * kPcgMultiplier + increment_; }

  Uint128 state_ = 0;
  Uint128 increment_ = 0;
  bool has_high_half_ = false;
  uint32_t high_half_ = 0;
};

// ---- Bounded integers (numpy/random/src/distributions/distributions.c) ---------------------
// Lemire's multiply-and-reject method for a value in [0, range_max], range_max inclusive and
// strictly below the type's maximum (the full range is handled by the caller).

uint32_t BoundedLemire32(Pcg64& rng, uint32_t range_max) {
  const uint32_t span = range_max + 1;
  uint64_t product = uint64_t{rng.Next32()} * span;
  if (static_cast<uint32_t>(product) < span) {
    const uint32_t threshold = (std::numeric_limits<uint32_t>::max() - range_max) % span;
    while (static_cast<uint32_t>(product) < threshold) product = uint64_t{rng.Next32()} * span;
  }
  return static_cast<uint32_t>(product >> 32);
}

uint64_t BoundedLemire64(Pcg64& rng, uint64_t range_max) {
  const uint64_t span = range_max + 1;
  Uint128 product = Uint128{rng.Next64()} * span;
  if (static_cast<uint64_t>(product) < span) {
    const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - range_max) % span;
    while (static_cast<uint64_t>(product) < threshold) product = Uint128{rng.Next64()} * span;
  }
  return static_cast<uint64_t>(product >> 64);
}

}  // namespace

std::vector<int64_t> NumpyDefaultRngIntegers(uint64_t seed, int64_t low, int64_t high_exclusive, size_t count) {
  if (low >= high_exclusive) {
    throw MakeError("numpy integers: low (", low, ") must be less than high (", high_exclusive, ")");
  }
  // Inclusive width in uint64 arithmetic (exact even for [INT64_MIN, INT64_MAX)), and the
  // offset, added with wrap-around exactly like NumPy's uint64 fill.
  const uint64_t range_max = static_cast<uint64_t>(high_exclusive) - static_cast<uint64_t>(low) - 1;
  const uint64_t offset = static_cast<uint64_t>(low);
  std::vector<int64_t> out(count);
  if (count == 0) return out;  // NumPy returns an empty array without touching the generator.

  Pcg64 rng(seed);
  constexpr uint64_t kMax32 = std::numeric_limits<uint32_t>::max();
  for (int64_t& value : out) {
    uint64_t draw = 0;
    if (range_max == 0) {
      draw = 0;  // a single possible value: no draws
    } else if (range_max == kMax32) {
      draw = rng.Next32();
    } else if (range_max < kMax32) {
      draw = BoundedLemire32(rng, static_cast<uint32_t>(range_max));
    } else {
      // range_max == UINT64_MAX cannot occur: high - low - 1 <= 2^64 - 2 for int64 bounds.
      draw = BoundedLemire64(rng, range_max);
    }
    value = static_cast<int64_t>(offset + draw);
  }
  return out;
}

std::vector<int64_t> EngramHashMultipliers(int layer_id, int max_ngram_size, int64_t compressed_vocab_size) {
  if (layer_id < 0) throw MakeError("Engram hash: layer id must be non-negative, got ", layer_id);
  if (max_ngram_size < 0) throw MakeError("Engram hash: max_ngram_size must be non-negative, got ", max_ngram_size);
  if (compressed_vocab_size <= 0) {
    throw MakeError("Engram hash: compressed vocab size must be positive, got ", compressed_vocab_size);
  }
  const int64_t bound = std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / compressed_vocab_size) / 2);
  const uint64_t seed = uint64_t{10007} * static_cast<uint64_t>(layer_id);
  std::vector<int64_t> values = NumpyDefaultRngIntegers(seed, 0, bound, static_cast<size_t>(max_ngram_size));
  for (int64_t& value : values) value = value * 2 + 1;  // value < bound <= INT64_MAX / 2: no overflow
  return values;
}

}  // namespace deepinfer
