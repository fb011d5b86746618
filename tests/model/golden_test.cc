// The backbone against the official reference's logits on tiny random V4.1 models and the trained default, in
// every execution mode (tools/golden/make_tiny_models.py and make_trained_golden.py made the data).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "backend/cpu_backend.h"
#include "model/cpu_forward.h"
#include "model/golden_support.h"

namespace deepinfer::testing {
namespace {

constexpr double kMinMeanCosine = 0.9999;
constexpr double kMinCosine = 0.999;
constexpr float kNearTieMargin = 0.01f;
// Beyond the acceptance thresholds: stay within this many times the reference's own noise
// envelope (its distance to its fp64-accumulated self; for a trained model, to its own decode
// path). Bugs that the loose thresholds let through (a dropped candidate filter, a missing
// quantizer) land well outside it.
constexpr double kEnvelopeFactor = 3.0;

struct Mode {
  const char* name;
  std::vector<int> chunks;  // chunk sizes, cycled
};

std::vector<Mode> Modes(int prompt_len) {
  return {
      {"prefill", {1 << 30}},
      {"chunked-1", {1}},  // token-by-token decode from the first token
      {"chunked-3", {3}},
      {"chunked-7", {7}},
      {"chunked-16", {16}},
      {"prefill+decode", {prompt_len, 1}},
      {"prefill+multi-token-steps", {prompt_len - 23, 5, 6, 2}},
  };
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { pool_ = std::make_unique<ThreadPool>(2); }
  static std::unique_ptr<ThreadPool> pool_;
};
std::unique_ptr<ThreadPool> GoldenTest::pool_;

TEST_P(GoldenTest, EveryModeMatchesTheReference) {
  const GoldenCase golden = LoadGolden(GetParam());
  const std::unique_ptr<Model> model = Model::Load(ModelDir(GetParam()));
  const size_t vocab = model->config().vocab_size;
  ASSERT_EQ(golden.logits.shape.size(), 2u);
  ASSERT_EQ(golden.logits.shape[0], golden.tokens.size());
  ASSERT_EQ(golden.logits.shape[1], vocab);
  const float* ref = golden.logits.values.data();

  for (const IsaLevel isa : SupportedIsaLevels()) {
    std::vector<float> first_mode_logits;
    CpuBackend backend(*pool_, isa);
    const ComputeContext ctx{backend};
    for (const Mode& mode : Modes(golden.prompt_len)) {
      const std::vector<float> ours = RunChunked(*model, golden.tokens, mode.chunks, ctx);
      ASSERT_EQ(ours.size(), golden.tokens.size() * vocab) << mode.name;
      double sum = 0, min_cos = 1;
      size_t near_ties = 0, argmax_mismatch = 0;
      for (size_t p = 0; p < golden.tokens.size(); ++p) {
        const double cos = Cosine(ours.data() + p * vocab, ref + p * vocab, vocab);
        sum += cos;
        min_cos = std::min(min_cos, cos);
        if (Margin(ref + p * vocab, vocab) <= kNearTieMargin) {
          ++near_ties;
        } else if (ArgMax(ours.data() + p * vocab, vocab) != ArgMax(ref + p * vocab, vocab)) {
          ++argmax_mismatch;
        }
      }
      const double mean = sum / golden.tokens.size();
      std::printf(
          "[golden] %s %-7s %-26s positions %zu  mean cos %.7f  min cos %.7f  near ties %zu  argmax mismatches %zu  "
          "(reference fp64 envelope: mean %.7f min %.7f)\n",
          GetParam().c_str(), std::string(IsaName(isa)).c_str(), mode.name, golden.tokens.size(), mean, min_cos,
          near_ties, argmax_mismatch, golden.envelope_mean_cosine, golden.envelope_min_cosine);
      const GoldenCase::DecodeSpread* spread = golden.decode_spread ? &*golden.decode_spread : nullptr;
      const char* envelope = spread ? "decode-vs-prefill spread" : "fp64 noise envelope";
      const double envelope_mean = spread ? spread->mean_cosine : golden.envelope_mean_cosine;
      const double envelope_min = spread ? spread->min_cosine : golden.envelope_min_cosine;
      EXPECT_GE(mean, 1.0 - kEnvelopeFactor * (1.0 - envelope_mean))
          << mode.name << ": mean cosine further from the reference than " << kEnvelopeFactor << "x its own "
          << envelope << " (" << envelope_mean << ")";
      EXPECT_GE(min_cos, 1.0 - kEnvelopeFactor * (1.0 - envelope_min))
          << mode.name << ": min cosine outside " << kEnvelopeFactor << "x the reference's " << envelope << " ("
          << envelope_min << ")";
      if (spread) {
        // A trained model: the reference does not meet the exact-core thresholds against itself.
        EXPECT_LE(argmax_mismatch, 2u * static_cast<size_t>(spread->argmax_mismatches))
            << mode.name << ": more than twice the reference's own " << spread->argmax_mismatches;
      } else {
        EXPECT_GE(mean, kMinMeanCosine) << mode.name;
        EXPECT_GE(min_cos, kMinCosine) << mode.name;
        EXPECT_EQ(argmax_mismatch, 0u) << mode.name;
      }
      // Our forward is exactly chunking-invariant: every mode gives the same bits.
      if (first_mode_logits.empty()) {
        first_mode_logits = ours;
      } else {
        EXPECT_TRUE(ours == first_mode_logits) << mode.name << " differs from whole-prompt prefill";
      }
    }
  }
}

TEST_P(GoldenTest, GreedyContinuationMatchesUpToNearTies) {
  const GoldenCase golden = LoadGolden(GetParam());
  const std::unique_ptr<Model> model = Model::Load(ModelDir(GetParam()));
  const size_t vocab = model->config().vocab_size;
  SequenceState state = model->NewSequence();
  std::vector<int32_t> prompt(golden.tokens.begin(), golden.tokens.begin() + golden.prompt_len);
  ForwardItem item{&state, prompt};
  std::vector<float> logits = CpuForward(*model, {&item, 1}, *pool_);
  size_t matched = 0;
  for (size_t p = golden.prompt_len; p < golden.tokens.size(); ++p) {
    const int32_t ours = static_cast<int32_t>(ArgMax(logits.data(), vocab));
    const float* ref_row = golden.logits.values.data() + (p - 1) * vocab;
    if (ours != golden.tokens[p]) {
      if (golden.decode_spread) {
        // A trained model: the reference's own decode path splits off after greedy_agreement.
        EXPECT_GE(matched, static_cast<size_t>(golden.decode_spread->greedy_agreement))
            << "greedy token " << p - golden.prompt_len << " differs (ours " << ours << ", reference "
            << golden.tokens[p] << ") before the reference's own decode path splits off";
        break;
      }
      EXPECT_LE(Margin(ref_row, vocab), kNearTieMargin)
          << "greedy token " << p - golden.prompt_len << " differs (ours " << ours << ", reference " << golden.tokens[p]
          << ") at a position that is not a near tie";
      break;  // after a legitimate near-tie split the continuations diverge
    }
    ++matched;
    const int32_t next = ours;
    ForwardItem step{&state, std::span<const int32_t>(&next, 1)};
    logits = CpuForward(*model, {&step, 1}, *pool_);
  }
  std::printf("[golden] %s greedy continuation: %zu of %zu tokens equal\n", GetParam().c_str(), matched,
              golden.tokens.size() - golden.prompt_len);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, GoldenTest, ::testing::Values("tiny-a", "tiny-b", "tiny-c", "tiny-d", "kjv-tiny"),
                         ModelParamName);

}  // namespace
}  // namespace deepinfer::testing
