// Random operands the kernel benchmarks share (linear_bench, kernel_ab): one generator, the
// activation rows and the BF16 weight bits, so both time the kernels on the same kind of numbers.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/numeric.h"

namespace deepinfer::bench {

inline uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Four bf16 weights from 64 random bits: random signs and mantissas, |w| in [2^-7, 2^-6), so no
// subnormals.
inline uint64_t Bf16Weights(uint64_t random) { return (random & 0x807f807f807f807full) | 0x3c003c003c003c00ull; }

// m x k bf16-exact activations with magnitudes varying per 32-block.
inline std::vector<float> Activations(int64_t m, int64_t k) {
  std::vector<float> x(static_cast<size_t>(m * k));
  uint64_t seed = 7;
  for (float& v : x) {
    const uint64_t r = SplitMix(seed);
    v = RoundToBF16((static_cast<float>(r & 0xffff) / 32768.0f - 1.0f) *
                    std::ldexp(1.0f, static_cast<int>((r >> 16) % 7) - 3));
  }
  return x;
}

}  // namespace deepinfer::bench
