// `deepinfer make-model`: the flags reach the generator (model/random_checkpoint), bad ones are
// reported naming the flag, and the embedded project tokenizer is the default.
#include "cli/make_model_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "error_of.h"
#include "io/model_config.h"
#include "model/checkpoint_builder.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using deepinfer::testing::ScratchDir;
using ::testing::HasSubstr;

std::string ArgError(const std::vector<std::string>& args) {
  return ErrorOf([&] { RunMakeModelCommand(args); });
}

// Without --tokenizer the model gets the project tokenizer (embedded in the binary).
TEST(MakeModelCommand, TinyPresetWithTheEmbeddedTokenizer) {
  ScratchDir scratch;
  const fs::path dir = scratch.path() / "tiny";
  ASSERT_EQ(RunMakeModelCommand({"--preset", "tiny", "--out", dir.string(), "--threads", "2", "--seed", "5"}), 0);
  const ModelConfig c = LoadModelConfig(dir.string());
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_EQ(fs::file_size(dir / "tokenizer.json"),
            fs::file_size(DEEPINFER_SOURCE_DIR "/data/tokenizer/tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
}

TEST(MakeModelCommand, ArgumentErrorsAreReported) {
  const std::vector<std::string> base = {"--preset", "v41-flash-slice", "--layers", "2", "--experts", "8"};
  EXPECT_THAT(ArgError(base), HasSubstr("--out DIR is required"));
  EXPECT_THAT(ArgError({"--preset", "v4-pro", "--layers", "2", "--experts", "8", "--out", "x"}),
              HasSubstr("--preset: unknown preset 'v4-pro' (available: v41-flash-slice, tiny)"));
  EXPECT_THAT(ArgError({"--layers", "2", "--experts", "8", "--out", "x"}), HasSubstr("--preset is required"));
  EXPECT_THAT(ArgError({"--preset", "v41-flash-slice", "--experts", "8", "--out", "x"}),
              HasSubstr("--layers is required"));
  EXPECT_THAT(ArgError({"--preset", "v41-flash-slice", "--layers", "2", "--experts", "5", "--out", "x"}),
              HasSubstr("--experts: expected 6..384"));
  EXPECT_THAT(ArgError({"--preset", "v41-flash-slice", "--layers", "41", "--experts", "8", "--out", "x"}),
              HasSubstr("--layers: expected 1..40"));
  EXPECT_THAT(ArgError({"--preset", "v41-flash-slice", "--layers", "two"}),
              HasSubstr("--layers: expected an integer, got 'two'"));
  EXPECT_THAT(
      ArgError({"--preset", "v41-flash-slice", "--layers", "2", "--experts", "8", "--out", "x", "--vocab", "200000"}),
      HasSubstr("--vocab: expected 3..129280"));
  EXPECT_THAT(ArgError({"--preset", "v41-flash-slice", "--bogus", "1"}), HasSubstr("unknown argument '--bogus'"));
  EXPECT_THAT(ArgError({"--preset"}), HasSubstr("--preset: missing value NAME"));

  // The output folder must be new or empty: nothing of an existing model is overwritten.
  ScratchDir scratch;
  std::ofstream(scratch.path() / "config.json") << "{}";
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--out", scratch.path().string()});
  EXPECT_THAT(ArgError(args), HasSubstr("not empty"));
  EXPECT_EQ(RunMakeModelCommand({"--help"}), 0);
}

}  // namespace
}  // namespace deepinfer
