#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace deepinfer {
namespace {

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : state_) s = SplitMix64(seed);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = Rotl(state_[3], 45);
  return result;
}

double Rng::UniformOpenZero() { return (static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53; }

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, Rng& rng) {
  DI_CHECK(!logits.empty());
  if (params.temperature < 0.0f || std::isnan(params.temperature)) {
    throw MakeError("temperature must be >= 0, got ", params.temperature);
  }
  if (params.temperature == 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const float temperature = std::max(params.temperature, 1e-5f);
  float max_logit = -INFINITY;
  for (float v : logits) max_logit = std::max(max_logit, v / temperature);
  std::vector<double> weights(logits.size());
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    weights[i] = std::exp(static_cast<double>(logits[i] / temperature - max_logit));
    total += weights[i];
  }
  // Gumbel-max: argmax p_i / E_i with E_i ~ Exponential(1) samples p exactly.
  int32_t best = 0;
  double best_score = -1.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double exponential = -std::log(rng.UniformOpenZero());
    const double score = (weights[i] / total) / exponential;
    if (score > best_score) {
      best_score = score;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

}  // namespace deepinfer
