#include "tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/model_directory.h"
#include "error_of.h"
#include "golden_reader.h"

namespace deepinfer {
namespace {

using testing::DefaultTokenizer;
using ::testing::HasSubstr;
using ::testing::StartsWith;

uint64_t Fnv1a64(std::string_view bytes, uint64_t hash) {
  for (const char byte : bytes) hash = (hash ^ static_cast<uint8_t>(byte)) * 0x100000001B3ULL;
  return hash;
}

TEST(TokenizerTest, SizeAndSpecialTokens) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  EXPECT_EQ(tokenizer.size(), 129280u);
  const std::vector<std::pair<std::string, int32_t>> expected = {
      {"<｜begin▁of▁sentence｜>", 0}, {"<｜end▁of▁sentence｜>", 1}, {"<｜▁pad▁｜>", 2},
      {"<｜User｜>", 128803},         {"<｜Assistant｜>", 128804},  {"<think>", 128821},
      {"</think>", 128822},           {"｜DSML｜", 128825},         {"<｜latest_reminder｜>", 128828},
  };
  for (const auto& [token, id] : expected) {
    EXPECT_EQ(tokenizer.TokenToId(token), id) << token;
    EXPECT_EQ(tokenizer.IdToToken(id), token);
  }
  EXPECT_TRUE(tokenizer.IsSpecial(0));
  EXPECT_TRUE(tokenizer.IsSpecial(129279));
  EXPECT_FALSE(tokenizer.IsSpecial(128803));  // chat-role tokens are added but not "special"
  EXPECT_FALSE(tokenizer.IsSpecial(1000));
  EXPECT_FALSE(tokenizer.IsSpecial(-1));
  EXPECT_FALSE(tokenizer.TokenToId("<｜System｜>").has_value());
  EXPECT_EQ(tokenizer.IdToToken(223), "Ġ");  // vocabulary tokens keep the byte-level alphabet
  EXPECT_THROW(tokenizer.IdToToken(129280), Error);
  EXPECT_THROW(tokenizer.IdToToken(-1), Error);
}

TEST(TokenizerTest, DecodeMatchesHfForEveryId) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  testing::LittleEndianReader golden(testing::ReadFileBytes(testing::kTokenizerDataDir + "/decode_golden.bin"));
  const auto block_size = golden.Read<uint32_t>();
  const auto count = golden.Read<uint32_t>();
  ASSERT_EQ(count, tokenizer.size());
  for (uint32_t start = 0; start < count; start += block_size) {
    uint64_t hash = 0xCBF29CE484222325ULL;
    for (uint32_t id = start; id < std::min(count, start + block_size); ++id) {
      const int32_t token = static_cast<int32_t>(id);
      const std::string text = tokenizer.Decode(std::span<const int32_t>(&token, 1));
      const auto length = static_cast<uint32_t>(text.size());
      hash = Fnv1a64(std::string_view(reinterpret_cast<const char*>(&length), sizeof(length)), hash);
      hash = Fnv1a64(text, hash);
    }
    ASSERT_EQ(hash, golden.Read<uint64_t>())
        << "decode differs from HF for some id in [" << start << ", " << start + block_size << ")";
  }

  // Exact texts for byte tokens, added tokens, lossy tokens and multi-token sequences.
  const auto records = golden.Read<uint32_t>();
  for (uint32_t record = 0; record < records; ++record) {
    const bool skip_special = golden.Read<uint8_t>() != 0;
    std::vector<int32_t> ids(golden.Read<uint32_t>());
    for (int32_t& id : ids) id = golden.Read<int32_t>();
    const std::string expected = golden.ReadBytes(golden.Read<uint32_t>());
    ASSERT_EQ(tokenizer.Decode(ids, skip_special), expected) << "record " << record << ", first id " << ids[0];
  }
  EXPECT_TRUE(golden.AtEnd());
}

TEST(TokenizerTest, DecodeJoinsBytesAcrossTokensAndSkipsUnknownIds) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  // "中" is E4 B8 AD; byte tokens for its bytes decode to U+FFFD alone but to "中" together.
  const std::vector<int32_t> bytes = {*tokenizer.TokenToId("ä"), *tokenizer.TokenToId("¸"), *tokenizer.TokenToId("Ń")};
  EXPECT_EQ(tokenizer.Decode(bytes), "中");
  EXPECT_EQ(tokenizer.Decode(std::vector<int32_t>{bytes[0], bytes[1]}), "\xEF\xBF\xBD");
  EXPECT_EQ(tokenizer.Decode(std::vector<int32_t>{0, 33310, 1}), "<｜begin▁of▁sentence｜>hello<｜end▁of▁sentence｜>");
  EXPECT_EQ(tokenizer.Decode(std::vector<int32_t>{0, 33310, 1}, /*skip_special_tokens=*/true), "hello");
  EXPECT_EQ(tokenizer.Decode(std::vector<int32_t>{-5, 33310, 129280, 1 << 30}), "hello");
}

TEST(TokenizerTest, TokenBytesAreTheRawPieces) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  // One byte of a three-byte character, not U+FFFD: what logprobs' `bytes` report.
  EXPECT_EQ(tokenizer.TokenBytes(*tokenizer.TokenToId("ä")), "\xE4");
  EXPECT_EQ(tokenizer.TokenBytes(33310), "hello");
  EXPECT_EQ(tokenizer.TokenBytes(128803), "<｜User｜>");
  EXPECT_EQ(tokenizer.TokenBytes(-1), "");
  EXPECT_EQ(tokenizer.TokenBytes(129280), "");
}

TEST(TokenizerTest, RejectsMalformedFiles) {
  const auto message_of = [](std::string_view json) {
    try {
      Tokenizer::FromJsonText(json, "bad.json");
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message_of("{"), HasSubstr("bad.json: not valid JSON"));
  EXPECT_THAT(message_of("{}"), HasSubstr("bad.json: tokenizer: expected a field \"model\""));
  EXPECT_THAT(message_of(R"({"model": {"type": "Unigram"}})"), HasSubstr("model.type: expected \"BPE\""));
  EXPECT_THAT(message_of(R"({"normalizer": {"type": "NFC"}, "model": {}})"), HasSubstr("normalizer: expected null"));
  EXPECT_THAT(message_of(R"({"model": {"vocab": {"a": 0}, "merges": ["a b"]}, "decoder": {"type": "ByteLevel"},
                             "pre_tokenizer": {"type": "ByteLevel", "use_regex": false}})"),
              HasSubstr("model.merges[0] (\"a b\"): expected both parts"));
  EXPECT_THAT(message_of(R"({"model": {"vocab": {}, "merges": []}, "decoder": {"type": "ByteLevel"},
                             "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated"}})"),
              HasSubstr("pre_tokenizer: expected the last step to be ByteLevel"));
  EXPECT_THAT(message_of(R"({"model": {"vocab": {}, "merges": []}, "decoder": {"type": "ByteLevel"},
                             "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                               {"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated"},
                               {"type": "ByteLevel", "use_regex": false}]}})"),
              HasSubstr("does not compile"));
  EXPECT_THAT(message_of(R"({"model": {"vocab": {}, "merges": []}, "decoder": {"type": "ByteLevel"},
                             "pre_tokenizer": {"type": "Metaspace"}})"),
              HasSubstr("pre_tokenizer step 0: expected a Split step or a final ByteLevel step, got \"Metaspace\""));
  EXPECT_THROW(Tokenizer::FromFile("/nonexistent/tokenizer.json"), Error);
}

// A minimal valid tokenizer.json with the given vocab and added_tokens JSON.
std::string TinyTokenizer(const std::string& vocab, const std::string& added = "[]") {
  return R"({"added_tokens": )" + added + R"(, "model": {"vocab": )" + vocab +
         R"(, "merges": []}, "decoder": {"type": "ByteLevel"},
            "pre_tokenizer": {"type": "ByteLevel", "use_regex": false}})";
}

TEST(TokenizerTest, HostileIdsAreRejectedBeforeAnythingIsSized) {
  EXPECT_EQ(Tokenizer::FromJsonText(TinyTokenizer(R"({"a": 0, "b": 1})"), "t.json").size(), 2u);
  // One id of 300,000,000 used to size the id tables (10 GB).
  EXPECT_THAT(ErrorOf([] { Tokenizer::FromJsonText(TinyTokenizer(R"({"a": 0, "b": 300000000})"), "t.json"); }),
              StartsWith("t.json: model.vocab[\"b\"]: id 300000000 is outside [0, 16777216)"));
  EXPECT_THAT(ErrorOf([] {
                Tokenizer::FromJsonText(TinyTokenizer(R"({"a": 0})", R"([{"id": 2147483647, "content": "x"}])"),
                                        "t.json");
              }),
              StartsWith("t.json: added_tokens entry: id 2147483647 is outside [0, 16777216)"));
  EXPECT_THAT(ErrorOf([] { Tokenizer::FromJsonText(TinyTokenizer(R"({"a": 2147483646})"), "t.json"); }),
              HasSubstr("id 2147483646 is outside [0, 16777216)"));
  EXPECT_THAT(ErrorOf([] { Tokenizer::FromJsonText(TinyTokenizer(R"({"a": -1})"), "t.json"); }),
              HasSubstr("id -1 is outside"));
  EXPECT_THAT(ErrorOf([] { Tokenizer::FromJsonText(TinyTokenizer(R"({"a": 1.5})"), "t.json"); }),
              HasSubstr("model.vocab[\"a\"]: id must be an integer"));
  // Below the bound but sparse: 2 tokens cannot claim 10 million ids.
  EXPECT_THAT(ErrorOf([] { Tokenizer::FromJsonText(TinyTokenizer(R"({"a": 0, "b": 10000000})"), "t.json"); }),
              StartsWith("t.json: ids reach 10000000 but only 2 tokens are defined"));
}

TEST(TokenizerTest, StringSplitPatternsCompile) {
  // {"String": ...} patterns are literals (PCRE2 refuses them together with PCRE2_UCP).
  const Tokenizer tokenizer = Tokenizer::FromJsonText(
      R"({"model": {"vocab": {"a": 0, "b": 1, "\u0120": 2}, "merges": []}, "decoder": {"type": "ByteLevel"},
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated"},
            {"type": "ByteLevel", "use_regex": false}]}})",
      "t.json");
  EXPECT_EQ(tokenizer.Encode("a b"), (std::vector<int32_t>{0, 2, 1}));
}

TEST(TokenizerTest, HostileJsonIsAnErrorNamingTheFile) {
  EXPECT_THAT(ErrorOf([] { Tokenizer::FromJsonText(TinyTokenizer(std::string(100'000, '[')), "t.json"); }),
              StartsWith("t.json: JSON nested deeper than 68 levels"));
  EXPECT_THAT(ErrorOf([] { Tokenizer::FromJsonText(TinyTokenizer(R"({"a": 1e400})"), "t.json"); }),
              StartsWith("t.json: not valid JSON: number overflow"));
  EXPECT_THAT(ErrorOf([] { Tokenizer::FromFile("/dev/zero"); }),
              StartsWith("/dev/zero: not a regular file (a character device)"));
  const std::string fifo = ::testing::TempDir() + "tokenizer_fifo.json";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(ErrorOf([&] { Tokenizer::FromFile(fifo); }), StartsWith(fifo + ": not a regular file (a FIFO)"));
  std::remove(fifo.c_str());
}

// tokenizer_config.json decides whether a raw text prompt starts with BOS, as HF's tokenizer(text).
TEST(TokenizerTest, TextPromptsFollowTheModelDirectorysTokenizerConfig) {
  const std::filesystem::path dir = ::testing::TempDir() + "tokenizer_prompt_rule";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto write = [&](const char* name, const std::string& text) { std::ofstream(dir / name) << text; };
  write("tokenizer.json", TinyTokenizer(R"({"a": 1, "b": 2})", R"([{"id": 0, "content": "<s>", "special": true}])"));
  const auto load = [&] { return Tokenizer::FromModelDirectory(ModelDirectory(dir.string())); };

  EXPECT_EQ(load()->EncodeTextPrompt("ab"), (std::vector<int32_t>{1, 2}));  // no tokenizer_config.json
  write("tokenizer_config.json", R"({"add_bos_token": true, "bos_token": {"__type": "AddedToken", "content": "<s>"}})");
  EXPECT_EQ(load()->EncodeTextPrompt("ab"), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(load()->Encode("ab"), (std::vector<int32_t>{1, 2}));
  write("tokenizer_config.json", R"({"add_bos_token": true, "bos_token": "<s>"})");
  EXPECT_EQ(load()->prompt_bos(), 0);
  write("tokenizer_config.json", R"({"add_bos_token": false, "bos_token": "<s>"})");
  EXPECT_EQ(load()->prompt_bos(), std::nullopt);

  const std::string config = (dir / "tokenizer_config.json").string();
  write("tokenizer_config.json", R"({"add_bos_token": "yes"})");
  EXPECT_THAT(ErrorOf(load), StartsWith(config + ": \"add_bos_token\" must be true or false, got \"yes\""));
  write("tokenizer_config.json", R"({"add_bos_token": true})");
  EXPECT_THAT(ErrorOf(load), StartsWith(config + ": \"add_bos_token\" is true but \"bos_token\" is not a token"));
  write("tokenizer_config.json", R"({"add_bos_token": true, "bos_token": "<bos>"})");
  EXPECT_THAT(ErrorOf(load), StartsWith(config + ": \"bos_token\" <bos> is not a token of tokenizer.json"));
  write("tokenizer_config.json", std::string(100'000, '['));
  EXPECT_THAT(ErrorOf(load), StartsWith(config + ": JSON nested deeper than 67 levels"));
  std::filesystem::remove(dir / "tokenizer.json");
  EXPECT_FALSE(load().has_value());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer
