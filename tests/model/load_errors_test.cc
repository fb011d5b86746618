// Model::Load and Model::Forward on damaged inputs: every bad checkpoint, config or request
// must surface as one deepinfer::Error whose message is a single line naming the file, tensor
// or field and what was expected -- never a crash, a DI_CHECK, or a half-updated sequence.
//
// Each test copies a tiny released-layout model (tests/data/models) into a scratch directory
// and damages the copy (tests/model/checkpoint_builder.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "abandoned_frames.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "error_of.h"
#include "model/checkpoint_builder.h"
#include "model/cpu_forward.h"
#include "model/golden_support.h"
#include "model/model.h"

namespace deepinfer::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Json = nlohmann::ordered_json;

std::string LoadError(const fs::path& dir, const ModelOptions& options = {}) {
  return ErrorOf([&] { Model::Load(dir.string(), options); });
}

std::vector<int32_t> Tokens(int n, int32_t vocab) {
  std::vector<int32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((7 * i + 3) % vocab);
  return tokens;
}

// Whether two sequence states hold exactly the same values (whatever pages hold them).
bool SameState(const SequenceState& a, const SequenceState& b) {
  if (a.length() != b.length() || a.engram_recent() != b.engram_recent() || !(a.layout() == b.layout())) return false;
  const CacheLayout& layout = a.layout();
  for (int layer = 0; layer < layout.num_layers; ++layer) {
    for (int64_t pos = std::max<int64_t>(0, a.length() - layout.window + 1); pos < a.length(); ++pos) {
      if (!std::equal(a.window_entry(layer, pos), a.window_entry(layer, pos) + layout.window_entry_bytes,
                      b.window_entry(layer, pos))) {
        return false;
      }
    }
    if (layout.ratio[layer] == 0) continue;
    if (a.compressed_count(layer) != b.compressed_count(layer) || a.pending_count(layer) != b.pending_count(layer)) {
      return false;
    }
    for (int64_t g = 0; g < a.compressed_count(layer); ++g) {
      if (!std::equal(a.compressed_entry(layer, g), a.compressed_entry(layer, g) + layout.compressed_entry_bytes,
                      b.compressed_entry(layer, g))) {
        return false;
      }
    }
    const int64_t pending = a.pending_count(layer) * layout.head_dim;
    if (pending > 0 && (!std::equal(a.pending_kv(layer), a.pending_kv(layer) + pending, b.pending_kv(layer)) ||
                        !std::equal(a.pending_gate(layer), a.pending_gate(layer) + pending, b.pending_gate(layer)))) {
      return false;
    }
  }
  return true;
}

class LoadErrorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pool_ = std::make_unique<ThreadPool>(2); }
  static void TearDownTestSuite() { pool_.reset(); }

  // Copies tests/data/models/<name> to <scratch>/<name> and returns the copy.
  fs::path Copy(const std::string& name) {
    const fs::path dst = scratch_.path() / name;
    CopyModelDir(ModelDir(name), dst);
    return dst;
  }

  // tiny-b: one model.safetensors, FP8 linears, FP4 experts, no Engram.
  fs::path TinyB() { return Copy("tiny-b"); }

  static void EditTensors(const fs::path& file, const std::function<void(StFile&)>& edit) {
    StFile st = StFile::Read(file);
    edit(st);
    st.Write(file);
  }

  static std::unique_ptr<ThreadPool> pool_;
  ScratchDir scratch_;
};
std::unique_ptr<ThreadPool> LoadErrorsTest::pool_;

// ---------------------------------------------------------------------------------------------
// The undamaged copies load and run: the damage, not the copying, is what the other tests see.

TEST_F(LoadErrorsTest, UnmodifiedCopyLoadsAndRuns) {
  const fs::path dir = TinyB();
  // Round-tripping the file through the test writer must also keep it loadable.
  EditTensors(dir / "model.safetensors", [](StFile&) {});
  const std::unique_ptr<Model> model = Model::Load(dir.string(), ModelOptions{.max_context = 64});
  EXPECT_EQ(model->max_context(), 64);
  SequenceState state = model->NewSequence();
  const std::vector<int32_t> tokens = Tokens(5, static_cast<int32_t>(model->config().vocab_size));
  const ForwardItem item{&state, tokens};
  const std::vector<float> logits = CpuForward(*model, {&item, 1}, *pool_);
  EXPECT_EQ(logits.size(), static_cast<size_t>(model->config().vocab_size));
  EXPECT_EQ(state.length(), 5);
}

TEST_F(LoadErrorsTest, UnmodifiedShardedEngramCopyLoadsAndRuns) {
  // tiny-a: two shards + index, Engram layers; symlinks that stay inside the directory are followed.
  const fs::path dir = Copy("tiny-a");
  fs::create_directories(dir / "blobs");
  fs::rename(dir / "tokenizer.json", dir / "blobs" / "tok");
  fs::create_symlink("blobs/tok", dir / "tokenizer.json");
  const std::unique_ptr<Model> model = Model::Load(dir.string());
  SequenceState state = model->NewSequence();
  const std::vector<int32_t> tokens = Tokens(5, static_cast<int32_t>(model->config().vocab_size));
  const ForwardItem item{&state, tokens, LogitsMode::kAll};
  EXPECT_EQ(CpuForward(*model, {&item, 1}, *pool_).size(), 5 * static_cast<size_t>(model->config().vocab_size));
}

// ---------------------------------------------------------------------------------------------
// (1)-(3) Damaged safetensors files.

TEST_F(LoadErrorsTest, TruncatedSafetensorsFile) {
  const fs::path dir = TinyB();
  const fs::path file = dir / "model.safetensors";
  const uintmax_t size = fs::file_size(file);
  fs::resize_file(file, size - 1000);  // a cut-off download: header intact, data short
  const std::string message = LoadError(dir);
  EXPECT_THAT(message,
              AllOf(StartsWith(file.string() + ": truncated: tensor '"), HasSubstr("but the data section has only"),
                    HasSubstr("(file is " + std::to_string(size - 1000) + " bytes, the header describes " +
                              std::to_string(size) + ")")));
}

TEST_F(LoadErrorsTest, SafetensorsFileShorterThanTheLengthPrefix) {
  const fs::path dir = TinyB();
  const fs::path file = dir / "model.safetensors";
  fs::resize_file(file, 5);
  EXPECT_THAT(LoadError(dir),
              AllOf(StartsWith(file.string() + ": truncated: 5 bytes"), HasSubstr("8-byte header length")));
}

TEST_F(LoadErrorsTest, EmptySafetensorsFile) {
  const fs::path dir = TinyB();
  const fs::path file = dir / "model.safetensors";
  fs::resize_file(file, 0);
  EXPECT_THAT(LoadError(dir), StartsWith(file.string() + ": truncated: 0 bytes"));
}

TEST_F(LoadErrorsTest, HeaderIsNotJson) {
  const fs::path dir = TinyB();
  const fs::path file = dir / "model.safetensors";
  // Line breaks and control bytes in the garbage must not leak into the one-line message.
  WriteBytes(file, StFile::WithHeader("{\"embed.weight\": \n\x01 not json\r\n at all", std::string(64, '\0')));
  EXPECT_THAT(LoadError(dir), StartsWith(file.string() + ": header: not valid JSON: "));
}

TEST_F(LoadErrorsTest, HeaderIsJsonButNotAnObject) {
  const fs::path dir = TinyB();
  const fs::path file = dir / "model.safetensors";
  WriteBytes(file, StFile::WithHeader("[1, 2, 3]", ""));
  EXPECT_THAT(LoadError(dir), StartsWith(file.string() + ": header is not a JSON object (got array)"));
}

TEST_F(LoadErrorsTest, HeaderLengthPastTheEnd) {
  const fs::path dir = TinyB();
  const fs::path file = dir / "model.safetensors";
  std::string bytes = ReadBytes(file);
  const uint64_t bogus = bytes.size();  // 8 more than the file can hold after the prefix
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((bogus >> (8 * i)) & 0xff);
  WriteBytes(file, bytes);
  EXPECT_THAT(LoadError(dir), AllOf(StartsWith(file.string() + ": header length " + std::to_string(bogus) +
                                               " runs past the end of the file"),
                                    HasSubstr("at most " + std::to_string(bytes.size() - 8) + " available")));
}

TEST_F(LoadErrorsTest, HugeHeaderLength) {
  const fs::path dir = TinyB();
  const fs::path file = dir / "model.safetensors";
  std::string bytes = ReadBytes(file);
  for (int i = 0; i < 8; ++i) bytes[i] = '\xff';  // 2^64 - 1: must not wrap around
  WriteBytes(file, bytes);
  EXPECT_THAT(LoadError(dir), AllOf(StartsWith(file.string() + ": header length 18446744073709551615"),
                                    HasSubstr("runs past the end of the file")));
}

TEST_F(LoadErrorsTest, TensorDataOffsetsDisagreeWithShape) {
  const fs::path dir = TinyB();
  const fs::path file = dir / "model.safetensors";
  // A header edited by hand: the dtype says BF16 but the bytes are those of the F8 tensor.
  EditTensors(file, [](StFile& st) { st.Get("layers.0.attn.wq_a.weight").dtype = "BF16"; });
  EXPECT_THAT(LoadError(dir), AllOf(StartsWith(file.string() + ": tensor 'layers.0.attn.wq_a.weight': byte size "
                                                               "mismatch: shape [32, 64] of BF16 needs 4096 bytes"),
                                    HasSubstr("hold 2048")));
}

// ---------------------------------------------------------------------------------------------
// (4)-(8) Tensors that do not match the config.

TEST_F(LoadErrorsTest, Fp8WeightStoredAsBf16) {
  const fs::path dir = TinyB();
  EditTensors(dir / "model.safetensors", [](StFile& st) { st.Retype("layers.0.attn.wq_a.weight", "BF16"); });
  EXPECT_THAT(LoadError(dir),
              AllOf(StartsWith(dir.string() + ": 1 tensor problem: "),
                    HasSubstr("tensor 'layers.0.attn.wq_a.weight' has dtype BF16, expected F8_E4M3 matrix with "
                              "F8_E8M0 32x32 block scales")));
}

TEST_F(LoadErrorsTest, Fp4ExpertStoredAsF32) {
  const fs::path dir = TinyB();
  EditTensors(dir / "model.safetensors", [](StFile& st) {
    st.Retype("layers.2.ffn.experts.3.w2.weight", "F32", {64, 96});
  });
  EXPECT_THAT(LoadError(dir),
              AllOf(StartsWith(dir.string() + ": 1 tensor problem: "),
                    HasSubstr("tensor 'layers.2.ffn.experts.3.w2.weight' has dtype F32, expected packed FP4 (I8) "
                              "matrix with F8_E8M0 per-32 scales")));
}

TEST_F(LoadErrorsTest, Fp32MatrixStoredAsBf16) {
  const fs::path dir = TinyB();
  EditTensors(dir / "model.safetensors", [](StFile& st) { st.Retype("layers.1.hc_ffn_fn", "BF16"); });
  EXPECT_THAT(LoadError(dir), HasSubstr("tensor 'layers.1.hc_ffn_fn' has dtype BF16, expected F32 matrix"));
}

TEST_F(LoadErrorsTest, ScaleWithWrongDtype) {
  const fs::path dir = TinyB();
  EditTensors(dir / "model.safetensors", [](StFile& st) { st.Retype("layers.0.attn.wo_b.scale", "U8"); });
  EXPECT_THAT(LoadError(dir), HasSubstr("scale 'layers.0.attn.wo_b.scale' has dtype U8, expected F8_E8M0"));
}

TEST_F(LoadErrorsTest, WrongShape) {
  const fs::path dir = TinyB();
  EditTensors(dir / "model.safetensors", [](StFile& st) { st.Retype("layers.0.attn_norm.weight", "BF16", {63}); });
  EXPECT_THAT(LoadError(dir), AllOf(StartsWith(dir.string() + ": 1 tensor problem: "),
                                    HasSubstr("tensor 'layers.0.attn_norm.weight' has shape [63], expected [64]")));
}

TEST_F(LoadErrorsTest, TransposedFp8Weight) {
  const fs::path dir = TinyB();
  EditTensors(dir / "model.safetensors", [](StFile& st) { st.Get("layers.0.attn.wq_a.weight").shape = {64, 32}; });
  EXPECT_THAT(LoadError(dir), HasSubstr("tensor 'layers.0.attn.wq_a.weight' has shape [64, 32], expected [32, 64]"));
}

TEST_F(LoadErrorsTest, WrongScaleShape) {
  const fs::path dir = TinyB();
  EditTensors(dir / "model.safetensors", [](StFile& st) { st.Get("layers.0.attn.wq_b.scale").shape = {1, 8}; });
  EXPECT_THAT(LoadError(dir), HasSubstr("scale 'layers.0.attn.wq_b.scale' has shape [1, 8], expected [8, 1]"));
}

TEST_F(LoadErrorsTest, MissingTensor) {
  const fs::path dir = TinyB();
  EditTensors(dir / "model.safetensors", [](StFile& st) { st.Remove("layers.3.attn.compressor.wkv.weight"); });
  EXPECT_THAT(LoadError(dir), AllOf(StartsWith(dir.string() + ": 1 tensor problem: "),
                                    HasSubstr("missing tensor 'layers.3.attn.compressor.wkv.weight' (expected "
                                              "BF16/F32 matrix [128, 64])")));
}

TEST_F(LoadErrorsTest, MissingFp4ExpertNamesThePackedShape) {
  const fs::path dir = TinyB();
  EditTensors(dir / "model.safetensors", [](StFile& st) { st.Remove("layers.5.ffn.experts.1.w3.weight"); });
  EXPECT_THAT(LoadError(dir), HasSubstr("missing tensor 'layers.5.ffn.experts.1.w3.weight' (expected packed FP4 "
                                        "(I8) matrix with F8_E8M0 per-32 scales [96, 32])"));
}

TEST_F(LoadErrorsTest, MissingTensorInAShardAndTheIndex) {
  const fs::path dir = Copy("tiny-a");
  const std::string name = "layers.7.ffn.shared_experts.w2.weight";
  std::string shard;
  EditJson(dir / "model.safetensors.index.json", [&](Json& index) {
    shard = index["weight_map"][name].get<std::string>();
    index["weight_map"].erase(name);
  });
  EditTensors(dir / shard, [&](StFile& st) { st.Remove(name); });
  EXPECT_THAT(LoadError(dir), AllOf(StartsWith(dir.string() + ": 1 tensor problem: "),
                                    HasSubstr("missing tensor '" + name + "' (expected F8_E4M3 matrix")));
}

TEST_F(LoadErrorsTest, IndexListsATensorItsShardLacks) {
  const fs::path dir = Copy("tiny-a");
  const std::string name = "layers.7.ffn.shared_experts.w2.weight";
  std::string shard;
  EditJson(dir / "model.safetensors.index.json",
           [&](Json& index) { shard = index["weight_map"][name].get<std::string>(); });
  EditTensors(dir / shard, [&](StFile& st) { st.Remove(name); });
  EXPECT_THAT(LoadError(dir), AllOf(HasSubstr("model.safetensors.index.json: tensor '" + name +
                                              "' is mapped to shard '" + shard + "' but that file does not contain it"),
                                    HasSubstr((dir / shard).string())));
}

TEST_F(LoadErrorsTest, MissingScaleOfFp8Weight) {
  const fs::path dir = TinyB();
  EditTensors(dir / "model.safetensors", [](StFile& st) { st.Remove("layers.0.attn.wq_a.scale"); });
  EXPECT_THAT(LoadError(dir), AllOf(StartsWith(dir.string() + ": 1 tensor problem: "),
                                    HasSubstr("missing scale 'layers.0.attn.wq_a.scale' of quantized tensor "
                                              "'layers.0.attn.wq_a.weight' (expected F8_E8M0 [1, 2])")));
}

TEST_F(LoadErrorsTest, MissingScaleOfFp4Expert) {
  const fs::path dir = TinyB();
  EditTensors(dir / "model.safetensors", [](StFile& st) { st.Remove("layers.4.ffn.experts.0.w2.scale"); });
  EXPECT_THAT(LoadError(dir), HasSubstr("missing scale 'layers.4.ffn.experts.0.w2.scale' of quantized tensor "
                                        "'layers.4.ffn.experts.0.w2.weight' (expected F8_E8M0 [64, 3])"));
}

TEST_F(LoadErrorsTest, SeveralProblemsAreReportedTogether) {
  const fs::path dir = TinyB();
  EditTensors(dir / "model.safetensors", [](StFile& st) {
    st.Retype("layers.0.attn.wq_a.weight", "BF16");
    st.Retype("layers.0.attn_norm.weight", "BF16", {63});
    st.Remove("layers.3.attn.compressor.wkv.weight");
    st.Remove("layers.1.attn.wkv.scale");
    st.Retype("layers.2.ffn.experts.0.w1.weight", "F32", {96, 64});
  });
  const std::string message = LoadError(dir);
  EXPECT_THAT(message, StartsWith(dir.string() + ": 5 tensor problems: "));
  EXPECT_THAT(message, HasSubstr("tensor 'layers.0.attn.wq_a.weight' has dtype BF16, expected F8_E4M3"));
  EXPECT_THAT(message, HasSubstr("tensor 'layers.0.attn_norm.weight' has shape [63], expected [64]"));
  EXPECT_THAT(message, HasSubstr("missing tensor 'layers.3.attn.compressor.wkv.weight'"));
  EXPECT_THAT(message, HasSubstr("missing scale 'layers.1.attn.wkv.scale' of quantized tensor "
                                 "'layers.1.attn.wkv.weight'"));
  EXPECT_THAT(message, HasSubstr("tensor 'layers.2.ffn.experts.0.w1.weight' has dtype F32"));
  EXPECT_THAT(message, Not(HasSubstr("more")));
}

TEST_F(LoadErrorsTest, ManyProblemsAreCountedAndElided) {
  const fs::path dir = TinyB();
  // Every scale of layer 0's FP4 experts: 4 experts x 3 matrices.
  EditTensors(dir / "model.safetensors", [](StFile& st) {
    for (int e = 0; e < 4; ++e) {
      for (const char* w : {"w1", "w2", "w3"})
        st.Remove("layers.0.ffn.experts." + std::to_string(e) + "." + w + ".scale");
    }
  });
  const std::string message = LoadError(dir);
  EXPECT_THAT(message, AllOf(StartsWith(dir.string() + ": 12 tensor problems: missing scale "
                                                       "'layers.0.ffn.experts.0.w1.scale'"),
                             HasSubstr("; ... and 4 more")));
}

// ---------------------------------------------------------------------------------------------
// (9) Inconsistent layer schedules, in both config forms. tiny-b: compress_ratios
// [0, 2, 2, 1, 1, 1], KV sources [1, 3], index sources [1, 3, 5].

TEST_F(LoadErrorsTest, HfConfigReuseLayerBeforeAnyKvSource) {
  const fs::path dir = TinyB();
  EditJson(dir / "config.json", [](Json& c) { c["text_config"]["compress_ratios"][0] = 2; });
  const std::string message = LoadError(dir);
  EXPECT_THAT(message, StartsWith((dir / "config.json").string() + ": "));
  EXPECT_THAT(message, HasSubstr("layer 0 (compress ratio 2) reads compressed KV but no KV-source layer precedes it"));
  EXPECT_THAT(message, HasSubstr("layer 0 (compress ratio 2) reads top-k indices but no index-source layer precedes "
                                 "it"));
}

TEST_F(LoadErrorsTest, HfConfigKvSourceAtRatioZeroLayer) {
  const fs::path dir = TinyB();
  EditJson(dir / "config.json", [](Json& c) {
    c["text_config"]["kv_source_layer_ids"] = {0, 1, 3};
    c["text_config"]["index_source_layer_ids"] = {0, 1, 3, 5};
  });
  const std::string message = LoadError(dir);
  EXPECT_THAT(message, StartsWith((dir / "config.json").string() + ": "));
  EXPECT_THAT(message, HasSubstr("text_config.kv_source_layer_ids: layer 0 has compress ratio 0, so it has no "
                                 "compressed KV to publish"));
  EXPECT_THAT(message,
              HasSubstr("text_config.index_source_layer_ids: layer 0 has compress ratio 0, so it has no compressed "
                        "positions to index"));
}

TEST_F(LoadErrorsTest, ReferenceConfigReuseLayerBeforeAnyKvSource) {
  const fs::path dir = TinyB();
  fs::remove(dir / "config.json");  // inference/config.json is read instead
  EditJson(dir / "inference" / "config.json", [](Json& c) { c["compress_ratios"][0] = 2; });
  const std::string message = LoadError(dir);
  EXPECT_THAT(message, StartsWith((dir / "inference" / "config.json").string() + ": "));
  EXPECT_THAT(message, HasSubstr("layer 0 (compress ratio 2) reads compressed KV but no KV-source layer precedes it"));
}

TEST_F(LoadErrorsTest, ReferenceConfigKvSourceAtRatioZeroLayer) {
  const fs::path dir = TinyB();
  fs::remove(dir / "config.json");
  // Layer 0 as a KV source only: also not an index source, which is a second problem.
  EditJson(dir / "inference" / "config.json", [](Json& c) { c["kv_source_layers"] = {0, 1, 3}; });
  const std::string message = LoadError(dir);
  EXPECT_THAT(message, StartsWith((dir / "inference" / "config.json").string() + ": 2 problems: "));
  EXPECT_THAT(message, HasSubstr("kv_source_layers: layer 0 has compress ratio 0, so it has no compressed KV to "
                                 "publish"));
  EXPECT_THAT(message, HasSubstr("kv_source_layers: layer 0 is not listed in index_source_layers"));
}

TEST_F(LoadErrorsTest, ReuseLayerReadingASourceOfAnotherRatio) {
  const fs::path dir = TinyB();
  // Layer 3 stops being a KV source, so the ratio-1 layers 4 and 5 would read layer 1's ratio-2 KV.
  EditJson(dir / "config.json", [](Json& c) {
    c["text_config"]["kv_source_layer_ids"] = {1};
    c["text_config"]["index_source_layer_ids"] = {1, 5};
  });
  const std::string message = LoadError(dir);
  EXPECT_THAT(message, HasSubstr("layer 3 (compress ratio 1) reads the compressed KV of layer 1, whose compress "
                                 "ratio is 2"));
}

TEST_F(LoadErrorsTest, ConfigThatIsNotJson) {
  const fs::path dir = TinyB();
  WriteBytes(dir / "config.json", "{\n  \"text_config\": {\n    oops\n");
  EXPECT_THAT(LoadError(dir), StartsWith((dir / "config.json").string() + ": not valid JSON: "));
}

// ---------------------------------------------------------------------------------------------
// (10)-(11) Requests and options beyond the configured limits.

TEST_F(LoadErrorsTest, PromptLongerThanMaxContextLeavesTheSequenceUnchanged) {
  const fs::path dir = TinyB();
  const std::unique_ptr<Model> model = Model::Load(dir.string(), ModelOptions{.max_context = 64});
  const auto vocab = static_cast<int32_t>(model->config().vocab_size);
  SequenceState state = model->NewSequence();
  const SequenceState fresh = model->NewSequence();

  const std::vector<int32_t> too_long = Tokens(65, vocab);
  const ForwardItem bad{&state, too_long};
  EXPECT_THAT(ErrorOf([&] {
                CpuForward(*model, {&bad, 1}, *pool_);
              }),
              HasSubstr("sequence 0: 65 tokens exceed the configured maximum context of 64 tokens"));
  EXPECT_EQ(state.length(), 0);
  EXPECT_TRUE(SameState(state, fresh));

  // The same sequence still works, up to exactly the maximum.
  const std::vector<int32_t> prompt = Tokens(60, vocab);
  const ForwardItem good{&state, prompt};
  EXPECT_EQ(CpuForward(*model, {&good, 1}, *pool_).size(), static_cast<size_t>(vocab));
  EXPECT_EQ(state.length(), 60);

  // Going past the maximum mid-sequence fails the same way and keeps the 60 tokens.
  const SequenceState before = state;
  const std::vector<int32_t> step = Tokens(5, vocab);
  const ForwardItem over{&state, step};
  EXPECT_THAT(ErrorOf([&] {
                CpuForward(*model, {&over, 1}, *pool_);
              }),
              HasSubstr("sequence 0: 65 tokens exceed the configured maximum context of 64 tokens"));
  EXPECT_TRUE(SameState(state, before));

  const std::vector<int32_t> last = Tokens(4, vocab);
  const ForwardItem fill{&state, last};
  EXPECT_EQ(CpuForward(*model, {&fill, 1}, *pool_).size(), static_cast<size_t>(vocab));
  EXPECT_EQ(state.length(), 64);
}

TEST_F(LoadErrorsTest, RejectedForwardLeavesAnEngramSequenceUnchanged) {
  // tiny-c has an Engram layer, so the state also carries the recent compressed token ids.
  const fs::path dir = Copy("tiny-c");
  const std::unique_ptr<Model> model = Model::Load(dir.string(), ModelOptions{.max_context = 16});
  const auto vocab = static_cast<int32_t>(model->config().vocab_size);
  SequenceState state = model->NewSequence();
  const std::vector<int32_t> prompt = Tokens(10, vocab);
  const ForwardItem first{&state, prompt};
  CpuForward(*model, {&first, 1}, *pool_);
  ASSERT_EQ(state.length(), 10);
  ASSERT_FALSE(state.engram_recent().empty());
  const SequenceState before = state;

  const std::vector<int32_t> too_many = Tokens(7, vocab);
  const ForwardItem over{&state, too_many};
  EXPECT_THAT(ErrorOf([&] {
                CpuForward(*model, {&over, 1}, *pool_);
              }),
              HasSubstr("sequence 0: 17 tokens exceed the configured maximum context of 16 tokens"));
  EXPECT_TRUE(SameState(state, before));

  const std::vector<int32_t> bad = {5, vocab};
  const ForwardItem bad_item{&state, bad};
  EXPECT_THAT(ErrorOf([&] {
                CpuForward(*model, {&bad_item, 1}, *pool_);
              }),
              HasSubstr("sequence 0: token id 448 at position 11 is outside the model vocabulary [0, 448)"));
  EXPECT_TRUE(SameState(state, before));

  const std::vector<int32_t> rest = Tokens(6, vocab);
  const ForwardItem fill{&state, rest};
  EXPECT_EQ(CpuForward(*model, {&fill, 1}, *pool_).size(), static_cast<size_t>(vocab));
  EXPECT_EQ(state.length(), 16);
}

TEST_F(LoadErrorsTest, TokenIdOutsideTheVocabulary) {
  const fs::path dir = TinyB();
  const std::unique_ptr<Model> model = Model::Load(dir.string(), ModelOptions{.max_context = 64});
  const auto vocab = static_cast<int32_t>(model->config().vocab_size);
  ASSERT_EQ(vocab, 384);
  SequenceState state = model->NewSequence();
  const SequenceState fresh = model->NewSequence();

  std::vector<int32_t> tokens = Tokens(6, vocab);
  tokens[4] = vocab;
  const ForwardItem bad{&state, tokens};
  EXPECT_THAT(ErrorOf([&] {
                CpuForward(*model, {&bad, 1}, *pool_);
              }),
              HasSubstr("sequence 0: token id 384 at position 4 is outside the model vocabulary [0, 384)"));
  EXPECT_TRUE(SameState(state, fresh));

  tokens[4] = -1;
  EXPECT_THAT(ErrorOf([&] {
                CpuForward(*model, {&bad, 1}, *pool_);
              }),
              HasSubstr("sequence 0: token id -1 at position 4 is outside the model vocabulary [0, 384)"));
  EXPECT_TRUE(SameState(state, fresh));

  tokens[4] = vocab - 1;
  EXPECT_EQ(CpuForward(*model, {&bad, 1}, *pool_).size(), static_cast<size_t>(vocab));
  EXPECT_EQ(state.length(), 6);
}

TEST_F(LoadErrorsTest, BadItemInABatchChangesNoSequence) {
  const fs::path dir = TinyB();
  const std::unique_ptr<Model> model = Model::Load(dir.string(), ModelOptions{.max_context = 64});
  const auto vocab = static_cast<int32_t>(model->config().vocab_size);
  SequenceState a = model->NewSequence();
  SequenceState b = model->NewSequence();
  const std::vector<int32_t> good = Tokens(3, vocab);
  const std::vector<int32_t> bad = {1, 2, vocab + 7};
  const ForwardItem items[] = {{&a, good}, {&b, bad}};
  EXPECT_THAT(ErrorOf([&] { CpuForward(*model, items, *pool_); }),
              HasSubstr("sequence 1: token id 391 at position 2 is outside the model vocabulary [0, 384)"));
  EXPECT_TRUE(SameState(a, model->NewSequence()));
  EXPECT_TRUE(SameState(b, model->NewSequence()));
}

TEST_F(LoadErrorsTest, EmptyForwardItem) {
  const fs::path dir = TinyB();
  const std::unique_ptr<Model> model = Model::Load(dir.string(), ModelOptions{.max_context = 64});
  SequenceState state = model->NewSequence();
  const ForwardItem empty{&state, {}};
  EXPECT_THAT(ErrorOf([&] { CpuForward(*model, {&empty, 1}, *pool_); }), HasSubstr("sequence 0: no tokens to process"));
  EXPECT_EQ(state.length(), 0);
}

TEST_F(LoadErrorsTest, MaxContextAboveMaxPositionEmbeddings) {
  const fs::path dir = TinyB();
  EXPECT_THAT(LoadError(dir, ModelOptions{.max_context = 4097}),
              HasSubstr("maximum context 4097 exceeds the model's max_position_embeddings 4096"));
  // The limit itself is fine.
  EXPECT_EQ(Model::Load(dir.string(), ModelOptions{.max_context = 4096})->max_context(), 4096);
}

TEST_F(LoadErrorsTest, ShardTruncatedWhileMappedIsAnErrorNamingTheFile) {
  // Another process cuts the file short after the load: the weight pages vanish from under the
  // mapping, and reading them raises SIGBUS, which must become an Error, not a crash.
  const fs::path dir = Copy("tiny-a");
  const std::unique_ptr<Model> model = Model::Load(dir.string());
  const fs::path shard = dir / "model-00002-of-00002.safetensors";
  fs::resize_file(shard, 4096);
  // One thread, so that everything the abandoned frames allocated was allocated on this thread
  // (LeakSanitizer's ignore scope is per thread); a fault in a pool task is tested in core.
  ThreadPool one(1);
  for (int round = 0; round < 2; ++round) {  // and again: the model stays broken, never crashes
    SequenceState state = model->NewSequence();
    const std::vector<int32_t> tokens = Tokens(3, static_cast<int32_t>(model->config().vocab_size));
    const ForwardItem item{&state, tokens};
    [[maybe_unused]] const AbandonedFramesMayLeak abandoned;
    EXPECT_THAT(ErrorOf([&] {
                  CpuForward(*model, {&item, 1}, one);
                }),
                StartsWith(shard.string() + ": the file was truncated or replaced while the model was using it"));
  }
}

// ---------------------------------------------------------------------------------------------
// (12)-(13) Missing files.

TEST_F(LoadErrorsTest, EngramModelWithoutTokenizer) {
  const fs::path dir = Copy("tiny-c");
  fs::remove(dir / "tokenizer.json");
  EXPECT_THAT(LoadError(dir), AllOf(StartsWith(dir.string() + ": the config has Engram layers"),
                                    HasSubstr((dir / "tokenizer.json").string() + " does not exist")));
}

TEST_F(LoadErrorsTest, EngramModelWithDanglingTokenizerSymlink) {
  const fs::path dir = Copy("tiny-c");
  fs::remove(dir / "tokenizer.json");
  fs::create_symlink(scratch_.path() / "nowhere" / "tokenizer.json", dir / "tokenizer.json");
  EXPECT_THAT(LoadError(dir), HasSubstr((dir / "tokenizer.json").string() + ": a dangling symlink (the tokenizer)"));
}

TEST_F(LoadErrorsTest, EngramModelWithGarbageTokenizer) {
  const fs::path dir = Copy("tiny-c");
  fs::remove(dir / "tokenizer.json");
  WriteBytes(dir / "tokenizer.json", "{\"model\": \n [not a tokenizer");
  EXPECT_THAT(LoadError(dir), HasSubstr((dir / "tokenizer.json").string()));
}

TEST_F(LoadErrorsTest, EngramModelWithEmptyTokenizerObject) {
  const fs::path dir = Copy("tiny-c");
  fs::remove(dir / "tokenizer.json");
  WriteBytes(dir / "tokenizer.json", "{}");
  EXPECT_THAT(LoadError(dir), HasSubstr((dir / "tokenizer.json").string()));
}

TEST_F(LoadErrorsTest, EngramModelWithTokenizerDirectory) {
  const fs::path dir = Copy("tiny-c");
  fs::remove(dir / "tokenizer.json");
  fs::create_directory(dir / "tokenizer.json");
  EXPECT_THAT(LoadError(dir), HasSubstr((dir / "tokenizer.json").string()));
}

TEST_F(LoadErrorsTest, NoConfigAtAll) {
  const fs::path dir = TinyB();
  fs::remove(dir / "config.json");
  fs::remove(dir / "inference" / "config.json");
  EXPECT_THAT(LoadError(dir),
              AllOf(StartsWith(dir.string() + ": no model config: neither "), HasSubstr((dir / "config.json").string()),
                    HasSubstr((dir / "inference" / "config.json").string() + " exists")));
}

TEST_F(LoadErrorsTest, NoSafetensorsFiles) {
  const fs::path dir = TinyB();
  fs::remove(dir / "model.safetensors");
  EXPECT_THAT(LoadError(dir), AllOf(StartsWith(dir.string()), HasSubstr("no *.safetensors files")));
}

TEST_F(LoadErrorsTest, MissingModelDirectory) {
  const fs::path dir = scratch_.path() / "does-not-exist";
  EXPECT_THAT(LoadError(dir), HasSubstr(dir.string()));
}

}  // namespace
}  // namespace deepinfer::testing
