#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "golden_reader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

using testing::DefaultTokenizer;

std::vector<int32_t> ReadIds(const std::string& path) {
  testing::LittleEndianReader reader(testing::ReadFileBytes(path));
  std::vector<int32_t> ids;
  while (!reader.AtEnd()) ids.push_back(reader.Read<int32_t>());
  return ids;
}

std::vector<int32_t> Encode(std::string_view text) { return DefaultTokenizer().Encode(text); }

// Every corpus file (tools/golden/tokenizer/make_corpus.py) against the ids HF `tokenizers`
// produced for it (encode_golden.py).
TEST(TokenizerEncodeTest, CorpusMatchesHfAndRoundTrips) {
  const std::filesystem::path corpus = testing::kTokenizerDataDir + "/corpus";
  size_t files = 0;
  size_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    if (entry.path().extension() == ".ids") continue;
    SCOPED_TRACE(entry.path().filename().string());
    const std::string text = testing::ReadFileBytes(entry.path().string());
    const std::vector<int32_t> expected = ReadIds(entry.path().string() + ".ids");
    const std::vector<int32_t> ids = Encode(text);
    ASSERT_EQ(ids.size(), expected.size());
    for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], expected[i]) << "at token " << i;
    // Decoding restores the text, with invalid bytes shown as U+FFFD.
    EXPECT_EQ(DefaultTokenizer().Decode(ids), Utf8Lossy(text));
    ++files;
    bytes += text.size();
  }
  EXPECT_EQ(files, 7u);
  EXPECT_GE(bytes, 1'000'000u);
}

TEST(TokenizerEncodeTest, SmallCasesMatchHf) {
  EXPECT_EQ(Encode(""), std::vector<int32_t>{});
  EXPECT_EQ(Encode("hello <think>world</think>\u0085 x"),
            (std::vector<int32_t>{33310, 223, 128821, 29616, 128822, 129, 230, 1527}));
  // Special and added tokens are cut out before pre-tokenization, wherever they occur.
  EXPECT_EQ(Encode("<｜User｜><｜Assistant｜>"), (std::vector<int32_t>{128803, 128804}));
  EXPECT_EQ(Encode("a<｜end▁of▁sentence｜>b"), (std::vector<int32_t>{67, 1, 68}));
}

// Oniguruma (Unicode 16.0 tables) sees U+1FAE8 as a symbol and U+105C0 as a letter, and does
// not count U+180E as whitespace; PCRE2 10.42 alone would disagree on all three.
TEST(TokenizerEncodeTest, UnicodePropertiesFollowOniguruma) {
  EXPECT_EQ(Encode(" \U0001FAE8\U0001FAE8 ok"), (std::vector<int32_t>{7351, 107, 104, 3574, 107, 104, 9109}));
  EXPECT_EQ(Encode("x\U000105C0y"), (std::vector<int32_t>{90, 120577, 248, 225, 91}));
  EXPECT_EQ(Encode("a\u180E\u180Eb"), (std::vector<int32_t>{67, 115522, 239, 115522, 239, 68}));
  EXPECT_EQ(Encode("12345 \uFF11\uFF12\uFF13\uFF14"), (std::vector<int32_t>{6895, 1883, 223, 127167, 25081, 33095}));
}

TEST(TokenizerEncodeTest, InvalidUtf8IsRepairedLikePythonReplace) {
  // Each maximal invalid subsequence becomes U+FFFD before encoding.
  EXPECT_EQ(Encode("a\xE4\xB8"
                   "b"),
            Encode("a\uFFFD"
                   "b"));
  EXPECT_EQ(Encode("\xED\xA0\x80"), Encode("\uFFFD\uFFFD\uFFFD"));
  EXPECT_EQ(Encode(std::string("\0\xFF", 2)), Encode(std::string("\0\uFFFD", 4)));
}

TEST(TokenizerEncodeTest, LongRunsDoNotExhaustRegexStack) {
  const std::string spaces(1 << 20, ' ');
  const std::vector<int32_t> ids = Encode(spaces + "x");
  EXPECT_EQ(DefaultTokenizer().Decode(ids), spaces + "x");
  const std::string letters(1 << 18, 'a');
  EXPECT_EQ(DefaultTokenizer().Decode(Encode(letters)), letters);
}

TEST(TokenizerEncodeTest, ConcurrentEncodesAgree) {
  const std::string text = testing::ReadFileBytes(testing::kTokenizerDataDir + "/corpus/special_tokens.txt");
  const std::vector<int32_t> expected = Encode(text);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) threads.emplace_back([&] { result = Encode(text); });
  for (auto& thread : threads) thread.join();
  for (const auto& result : results) EXPECT_EQ(result, expected);
}

}  // namespace
}  // namespace deepinfer
