#include "engine/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::vector<float> LogsOf(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature = 1.0) {
  double max_value = -INFINITY;
  for (float v : logits) max_value = std::max(max_value, v / temperature);
  std::vector<double> out;
  double total = 0.0;
  for (float v : logits) {
    out.push_back(std::exp(v / temperature - max_value));
    total += out.back();
  }
  for (double& p : out) p /= total;
  return out;
}

// Fixed pseudo-random logits in [-4, 4].
std::vector<float> RandomLogits(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> logits(n);
  for (float& v : logits) v = static_cast<float>(8.0 * rng.UniformOpenZero() - 4.0);
  return logits;
}

// One draw from a fresh generator seeded with 0.
int32_t SampleOnce(std::span<const float> logits, const SamplingParams& params) {
  Rng rng(0);
  return SampleToken(logits, params, rng);
}

SampleResult SampleOnceFull(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history) {
  Rng rng(0);
  return Sample(logits, params, history, rng);
}

std::vector<int32_t> Support(const std::vector<double>& probs) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] > 0.0) ids.push_back(static_cast<int32_t>(i));
  }
  return ids;
}

// The sampler as it was before the OpenAI controls: the CLI's seeded output must not change.
int32_t ReferenceTemperatureSample(std::span<const float> logits, float temperature, Rng& rng) {
  float max_logit = -INFINITY;
  for (float v : logits) max_logit = std::max(max_logit, v / temperature);
  std::vector<double> weights(logits.size());
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    weights[i] = std::exp(static_cast<double>(logits[i] / temperature - max_logit));
    total += weights[i];
  }
  int32_t best = 0;
  double best_score = -1.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double score = (weights[i] / total) / -std::log(rng.UniformOpenZero());
    if (score > best_score) {
      best_score = score;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

// Pearson chi-square of observed counts against expected probabilities (cells with p > 0).
double ChiSquare(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t draws) {
  double chi2 = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0.0) continue;
    const double expected = probs[i] * static_cast<double>(draws);
    chi2 += (static_cast<double>(counts[i]) - expected) * (static_cast<double>(counts[i]) - expected) / expected;
  }
  return chi2;
}

TEST(SamplerTest, GreedyIsArgmaxWithTiesToTheLowestId) {
  Rng rng(1);
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(SampleToken(logits, SamplingParams{}, rng), 1);
  EXPECT_EQ(SampleToken(logits, SamplingParams{0.0f}, rng), 1);
  // Greedy draws nothing from the generator.
  Rng fresh(1);
  EXPECT_EQ(rng.Next(), fresh.Next());
}

TEST(SamplerTest, TemperatureOnlyMatchesThePreviousSamplerBitForBit) {
  const std::vector<float> logits = RandomLogits(1000, 7);
  Rng rng(11);
  Rng reference_rng(11);
  for (int step = 0; step < 50; ++step) {
    const float temperature = step % 2 == 0 ? 0.8f : 1.3f;
    ASSERT_EQ(SampleToken(logits, SamplingParams{temperature}, rng),
              ReferenceTemperatureSample(logits, temperature, reference_rng))
        << "step " << step;
  }
}

TEST(SamplerTest, TemperatureScalesTheSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
  for (float temperature : {0.25f, 1.0f, 2.0f}) {
    const std::vector<double> probs = SamplingDistribution(logits, SamplingParams{temperature}, {});
    const std::vector<double> expected = Softmax(logits, temperature);
    for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(probs[i], expected[i], 1e-6) << i;
  }
  // Temperature 0: one-hot on the greedy token.
  EXPECT_EQ(SamplingDistribution(logits, SamplingParams{}, {}), (std::vector<double>{0, 1, 0, 0}));
}

TEST(SamplerTest, TopKOneEqualsGreedy) {
  std::vector<float> logits = RandomLogits(500, 3);
  logits[77] = 10.0f;
  logits[300] = 10.0f;  // a tie: both greedy and top-k = 1 take the lower id
  SamplingParams params{1.5f};
  params.top_k = 1;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    Rng rng(seed);
    ASSERT_EQ(SampleToken(logits, params, rng), 77) << "seed " << seed;
  }
  EXPECT_EQ(SampleOnce(logits, SamplingParams{}), 77);
}

TEST(SamplerTest, TopKKeepsExactlyKTokensRenormalised) {
  const std::vector<float> logits = {1.0f, 5.0f, 3.0f, 5.0f, 2.0f, 0.0f};
  SamplingParams params{1.0f};
  params.top_k = 3;
  std::vector<double> probs = SamplingDistribution(logits, params, {});
  EXPECT_EQ(Support(probs), (std::vector<int32_t>{1, 2, 3}));
  const std::vector<double> full = Softmax(logits);
  const double mass = full[1] + full[2] + full[3];
  EXPECT_NEAR(probs[1], full[1] / mass, 1e-12);
  EXPECT_NEAR(probs[2], full[2] / mass, 1e-12);
  // Ties at the cut go to the lowest id.
  params.top_k = 1;
  EXPECT_EQ(Support(SamplingDistribution(logits, params, {})), (std::vector<int32_t>{1}));
  // k at or above the vocabulary is no filter.
  params.top_k = 6;
  EXPECT_EQ(Support(SamplingDistribution(logits, params, {})).size(), 6u);
  params.top_k = 1000;
  EXPECT_EQ(Support(SamplingDistribution(logits, params, {})).size(), 6u);
}

TEST(SamplerTest, TopPKeepsExactlyTheMinimalNucleus) {
  // Probabilities 0.05, 0.5, 0.15, 0.3 (shuffled so id order is not probability order).
  const std::vector<float> logits = LogsOf({0.05, 0.5, 0.15, 0.3});
  SamplingParams params{1.0f};
  const auto nucleus = [&](float top_p) {
    params.top_p = top_p;
    return Support(SamplingDistribution(logits, params, {}));
  };
  EXPECT_EQ(nucleus(0.2f), (std::vector<int32_t>{1}));
  EXPECT_EQ(nucleus(0.49f), (std::vector<int32_t>{1}));
  EXPECT_EQ(nucleus(0.51f), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(nucleus(0.79f), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(nucleus(0.81f), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(nucleus(0.94f), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(nucleus(0.96f), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(nucleus(1.0f), (std::vector<int32_t>{0, 1, 2, 3}));
  params.top_p = 0.79f;
  const std::vector<double> probs = SamplingDistribution(logits, params, {});
  EXPECT_NEAR(probs[1], 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(probs[3], 0.3 / 0.8, 1e-6);
}

TEST(SamplerTest, TopPReadsTheTopKDistributionAndTemperature) {
  const std::vector<float> logits = LogsOf({0.5, 0.3, 0.2});
  SamplingParams params{1.0f};
  params.top_p = 0.6f;
  // 0.5 < 0.6: two tokens are needed.
  EXPECT_EQ(Support(SamplingDistribution(logits, params, {})), (std::vector<int32_t>{0, 1}));
  // After top-k = 2 the first token holds 0.5 / 0.8 = 0.625 >= 0.6 alone.
  params.top_k = 2;
  EXPECT_EQ(Support(SamplingDistribution(logits, params, {})), (std::vector<int32_t>{0}));
  // Temperature comes first: at T = 0.5 the probabilities are 25:9:4 / 38, 0.658 >= 0.6.
  params.top_k = 0;
  params.temperature = 0.5f;
  EXPECT_EQ(Support(SamplingDistribution(logits, params, {})), (std::vector<int32_t>{0}));
}

TEST(SamplerTest, MinPDropsTokensBelowTheScaledMaximum) {
  const std::vector<float> logits = LogsOf({0.5, 0.2, 0.1, 0.09, 0.11});
  SamplingParams params{1.0f};
  params.min_p = 0.19f;  // threshold 0.095
  EXPECT_EQ(Support(SamplingDistribution(logits, params, {})), (std::vector<int32_t>{0, 1, 2, 4}));
  params.min_p = 0.21f;  // threshold 0.105
  EXPECT_EQ(Support(SamplingDistribution(logits, params, {})), (std::vector<int32_t>{0, 1, 4}));
  params.min_p = 1.0f;  // only the maximum
  EXPECT_EQ(Support(SamplingDistribution(logits, params, {})), (std::vector<int32_t>{0}));
  params.min_p = 0.21f;
  const std::vector<double> probs = SamplingDistribution(logits, params, {});
  EXPECT_NEAR(probs[4], 0.11 / 0.81, 1e-6);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOnce) {
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, -1.0f, 0.0f};
  const std::vector<int32_t> prompt = {0, 5};
  const std::vector<int32_t> output = {1, 1, 3};
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  ApplyPenalties(logits, params, {prompt, output});
  // Token 1 appears twice but is penalised once; 2 and 4 were never seen; 0 stays 0.
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 1.0f, 0.25f, -1.0f, 0.0f}));
}

TEST(SamplerTest, FrequencyAndPresencePenaltiesCountOutputTokensOnly) {
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, -1.0f};
  const std::vector<int32_t> prompt = {0, 2, 2};
  const std::vector<int32_t> output = {1, 3, 1, 1};
  SamplingParams params;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  ApplyPenalties(logits, params, {prompt, output});
  EXPECT_EQ(logits, (std::vector<float>{2.0f, -2.0f - 1.5f - 0.25f, 1.0f, 0.5f - 0.5f - 0.25f, -1.0f}));
  // Negative values reward repetition (OpenAI allows [-2, 2]).
  std::vector<float> rewarded = {0.0f, 0.0f};
  params.frequency_penalty = -1.0f;
  params.presence_penalty = -2.0f;
  const std::vector<int32_t> once = {1};
  ApplyPenalties(rewarded, params, {{}, once});
  EXPECT_EQ(rewarded, (std::vector<float>{0.0f, 3.0f}));
}

TEST(SamplerTest, LogitBiasComesFirstThenPenaltiesInVllmOrder) {
  // Token 0: -1 + 2 (bias) = 1, / 2 (repetition) = 0.5, - 0.5 * 1 (frequency) - 0.25 (presence) = -0.25.
  // Bias after the penalties would give -1 * 2 - 0.75 + 2 = -0.75.
  const std::vector<float> logits = {-1.0f, 0.3f, 0.1f};
  const std::vector<int32_t> output = {0};
  SamplingParams params{1.0f};
  params.logit_bias = {{0, 2.0f}};
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  const std::vector<double> probs = SamplingDistribution(logits, params, {{}, output});
  const std::vector<double> expected = Softmax({-0.25f, 0.3f, 0.1f});
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(probs[i], expected[i], 1e-7) << i;
  // Repetition is applied before frequency/presence: (1 - 0.75) / 2 would differ.
  std::vector<float> direct(logits);
  ApplyLogitBias(direct, params);
  ApplyPenalties(direct, params, {{}, output});
  EXPECT_FLOAT_EQ(direct[0], -0.25f);
}

TEST(SamplerTest, LogitBiasInfinityForcesAndForbids) {
  const std::vector<float> logits = RandomLogits(50, 5);
  const int32_t greedy = SampleOnce(logits, SamplingParams{});

  SamplingParams forced{1.0f};
  forced.logit_bias = {{13, INFINITY}};
  forced.top_k = 5;  // filters keep a forced token: it is the most likely
  for (uint64_t seed = 0; seed < 32; ++seed) {
    Rng rng(seed);
    ASSERT_EQ(SampleToken(logits, forced, rng), 13);
  }
  forced.temperature = 0.0f;
  EXPECT_EQ(SampleOnce(logits, forced), 13);

  // Several forced tokens: uniform among them; greedy takes the lowest.
  SamplingParams two{1.0f};
  two.logit_bias = {{40, INFINITY}, {7, INFINITY}};
  std::vector<double> probs = SamplingDistribution(logits, two, {});
  EXPECT_EQ(Support(probs), (std::vector<int32_t>{7, 40}));
  EXPECT_DOUBLE_EQ(probs[7], 0.5);
  two.temperature = 0.0f;
  EXPECT_EQ(SampleOnce(logits, two), 7);

  // -inf forbids, even the greedy token.
  SamplingParams forbid{0.0f};
  forbid.logit_bias = {{greedy, -INFINITY}};
  EXPECT_NE(SampleOnce(logits, forbid), greedy);
  forbid.temperature = 5.0f;
  EXPECT_EQ(SamplingDistribution(logits, forbid, {})[greedy], 0.0);
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Rng rng(seed);
    ASSERT_NE(SampleToken(logits, forbid, rng), greedy);
  }

  // Forbidding everything is a bad request, not a crash.
  SamplingParams none{1.0f};
  for (int32_t id = 0; id < 50; ++id) none.logit_bias[id] = -INFINITY;
  EXPECT_THAT([&] { SampleOnce(logits, none); }, ThrowsMessage<Error>(HasSubstr("forbids every token")));
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedsDiffer) {
  const std::vector<float> logits = RandomLogits(2000, 9);
  SamplingParams params{0.9f};
  params.top_p = 0.95f;
  params.top_k = 200;
  params.repetition_penalty = 1.1f;
  const auto generate = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> out;
    for (int step = 0; step < 40; ++step) out.push_back(Sample(logits, params, {{}, out}, rng).token);
    return out;
  };
  EXPECT_EQ(generate(42), generate(42));
  EXPECT_NE(generate(42), generate(43));

  // Each call draws exactly vocab_size numbers whatever the filters, so a sequence's stream
  // position depends only on how many tokens it sampled.
  Rng filtered(5);
  Rng plain(5);
  SampleToken(logits, params, filtered);
  SampleToken(logits, SamplingParams{0.9f}, plain);
  EXPECT_EQ(filtered.Next(), plain.Next());
}

TEST(SamplerTest, SampledFrequenciesMatchTheSoftmax) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -3.0f};
  constexpr int64_t kDraws = 200'000;
  const SamplingParams params{0.7f};
  std::vector<int64_t> counts(logits.size(), 0);
  Rng rng(1234);
  for (int64_t i = 0; i < kDraws; ++i) ++counts[SampleToken(logits, params, rng)];
  // Fixed seed: deterministic. 5 degrees of freedom; 25.7 is the 0.9999 quantile, so a correct
  // sampler passes this for all but 1 in 10^4 seeds and a biased one fails by orders of magnitude.
  EXPECT_LT(ChiSquare(counts, Softmax(logits, 0.7), kDraws), 25.7);
  // Each frequency also within 5 standard errors.
  const std::vector<double> probs = Softmax(logits, 0.7);
  for (size_t i = 0; i < probs.size(); ++i) {
    const double sd = std::sqrt(probs[i] * (1 - probs[i]) / kDraws);
    EXPECT_NEAR(static_cast<double>(counts[i]) / kDraws, probs[i], 5 * sd) << i;
  }
}

TEST(SamplerTest, SampledFrequenciesMatchTheFilteredDistribution) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -3.0f, 1.5f, 0.7f};
  constexpr int64_t kDraws = 100'000;
  SamplingParams params{1.2f};
  params.top_k = 6;
  params.top_p = 0.9f;
  params.min_p = 0.2f;
  const std::vector<double> probs = SamplingDistribution(logits, params, {});
  ASSERT_GE(Support(probs).size(), 3u);
  ASSERT_LT(Support(probs).size(), 6u);
  std::vector<int64_t> counts(logits.size(), 0);
  Rng rng(99);
  for (int64_t i = 0; i < kDraws; ++i) ++counts[SampleToken(logits, params, rng)];
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "filtered token " << i << " was sampled";
    }
  }
  const double dof = static_cast<double>(Support(probs).size() - 1);
  EXPECT_LT(ChiSquare(counts, probs, kDraws), dof + 8.0 * std::sqrt(2.0 * dof));
}

TEST(SamplerTest, LogprobsAreTheRawModelLogSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.5f, 3.0f};
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v));
  const auto expected = [&](int32_t id) { return static_cast<double>(logits[id]) - std::log(sum); };

  SamplingParams params{};
  params.logprobs = 3;
  SampleResult result = SampleOnceFull(logits, params, {});
  EXPECT_EQ(result.token, 2);
  ASSERT_TRUE(result.logprob.has_value());
  EXPECT_NEAR(*result.logprob, expected(2), 1e-6);
  ASSERT_EQ(result.top_logprobs.size(), 3u);
  // Most likely first, ties to the lowest id.
  EXPECT_EQ(result.top_logprobs[0].token, 2);
  EXPECT_EQ(result.top_logprobs[1].token, 4);
  EXPECT_EQ(result.top_logprobs[2].token, 1);
  for (const TokenLogprob& entry : result.top_logprobs) EXPECT_NEAR(entry.logprob, expected(entry.token), 1e-6);

  // Bias, penalties, temperature and truncation change what is sampled, not what is reported.
  params.temperature = 0.3f;
  params.top_k = 1;
  params.logit_bias = {{3, INFINITY}};
  params.repetition_penalty = 1.7f;
  const std::vector<int32_t> output = {2, 4};
  result = SampleOnceFull(logits, params, {{}, output});
  EXPECT_EQ(result.token, 3);
  EXPECT_NEAR(*result.logprob, expected(3), 1e-6);
  EXPECT_EQ(result.top_logprobs[0].token, 2);
  EXPECT_NEAR(result.top_logprobs[0].logprob, expected(2), 1e-6);

  // 0: only the chosen token; more than the vocabulary: all of it; unset: nothing.
  params.logprobs = 0;
  result = SampleOnceFull(logits, params, {});
  EXPECT_TRUE(result.logprob.has_value());
  EXPECT_TRUE(result.top_logprobs.empty());
  params.logprobs = 100;
  EXPECT_EQ(SampleOnceFull(logits, params, {}).top_logprobs.size(), logits.size());
  params.logprobs.reset();
  result = SampleOnceFull(logits, params, {});
  EXPECT_FALSE(result.logprob.has_value());
  EXPECT_TRUE(result.top_logprobs.empty());

  const std::vector<float> log_softmax = LogSoftmax(logits);
  for (int32_t id = 0; id < 5; ++id) EXPECT_NEAR(log_softmax[id], expected(id), 1e-6);
}

TEST(SamplerTest, ValidationNamesTheBadField) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f};
  const auto rejects = [&](SamplingParams params, const char* message) {
    EXPECT_THAT([&] { ValidateSamplingParams(params, logits.size()); }, ThrowsMessage<Error>(HasSubstr(message)));
    EXPECT_THAT([&] { SampleOnce(logits, params); }, ThrowsMessage<Error>(HasSubstr(message)));
  };
  SamplingParams p;
  p.temperature = -0.1f;
  rejects(p, "temperature must be a finite number >= 0");
  p.temperature = NAN;
  rejects(p, "temperature must be a finite number >= 0");
  p = {};
  p.top_p = 0.0f;
  rejects(p, "top_p must be in (0, 1]");
  p.top_p = 1.01f;
  rejects(p, "top_p must be in (0, 1]");
  p.top_p = NAN;
  rejects(p, "top_p must be in (0, 1]");
  p = {};
  p.top_k = -1;
  rejects(p, "top_k must be >= 0");
  p = {};
  p.min_p = -0.1f;
  rejects(p, "min_p must be in [0, 1]");
  p.min_p = 1.5f;
  rejects(p, "min_p must be in [0, 1]");
  p = {};
  p.repetition_penalty = 0.0f;
  rejects(p, "repetition_penalty must be a finite number > 0");
  p.repetition_penalty = INFINITY;
  rejects(p, "repetition_penalty must be a finite number > 0");
  p = {};
  p.presence_penalty = 2.5f;
  rejects(p, "presence_penalty must be in [-2, 2]");
  p = {};
  p.frequency_penalty = -2.5f;
  rejects(p, "frequency_penalty must be in [-2, 2]");
  p.frequency_penalty = NAN;
  rejects(p, "frequency_penalty must be in [-2, 2]");
  p = {};
  p.logit_bias = {{3, 1.0f}};
  rejects(p, "logit_bias names token id 3, outside the vocabulary of 3 tokens");
  p.logit_bias = {{-1, 1.0f}};
  rejects(p, "logit_bias names token id -1");
  p.logit_bias = {{1, NAN}};
  rejects(p, "logit_bias for token id 1 is NaN");
  p = {};
  p.logprobs = -1;
  rejects(p, "logprobs (the number of top tokens to report) must be >= 0");

  // The edges of every range are accepted.
  SamplingParams edges{2.0f};
  edges.top_p = 1.0f;
  edges.min_p = 1.0f;
  edges.presence_penalty = -2.0f;
  edges.frequency_penalty = 2.0f;
  edges.logit_bias = {{0, -INFINITY}, {2, 100.0f}};
  EXPECT_NO_THROW(ValidateSamplingParams(edges, logits.size()));
  edges.min_p = 0.0f;
  EXPECT_NO_THROW(SampleOnce(logits, edges));
}

TEST(SamplerTest, RealVocabularySizeWithAllControls) {
  const std::vector<float> logits = RandomLogits(129280, 21);
  SamplingParams params{0.7f};
  params.top_k = 50;
  params.top_p = 0.9f;
  params.min_p = 0.05f;
  params.repetition_penalty = 1.05f;
  params.frequency_penalty = 0.3f;
  params.presence_penalty = 0.2f;
  params.logprobs = 5;
  std::vector<int32_t> output;
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  Rng rng(3);
  for (int step = 0; step < 8; ++step) {
    const SampleResult result = Sample(logits, params, {prompt, output}, rng);
    ASSERT_GE(result.token, 0);
    ASSERT_EQ(result.top_logprobs.size(), 5u);
    output.push_back(result.token);
  }
  const std::vector<double> probs = SamplingDistribution(logits, params, {prompt, output});
  EXPECT_LE(Support(probs).size(), 50u);
  EXPECT_NEAR(std::accumulate(probs.begin(), probs.end(), 0.0), 1.0, 1e-12);
}

// Step 0: a constraint's mask forbids tokens before everything else, for good.
TEST(SamplerTest, ConstraintMaskForbidsTokensWhateverTheOtherControls) {
  const std::vector<float> logits = RandomLogits(200, 3);
  std::vector<uint64_t> mask(4, 0);
  const std::vector<int32_t> allowed = {5, 70, 71, 150, 199};
  for (int32_t t : allowed) mask[t >> 6] |= uint64_t{1} << (t & 63);
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 3;
  params.logit_bias = {{6, INFINITY}, {70, 1.0f}};  // a +inf bias cannot revive token 6
  const std::vector<double> probs = SamplingDistribution(logits, params, TokenHistory{}, mask);
  double total = 0;
  for (size_t t = 0; t < probs.size(); ++t) {
    const bool ok = std::find(allowed.begin(), allowed.end(), static_cast<int32_t>(t)) != allowed.end();
    if (!ok) {
      EXPECT_EQ(probs[t], 0.0) << "token " << t;
    }
    total += probs[t];
  }
  EXPECT_NEAR(total, 1.0, 1e-12);
  Rng rng(9);
  for (int i = 0; i < 200; ++i) {
    const int32_t token = Sample(logits, params, TokenHistory{}, rng, mask).token;
    ASSERT_NE(std::find(allowed.begin(), allowed.end(), token), allowed.end());
  }
  // Greedy: the best allowed token.
  SamplingParams greedy;
  int32_t best = allowed[0];
  for (int32_t t : allowed) {
    if (logits[t] > logits[best]) best = t;
  }
  EXPECT_EQ(Sample(logits, greedy, TokenHistory{}, rng, mask).token, best);
  // Every allowed token biased away: a clear error.
  SamplingParams none;
  for (int32_t t : allowed) none.logit_bias[t] = -INFINITY;
  EXPECT_THAT([&] { Sample(logits, none, TokenHistory{}, rng, mask); },
              ThrowsMessage<Error>(HasSubstr("logit_bias forbids every token the output constraint allows")));
}

TEST(SamplerTest, LogprobsUnderAConstraintAreRenormalisedOverTheAllowedTokens) {
  const std::vector<float> logits = RandomLogits(100, 4);
  std::vector<uint64_t> mask(2, 0);
  for (int32_t t : {2, 30, 64, 99}) mask[t >> 6] |= uint64_t{1} << (t & 63);
  SamplingParams params;
  params.logprobs = 10;
  Rng rng(1);
  const SampleResult r = Sample(logits, params, TokenHistory{}, rng, mask);
  double z = 0;
  for (int32_t t : {2, 30, 64, 99}) z += std::exp(static_cast<double>(logits[t]));
  ASSERT_EQ(r.top_logprobs.size(), 4u);  // fewer than asked: only allowed tokens are listed
  double total = 0;
  for (const TokenLogprob& t : r.top_logprobs) {
    EXPECT_NEAR(t.logprob, logits[t.token] - std::log(z), 1e-6);
    total += std::exp(static_cast<double>(t.logprob));
  }
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_EQ(r.logprob, r.top_logprobs[0].logprob);  // greedy took the best allowed token
  // Without a mask nothing changes (the same call as before constraints existed).
  Rng a(5), b(5);
  SamplingParams sampled;
  sampled.temperature = 0.7f;
  sampled.logprobs = 3;
  const SampleResult plain = Sample(logits, sampled, TokenHistory{}, a);
  const SampleResult empty_mask = Sample(logits, sampled, TokenHistory{}, b, TokenMask{});
  EXPECT_EQ(plain.token, empty_mask.token);
  EXPECT_EQ(plain.logprob, empty_mask.logprob);
}

}  // namespace
}  // namespace deepinfer
