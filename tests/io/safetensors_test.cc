#include "io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors_fixture.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;

TEST_F(SafetensorsTest, DTypeTable) {
  const std::vector<std::pair<std::string, size_t>> expected = {{"BF16", 2},    {"F16", 2},     {"F32", 4},
                                                                {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I8", 1},
                                                                {"U8", 1},      {"I32", 4},     {"I64", 8}};
  for (const auto& [name, size] : expected) {
    const std::optional<DType> dtype = ParseDType(name);
    ASSERT_TRUE(dtype.has_value()) << name;
    EXPECT_EQ(DTypeName(*dtype), name);
    EXPECT_EQ(DTypeSize(*dtype), size) << name;
  }
  EXPECT_FALSE(ParseDType("F64").has_value());
  EXPECT_FALSE(ParseDType("bf16").has_value());
}

TEST_F(SafetensorsTest, ValidSingleFile) {
  const std::string path = Write("model.safetensors", ValidFile());
  const SafetensorsFile file(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(file.tensors().size(), 2u);

  const Checkpoint checkpoint = Checkpoint::Open(path);
  EXPECT_EQ(checkpoint.size(), 2u);
  EXPECT_EQ(checkpoint.Names(), (std::vector<std::string>{"b", "w"}));
  EXPECT_EQ(checkpoint.files(), std::vector<std::string>{path});
  EXPECT_EQ(checkpoint.Find("missing"), nullptr);

  const TensorInfo* w = checkpoint.Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->name, "w");
  EXPECT_EQ(w->dtype, DType::kF32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->numel(), 6);
  EXPECT_EQ(w->ShapeString(), "[2, 3]");
  EXPECT_EQ(w->nbytes, 24u);
  EXPECT_EQ(w->file, path);
  std::vector<float> values(6);
  std::memcpy(values.data(), w->data, w->nbytes);
  EXPECT_EQ(values, (std::vector<float>{1, 2, 3, 4, 5, 6}));

  const TensorInfo* b = checkpoint.Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::kBF16);
  EXPECT_EQ(b->ShapeString(), "[2]");
  uint16_t bits[2];
  std::memcpy(bits, b->data, sizeof(bits));
  EXPECT_EQ(bits[0], 0x3f80);
  EXPECT_EQ(bits[1], 0xc000);
}

TEST_F(SafetensorsTest, ScalarsEmptyTensorsAndNoMetadata) {
  const std::string header = R"({"s": {"dtype": "I64", "shape": [], "data_offsets": [0, 8]},)"
                             R"( "e": {"dtype": "F16", "shape": [0, 5], "data_offsets": [8, 8]},)"
                             R"( "q": {"dtype": "F8_E4M3", "shape": [3], "data_offsets": [8, 11]}})";
  const std::string path = Write("x.safetensors", Safetensors(header, Bytes<int64_t>({-7}) + "abc"));
  const Checkpoint checkpoint = Checkpoint::Open(path);
  const TensorInfo* s = checkpoint.Find("s");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->numel(), 1);
  EXPECT_EQ(s->ShapeString(), "[]");
  int64_t value = 0;
  std::memcpy(&value, s->data, 8);
  EXPECT_EQ(value, -7);
  const TensorInfo* e = checkpoint.Find("e");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->numel(), 0);
  EXPECT_EQ(e->nbytes, 0u);
  const TensorInfo* q = checkpoint.Find("q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(q->data), q->nbytes), "abc");
  EXPECT_TRUE(SafetensorsFile(path).metadata().empty());
}

struct BadCase {
  std::string label;
  std::string bytes;
  std::string phrase;
};

TEST_F(SafetensorsTest, EachBadInputIsASpecificError) {
  const std::string f32_2x3 = R"("dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24])";
  const std::string data24(24, '\0');
  const std::vector<BadCase> cases = {
      {"short", std::string(5, '\0'), "truncated: 5 bytes, a safetensors file starts with an 8-byte header length"},
      {"empty", "", "truncated: 0 bytes"},
      {"header_past_end", LengthPrefix(1000) + std::string(12, ' '),
       "header length 1000 runs past the end of the file (20 bytes"},
      {"header_len_max", LengthPrefix(~uint64_t{0}) + "{}", "header length 18446744073709551615 runs past the end"},
      {"bad_json", Safetensors(R"({"w": tru})"), "header: not valid JSON: parse error at line 1, column"},
      {"empty_header", Safetensors(""), "header: not valid JSON"},
      {"bad_utf8", Safetensors("{\"w\xff\": {}}"), "header: not valid JSON"},
      {"not_object", Safetensors("[1, 2]"), "header is not a JSON object (got array)"},
      {"entry_not_object", Safetensors(R"({"w": 5})"), "tensor 'w': entry must be a JSON object, got number"},
      {"missing_dtype", Safetensors(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})"),
       "tensor 'w': missing \"dtype\""},
      {"missing_shape", Safetensors(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})"),
       "tensor 'w': missing \"shape\""},
      {"missing_offsets", Safetensors(R"({"w": {"dtype": "F32", "shape": [1]}})"),
       "tensor 'w': missing \"data_offsets\""},
      {"dtype_not_string", Safetensors(R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})"),
       "tensor 'w': \"dtype\" must be a string, got number"},
      {"shape_not_array", Safetensors(R"({"w": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}})"),
       "tensor 'w': \"shape\" must be an array of integers, got string"},
      {"shape_float", Safetensors(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})"),
       "tensor 'w': \"shape\" must be an array of integers, found number 1.5"},
      {"offsets_one", Safetensors(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4]}})"),
       "tensor 'w': \"data_offsets\" must be [begin, end] with non-negative integers, got [4]"},
      {"offsets_negative", Safetensors(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})"),
       "\"data_offsets\" must be [begin, end] with non-negative integers, got [-4,0]"},
      {"offsets_string", Safetensors(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": "0-4"}})"),
       "\"data_offsets\" must be [begin, end]"},
      {"unsupported_dtype", Safetensors(R"({"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})"),
       "tensor 'w': unsupported dtype 'F64' (supported: BF16, F16, F32, F8_E4M3, F8_E8M0, I8, U8, I32, I64)"},
      {"negative_dim", Safetensors(R"({"w": {"dtype": "F32", "shape": [3, -2], "data_offsets": [0, 24]}})", data24),
       "tensor 'w': negative dimension -2 in \"shape\""},
      {"huge_dim", Safetensors(R"({"w": {"dtype": "U8", "shape": [18446744073709551615], "data_offsets": [0, 1]}})"),
       "shape dimension 18446744073709551615 is too large"},
      {"begin_after_end", Safetensors(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", data24),
       "tensor 'w': data_offsets begin > end: [8, 4]"},
      {"end_beyond_data",
       Safetensors(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                   R"( "b": {"dtype": "U8", "shape": [4], "data_offsets": [100, 104]}})",
                   std::string(8, '\0')),
       "tensor 'b': data_offsets [100, 104] end beyond the data section (8 bytes)"},
      {"size_mismatch", Safetensors(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", data24),
       "tensor 'w': byte size mismatch: shape [2, 3] of F32 needs 24 bytes, data_offsets [0, 20] hold 20"},
      {"numel_overflow",
       Safetensors(R"({"w": {"dtype": "U8", "shape": [4294967296, 4294967296, 4], "data_offsets": [0, 0]}})"),
       "tensor 'w': shape [4294967296, 4294967296, 4] overflows the element count"},
      {"bytes_overflow",
       Safetensors(R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})"),
       "tensor 'w': shape [4611686018427387904] of F32 overflows the byte size"},
      {"wrapped_size",  // 2^62 * 4 wraps to 0 in 64 bits; must not be accepted as an empty tensor
       Safetensors(R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 1], "data_offsets": [0, 0]}})"),
       "overflows the byte size"},
      {"overlap",
       Safetensors(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},)"
                   R"( "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}})",
                   std::string(12, '\0')),
       "tensors 'a' [0, 8] and 'b' [4, 12] overlap"},
      {"truncated_data", Safetensors("{\"w\": {" + f32_2x3 + "}}", std::string(21, '\0')),
       "truncated: tensor 'w' data_offsets [0, 24] but the data section has only 21 bytes"},
      {"duplicate_name", Safetensors("{\"w\": {" + f32_2x3 + "}, \"w\": {" + f32_2x3 + "}}", data24),
       "tensor 'w' appears twice in the header"},
      {"metadata_not_object", Safetensors(R"({"__metadata__": ["pt"]})"),
       "\"__metadata__\" must be a JSON object, got array"},
      {"metadata_not_string", Safetensors(R"({"__metadata__": {"format": 1}})"),
       "\"__metadata__\" value for 'format' must be a string, got number"},
      {"hostile_name",  // a newline in a name must not break the one-line message
       Safetensors(R"({"a\nb": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})"),
       "tensor 'a?b': unsupported dtype"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string name = "bad_" + c.label + ".safetensors";
    const std::string path = Write(name, c.bytes);
    const std::string message = ErrorOf([&] { SafetensorsFile file(path); });
    EXPECT_THAT(message, HasSubstr(name));
    EXPECT_THAT(message, HasSubstr(c.phrase));
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    // The checkpoint layer reports the same problem.
    EXPECT_THAT(ErrorOf([&] { Checkpoint::Open(path); }), HasSubstr(c.phrase));
  }
}

TEST_F(SafetensorsTest, EveryTruncationOfAValidFileIsRejected) {
  const std::string bytes = ValidFile();
  for (size_t length = 0; length < bytes.size(); ++length) {
    SCOPED_TRACE(length);
    const std::string path = Write("cut.safetensors", bytes.substr(0, length));
    const std::string message = ErrorOf([&] { SafetensorsFile file(path); });
    EXPECT_THAT(message, HasSubstr("cut.safetensors"));
    EXPECT_TRUE(message.find("truncated") != std::string::npos ||
                message.find("runs past the end of the file") != std::string::npos)
        << message;
  }
}

TEST_F(SafetensorsTest, CorruptedHeaderBytesNeverCrash) {
  // Every header byte replaced by characters that change JSON structure or numbers: each variant must either
  // open (and then stay in bounds) or throw Error, never anything else.
  const std::string bytes = ValidFile();
  const size_t header_end = bytes.size() - 28;  // length prefix and header; 28 data bytes follow
  const std::string replacements = std::string("09-\"[]{},: e.") + '\xff' + '\0';
  int opened = 0;
  for (size_t pos = 0; pos < header_end; ++pos) {
    for (const char r : replacements) {
      std::string corrupt = bytes;
      corrupt[pos] = r;
      const std::string path = Write("fuzz.safetensors", corrupt);
      try {
        const SafetensorsFile file(path);
        for (const TensorInfo& t : file.tensors()) {
          ASSERT_EQ(t.nbytes, static_cast<size_t>(t.numel()) * DTypeSize(t.dtype));
          // Touch every byte: under the sanitizers an out-of-bounds tensor would fault here.
          unsigned sum = 0;
          for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
          (void)sum;
        }
        ++opened;
      } catch (const Error&) {
      }
    }
  }
  EXPECT_GT(opened, 0);  // some replacements (e.g. inside a metadata string) stay valid
}

TEST_F(SafetensorsTest, DirectoryWithModelSafetensors) {
  const std::string path = Write("model/model.safetensors", ValidFile());
  const Checkpoint checkpoint = Checkpoint::Open(Path("model"));
  EXPECT_EQ(checkpoint.files(), std::vector<std::string>{path});
  EXPECT_EQ(checkpoint.Names(), (std::vector<std::string>{"b", "w"}));
}

TEST_F(SafetensorsTest, ShardedDirectoryWithIndex) {
  const std::string shard1 = Write("m/model-00001-of-00002.safetensors",
                                   Safetensors(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},)"
                                               R"( "b": {"dtype": "I32", "shape": [1], "data_offsets": [2, 6]}})",
                                               std::string("\x01\x02", 2) + Bytes<int32_t>({-5})));
  const std::string shard2 = Write("m/model-00002-of-00002.safetensors", OneTensor("c", 9));
  Write("m/model.safetensors.index.json",
        R"({"metadata": {"total_size": 10}, "weight_map": {"a": "model-00001-of-00002.safetensors",)"
        R"( "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
  // A stray file the index does not list must not be opened.
  Write("m/unrelated.safetensors", "garbage");

  const Checkpoint checkpoint = Checkpoint::Open(Path("m"));
  EXPECT_EQ(checkpoint.files(), (std::vector<std::string>{shard1, shard2}));  // each shard once
  EXPECT_EQ(checkpoint.Names(), (std::vector<std::string>{"a", "b", "c"}));
  const TensorInfo* b = checkpoint.Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->file, shard1);
  int32_t value = 0;
  std::memcpy(&value, b->data, 4);
  EXPECT_EQ(value, -5);
  const TensorInfo* c = checkpoint.Find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->file, shard2);
  EXPECT_EQ(c->data[1], 9);

  // The index file itself is accepted as the path too.
  EXPECT_EQ(Checkpoint::Open(Path("m/model.safetensors.index.json")).size(), 3u);
}

TEST_F(SafetensorsTest, ShardsWithoutIndexAreOpenedSorted) {
  const std::string second = Write("d/part-b.safetensors", OneTensor("y", 2));
  const std::string first = Write("d/part-a.safetensors", OneTensor("x", 1));
  Write("d/notes.txt", "not a checkpoint");
  const Checkpoint checkpoint = Checkpoint::Open(Path("d"));
  EXPECT_EQ(checkpoint.files(), (std::vector<std::string>{first, second}));
  EXPECT_EQ(checkpoint.Names(), (std::vector<std::string>{"x", "y"}));
}

TEST_F(SafetensorsTest, DuplicateTensorAcrossShardsWithoutIndex) {
  Write("d/part-a.safetensors", OneTensor("x", 1));
  Write("d/part-b.safetensors", OneTensor("x", 2));
  const std::string message = ErrorOf([&] { Checkpoint::Open(Path("d")); });
  EXPECT_THAT(message, HasSubstr("tensor 'x' appears in two files"));
  EXPECT_THAT(message, HasSubstr("part-a.safetensors"));
  EXPECT_THAT(message, HasSubstr("part-b.safetensors"));
}

TEST_F(SafetensorsTest, IndexErrors) {
  struct IndexCase {
    std::string label;
    std::string index;
    std::string phrase;
  };
  const std::vector<IndexCase> cases = {
      {"missing_shard", R"({"weight_map": {"x": "s1.safetensors", "z": "gone.safetensors"}})",
       "gone.safetensors: no such file (shard listed in "},
      {"absent_tensor", R"({"weight_map": {"x": "s1.safetensors", "q": "s2.safetensors"}})",
       "tensor 'q' is mapped to shard 's2.safetensors' but that file does not contain it"},
      {"tensor_in_two_shards", R"({"weight_map": {"x": "s1.safetensors", "dup": "s2.safetensors"}})",
       "tensor 'x' appears in two files"},
      {"bad_json", R"({"weight_map": )", "model.safetensors.index.json: not valid JSON: parse error"},
      {"deep_json", R"({"weight_map": )" + std::string(100'000, '['), "JSON nested deeper than 66 levels"},
      {"number_overflow", R"({"weight_map": {"x": 1e400}})", "not valid JSON: number overflow parsing '1e400'"},
      {"no_weight_map", R"({"metadata": {}})", "expected a JSON object with a \"weight_map\" object"},
      {"shard_not_string", R"({"weight_map": {"x": 1}})", "weight_map entry for 'x' must be a file name string"},
      {"empty_weight_map", R"({"weight_map": {}})", "weight_map is empty"},
  };
  for (const IndexCase& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string dir = "idx_" + c.label;
    Write(dir + "/s1.safetensors", OneTensor("x", 1));
    if (c.label == "tensor_in_two_shards") {
      Write(dir + "/s2.safetensors", Safetensors(R"({"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
                                                 R"( "dup": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                                                 "ab"));
    } else {
      Write(dir + "/s2.safetensors", OneTensor("y", 2));
    }
    Write(dir + "/model.safetensors.index.json", c.index);
    const std::string message = ErrorOf([&] { Checkpoint::Open(Path(dir)); });
    EXPECT_THAT(message, HasSubstr(c.phrase));
    EXPECT_THAT(message, HasSubstr(c.label == "tensor_in_two_shards" ? "s2.safetensors" : dir));
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST_F(SafetensorsTest, BadShardNamesItsFile) {
  Write("m/s1.safetensors", OneTensor("x", 1));
  Write("m/s2.safetensors", std::string(3, '\0'));
  Write("m/model.safetensors.index.json", R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})");
  EXPECT_THAT(ErrorOf([&] { Checkpoint::Open(Path("m")); }),
              HasSubstr("s2.safetensors: truncated: 3 bytes, a safetensors file starts with an 8-byte header length"));
}

TEST_F(SafetensorsTest, DirectoryWithoutCheckpointAndMissingPath) {
  Write("empty/readme.md", "nothing here");
  fs::create_directories(Path("empty/sub.safetensors"));  // a directory, not a shard
  EXPECT_THAT(ErrorOf([&] { Checkpoint::Open(Path("empty")); }),
              HasSubstr("empty: no model.safetensors.index.json and no *.safetensors files in the directory"));
  EXPECT_THAT(ErrorOf([&] { Checkpoint::Open(Path("nope.safetensors")); }),
              HasSubstr("nope.safetensors: no such file or directory"));
}

}  // namespace
}  // namespace deepinfer
