// The embedded default model's unpacked copy: private to the user, and never trusted unless it
// is byte-for-byte what the binary holds.
#include "cli/default_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "error_of.h"
#include "model/checkpoint_builder.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

mode_t ModeOf(const fs::path& path) {
  struct stat info {};
  EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

TEST(DefaultModel, UnpacksIntoAPrivateFolderAndLoads) {
  ScratchDir temp;
  const fs::path dir = MaterializeDefaultModel(temp.path());
  const fs::path folder = temp.path() / ("deepinfer-" + std::to_string(::geteuid()));
  EXPECT_EQ(dir.parent_path(), folder);
  EXPECT_EQ(ModeOf(folder), 0700u);
  EXPECT_THAT(dir.filename().string(), StartsWith("default-model-"));
  EXPECT_EQ(MaterializeDefaultModel(temp.path()), dir.string());  // reused
  EXPECT_EQ(Model::Load(dir.string())->config().vocab_size, 4096);
}

TEST(DefaultModel, TheProjectTokenizerUnpacksBesideIt) {
  ScratchDir temp;
  const fs::path file = MaterializeProjectTokenizer(temp.path());
  EXPECT_EQ(file.parent_path().parent_path(), temp.path() / ("deepinfer-" + std::to_string(::geteuid())));
  EXPECT_THAT(file.parent_path().filename().string(), StartsWith("project-tokenizer-"));
  EXPECT_EQ(Tokenizer::FromFile(file.string()).size(), 129280u);
  EXPECT_EQ(MaterializeProjectTokenizer(temp.path()), file.string());  // reused
}

TEST(DefaultModel, ATamperedCopyIsReplacedNotUsed) {
  ScratchDir temp;
  const fs::path dir = MaterializeDefaultModel(temp.path());
  const fs::path shard = dir / "model.safetensors";
  const std::string original = ReadBytes(shard);
  std::string tampered = original;
  tampered[tampered.size() - 1] ^= 0x55;  // same size, different weights
  WriteBytes(shard, tampered);
  EXPECT_EQ(MaterializeDefaultModel(temp.path()), dir.string());
  EXPECT_EQ(ReadBytes(shard), original);

  // A file replaced by a symlink (to a same-content file elsewhere) is not trusted either.
  const fs::path elsewhere = temp.path() / "elsewhere.json";
  fs::copy_file(dir / "config.json", elsewhere);
  fs::remove(dir / "config.json");
  fs::create_symlink(elsewhere, dir / "config.json");
  MaterializeDefaultModel(temp.path());
  EXPECT_FALSE(fs::is_symlink(dir / "config.json"));
}

TEST(DefaultModel, AFolderOthersCanWriteIsRefused) {
  ScratchDir temp;
  const fs::path folder = temp.path() / ("deepinfer-" + std::to_string(::geteuid()));
  fs::create_directory(folder);
  ASSERT_EQ(::chmod(folder.c_str(), 0777), 0);
  EXPECT_THAT(ErrorOf([&] { MaterializeDefaultModel(temp.path()); }),
              AllOf(StartsWith(folder.string() + ": not a private folder of this user (a directory, owner uid "),
                    HasSubstr("mode 0777; expected a directory owned by uid"), HasSubstr("remove it or set TMPDIR")));
}

TEST(DefaultModel, ASymlinkedFolderIsRefused) {
  ScratchDir temp;
  fs::create_directory(temp.path() / "planted");
  ASSERT_EQ(::chmod((temp.path() / "planted").c_str(), 0700), 0);
  fs::create_directory_symlink("planted", temp.path() / ("deepinfer-" + std::to_string(::geteuid())));
  EXPECT_THAT(ErrorOf([&] { MaterializeDefaultModel(temp.path()); }),
              HasSubstr("not a private folder of this user (a symlink"));
}

TEST(DefaultModel, AFolderOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to hand a folder to another user";
  ScratchDir temp;
  const fs::path folder = temp.path() / "deepinfer-0";
  fs::create_directory(folder);
  ASSERT_EQ(::chmod(folder.c_str(), 0700), 0);
  ASSERT_EQ(::chown(folder.c_str(), 65534, 65534), 0);
  EXPECT_THAT(ErrorOf([&] { MaterializeDefaultModel(temp.path()); }), HasSubstr("owner uid 65534"));
}

}  // namespace
}  // namespace deepinfer::testing
