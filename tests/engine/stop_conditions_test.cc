#include "engine/stop_conditions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// Loading takes a few hundred milliseconds, so all tests share one immutable instance.
const Tokenizer& DefaultTokenizer() {
  static const Tokenizer tokenizer = Tokenizer::FromFile(DEEPINFER_SOURCE_DIR "/data/tokenizer/tokenizer.json");
  return tokenizer;
}

constexpr int32_t kEos = 1;  // <｜end▁of▁sentence｜>

// The id of the single-byte token for `byte`, through GPT-2's byte-to-unicode alphabet.
int32_t ByteToken(uint8_t byte) {
  char32_t code_point = byte;
  const bool printable = (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
  if (!printable) {
    int shifted = 0;
    for (int b = 0; b < byte; ++b) {
      if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) ++shifted;
    }
    code_point = 256 + shifted;
  }
  std::string token;
  AppendUtf8(code_point, token);
  const std::optional<int32_t> id = DefaultTokenizer().TokenToId(token);
  EXPECT_TRUE(id.has_value()) << "no single-byte token for byte " << int{byte};
  return id.value_or(0);
}

// One token per byte: every multi-byte character is split across tokens.
std::vector<int32_t> ByteTokens(std::string_view bytes) {
  std::vector<int32_t> ids;
  for (char c : bytes) ids.push_back(ByteToken(static_cast<uint8_t>(c)));
  return ids;
}

struct Generated {
  std::vector<std::string> pieces;  // text emitted after each token
  std::string text;                 // all of it
  StopStep last;
  size_t tokens_used = 0;
};

Generated Generate(StopChecker& checker, const std::vector<int32_t>& ids) {
  Generated run;
  for (int32_t id : ids) {
    StopStep step = checker.Append(id);
    EXPECT_TRUE(IsValidUtf8(step.text)) << "partial UTF-8 emitted after token " << run.tokens_used;
    run.pieces.push_back(step.text);
    run.text += step.text;
    ++run.tokens_used;
    run.last = step;
    if (step.finished()) break;
  }
  return run;
}

// ---- StopStringMatcher: text only ----

TEST(StopStringMatcherTest, StopStringSplitAcrossChunksIsHeldThenCut) {
  StopStringMatcher matcher({"</end>"});
  EXPECT_EQ(matcher.Feed("Hello </").text, "Hello ");
  EXPECT_EQ(matcher.held(), "</");
  StopStringMatcher::Result result = matcher.Feed("en");
  EXPECT_EQ(result.text, "");
  EXPECT_FALSE(result.matched);
  result = matcher.Feed("d> and more");
  EXPECT_EQ(result.text, "");
  ASSERT_TRUE(result.matched);
  EXPECT_EQ(*result.matched, 0u);
  EXPECT_TRUE(matcher.matched());
  // Nothing after a match.
  EXPECT_EQ(matcher.Feed("x").text, "");
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopStringMatcherTest, HeldTextIsReleasedWhenItStopsMatching) {
  StopStringMatcher matcher({"</end>"});
  EXPECT_EQ(matcher.Feed("a</e").text, "a");
  EXPECT_EQ(matcher.Feed("x").text, "</ex");
  // A later '<' can start a match again.
  EXPECT_EQ(matcher.Feed("b<").text, "b");
  EXPECT_EQ(matcher.Flush(), "<");
}

TEST(StopStringMatcherTest, EarliestEndingStopStringWinsAndIncludeKeepsIt) {
  {
    StopStringMatcher matcher({"abcd", "bc"});
    const StopStringMatcher::Result result = matcher.Feed("xabcd");
    EXPECT_EQ(result.text, "xa");
    EXPECT_EQ(result.matched, 1u);
  }
  {
    StopStringMatcher matcher({"cd", "bcd"});  // same end: the longer one
    const StopStringMatcher::Result result = matcher.Feed("abcde");
    EXPECT_EQ(result.text, "a");
    EXPECT_EQ(result.matched, 1u);
  }
  {
    StopStringMatcher matcher({"STOP"}, /*include_stop_string=*/true);
    EXPECT_EQ(matcher.Feed("go ST").text, "go ");
    const StopStringMatcher::Result result = matcher.Feed("OP tail");
    EXPECT_EQ(result.text, "STOP");
    EXPECT_EQ(result.matched, 0u);
  }
}

TEST(StopStringMatcherTest, NeverEmitsAPartialUtf8Character) {
  StopStringMatcher matcher({});
  EXPECT_EQ(matcher.Feed("a\xE4").text, "a");
  EXPECT_EQ(matcher.Feed("\xB8").text, "");
  EXPECT_EQ(matcher.Feed("\xAD!").text, "中!");
  // Four-byte character one byte at a time.
  const std::string emoji = "\U0001FAE8";
  std::string out;
  for (char c : emoji) {
    const std::string piece = matcher.Feed(std::string(1, c)).text;
    EXPECT_TRUE(IsValidUtf8(piece));
    out += piece;
  }
  EXPECT_EQ(out, emoji);
  // At the end an incomplete character becomes U+FFFD; invalid bytes are not held.
  EXPECT_EQ(matcher.Feed("x\xF0\x9F").text, "x");
  EXPECT_EQ(matcher.Flush(), "\uFFFD");
  EXPECT_EQ(matcher
                .Feed("\xFF"
                      "a")
                .text,
            "\uFFFD"
            "a");
}

TEST(StopStringMatcherTest, MultiByteStopStringSplitInsideACharacter) {
  StopStringMatcher matcher({"止"});  // E6 AD A2
  EXPECT_EQ(matcher.Feed("ab\xE6").text, "ab");
  EXPECT_EQ(matcher.Feed("\xAD").text, "");
  const StopStringMatcher::Result result = matcher.Feed("\xA2 after");
  EXPECT_EQ(result.text, "");
  EXPECT_TRUE(result.matched);
  // A prefix of a multi-byte stop string that then diverges is released whole.
  StopStringMatcher other({"中文"});
  EXPECT_EQ(other.Feed("x中").text, "x");
  EXPECT_EQ(other.Feed("国").text, "中国");
}

// Any chunking of the same bytes gives the same text and the same match.
TEST(StopStringMatcherTest, ChunkingDoesNotChangeTheResult) {
  const std::string text = "The answer is 42.\n\n中文 text <|stop|> ignored \U0001FAE8 tail";
  for (const std::vector<std::string>& stops : std::vector<std::vector<std::string>>{
           {"<|stop|>"}, {"\n\n"}, {"文 t"}, {"\U0001FAE8"}, {"nothing", "never"}, {"42", "answer"}}) {
    StopStringMatcher whole(stops);
    const StopStringMatcher::Result expected = whole.Feed(text);
    const std::string expected_text = expected.text + whole.Flush();
    Rng rng(17);
    for (int trial = 0; trial < 200; ++trial) {
      StopStringMatcher matcher(stops);
      std::string out;
      std::optional<size_t> matched;
      for (size_t pos = 0; pos < text.size();) {
        const size_t size = 1 + rng.Next() % 5;
        const StopStringMatcher::Result result = matcher.Feed(std::string_view(text).substr(pos, size));
        ASSERT_TRUE(IsValidUtf8(result.text));
        out += result.text;
        if (result.matched) matched = result.matched;
        pos += size;
      }
      out += matcher.Flush();
      ASSERT_EQ(out, expected_text) << "stops[0] = " << stops[0] << ", trial " << trial;
      ASSERT_EQ(matched, expected.matched);
    }
  }
}

// ---- IncrementalDetokenizer ----

TEST(IncrementalDetokenizerTest, WaitsForTheLastByteOfACharacter) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  IncrementalDetokenizer detokenizer(tokenizer, /*skip_special_tokens=*/true);
  std::vector<int32_t> ids = ByteTokens("a中");  // 61 | E4 | B8 | AD
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(detokenizer.Append(id));
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "", "", "中"}));
  EXPECT_EQ(detokenizer.Flush(), "");
}

TEST(IncrementalDetokenizerTest, ConcatenationEqualsDecodeOfEveryPrefix) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  const std::string text = "Hello, 世界! \U0001FAE8\U0001FAE8 ok — naïve café <｜end▁of▁sentence｜> fin";
  for (const std::vector<int32_t>& ids : {tokenizer.Encode(text), ByteTokens("x \U0001FAE8 y 世")}) {
    IncrementalDetokenizer detokenizer(tokenizer, /*skip_special_tokens=*/false);
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::string piece = detokenizer.Append(ids[i]);
      ASSERT_TRUE(IsValidUtf8(piece)) << "token " << i;
      out += piece;
      // What was emitted is always a prefix of the full decode.
      const std::string full = tokenizer.Decode(std::span<const int32_t>(ids).first(i + 1));
      ASSERT_TRUE(full.starts_with(out)) << "token " << i;
    }
    out += detokenizer.Flush();
    EXPECT_EQ(out, tokenizer.Decode(ids));
  }
}

TEST(IncrementalDetokenizerTest, FlushShowsAnUnfinishedCharacterAsReplacement) {
  IncrementalDetokenizer detokenizer(DefaultTokenizer(), true);
  const std::vector<int32_t> ids = ByteTokens("ok\xE4\xB8");
  std::string out;
  for (int32_t id : ids) out += detokenizer.Append(id);
  EXPECT_EQ(out, "ok");
  EXPECT_EQ(detokenizer.Flush(), "\uFFFD");
}

// ---- StopChecker ----

TEST(StopCheckerTest, StopStringSpanningSeveralTokens) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  const std::vector<int32_t> ids = tokenizer.Encode("Sure. Here it is: 1, 2, 3.\n###END### and then more text");
  StopParams params;
  params.stop = {"###END###"};
  StopChecker checker(params, kEos, &tokenizer);
  const Generated run = Generate(checker, ids);
  EXPECT_EQ(run.text, "Sure. Here it is: 1, 2, 3.\n");
  EXPECT_EQ(run.last.finish, FinishReason::kStopString);
  EXPECT_EQ(run.last.stop_string, "###END###");
  EXPECT_EQ(OpenAiFinishReason(run.last.finish), "stop");
  EXPECT_LT(run.tokens_used, ids.size());
  EXPECT_TRUE(checker.finished());
  // The stop string took more than one token, and the text before it was held back meanwhile.
  const std::vector<int32_t> stop_ids = tokenizer.Encode("###END###");
  EXPECT_GT(stop_ids.size(), 1u);
}

TEST(StopCheckerTest, StopStringInsideSplitUtf8Bytes) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  StopParams params;
  params.stop = {"中"};
  StopChecker checker(params, kEos, &tokenizer);
  const Generated run = Generate(checker, ByteTokens("a中b"));
  EXPECT_EQ(run.pieces, (std::vector<std::string>{"a", "", "", ""}));
  EXPECT_EQ(run.last.finish, FinishReason::kStopString);
  EXPECT_EQ(run.tokens_used, 4u);
}

TEST(StopCheckerTest, PartialCharacterNeverEmittedWithoutStopStrings) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  StopChecker checker(StopParams{}, kEos, &tokenizer);
  const Generated run = Generate(checker, ByteTokens("é\U0001FAE8z"));
  EXPECT_EQ(run.pieces, (std::vector<std::string>{"", "é", "", "", "", "\U0001FAE8", "z"}));
  EXPECT_FALSE(run.last.finished());
}

TEST(StopCheckerTest, EosStopsUnlessIgnoredAndItsTextIsNotShown) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  std::vector<int32_t> ids = tokenizer.Encode("Hi there");
  ids.push_back(kEos);
  ids.push_back(tokenizer.Encode("!")[0]);
  {
    StopParams params;
    params.skip_special_tokens = false;  // even when special tokens would be shown
    StopChecker checker(params, kEos, &tokenizer);
    const Generated run = Generate(checker, ids);
    EXPECT_EQ(run.text, "Hi there");
    EXPECT_EQ(run.last.finish, FinishReason::kStopToken);
    EXPECT_EQ(run.last.stop_token, kEos);
    EXPECT_EQ(run.tokens_used, ids.size() - 1);
  }
  {
    StopParams params;
    params.ignore_eos = true;
    StopChecker checker(params, kEos, &tokenizer);
    const Generated run = Generate(checker, ids);
    EXPECT_EQ(run.text, "Hi there!");  // skip_special_tokens hides EOS
    EXPECT_FALSE(run.last.finished());
  }
  {
    // Explicit stop ids stop even with ignore_eos; the text held for a possible stop string is released.
    StopParams params;
    params.ignore_eos = true;
    params.stop_token_ids = {ids.back()};
    params.stop = {"there!!"};
    StopChecker checker(params, kEos, &tokenizer);
    const Generated run = Generate(checker, ids);
    EXPECT_EQ(run.text, "Hi there");
    EXPECT_EQ(run.last.finish, FinishReason::kStopToken);
    EXPECT_EQ(run.last.stop_token, ids.back());
  }
}

TEST(StopCheckerTest, MaxTokensReleasesHeldText) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  StopParams params;
  params.max_tokens = 3;
  params.stop = {"abc"};
  StopChecker checker(params, kEos, &tokenizer);
  // "x", "a", "b": "ab" is held as a possible start of "abc" until the length limit releases it.
  const Generated run = Generate(checker, ByteTokens("xabc"));
  EXPECT_EQ(run.pieces, (std::vector<std::string>{"x", "", "ab"}));
  EXPECT_EQ(run.last.finish, FinishReason::kMaxTokens);
  EXPECT_EQ(OpenAiFinishReason(run.last.finish), "length");
  EXPECT_EQ(checker.num_tokens(), 3);

  // A stop string completed by the last allowed token is a stop, not a length finish.
  params.max_tokens = 4;
  StopChecker exact(params, kEos, &tokenizer);
  const Generated stopped = Generate(exact, ByteTokens("xabc"));
  EXPECT_EQ(stopped.text, "x");
  EXPECT_EQ(stopped.last.finish, FinishReason::kStopString);

  // An unfinished character at the limit is shown as U+FFFD.
  params.max_tokens = 2;
  params.stop = {};
  StopChecker cut(params, kEos, &tokenizer);
  EXPECT_EQ(Generate(cut, ByteTokens("a中")).text, "a\uFFFD");
}

TEST(StopCheckerTest, IncludeStopStringInOutput) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  StopParams params;
  params.stop = {"</answer>"};
  params.include_stop_string_in_output = true;
  StopChecker checker(params, kEos, &tokenizer);
  const Generated run = Generate(checker, tokenizer.Encode("<answer>7</answer> trailing"));
  EXPECT_EQ(run.text, "<answer>7</answer>");
  EXPECT_EQ(run.last.finish, FinishReason::kStopString);
}

TEST(StopCheckerTest, FlushAtAnExternalEnd) {
  const Tokenizer& tokenizer = DefaultTokenizer();
  StopParams params;
  params.stop = {"abc"};
  StopChecker checker(params, kEos, &tokenizer);
  EXPECT_EQ(Generate(checker, ByteTokens("xab")).text, "x");
  EXPECT_EQ(checker.Flush(), "ab");
  EXPECT_TRUE(checker.finished());
}

TEST(StopCheckerTest, WorksWithoutATokenizerForTokenConditions) {
  StopParams params;
  params.max_tokens = 5;
  StopChecker checker(params, kEos, nullptr);
  EXPECT_FALSE(checker.Append(10).finished());
  EXPECT_EQ(checker.Append(kEos).finish, FinishReason::kStopToken);
  StopChecker length(params, std::nullopt, nullptr);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(length.Append(kEos).finished());
  EXPECT_EQ(length.Append(kEos).finish, FinishReason::kMaxTokens);
}

TEST(StopCheckerTest, ValidationNamesTheBadField) {
  const auto rejects = [](const StopParams& params, const char* message) {
    EXPECT_THAT([&] { ValidateStopParams(params, 100); }, ThrowsMessage<Error>(HasSubstr(message)));
  };
  StopParams p;
  p.max_tokens = 0;
  rejects(p, "max_tokens must be >= 1, got 0");
  p = {};
  p.stop_token_ids = {5, 100};
  rejects(p, "stop_token_ids names token id 100, outside the vocabulary of 100 tokens");
  p = {};
  p.stop = {"ok", ""};
  rejects(p, "stop string 1 is empty");
  p.stop = {"\xE4\xB8"};
  rejects(p, "stop string 0 is not valid UTF-8");
  EXPECT_THAT([&] { StopChecker checker(p, kEos, &DefaultTokenizer()); },
              ThrowsMessage<Error>(HasSubstr("not valid UTF-8")));
  p.stop = {"x"};
  EXPECT_THAT([&] { StopChecker checker(p, kEos, nullptr); }, ThrowsMessage<Error>(HasSubstr("need a tokenizer")));
  EXPECT_NO_THROW(ValidateStopParams(StopParams{}, 100));
}

}  // namespace
}  // namespace deepinfer
