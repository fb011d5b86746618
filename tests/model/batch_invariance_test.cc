// A sequence's logits do not depend on what else shares the forward: batched calls of
// independent sequences at different positions, with different chunkings and thread counts,
// reproduce each sequence's solo run bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/cpu_forward.h"
#include "model/golden_support.h"
#include "model/model.h"
#include "model/weights.h"

namespace deepinfer::testing {
namespace {

struct Plan {
  std::vector<int32_t> tokens;
  std::vector<size_t> chunks;  // sizes, summing to tokens.size()
  size_t first_step = 0;       // the batched step at which this sequence arrives
};

std::vector<Plan> MakePlans(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t lengths[] = {41, 77, 120, 150, 96};
  std::vector<Plan> plans;
  for (size_t i = 0; i < std::size(lengths); ++i) {
    Plan plan;
    plan.first_step = i * 2;
    plan.tokens.push_back(0);
    while (plan.tokens.size() < lengths[i]) plan.tokens.push_back(3 + rng() % (vocab - 3));
    for (size_t done = 0; done < lengths[i];) {
      const size_t size = std::min<size_t>(1 + rng() % 9, lengths[i] - done);
      plan.chunks.push_back(size);
      done += size;
    }
    plans.push_back(std::move(plan));
  }
  return plans;
}

// Logits of each chunk of each plan, running every sequence alone.
std::vector<std::vector<std::vector<float>>> RunAlone(const Model& model, const std::vector<Plan>& plans,
                                                      ThreadPool& pool) {
  std::vector<std::vector<std::vector<float>>> out;
  for (const Plan& plan : plans) {
    SequenceState state = model.NewSequence();
    std::vector<std::vector<float>> per_chunk;
    size_t done = 0;
    for (size_t size : plan.chunks) {
      ForwardItem item{&state, std::span<const int32_t>(plan.tokens.data() + done, size), LogitsMode::kAll};
      per_chunk.push_back(CpuForward(model, {&item, 1}, pool));
      done += size;
    }
    out.push_back(std::move(per_chunk));
  }
  return out;
}

// The interleaved copies of the FP8/FP4 matrices and the head (Model::InterleaveMatrices) change
// where the kernels read, not what they compute: every chunk's logits keep their bits.
TEST(BatchInvariance, InterleavedWeightsGiveTheSameBits) {
  const std::unique_ptr<Model> in_place = Model::Load(ModelDir("tiny-a"));
  const std::unique_ptr<Model> interleaved = Model::Load(ModelDir("tiny-a"));
  const Model::InterleaveReport report = interleaved->InterleaveMatrices([](MatrixFormat) { return true; });
  ASSERT_GT(report.matrices, 0);
  EXPECT_EQ(interleaved->InterleaveMatrices([](MatrixFormat) { return true; }).bytes, report.bytes)
      << "a second call does nothing";
  const std::vector<Plan> plans = MakePlans(in_place->config().vocab_size, 11);
  ThreadPool pool(2);
  const auto expected = RunAlone(*in_place, plans, pool);
  const auto got = RunAlone(*interleaved, plans, pool);
  for (size_t i = 0; i < plans.size(); ++i) {
    for (size_t c = 0; c < plans[i].chunks.size(); ++c) {
      ASSERT_EQ(expected[i][c].size(), got[i][c].size());
      ASSERT_EQ(0, std::memcmp(expected[i][c].data(), got[i][c].data(), got[i][c].size() * sizeof(float)))
          << "sequence " << i << " chunk " << c;
    }
  }
}

TEST(BatchInvariance, BatchedSequencesAtDifferentPositionsMatchSoloRunsBitForBit) {
  const std::unique_ptr<Model> model = Model::Load(ModelDir("tiny-a"));
  const int64_t vocab = model->config().vocab_size;
  const std::vector<Plan> plans = MakePlans(vocab, 7);
  ThreadPool pool(2);
  const auto alone = RunAlone(*model, plans, pool);

  std::vector<SequenceState> states;
  for (size_t i = 0; i < plans.size(); ++i) states.push_back(model->NewSequence());
  std::vector<size_t> next_chunk(plans.size(), 0), done(plans.size(), 0);
  size_t compared = 0, max_batch = 0;
  for (size_t step = 0;; ++step) {
    std::vector<ForwardItem> items;
    std::vector<size_t> who;
    for (size_t i = 0; i < plans.size(); ++i) {
      if (step < plans[i].first_step || next_chunk[i] == plans[i].chunks.size()) continue;
      const size_t size = plans[i].chunks[next_chunk[i]];
      items.push_back({&states[i], std::span<const int32_t>(plans[i].tokens.data() + done[i], size), LogitsMode::kAll});
      who.push_back(i);
    }
    if (items.empty()) {
      bool all_done = true;
      for (size_t i = 0; i < plans.size(); ++i) all_done &= next_chunk[i] == plans[i].chunks.size();
      if (all_done) break;
      continue;
    }
    max_batch = std::max(max_batch, items.size());
    const std::vector<float> logits = CpuForward(*model, items, pool);
    size_t offset = 0;
    for (size_t k = 0; k < who.size(); ++k) {
      const size_t i = who[k];
      const std::vector<float>& expected = alone[i][next_chunk[i]];
      ASSERT_LE(offset + expected.size(), logits.size());
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), logits.begin() + offset))
          << "sequence " << i << " chunk " << next_chunk[i] << " differs when batched";
      offset += expected.size();
      done[i] += plans[i].chunks[next_chunk[i]];
      ++next_chunk[i];
      ++compared;
    }
    EXPECT_EQ(offset, logits.size());
  }
  EXPECT_GE(max_batch, 4u);
  EXPECT_GT(compared, 50u);
}

TEST(BatchInvariance, ThreadCountDoesNotChangeBits) {
  const std::unique_ptr<Model> model = Model::Load(ModelDir("tiny-c"));
  std::vector<int32_t> tokens = {0};
  for (int i = 1; i < 70; ++i) tokens.push_back(3 + (i * 37) % 400);
  ThreadPool one(1), three(3);
  EXPECT_TRUE(RunChunked(*model, tokens, {11, 1, 5}, one) == RunChunked(*model, tokens, {70}, three));
}

// A 3-thread pool's steps run on all threads or on the caller alone (StepParallelism): the same
// bits either way, and the same as one thread's, including a backend that picks per step.
TEST(BatchInvariance, StepThreadsDoNotChangeBits) {
  const std::unique_ptr<Model> model = Model::Load(ModelDir("tiny-c"));
  std::vector<int32_t> tokens = {0};
  for (int i = 1; i < 40; ++i) tokens.push_back(3 + (i * 53) % 400);
  const std::vector<int> chunks = {9, 1, 1, 1, 1, 1, 1};
  ThreadPool one(1), three(3);
  const std::vector<float> reference = RunChunked(*model, tokens, chunks, one);
  using Way = StepParallelism::Way;
  for (Way way : {Way::kAllThreads, Way::kOneThread, Way::kChoose}) {
    // kChoose probes every short-call shape here (no threshold), so it runs both ways.
    CpuBackend backend(three, DetectIsa(), ChooseBf16Dot(), {.way = way, .probe_below_call_seconds = 1e9});
    EXPECT_TRUE(RunChunked(*model, tokens, chunks, ComputeContext{backend}) == reference)
        << "way " << static_cast<int>(way);
    const StepParallelism::Stats stats = backend.step_stats();
    EXPECT_EQ(stats.serial_steps, way == Way::kOneThread    ? stats.steps
                                  : way == Way::kAllThreads ? 0
                                                            : stats.serial_steps);
    EXPECT_EQ(stats.probes > 0, way == Way::kChoose);
  }
}

// The binder's load-time scans travel with the matrices: the head's bf16 exponent range, and
// every FP8 linear marked free of NaN codes (the generator writes none), which spares the AVX2
// tiles their check in every group; the forwards above run on them.
TEST(BatchInvariance, BoundLinearsCarryTheirLoadTimeScans) {
  const std::string dir = ModelDir("tiny-a");
  const Checkpoint checkpoint = Checkpoint::Open(dir);
  const ModelWeights weights = BindWeights(LoadModelConfig(dir), checkpoint, dir);
  EXPECT_TRUE(weights.head.format != MatrixFormat::kBF16 || weights.head.bf16_exponents.known);
  int fp8 = 0;
  for (const LayerWeights& layer : weights.layers) {
    const AttentionWeights& a = layer.attn;
    const ExpertWeights& shared = layer.ffn.shared;
    for (const WeightMatrix* w :
         {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b, &a.indexer_wq_b, &shared.w1, &shared.w2, &shared.w3}) {
      if (w->format != MatrixFormat::kFP8Block32) continue;
      ++fp8;
      EXPECT_TRUE(w->fp8_nan_free);
    }
  }
  EXPECT_GT(fp8, 0) << "tiny-a has FP8 linears";
}

}  // namespace
}  // namespace deepinfer::testing
