#include "chat/output_parser.h"

#include <gtest/gtest.h>

#include <random>

#include "chat/parse_in_chunks.h"
#include "core/error.h"
#include "fixture_files.h"

namespace deepinfer {
namespace {

using testing::ChatDataDir;
using testing::FixtureNames;
using testing::ReadJson;

ChatOutputDelta ExpectedOf(const nlohmann::ordered_json& expected) {
  ChatOutputDelta result;
  result.reasoning_content = expected["reasoning_content"].get<std::string>();
  result.content = expected["content"].get<std::string>();
  for (const auto& call : expected["tool_calls"]) {
    result.tool_calls.push_back({call["name"].get<std::string>(), call["arguments"].get<std::string>()});
  }
  return result;
}

void ExpectSame(const ChatOutputDelta& actual, const ChatOutputDelta& expected, const std::string& how) {
  SCOPED_TRACE(how);
  EXPECT_EQ(actual.reasoning_content, expected.reasoning_content);
  EXPECT_EQ(actual.content, expected.content);
  ASSERT_EQ(actual.tool_calls.size(), expected.tool_calls.size());
  for (std::size_t i = 0; i < expected.tool_calls.size(); ++i) {
    EXPECT_EQ(actual.tool_calls[i].name, expected.tool_calls[i].name) << "call " << i;
    EXPECT_EQ(actual.tool_calls[i].arguments, expected.tool_calls[i].arguments) << "call " << i;
  }
}

// Whole text, one byte at a time, and several seeded random chunkings (tags split at boundaries).
void CheckFixture(const nlohmann::ordered_json& fixture) {
  const std::string text = fixture["text"].get<std::string>();
  const bool thinking = fixture["thinking"].get<bool>();
  const ChatOutputDelta expected = ExpectedOf(fixture["expected"]);
  if (!fixture["official"].contains("error")) {
    // Where the official parser succeeds, the lenient rule must agree with it.
    ExpectSame(ExpectedOf(fixture["official"]), expected, "fixture: official vs expected");
  }
  ExpectSame(ParseChatOutput(text, thinking), expected, "whole text");
  ExpectSame(ParseInChunks(text, thinking, [] { return std::size_t{1}; }), expected, "1-byte chunks");
  for (unsigned seed : {1u, 2u, 3u, 42u, 2024u}) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::size_t> size(1, 1 + seed % 23);
    ExpectSame(ParseInChunks(text, thinking, [&] { return size(rng); }), expected,
               "random chunks, seed " + std::to_string(seed));
  }
}

class ParseFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ParseFixtureTest, MatchesOfficialParser) {
  const auto fixture = ReadJson(ChatDataDir() / "parse" / (GetParam() + ".json"));
  SCOPED_TRACE(fixture["description"].get<std::string>());
  CheckFixture(fixture);
}

INSTANTIATE_TEST_SUITE_P(Golden, ParseFixtureTest, ::testing::ValuesIn(FixtureNames("parse")),
                         [](const auto& info) { return info.param; });

TEST(ParseFixtures, Generated) {
  const auto fixtures = ReadJson(ChatDataDir() / "parse_generated.json");
  ASSERT_GE(fixtures.size(), 100u);
  for (const auto& fixture : fixtures) {
    SCOPED_TRACE(fixture["name"].get<std::string>());
    CheckFixture(fixture);
  }
}

TEST(ParseFixtures, EnoughFixtures) {
  int accepted = 0;
  for (const std::string& name : FixtureNames("parse")) {
    accepted += !ReadJson(ChatDataDir() / "parse" / (name + ".json"))["official"].contains("error");
  }
  EXPECT_GE(accepted, 20);
}

TEST(ChatOutputParser, StreamsTextBeforeTheEnd) {
  ChatOutputParser parser(/*thinking=*/true);
  EXPECT_EQ(parser.Feed("Let me").reasoning_content, "Let me");
  EXPECT_EQ(parser.Feed(" think</th").reasoning_content, " think");
  const ChatOutputDelta delta = parser.Feed("ink>Answer\n");
  EXPECT_EQ(delta.reasoning_content, "");
  EXPECT_EQ(delta.content, "Answer");  // The newline might start a tool block; it waits.
  EXPECT_EQ(parser.Feed("more").content, "\nmore");
  EXPECT_EQ(parser.Feed("<｜end▁of▁sentence｜>").content, "");
  EXPECT_TRUE(parser.Finish().empty());
}

TEST(ChatOutputParser, EmitsToolCallsWhenTheBlockCloses) {
  ChatOutputParser parser(/*thinking=*/false);
  EXPECT_TRUE(parser
                  .Feed("\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
                        "<｜DSML｜ parameter name=\"n\" string=\"false\">[1, 2]</｜DSML｜ parameter>\n"
                        "</｜DSML｜ invoke>\n")
                  .empty());
  const ChatOutputDelta delta = parser.Feed("</｜DSML｜ calls>");
  ASSERT_EQ(delta.tool_calls.size(), 1u);
  EXPECT_EQ(delta.tool_calls[0], (ParsedToolCall{"f", "{\"n\": [1, 2]}"}));
  EXPECT_TRUE(parser.Finish().empty());
}

TEST(ChatOutputParser, MalformedBlockFailsEarlyAsContent) {
  ChatOutputParser parser(/*thinking=*/false);
  EXPECT_EQ(parser.Feed("a\n\n<｜DSML｜ calls are described in").content, "a\n\n<｜DSML｜ calls are described in");
  EXPECT_TRUE(parser.Finish().empty());
}

// tool_choice "none": a well-formed block stays content, byte for byte, however it is chunked;
// reasoning is still split off.
TEST(ChatOutputParser, WithoutToolCallsDsmlStaysContent) {
  const std::string block =
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
      "<｜DSML｜ parameter name=\"n\" string=\"false\">1</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  const std::string text = "why</think>ok" + block + "\n\n<｜DSML｜ calls" + "<｜end▁of▁sentence｜>";
  for (const size_t piece : {size_t{1}, size_t{3}, text.size()}) {
    ChatOutputParser parser(/*thinking=*/true, /*tool_calls=*/false);
    ChatOutputDelta total;
    for (size_t pos = 0; pos < text.size(); pos += piece) {
      const ChatOutputDelta d = parser.Feed(std::string_view(text).substr(pos, piece));
      total.reasoning_content += d.reasoning_content;
      total.content += d.content;
      EXPECT_TRUE(d.tool_calls.empty());
    }
    const ChatOutputDelta end = parser.Finish();
    total.content += end.content;
    EXPECT_EQ(total.reasoning_content, "why") << "piece " << piece;
    EXPECT_EQ(total.content, "ok" + block + "\n\n<｜DSML｜ calls") << "piece " << piece;
  }
}

TEST(ChatOutputParser, FeedAfterFinishIsAnInternalError) {
  ChatOutputParser parser(/*thinking=*/false);
  parser.Finish();
  EXPECT_THROW(parser.Feed("x"), Error);
}

}  // namespace
}  // namespace deepinfer
