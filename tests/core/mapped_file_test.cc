#include "core/mapped_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "core/thread_pool.h"
#include "error_of.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class MappedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "deepinfer_mapped_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, size_t bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << std::string(bytes, 'x');
    return path;
  }

  fs::path dir_;
};

TEST_F(MappedFileTest, MapsRegularFilesOnly) {
  const MappedFile file(Write("a.bin", 10000));
  EXPECT_EQ(file.size(), 10000u);
  EXPECT_EQ(file.data()[9999], 'x');
  EXPECT_TRUE(file.Contains(file.data() + 5));
  EXPECT_FALSE(file.Contains(file.data() + 10000));
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  EXPECT_THAT(ErrorOf([&] { MappedFile fifo((dir_ / "fifo").string()); }),
              HasSubstr("fifo: not a regular file (a FIFO)"));
  EXPECT_THAT(ErrorOf([&] { MappedFile dir(dir_.string()); }), HasSubstr(": not a regular file (a directory)"));
  EXPECT_THAT(ErrorOf([] { MappedFile zero("/dev/zero"); }),
              StartsWith("/dev/zero: not a regular file (a character device)"));
  EXPECT_THAT(ErrorOf([&] { MappedFile gone((dir_ / "gone").string()); }), HasSubstr("gone: no such file"));
}

TEST_F(MappedFileTest, ASigbusInsideAGuardIsAnException) {
  const std::string path = Write("cut.bin", 1 << 20);
  const MappedFile file(path);
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);  // the pages past 4 KB are gone from under the mapping
  volatile unsigned sum = 0;
  try {
    GuardMappedReads([&] {
      for (size_t i = 0; i < file.size(); i += 4096) sum = sum + file.data()[i];
    });
    FAIL() << "no fault";
  } catch (const MappedFileFault& fault) {
    EXPECT_TRUE(file.Contains(fault.address()));
    EXPECT_GE(static_cast<const uint8_t*>(fault.address()), file.data() + 4096);
    EXPECT_THAT(fault.what(), HasSubstr("cut short while in use (SIGBUS"));
  }
  // The guard is gone afterwards, and later guards still work (the signal is not left blocked).
  for (int round = 0; round < 3; ++round) {
    EXPECT_THROW(GuardMappedReads([&] { sum = sum + file.data()[file.size() - 1]; }), MappedFileFault);
  }
  // Nested guards: the innermost catches; other exceptions pass through unchanged.
  GuardMappedReads([&] {
    EXPECT_THROW(GuardMappedReads([&] { sum = sum + file.data()[1 << 19]; }), MappedFileFault);
    EXPECT_THROW(GuardMappedReads([] { throw std::runtime_error("mine"); }), std::runtime_error);
  });
  EXPECT_EQ(file.data()[100], 'x');  // what is still backed reads normally
}

TEST_F(MappedFileTest, ASigbusInAPoolTaskReachesTheCaller) {
  const std::string path = Write("pool.bin", 1 << 20);
  const MappedFile file(path);
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  ThreadPool pool(3);
  std::atomic<unsigned> sum{0};
  EXPECT_THROW(pool.ParallelFor(256,
                                [&](size_t begin, size_t end) {
                                  for (size_t i = begin; i < end; ++i) sum += file.data()[i * 4096];
                                }),
               MappedFileFault);
  // The pool is intact.
  std::atomic<int> ran{0};
  pool.ParallelFor(64, [&](size_t begin, size_t end) { ran += static_cast<int>(end - begin); });
  EXPECT_EQ(ran.load(), 64);
}

}  // namespace
}  // namespace deepinfer
