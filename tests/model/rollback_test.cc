// Speculative verify steps and their rollback (ForwardItem::rollback, SequenceState::Truncate):
// after any pattern of accepted and rejected drafts, every byte a later forward can read equals
// that of a sequence that only ever ran the kept tokens, and the kept rows' logits are its
// logits bit for bit.
#include <gtest/gtest.h>

#include <random>

#include "backend/cpu_backend.h"
#include "core/error.h"
#include "model/golden_support.h"

namespace deepinfer::testing {
namespace {

class RollbackTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { pool_ = std::make_unique<ThreadPool>(2); }
  static void TearDownTestSuite() { pool_.reset(); }
  static std::unique_ptr<ThreadPool> pool_;
};
std::unique_ptr<ThreadPool> RollbackTest::pool_;

TEST_P(RollbackTest, ArbitraryAcceptPatternsLeaveTheStateOfTheKeptTokens) {
  const std::unique_ptr<Model> model = Model::Load(ModelDir(GetParam()));
  const int64_t vocab = model->config().vocab_size;
  CpuBackend backend(*pool_, DetectIsa());
  const ComputeContext ctx{backend};
  std::mt19937 rng(7);
  std::vector<int32_t> text(170);
  for (int32_t& t : text) t = static_cast<int32_t>(3 + rng() % (vocab - 3));

  SequenceState plain = model->NewSequence();
  SequenceState speculative = model->NewSequence();
  std::vector<float> plain_logits, verify_logits;
  const int64_t prompt = 37;
  for (SequenceState* state : {&plain, &speculative}) {
    ForwardItem item{state, std::span<const int32_t>(text).first(prompt), LogitsMode::kNone};
    model->ForwardInto({&item, 1}, ctx, plain_logits);
  }
  int64_t length = prompt;
  int steps = 0, rejected_tokens = 0;
  while (length + 8 < static_cast<int64_t>(text.size())) {
    // [next, d1..dk]: each draft right (the text's token) or wrong, at random.
    const int k = static_cast<int>(rng() % 7);
    std::vector<int32_t> verify = {text[length]};
    int accepted = -1;
    for (int i = 0; i < k; ++i) {
      const bool right = rng() % 3 != 0;
      if (!right && accepted < 0) accepted = i;
      verify.push_back(right ? text[length + 1 + i]
                             : static_cast<int32_t>((text[length + 1 + i] + 1 + rng() % 50) % vocab));
    }
    if (accepted < 0) accepted = k;
    ForwardItem item{&speculative, verify, LogitsMode::kAll};
    item.rollback = true;
    model->ForwardInto({&item, 1}, ctx, verify_logits);
    const int64_t kept = 1 + accepted;
    speculative.Truncate(length + kept, model->EngramHistory(std::span<const int32_t>(text).first(length + kept)));
    speculative.ReleaseStaleWindowPages();
    rejected_tokens += static_cast<int>(verify.size() - kept);

    ForwardItem step{&plain, std::span<const int32_t>(text).subspan(length, kept), LogitsMode::kAll};
    model->ForwardInto({&step, 1}, ctx, plain_logits);
    ASSERT_TRUE(std::equal(plain_logits.begin(), plain_logits.end(), verify_logits.begin()))
        << "step " << steps << ": the kept rows' logits differ from a plain run's";
    length += kept;
    ASSERT_EQ(speculative.length(), length);
    ASSERT_TRUE(speculative.VisibleBytes() == plain.VisibleBytes()) << "step " << steps << " at length " << length;
    ++steps;
  }
  EXPECT_GT(rejected_tokens, 40);
  // And the next plain step still agrees (nothing stale left behind).
  for (SequenceState* state : {&plain, &speculative}) {
    ForwardItem item{state, std::span<const int32_t>(text).subspan(length, 5), LogitsMode::kAll};
    model->ForwardInto({&item, 1}, ctx, state == &plain ? plain_logits : verify_logits);
  }
  EXPECT_TRUE(plain_logits == verify_logits);
  std::printf("[rollback] %s: %d verify steps, %d rejected tokens rolled back, states equal at every step\n",
              GetParam().c_str(), steps, rejected_tokens);
}

TEST_P(RollbackTest, TruncateOutsideTheLastVerifyIsRejected) {
  const std::unique_ptr<Model> model = Model::Load(ModelDir(GetParam()));
  CpuBackend backend(*pool_, DetectIsa());
  const ComputeContext ctx{backend};
  SequenceState state = model->NewSequence();
  const std::vector<int32_t> tokens = {0, 5, 9, 11, 20, 31};
  ForwardItem item{&state, tokens, LogitsMode::kNone};
  std::vector<float> logits;
  model->ForwardInto({&item, 1}, ctx, logits);
  EXPECT_THROW(state.Truncate(4, {}), Error);  // a plain forward is not truncatable
  ForwardItem verify{&state, std::span<const int32_t>(tokens).first(3), LogitsMode::kAll};
  verify.rollback = true;
  model->ForwardInto({&verify, 1}, ctx, logits);
  EXPECT_THROW(state.Truncate(5, {}), Error);   // before the verify's start
  EXPECT_THROW(state.Truncate(10, {}), Error);  // past its end
  EXPECT_EQ(state.length(), 9);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, RollbackTest, ::testing::Values("tiny-a", "tiny-c", "tiny-d"), ModelParamName);

}  // namespace
}  // namespace deepinfer::testing
