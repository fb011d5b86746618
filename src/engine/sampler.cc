#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
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

// OpenAI's documented range for presence_penalty and frequency_penalty.
constexpr float kMaxAbsOpenAiPenalty = 2.0f;
// The reference's floor: a smaller temperature would only overflow l / T.
constexpr float kMinTemperature = 1e-5f;

void CheckHistory(std::span<const int32_t> ids, size_t vocab_size, const char* which) {
  for (int32_t id : ids) {
    DI_CHECK(id >= 0 && static_cast<size_t>(id) < vocab_size, "sampling: ", which, " token id ", id,
             " is outside the vocabulary of ", vocab_size);
  }
}

bool Allowed(TokenMask allowed, size_t id) { return (allowed[id >> 6] >> (id & 63)) & 1; }

// The adjusted logits of steps 0-2 with the +inf rule applied: forced tokens become 0 and the
// rest -inf, so the later steps need no special case.
std::vector<float> AdjustedLogits(std::span<const float> logits, const SamplingParams& params,
                                  const TokenHistory& history, TokenMask allowed) {
  DI_CHECK(!logits.empty());
  ValidateSamplingParams(params, logits.size());
  CheckHistory(history.prompt, logits.size(), "prompt");
  CheckHistory(history.output, logits.size(), "output");
  std::vector<float> adjusted(logits.begin(), logits.end());
  for (size_t i = 0; i < adjusted.size(); ++i) {
    DI_CHECK(!std::isnan(adjusted[i]), "sampling: the logit of token ", i, " is NaN");
  }
  ApplyLogitBias(adjusted, params);
  ApplyPenalties(adjusted, params, history);
  if (!allowed.empty()) {
    // Step 0, applied after 1-2 so that a +inf bias cannot revive a forbidden token; -inf stays
    // -inf through the penalties, so for every other token this equals masking first.
    DI_CHECK(allowed.size() * 64 >= adjusted.size(), "token mask of ", allowed.size(), " words for ", adjusted.size(),
             " logits");
    for (size_t i = 0; i < adjusted.size(); ++i) {
      if (!Allowed(allowed, i)) adjusted[i] = -INFINITY;
    }
  }
  bool any_forced = false;
  bool any_allowed = false;
  for (float v : adjusted) {
    any_forced |= v == INFINITY;
    any_allowed |= v != -INFINITY;
  }
  if (!any_allowed && !allowed.empty()) {
    throw MakeError("sampling: logit_bias forbids every token the output constraint allows, so nothing can be sampled");
  }
  if (!any_allowed) {
    throw MakeError("sampling: logit_bias forbids every token of the vocabulary (all ", adjusted.size(),
                    " logits are -inf), so nothing can be sampled");
  }
  if (any_forced) {
    for (float& v : adjusted) v = v == INFINITY ? 0.0f : -INFINITY;
  }
  return adjusted;
}

int32_t Argmax(std::span<const float> values) {
  // max_element returns the first maximum: ties go to the lowest id.
  return static_cast<int32_t>(std::max_element(values.begin(), values.end()) - values.begin());
}

// Steps 3-6 on the adjusted logits (temperature > 0): unnormalised weights, 0 where filtered.
std::vector<double> FilteredWeights(std::span<const float> adjusted, const SamplingParams& params) {
  const float temperature = std::max(params.temperature, kMinTemperature);
  // The same arithmetic as the reference's softmax(l / T): the division in fp32, exp in fp64.
  float max_scaled = -INFINITY;
  for (float v : adjusted) max_scaled = std::max(max_scaled, v / temperature);
  std::vector<double> weights(adjusted.size());
  for (size_t i = 0; i < adjusted.size(); ++i) {
    const float scaled = adjusted[i] / temperature;
    // A huge finite logit over a tiny temperature overflows to +inf: take the limit (uniform over
    // the overflowed tokens) rather than computing inf - inf.
    weights[i] =
        max_scaled == INFINITY ? (scaled == INFINITY ? 1.0 : 0.0) : std::exp(static_cast<double>(scaled - max_scaled));
  }
  const bool top_k_on = params.top_k > 0;
  const bool top_p_on = params.top_p < 1.0f;
  const bool min_p_on = params.min_p > 0.0f;
  if (!top_k_on && !top_p_on && !min_p_on) return weights;

  // Candidates: tokens with non-zero weight, most likely first, ties to the lowest id. Ordering
  // on the adjusted fp32 logits keeps distinctions that exp() in fp64 may round away.
  std::vector<int32_t> order;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] > 0.0) order.push_back(static_cast<int32_t>(i));
  }
  const auto more_likely = [&](int32_t a, int32_t b) {
    return adjusted[a] > adjusted[b] || (adjusted[a] == adjusted[b] && a < b);
  };
  size_t keep = order.size();
  if (top_k_on && static_cast<size_t>(params.top_k) < keep) {
    keep = static_cast<size_t>(params.top_k);
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), more_likely);
  }
  if (top_p_on) {
    std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), more_likely);
    double mass = 0.0;
    for (size_t j = 0; j < keep; ++j) mass += weights[order[j]];
    const double target = static_cast<double>(params.top_p) * mass;
    double cumulative = 0.0;
    size_t nucleus = 0;
    while (nucleus < keep) {
      cumulative += weights[order[nucleus++]];
      if (cumulative >= target) break;
    }
    keep = nucleus;
  }
  for (size_t j = keep; j < order.size(); ++j) weights[order[j]] = 0.0;
  if (min_p_on) {
    // The most likely token survives steps 4-5 and has weight exp(0) = 1 (or the forced 1).
    const double max_weight = *std::max_element(weights.begin(), weights.end());
    const double threshold = static_cast<double>(params.min_p) * max_weight;
    for (double& w : weights) {
      if (w < threshold) w = 0.0;
    }
  }
  return weights;
}

double Total(const std::vector<double>& weights) {
  // Summed in id order, as the reference does; the unfiltered case then matches it bit for bit.
  double total = 0.0;
  for (double w : weights) total += w;
  return total;
}

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

void ValidateSamplingParams(const SamplingParams& params, size_t vocab_size) {
  if (!(params.temperature >= 0.0f) || !std::isfinite(params.temperature)) {
    throw MakeError("sampling: temperature must be a finite number >= 0 (0 = greedy), got ", params.temperature);
  }
  if (params.top_k < 0) {
    throw MakeError("sampling: top_k must be >= 0 (0 disables it), got ", params.top_k);
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    throw MakeError("sampling: top_p must be in (0, 1] (1 disables it), got ", params.top_p);
  }
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
    throw MakeError("sampling: min_p must be in [0, 1] (0 disables it), got ", params.min_p);
  }
  if (!(params.repetition_penalty > 0.0f) || !std::isfinite(params.repetition_penalty)) {
    throw MakeError("sampling: repetition_penalty must be a finite number > 0 (1 disables it), got ",
                    params.repetition_penalty);
  }
  if (!(std::fabs(params.presence_penalty) <= kMaxAbsOpenAiPenalty)) {
    throw MakeError("sampling: presence_penalty must be in [-2, 2], got ", params.presence_penalty);
  }
  if (!(std::fabs(params.frequency_penalty) <= kMaxAbsOpenAiPenalty)) {
    throw MakeError("sampling: frequency_penalty must be in [-2, 2], got ", params.frequency_penalty);
  }
  for (const auto& [id, bias] : params.logit_bias) {
    if (id < 0 || static_cast<size_t>(id) >= vocab_size) {
      throw MakeError("sampling: logit_bias names token id ", id, ", outside the vocabulary of ", vocab_size,
                      " tokens");
    }
    if (std::isnan(bias)) throw MakeError("sampling: logit_bias for token id ", id, " is NaN");
  }
  if (params.logprobs && *params.logprobs < 0) {
    throw MakeError("sampling: logprobs (the number of top tokens to report) must be >= 0, got ", *params.logprobs);
  }
}

void ApplyLogitBias(std::span<float> logits, const SamplingParams& params) {
  for (const auto& [id, bias] : params.logit_bias) {
    DI_CHECK(id >= 0 && static_cast<size_t>(id) < logits.size());
    logits[id] += bias;
    // -inf + +inf would be NaN; a bias of +inf forces the token whatever its logit.
    if (std::isnan(logits[id])) logits[id] = bias;
  }
}

void ApplyPenalties(std::span<float> logits, const SamplingParams& params, const TokenHistory& history) {
  if (params.repetition_penalty != 1.0f) {
    // Once per distinct id, as HF's gather/scatter does.
    std::vector<uint8_t> seen(logits.size(), 0);
    const float penalty = params.repetition_penalty;
    for (std::span<const int32_t> ids : {history.prompt, history.output}) {
      for (int32_t id : ids) {
        DI_CHECK(id >= 0 && static_cast<size_t>(id) < logits.size());
        if (seen[id]) continue;
        seen[id] = 1;
        logits[id] = logits[id] > 0.0f ? logits[id] / penalty : logits[id] * penalty;
      }
    }
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    std::vector<int32_t> sorted(history.output.begin(), history.output.end());
    std::sort(sorted.begin(), sorted.end());
    for (size_t start = 0; start < sorted.size();) {
      size_t end = start;
      while (end < sorted.size() && sorted[end] == sorted[start]) ++end;
      const int32_t id = sorted[start];
      DI_CHECK(id >= 0 && static_cast<size_t>(id) < logits.size());
      logits[id] -= params.frequency_penalty * static_cast<float>(end - start);
      logits[id] -= params.presence_penalty;
      start = end;
    }
  }
}

std::vector<double> SamplingDistribution(std::span<const float> logits, const SamplingParams& params,
                                         const TokenHistory& history, TokenMask allowed) {
  const std::vector<float> adjusted = AdjustedLogits(logits, params, history, allowed);
  if (params.temperature == 0.0f) {
    std::vector<double> one_hot(logits.size(), 0.0);
    one_hot[Argmax(adjusted)] = 1.0;
    return one_hot;
  }
  std::vector<double> weights = FilteredWeights(adjusted, params);
  const double total = Total(weights);
  for (double& w : weights) w /= total;
  return weights;
}

std::vector<float> LogSoftmax(std::span<const float> logits) {
  DI_CHECK(!logits.empty());
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_logit);
  const double log_normaliser = max_logit + std::log(sum);
  std::vector<float> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    out[i] = static_cast<float>(static_cast<double>(logits[i]) - log_normaliser);
  return out;
}

SampleResult Sample(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history, Rng& rng,
                    TokenMask allowed) {
  const std::vector<float> adjusted = AdjustedLogits(logits, params, history, allowed);
  int32_t token = 0;
  if (params.temperature == 0.0f) {
    token = Argmax(adjusted);
  } else {
    const std::vector<double> weights = FilteredWeights(adjusted, params);
    const double total = Total(weights);
    // Gumbel-max: argmax p_i / E_i with E_i ~ Exponential(1) samples p exactly. A filtered token
    // has p_i = 0 and still consumes its draw, so the stream position never depends on params.
    double best_score = -1.0;
    for (size_t i = 0; i < weights.size(); ++i) {
      const double exponential = -std::log(rng.UniformOpenZero());
      const double score = (weights[i] / total) / exponential;
      if (score > best_score) {
        best_score = score;
        token = static_cast<int32_t>(i);
      }
    }
  }
  return TokenResult(logits, params, token, allowed);
}

SampleResult TokenResult(std::span<const float> logits, const SamplingParams& params, int32_t token,
                         TokenMask allowed) {
  SampleResult result;
  result.token = token;
  if (params.logprobs) {
    // The raw model distribution (vLLM's default), not the processed one: see the header. Under a
    // constraint, the raw row with the forbidden tokens at -inf.
    std::vector<float> masked;
    size_t candidates = logits.size();
    if (!allowed.empty()) {
      masked.assign(logits.begin(), logits.end());
      candidates = 0;
      for (size_t i = 0; i < masked.size(); ++i) {
        if (Allowed(allowed, i)) {
          ++candidates;
        } else {
          masked[i] = -INFINITY;
        }
      }
      logits = masked;
    }
    const std::vector<float> logprobs = LogSoftmax(logits);
    result.logprob = logprobs[result.token];
    const size_t n = std::min(static_cast<size_t>(*params.logprobs), candidates);
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    result.top_logprobs.reserve(n);
    for (size_t j = 0; j < n; ++j) result.top_logprobs.push_back({ids[j], logprobs[ids[j]]});
  }
  return result;
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, Rng& rng) {
  return Sample(logits, params, TokenHistory{}, rng).token;
}

}  // namespace deepinfer
