// DSpark speculative decoding, the parts that are pure functions: the lossless acceptance rule,
// the draft's own distribution, the verify-length policy and the automatic off-switch.
//
// One speculative step of a request at position p (its next token t sampled, not yet run):
//   1. the draft (Model::Draft) proposes d_1..d_B for positions p + 2 .. from t and the taps;
//   2. ChooseVerifyLength picks k <= B from the confidence head and the step's byte costs;
//   3. the target runs [t, d_1..d_k] in one forward (ForwardItem::rollback);
//   4. row i's token: at temperature 0 the target's own greedy pick, accepted when it equals
//      d_{i+1} (so the output is token for token the plain greedy output); at T > 0
//      VerifyDraftToken, whose result is distributed exactly as the target's sampler
//      (SamplingDistribution). The first rejected row's token, or row k's when all d_1..d_k
//      survive, ends the step (the bonus token);
//   5. the sequence state is truncated to the kept positions, whose taps seed the draft next.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace deepinfer {

// The draft's distribution of one slot: softmax(logits / T), one-hot on the argmax (ties to the
// lowest id) at T = 0. What the draft token is drawn from and what acceptance divides by.
std::vector<double> DraftDistribution(std::span<const float> logits, float temperature);

// One draw from a distribution by inverse CDF over ids in order (one Rng draw).
int32_t DrawFrom(std::span<const double> probabilities, Rng& rng);

// Lossless speculative sampling (Leviathan et al. 2023; Chen et al. 2023). `proposal` was drawn
// from q; accept it with probability min(1, p / q) (one Rng draw); otherwise draw from the
// residual max(0, p - q) renormalised (one more draw). The token is distributed as p.
struct DraftVerdict {
  bool accepted = false;
  int32_t token = 0;
};
DraftVerdict VerifyDraftToken(std::span<const double> p, std::span<const double> q, int32_t proposal, Rng& rng);

// What a step reads, for the verify-length policy: a plain decode step reads `fixed` bytes plus,
// in each of `moe_layers` layers, top_k routed experts of `expert_bytes`; an n-token step reads
// the experts its tokens pick, ExpectedDistinctExperts (model/model.h) per layer; a draft reads
// `draft` bytes.
struct StepBytes {
  double fixed = 0;
  double expert_bytes = 0;
  int experts = 1;
  int top_k = 1;
  int moe_layers = 0;
  double draft = 0;

  double Step(int64_t tokens) const;  // bytes of a target step of `tokens` tokens
};

// Expected tokens a verify of the first k drafts yields (bonus included), reading the confidence
// head's logit c_i as the log-odds that draft i survives once d_1..d_{i-1} did:
// 1 + sum_{i <= k} prod_{m <= i} sigmoid(c_m).
double ExpectedTokens(std::span<const float> confidence, int k);

// The k in [1, max_k] whose expected tokens per byte read (draft and verify) is highest; ties to
// the shorter verify.
int ChooseVerifyLength(std::span<const float> confidence, int max_k, const StepBytes& bytes);

// The automatic off-switch of one request: after `kWarmup` verify steps it compares the tokens a
// speculative step actually yielded per byte read with a plain step's one token per plain-step
// bytes; when speculation loses it stays off for `kOffSteps` plain steps, then probes again.
class SpeculationGate {
 public:
  static constexpr int kWarmup = 8;
  static constexpr int kOffSteps = 64;
  bool open() const { return off_steps_left_ == 0; }
  void RecordVerify(int tokens_yielded, double bytes_read, const StepBytes& bytes);
  void RecordPlainStep();  // a decode step while closed

 private:
  int steps_ = 0;
  double tokens_ = 0;
  double bytes_ = 0;
  int off_steps_left_ = 0;
};

}  // namespace deepinfer
