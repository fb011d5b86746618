// model/random_checkpoint: a random slice with the real V4.1-Flash dimensions loads with
// Model::Load and runs a finite prefill and decode; its config follows the documented layer
// rule; bad options are reported.
#include "model/random_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "chat/chat_tokens.h"
#include "core/thread_pool.h"
#include "error_of.h"
#include "io/model_config.h"
#include "model/checkpoint_builder.h"
#include "model/cpu_forward.h"
#include "model/model.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using deepinfer::testing::ScratchDir;
using ::testing::HasSubstr;

void ExpectFinite(const std::vector<float>& logits, const char* what) {
  ASSERT_FALSE(logits.empty()) << what;
  double sum = 0, sum_sq = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    ASSERT_TRUE(std::isfinite(logits[i])) << what << ": logit " << i << " is " << logits[i];
    sum += logits[i];
    sum_sq += static_cast<double>(logits[i]) * logits[i];
  }
  const double mean = sum / logits.size();
  const double std = std::sqrt(std::max(0.0, sum_sq / logits.size() - mean * mean));
  // head std 0.5/sqrt(D) on a unit-rms final norm: logits of std ~0.5, never degenerate.
  EXPECT_GT(std, 0.05) << what;
  EXPECT_LT(std, 20.0) << what;
}

constexpr const char* kProjectTokenizer = DEEPINFER_SOURCE_DIR "/data/tokenizer/tokenizer.json";

// The project tokenizer, read once.
const TokenizerFacts& ProjectTokenizer() {
  static const TokenizerFacts facts = ReadTokenizerFacts(kProjectTokenizer, chat_tokens::kImagePlaceholder);
  return facts;
}

RandomCheckpointOptions Options(const std::string& preset, int layers, int experts, const std::string& out) {
  RandomCheckpointOptions o;
  o.preset = preset;
  o.layers = layers;
  o.experts = experts;
  o.out = out;
  o.threads = 2;
  return o;
}

// Writes a checkpoint as make-model does, with the project tokenizer.
RandomCheckpointResult Write(RandomCheckpointOptions options) {
  options.tokenizer = kProjectTokenizer;
  return WriteRandomCheckpoint(options, ProjectTokenizer());
}

std::string WriteError(const RandomCheckpointOptions& options) {
  return ErrorOf([&] { Write(options); });
}

// Four layers at the real dimensions (~1.5 GB of weights with 8 experts and a 1024 vocab).
TEST(RandomCheckpoint, RealDimensionSliceLoadsAndRunsPrefillAndDecode) {
  ScratchDir scratch;
  const std::string dir = (scratch.path() / "slice").string();
  RandomCheckpointOptions options = Options("v41-flash-slice", 4, 8, dir);
  options.vocab = 1024;
  options.seed = 3;
  Write(options);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "model.safetensors"));

  const std::unique_ptr<Model> model = Model::Load(dir);
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.num_heads, 64);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.moe_intermediate_size, 2304);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.norm_eps, 1e-20);
  EXPECT_EQ(c.original_seq_len, 65536);
  EXPECT_EQ(c.weight_dtype, "fp8");
  EXPECT_EQ(c.expert_dtype, "fp4");
  // L = 4: ratio-2 source + Engram, ratio-2 reuse, ratio-1 source + candidates, reindex.
  EXPECT_EQ(c.compress_ratios, (std::vector<int>{2, 2, 1, 1}));
  EXPECT_EQ(c.kv_source_layers, (std::vector<int>{0, 2}));
  EXPECT_EQ(c.index_source_layers, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(c.candidate_source_layer, 2);
  EXPECT_TRUE(c.roles[3].uses_candidates);
  EXPECT_EQ(c.engram_layer_ids, (std::vector<int>{0}));
  const TensorInfo* expert = model->checkpoint().Find("layers.1.ffn.experts.7.w2.weight");
  ASSERT_NE(expert, nullptr);
  EXPECT_EQ(expert->dtype, DType::kI8);
  EXPECT_EQ(expert->shape, (std::vector<int64_t>{5120, 1152}));

  ThreadPool pool(2);
  SequenceState state = model->NewSequence();
  const std::vector<int32_t> prompt = {0, 17, 512, 999, 42};
  ForwardItem prefill{&state, prompt, LogitsMode::kAll};
  const std::vector<float> prefill_logits = CpuForward(*model, {&prefill, 1}, pool);
  ASSERT_EQ(prefill_logits.size(), prompt.size() * static_cast<size_t>(c.vocab_size));
  ExpectFinite(prefill_logits, "prefill");
  int32_t next = static_cast<int32_t>(std::max_element(prefill_logits.end() - c.vocab_size, prefill_logits.end()) -
                                      (prefill_logits.end() - c.vocab_size));
  for (int step = 0; step < 2; ++step) {
    const std::vector<int32_t> token = {next};
    ForwardItem decode{&state, token};
    const std::vector<float> logits = CpuForward(*model, {&decode, 1}, pool);
    ASSERT_EQ(logits.size(), static_cast<size_t>(c.vocab_size));
    ExpectFinite(logits, step == 0 ? "decode 1" : "decode 2");
    next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  EXPECT_EQ(state.length(), static_cast<int64_t>(prompt.size()) + 2);
}

// The tiny preset: tiny-a's dimensions with the tokenizer's whole vocabulary, so chat text runs.
TEST(RandomCheckpoint, TinyPresetCoversTheTokenizerAndRuns) {
  ScratchDir scratch;
  const std::string dir = (scratch.path() / "tiny").string();
  Write(WithPresetDefaults(Options("tiny", 0, 0, dir)));
  const std::unique_ptr<Model> model = Model::Load(dir);
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.vocab_size, ProjectTokenizer().size);
  EXPECT_EQ(c.engram_compressed_vocab_size, ProjectTokenizer().engram_compressed_vocab);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  ThreadPool pool(2);
  SequenceState state = model->NewSequence();
  // Ids from the top of the tokenizer: the chat-format tokens <｜User｜> and <｜Assistant｜>.
  const std::vector<int32_t> prompt = {0, 128803, 19923, 128804};
  ForwardItem prefill{&state, prompt, LogitsMode::kAll};
  ExpectFinite(CpuForward(*model, {&prefill, 1}, pool), "tiny prefill");

  // A smaller vocabulary is allowed; one beyond the tokenizer is not.
  RandomCheckpointOptions big = WithPresetDefaults(Options("tiny", 0, 0, (scratch.path() / "big").string()));
  big.vocab = 200000;
  EXPECT_THAT(WriteError(big), HasSubstr("--vocab: expected 3..129280"));
}

RandomCheckpointOptions Slice(int layers) { return Options("v41-flash-slice", layers, 16, "unused"); }

// The documented rule, through the config parser's own role derivation.
TEST(RandomCheckpoint, LayerScheduleFollowsTheDocumentedRule) {
  struct Case {
    int layers;
    std::vector<int> ratios, kv, index, engram;
    int candidates;
  };
  const Case cases[] = {
      {1, {1}, {0}, {0}, {0}, 0},
      {2, {2, 1}, {0, 1}, {0, 1}, {0}, 1},
      {3, {2, 2, 1}, {0, 2}, {0, 2}, {0}, 2},
      {4, {2, 2, 1, 1}, {0, 2}, {0, 2, 3}, {0}, 2},
      {5, {0, 2, 2, 1, 1}, {1, 3}, {1, 3, 4}, {0, 1}, 3},
      {6, {0, 2, 2, 1, 1, 1}, {1, 3}, {1, 3, 4}, {0, 1}, 3},
      {10, {0, 2, 2, 1, 1, 1, 1, 1, 1, 1}, {1, 3}, {1, 3, 4, 8}, {0, 1}, 3},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE("layers = " + std::to_string(k.layers));
    const ModelConfig c = ParseModelConfig(RandomCheckpointConfigJson(Slice(k.layers), ProjectTokenizer()), "test");
    EXPECT_EQ(c.compress_ratios, k.ratios);
    EXPECT_EQ(c.kv_source_layers, k.kv);
    EXPECT_EQ(c.index_source_layers, k.index);
    EXPECT_EQ(c.engram_layer_ids, k.engram);
    EXPECT_EQ(c.candidate_source_layer, k.candidates);
    for (const int layer : k.index) EXPECT_EQ(c.roles[layer].uses_candidates, layer > k.candidates);
  }
  // All 40 layers validate too (the released backbone length).
  EXPECT_NO_THROW(ParseModelConfig(RandomCheckpointConfigJson(Slice(40), ProjectTokenizer()), "test"));
}

TEST(RandomCheckpoint, EngramTablesHoldEveryHashBucket) {
  // Default: engram_vocab_size 4000, rows = each layer's exact prime sum.
  const ModelConfig c = ParseModelConfig(RandomCheckpointConfigJson(Slice(6), ProjectTokenizer()), "test");
  EXPECT_EQ(c.engram_vocab_size, 4000);
  ASSERT_EQ(c.engram_num_embeddings.size(), 2u);
  EXPECT_EQ(c.engram_num_embeddings, EngramPrimeSums(4000, 2, 8));
  EXPECT_LT(c.engram_num_embeddings[0], c.engram_num_embeddings[1]);
  EXPECT_GT(c.engram_num_embeddings[0], 24 * 4000);

  // --engram-rows R: both tables R rows, the largest engram_vocab_size whose sums fit.
  RandomCheckpointOptions o = Slice(6);
  o.engram_rows = 50000;
  const ModelConfig r = ParseModelConfig(RandomCheckpointConfigJson(o, ProjectTokenizer()), "test");
  EXPECT_EQ(r.engram_num_embeddings, (std::vector<int64_t>{50000, 50000}));
  EXPECT_LE(EngramPrimeSums(r.engram_vocab_size, 2, 8).back(), 50000);
  EXPECT_GT(EngramPrimeSums(r.engram_vocab_size + 1, 2, 8).back(), 50000);

  o.engram_rows = 100;
  const std::string error = ErrorOf([&] { (void)RandomCheckpointConfigJson(o, ProjectTokenizer()); });
  EXPECT_THAT(error, HasSubstr("--engram-rows"));
  EXPECT_THAT(error, HasSubstr("at least"));
}

TEST(RandomCheckpoint, OptionErrorsAreReported) {
  EXPECT_THAT(WriteError(Options("v41-flash-slice", 2, 8, "")), HasSubstr("--out DIR is required"));
  EXPECT_THAT(WriteError(Options("v4-pro", 2, 8, "x")),
              HasSubstr("--preset: unknown preset 'v4-pro' (available: v41-flash-slice, tiny)"));
  EXPECT_THAT(WriteError(Options("v41-flash-slice", 41, 8, "x")), HasSubstr("--layers: expected 1..40"));
  EXPECT_THAT(
      ErrorOf([] { WriteRandomCheckpoint(WithPresetDefaults(Options("tiny", 0, 0, "x")), ProjectTokenizer()); }),
      HasSubstr("the tokenizer.json to copy into x is required"));
}

}  // namespace
}  // namespace deepinfer
