#include "io/safetensors_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The byte at `offset` of tensor `index`: a pure function of its position, so any chunking and
// any thread count must reproduce it.
uint8_t PatternByte(size_t index, uint64_t offset) {
  uint64_t x = (index + 1) * 0x9E3779B97F4A7C15ULL ^ (offset * 0xBF58476D1CE4E5B9ULL);
  x ^= x >> 29;
  return static_cast<uint8_t>(x * 0x94D049BB133111EBULL >> 56);
}

void FillPattern(size_t index, uint64_t offset, std::span<uint8_t> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = PatternByte(index, offset + i);
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<TensorSpec> MixedTensors() {
  return {
      {"odd.u8", DType::kU8, {3}},  // leaves the following tensors unaligned in a plain file
      {"w.f32", DType::kF32, {5, 7}},
      {"b.bf16", DType::kBF16, {11}},
      {"codes.fp8", DType::kF8E4M3, {40, 33}},
      {"scale.e8m0", DType::kF8E8M0, {2, 2}},
      {"packed.i8", DType::kI8, {4, 16}},
      {"empty", DType::kF32, {0, 5}},
      {"scalar", DType::kI64, {}},
  };
}

class SafetensorsWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "deepinfer_st_writer_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Every tensor of `tensors` is in `checkpoint` with its dtype, shape and pattern bytes.
  static void ExpectPattern(const Checkpoint& checkpoint, const std::vector<TensorSpec>& tensors) {
    ASSERT_EQ(checkpoint.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorInfo* info = checkpoint.Find(tensors[i].name);
      ASSERT_NE(info, nullptr) << tensors[i].name;
      EXPECT_EQ(info->dtype, tensors[i].dtype) << tensors[i].name;
      EXPECT_EQ(info->shape, tensors[i].shape) << tensors[i].name;
      ASSERT_EQ(info->nbytes, tensors[i].nbytes()) << tensors[i].name;
      for (size_t b = 0; b < info->nbytes; ++b) {
        ASSERT_EQ(info->data[b], PatternByte(i, b)) << tensors[i].name << " byte " << b;
      }
    }
  }

  fs::path dir_;
};

TEST_F(SafetensorsWriterTest, StreamedChunksRoundTripThroughTheReader) {
  const std::vector<TensorSpec> tensors = MixedTensors();
  const std::string path = (dir_ / "a.safetensors").string();
  {
    SafetensorsWriter writer(path, tensors, {{"format", "pt"}, {"note", "hi \"there\""}});
    EXPECT_EQ(writer.header_bytes() % 8, 0u);
    for (size_t i = 0; i < tensors.size(); ++i) {
      uint64_t expected_offset = 0;
      writer.WriteNext(
          tensors[i].name,
          [&](uint64_t offset, std::span<uint8_t> out) {
            EXPECT_EQ(offset, expected_offset);  // consecutive chunks, in order
            EXPECT_LE(out.size(), 7u);
            expected_offset += out.size();
            FillPattern(i, offset, out);
          },
          /*chunk_bytes=*/7);
      EXPECT_EQ(expected_offset, tensors[i].nbytes());
    }
    writer.Finish();
    EXPECT_EQ(fs::file_size(path), writer.file_bytes());
  }
  const SafetensorsFile file(path);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("note"), "hi \"there\"");
  ExpectPattern(Checkpoint::Open(path), tensors);

  // Header: little-endian length, JSON padded with spaces to a multiple of 8.
  const std::string bytes = ReadAll(path);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + length) % 8, 0u);
  const std::string header = bytes.substr(8, length);
  EXPECT_TRUE(nlohmann::json::parse(header).is_object());
  const size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(header.size() - last - 1, 8u);
}

TEST_F(SafetensorsWriterTest, ParallelWriteAllMatchesSequentialBytes) {
  std::vector<TensorSpec> tensors = MixedTensors();
  tensors.push_back({"big", DType::kBF16, {300, 1000}});
  const TensorFiller fill = [](size_t index, const TensorSpec&, uint64_t offset, std::span<uint8_t> out) {
    FillPattern(index, offset, out);
  };
  const std::string one = (dir_ / "one.safetensors").string();
  const std::string four = (dir_ / "four.safetensors").string();
  {
    SafetensorsWriter writer(one, tensors);
    writer.WriteAll(fill, 1, 4096);
    writer.Finish();
  }
  {
    SafetensorsWriter writer(four, tensors);
    writer.WriteNext("odd.u8", [](uint64_t offset, std::span<uint8_t> out) { FillPattern(0, offset, out); });
    writer.WriteAll(fill, 4, 4096);  // the rest, in parallel
    EXPECT_EQ(writer.written(), tensors.size());
    writer.Finish();
  }
  EXPECT_EQ(ReadAll(one), ReadAll(four));
  ExpectPattern(Checkpoint::Open(four), tensors);
}

TEST_F(SafetensorsWriterTest, ShardsStayUnderTheLimitAndReadBackThroughTheIndex) {
  std::vector<TensorSpec> tensors;
  for (int i = 0; i < 10; ++i) tensors.push_back({"t" + std::to_string(i), DType::kBF16, {100, 10}});  // 2000 B
  tensors.push_back({"huge", DType::kF32, {2000}});                                                    // 8000 B
  tensors.push_back({"tail.u8", DType::kU8, {5}});
  tensors.push_back({"tail.f32", DType::kF32, {3}});

  const auto plan = PlanShards(tensors, 4500);
  // 2 x 2000 per shard; "huge" exceeds the limit alone; the tails share the last shard.
  ASSERT_EQ(plan.size(), 7u);
  EXPECT_EQ(plan[0], (std::vector<size_t>{0, 1}));
  EXPECT_EQ(plan[5], (std::vector<size_t>{10}));
  EXPECT_EQ(plan[6], (std::vector<size_t>{11, 12}));
  EXPECT_EQ(PlanShards(tensors, 0).size(), 1u);

  const CheckpointFiles files = WriteSafetensorsCheckpoint(
      dir_.string(), tensors,
      [](size_t index, const TensorSpec&, uint64_t offset, std::span<uint8_t> out) { FillPattern(index, offset, out); },
      4500, {{"format", "pt"}}, 2);
  ASSERT_EQ(files.files.size(), 7u);
  EXPECT_EQ(fs::path(files.files[0]).filename(), "model-00001-of-00007.safetensors");
  EXPECT_EQ(fs::path(files.index).filename(), "model.safetensors.index.json");
  EXPECT_EQ(files.total_bytes, 10 * 2000u + 8000u + 5u + 12u);
  const nlohmann::json index = nlohmann::json::parse(ReadAll(files.index));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), files.total_bytes);
  EXPECT_EQ(index["weight_map"]["huge"], "model-00006-of-00007.safetensors");
  EXPECT_EQ(index["weight_map"]["tail.u8"], "model-00007-of-00007.safetensors");

  const Checkpoint checkpoint = Checkpoint::Open(dir_.string());
  EXPECT_EQ(checkpoint.files().size(), 7u);
  ExpectPattern(checkpoint, tensors);
  // Inside a file, larger elements come first, so the F32 tail is aligned despite the U8 one.
  const TensorInfo* tail = checkpoint.Find("tail.f32");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tail->data) % 4, 0u);
}

TEST_F(SafetensorsWriterTest, OneShardIsAPlainModelFileAndReplacesAStaleIndex) {
  std::ofstream(dir_ / "model.safetensors.index.json") << R"({"weight_map": {"x": "gone.safetensors"}})";
  const std::vector<TensorSpec> tensors = MixedTensors();
  const CheckpointFiles files = WriteSafetensorsCheckpoint(
      dir_.string(), tensors, [](size_t index, const TensorSpec&, uint64_t offset, std::span<uint8_t> out) {
        FillPattern(index, offset, out);
      });
  ASSERT_EQ(files.files.size(), 1u);
  EXPECT_EQ(fs::path(files.files[0]).filename(), "model.safetensors");
  EXPECT_TRUE(files.index.empty());
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors.index.json"));
  const Checkpoint checkpoint = Checkpoint::Open(dir_.string());
  ExpectPattern(checkpoint, tensors);
  for (const TensorSpec& spec : tensors) {
    const TensorInfo* info = checkpoint.Find(spec.name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(info->data) % DTypeSize(spec.dtype), 0u) << spec.name;
  }
}

// Expects `body` to throw a deepinfer::Error whose message contains every fragment.
template <typename Body>
void ExpectError(Body body, const std::vector<std::string>& fragments) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one containing '" << fragments.front() << "'";
  } catch (const Error& e) {
    for (const std::string& fragment : fragments) EXPECT_THAT(e.what(), HasSubstr(fragment));
  }
}

TEST_F(SafetensorsWriterTest, BadDeclarationsAreRejectedBeforeAnyFileExists) {
  const std::string path = (dir_ / "bad.safetensors").string();
  ExpectError(
      [&] {
        SafetensorsWriter w(path, {{"a", DType::kF32, {1}}, {"a", DType::kU8, {2}}});
      },
      {path, "'a' is declared twice"});
  ExpectError([&] { SafetensorsWriter w(path, {{"", DType::kF32, {1}}}); }, {path, "empty name"});
  ExpectError([&] { SafetensorsWriter w(path, {{"__metadata__", DType::kF32, {1}}}); }, {path, "reserved"});
  ExpectError(
      [&] {
        SafetensorsWriter w(path, {{"neg", DType::kF32, {2, -3}}});
      },
      {path, "'neg'", "negative dimension", "[2, -3]"});
  ExpectError(
      [&] {
        SafetensorsWriter w(path, {{"big", DType::kF32, {int64_t{1} << 40, int64_t{1} << 40}}});
      },
      {path, "'big'", "overflows"});
  ExpectError(
      [&] {
        SafetensorsWriter w(path, {{"big", DType::kI64, {int64_t{1} << 31, int64_t{1} << 31}}});
      },
      {path, "'big'", "overflows the byte size"});
  EXPECT_FALSE(fs::exists(path));
  const std::string nowhere = (dir_ / "no" / "such" / "dir" / "x.safetensors").string();
  ExpectError([&] { SafetensorsWriter w(nowhere, {{"a", DType::kF32, {1}}}); }, {nowhere, "cannot create"});
}

TEST_F(SafetensorsWriterTest, MisuseIsReportedAndUnfinishedFilesAreRemoved) {
  const std::string path = (dir_ / "m.safetensors").string();
  const auto zeros = [](uint64_t, std::span<uint8_t> out) { std::memset(out.data(), 0, out.size()); };
  {
    SafetensorsWriter writer(path, {{"a", DType::kF32, {4}}, {"b", DType::kU8, {4}}});
    EXPECT_TRUE(fs::exists(path));
    ExpectError([&] { writer.WriteNext("b", zeros); }, {path, "out of order", "next declared tensor is 'a'"});
    writer.WriteNext("a", zeros);
    ExpectError([&] { writer.Finish(); }, {path, "after 1 of 2 tensors", "'b'"});
    writer.WriteNext("b", zeros);
    ExpectError([&] { writer.WriteNext("c", zeros); }, {path, "all 2 declared tensors are written"});
    writer.Finish();
    ExpectError([&] { writer.WriteNext("a", zeros); }, {path, "after Finish()"});
    ExpectError([&] { writer.Finish(); }, {path, "after Finish()"});
  }
  EXPECT_TRUE(fs::exists(path));  // finished files stay

  const std::string partial = (dir_ / "partial.safetensors").string();
  {
    SafetensorsWriter writer(partial, {{"a", DType::kF32, {4}}, {"b", DType::kU8, {4}}});
    writer.WriteNext("a", zeros);
  }
  EXPECT_FALSE(fs::exists(partial)) << "a writer destroyed before Finish() must remove its file";

  const std::string failing = (dir_ / "failing.safetensors").string();
  EXPECT_THROW(WriteSafetensorsFile(
                   failing, {{"a", DType::kF32, {1 << 21}}},
                   [](size_t, const TensorSpec&, uint64_t offset, std::span<uint8_t>) {
                     if (offset > 0) throw std::runtime_error("generator failed");
                   },
                   {}, 3),
               std::runtime_error);
  EXPECT_FALSE(fs::exists(failing));

  ExpectError(
      [&] {
        WriteSafetensorsCheckpoint((dir_ / "missing").string(), {{"a", DType::kU8, {1}}}, {});
      },
      {"missing", "not a directory"});
}

}  // namespace
}  // namespace deepinfer
