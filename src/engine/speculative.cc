#include "engine/speculative.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/model.h"

namespace deepinfer {

std::vector<double> DraftDistribution(std::span<const float> logits, float temperature) {
  DI_CHECK(!logits.empty());
  std::vector<double> q(logits.size(), 0.0);
  const size_t best = static_cast<size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if (temperature == 0.0f) {
    q[best] = 1.0;
    return q;
  }
  const double t = std::max(static_cast<double>(temperature), 1e-5);
  const double max_logit = logits[best];
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) total += q[i] = std::exp((logits[i] - max_logit) / t);
  for (double& v : q) v /= total;
  return q;
}

int32_t DrawFrom(std::span<const double> probabilities, Rng& rng) {
  double total = 0;
  for (double p : probabilities) total += p;
  DI_CHECK(total > 0, "a distribution with no mass");
  const double target = rng.UniformOpenZero() * total;
  double cumulative = 0;
  int32_t last_positive = 0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    if (probabilities[i] <= 0) continue;
    cumulative += probabilities[i];
    last_positive = static_cast<int32_t>(i);
    if (target <= cumulative) return last_positive;
  }
  return last_positive;  // rounding left the target a hair above the sum
}

DraftVerdict VerifyDraftToken(std::span<const double> p, std::span<const double> q, int32_t proposal, Rng& rng) {
  DI_CHECK(p.size() == q.size() && proposal >= 0 && static_cast<size_t>(proposal) < p.size());
  const double q_x = q[proposal];
  DI_CHECK(q_x > 0, "draft token ", proposal, " has no probability under the draft");
  if (rng.UniformOpenZero() * q_x <= p[proposal]) return {true, proposal};
  std::vector<double> residual(p.size());
  double mass = 0;
  for (size_t i = 0; i < p.size(); ++i) mass += residual[i] = std::max(0.0, p[i] - q[i]);
  // p == q leaves no residual, but then the proposal is always accepted.
  if (mass <= 0) return {true, proposal};
  return {false, DrawFrom(residual, rng)};
}

double StepBytes::Step(int64_t tokens) const {
  return fixed + moe_layers * expert_bytes * ExpectedDistinctExperts(experts, top_k, tokens);
}

double ExpectedTokens(std::span<const float> confidence, int k) {
  double expected = 1.0;
  double survive = 1.0;
  for (int i = 0; i < k && i < static_cast<int>(confidence.size()); ++i) {
    survive *= 1.0 / (1.0 + std::exp(-static_cast<double>(confidence[i])));
    expected += survive;
  }
  return expected;
}

int ChooseVerifyLength(std::span<const float> confidence, int max_k, const StepBytes& bytes) {
  int best = 1;
  double best_rate = -1;
  for (int k = 1; k <= max_k; ++k) {
    const double rate = ExpectedTokens(confidence, k) / (bytes.draft + bytes.Step(k + 1));
    if (rate > best_rate * (1 + 1e-12)) {
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

void SpeculationGate::RecordVerify(int tokens_yielded, double bytes_read, const StepBytes& bytes) {
  tokens_ += tokens_yielded;
  bytes_ += bytes_read;
  if (++steps_ < kWarmup) return;
  if (tokens_ / bytes_ < 1.0 / bytes.Step(1)) off_steps_left_ = kOffSteps;
  steps_ = 0;
  tokens_ = bytes_ = 0;
}

void SpeculationGate::RecordPlainStep() {
  if (off_steps_left_ > 0) --off_steps_left_;
}

}  // namespace deepinfer
