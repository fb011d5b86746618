// Token sampling from one sequence's fp32 logits row, with the controls of an OpenAI-compatible
// server. Everything here is a pure function of (logits, params, token history, rng state).
//
// Processing order (each step sees the previous step's output):
//   0. constraint mask    with a structured-output constraint (`allowed`, constraint.h), a token
//                         outside the mask is forbidden: its logit is -inf from here on, and it
//                         stays -inf through steps 1-2 (not even a +inf logit_bias brings it back),
//                         so it can never be sampled. Without a constraint this step does nothing.
//   1. logit bias         l[id] += bias[id]                          (OpenAI `logit_bias`)
//   2. penalties          repetition, then frequency, then presence  (vLLM's order)
//        repetition:      for each distinct id in prompt + output: l > 0 ? l / r : l * r
//                         (HF `RepetitionPenaltyLogitsProcessor`, vLLM `repetition_penalty`)
//        frequency:       l[id] -= frequency_penalty * count_in_output(id)
//        presence:        l[id] -= presence_penalty * (count_in_output(id) > 0)
//      After steps 1-2, if any logit is +inf (a +inf bias), the distribution is uniform over those
//      tokens (the limit of softmax); a -inf logit forbids its token. When every token is
//      forbidden the request is rejected with an Error.
//   -- temperature 0 stops here: greedy argmax of the adjusted logits, ties to the lowest id. --
//   3. temperature        p = softmax(l / T), T clamped to at least 1e-5 as the reference does
//   4. top-k              keep the k most likely tokens, exactly k: ties broken to the lowest id
//                         (so top_k = 1 is greedy)
//   5. top-p              on the top-k distribution renormalised: keep the minimal most-likely-
//                         first prefix whose probability mass reaches top_p (same tie order)
//   6. min-p              drop tokens with p < min_p * max(p); renormalisation does not change
//                         the ratio, so this is the same whether read before or after 4-5
//   7. sample             Gumbel-max, as the reference: argmax(p / Exponential(1)), one
//                         exponential per vocabulary entry in id order from the sequence's Rng,
//                         so a call at T > 0 always consumes exactly vocab_size draws whatever the
//                         filters: the same seed and the same logits give the same tokens.
//
// Logprobs: like vLLM's default (`logprobs_mode = raw_logprobs`), reported logprobs are the
// log-softmax of the ORIGINAL logits row passed in, before bias, penalties, temperature and
// truncation -- the model's own distribution, not the one sampled from. A forced or filtered
// token therefore still gets its model logprob. Under a constraint the row is the model's logits
// with the forbidden tokens at -inf (step 0), as vLLM reports them with a grammar bitmask: the
// model's distribution renormalised over what the constraint allows; top_logprobs lists allowed
// tokens only (fewer than asked when fewer are allowed).
//
// Seeds: each sequence owns its `Rng`, built from the request's seed, and nothing else draws from
// it; results never depend on batching or on other requests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

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

// OpenAI/vLLM request fields. Defaults disable every control; `temperature` stays the first
// field so `SamplingParams{0.8f}` keeps working. Every field has an initialiser so aggregate
// initialisation with fewer fields does not trip -Wmissing-field-initializers.
struct SamplingParams {
  float temperature = 0.0f;         // >= 0, finite; 0 = greedy
  int32_t top_k = 0;                // >= 0; 0 = off
  float top_p = 1.0f;               // in (0, 1]; 1 = off
  float min_p = 0.0f;               // in [0, 1]; 0 = off
  float repetition_penalty = 1.0f;  // finite, > 0; 1 = off; over prompt + output
  float presence_penalty = 0.0f;    // in [-2, 2] (OpenAI); over output only
  float frequency_penalty = 0.0f;   // in [-2, 2] (OpenAI); over output only
  // Additive bias per token id, any value but NaN: +inf forces the token (uniformly among all
  // +inf tokens), -inf forbids it. Ids must lie inside the vocabulary (the logits row).
  std::map<int32_t, float> logit_bias = {};
  // Unset: no logprobs. N >= 0: the chosen token's logprob plus the N most likely tokens
  // (N is clamped to the vocabulary size).
  std::optional<int32_t> logprobs = std::nullopt;
};

// The tokens the penalties look at. Ids must lie inside the vocabulary (checked).
struct TokenHistory {
  std::span<const int32_t> prompt = {};
  std::span<const int32_t> output = {};  // tokens generated so far for this sequence
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = 0;
  // Set iff params.logprobs is set: raw-logit log-softmax of `token` (see the header comment).
  std::optional<float> logprob = std::nullopt;
  // params.logprobs entries, most likely first, ties to the lowest id.
  std::vector<TokenLogprob> top_logprobs = {};
};

// Throws deepinfer::Error naming the first bad field. Call at request admission; Sample calls it
// again (it is cheap).
void ValidateSamplingParams(const SamplingParams& params, size_t vocab_size);

// Steps 1 and 2, in place: the adjusted logits, before the +inf/-inf handling.
void ApplyLogitBias(std::span<float> logits, const SamplingParams& params);
void ApplyPenalties(std::span<float> logits, const SamplingParams& params, const TokenHistory& history);

// A constraint's allowed next tokens: bit t % 64 of word t / 64 (at least one bit per logit);
// empty: no constraint.
using TokenMask = std::span<const uint64_t>;

// Steps 0-6: the probabilities Sample draws from (one-hot on the greedy token at temperature
// 0); filtered tokens have probability exactly 0.
std::vector<double> SamplingDistribution(std::span<const float> logits, const SamplingParams& params,
                                         const TokenHistory& history, TokenMask allowed = {});

// log_softmax(logits) in double, returned as float.
std::vector<float> LogSoftmax(std::span<const float> logits);

SampleResult Sample(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history, Rng& rng,
                    TokenMask allowed = {});
// What Sample reports for `token` chosen elsewhere (a speculative draft the target accepted):
// the token with its logprobs, when params ask for them.
SampleResult TokenResult(std::span<const float> logits, const SamplingParams& params, int32_t token,
                         TokenMask allowed = {});

// Sample without history (penalties see no tokens), returning only the token.
int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, Rng& rng);

}  // namespace deepinfer
