// Token sampling from fp32 logits. Temperature 0 is greedy argmax (ties to the lowest id);
// otherwise the reference's Gumbel-max form: argmax(softmax(logits / T) / Exponential(1)),
// with the exponential noise drawn from a per-sequence seeded generator, so the same seed
// gives the same tokens whatever else runs.
#pragma once

#include <cstdint>
#include <span>

namespace deepinfer {

// xoshiro256** seeded through splitmix64: small, fast, reproducible across platforms.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in (0, 1], 53 bits.
  double UniformOpenZero();

 private:
  uint64_t state_[4];
};

struct SamplingParams {
  float temperature = 0.0f;
};

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, Rng& rng);

}  // namespace deepinfer
