#include "chat/chat_encoding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "chat/py_json.h"
#include "core/error.h"
#include "error_of.h"
#include "fixture_files.h"

namespace deepinfer {
namespace {

using testing::ChatDataDir;
using testing::FixtureNames;
using testing::ReadJson;

class PromptFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PromptFixtureTest, MatchesOfficialEncoder) {
  const auto fixture = ReadJson(ChatDataDir() / "prompt" / (GetParam() + ".json"));
  SCOPED_TRACE(fixture["description"].get<std::string>());
  if (fixture.contains("error")) {
    EXPECT_THROW(
        {
          const ChatRequest request = ParseChatRequestJson(fixture["request"]);
          RenderChatPrompt(request.messages, request.options);
        },
        Error)
        << "official encoder raised " << fixture["error"].get<std::string>();
    return;
  }
  const ChatRequest request = ParseChatRequestJson(fixture["request"]);
  EXPECT_EQ(RenderChatPrompt(request.messages, request.options), fixture["prompt"].get<std::string>());
}

INSTANTIATE_TEST_SUITE_P(Golden, PromptFixtureTest, ::testing::ValuesIn(FixtureNames("prompt")),
                         [](const auto& info) { return info.param; });

TEST(PromptFixtures, EnoughFixtures) {
  int rendered = 0;
  for (const std::string& name : FixtureNames("prompt")) {
    rendered += !ReadJson(ChatDataDir() / "prompt" / (name + ".json")).contains("error");
  }
  EXPECT_GE(rendered, 30);
}

TEST(ChatEncoding, ProgrammaticMessages) {
  ChatMessage system{"system", "Be brief.", "", {}, "", "", nullptr};
  ChatMessage user{"user", "Hi", "", {}, "", "", nullptr};
  ChatOptions options;
  options.thinking = true;
  options.reasoning_effort = "max";
  EXPECT_EQ(RenderChatPrompt({system, user}, options),
            "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 100 (range 1-100, the higher the value, the more "
            "thorough the reasoning)\n\nBe brief.<｜User｜>Hi<｜Assistant｜><think>");
}

TEST(ChatEncoding, UnknownRoleIsRejected) {
  ChatMessage message{"robot", "x", "", {}, "", "", nullptr};
  EXPECT_THROW(RenderChatPrompt({message}, ChatOptions()), Error);
}

TEST(ChatEncoding, PlainJsonOverloadSortsKeys) {
  // nlohmann::json cannot keep key order; the overload still works, with sorted schema keys.
  const auto request = nlohmann::json::parse(
      R"({"messages": [{"role": "user", "content": "q"}],
          "tools": [{"type": "function", "function": {"name": "f", "description": "d"}}]})");
  const ChatRequest parsed = ParseChatRequestJson(request);
  const std::string prompt = RenderChatPrompt(parsed.messages, parsed.options);
  EXPECT_NE(prompt.find(R"({"description": "d", "name": "f"})"), std::string::npos);
}

TEST(ReasoningEffort, ParsesNumbersAndNames) {
  EXPECT_EQ(ResolveReasoningEffort(ParseReasoningEffort("1")), 1);
  EXPECT_EQ(ResolveReasoningEffort(ParseReasoningEffort("100")), 100);
  EXPECT_EQ(ResolveReasoningEffort(ParseReasoningEffort("low")), 25);
  EXPECT_EQ(ResolveReasoningEffort(ParseReasoningEffort("high")), 50);
  EXPECT_EQ(ResolveReasoningEffort(ParseReasoningEffort("xhigh")), 75);
  EXPECT_EQ(ResolveReasoningEffort(ParseReasoningEffort("max")), 100);
  EXPECT_EQ(ResolveReasoningEffort(ReasoningEffort()), 50);
  EXPECT_THROW(ParseReasoningEffort("0"), Error);
  EXPECT_THROW(ParseReasoningEffort("101"), Error);
  EXPECT_THROW(ParseReasoningEffort("medium"), Error);
  EXPECT_THROW(ParseReasoningEffort(""), Error);
  EXPECT_THROW(ParseReasoningEffort("5x"), Error);
}

TEST(ChatRequestJson, ErrorsNameTheField) {
  auto message_of = [](const char* text) {
    try {
      ParseChatRequestJson(nlohmann::ordered_json::parse(text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of(R"([{"role": "wizard"}])").find("messages[0].role: unknown role \"wizard\""), std::string::npos);
  EXPECT_NE(message_of(R"({"messages": 3})").find("messages: expected an array"), std::string::npos);
  EXPECT_NE(message_of(R"([{"role": "user", "content": [{"type": "image_url"}]}])").find("messages[0].content[0]"),
            std::string::npos);
  EXPECT_NE(message_of(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}])")
                .find("messages[0].tool_calls[0].function: missing \"arguments\""),
            std::string::npos);
  EXPECT_NE(message_of(R"({"messages": [], "reasoning_effort": 1.5})").find("reasoning_effort"), std::string::npos);
}

TEST(ChatRequestFile, ReportsMissingAndInvalidFiles) {
  const auto dir = std::filesystem::temp_directory_path() / "deepinfer_chat_request_test";
  std::filesystem::create_directories(dir);
  EXPECT_THROW(LoadChatRequestFile((dir / "missing.json").string()), Error);
  const auto bad = dir / "bad.json";
  std::ofstream(bad) << "{not json";
  try {
    LoadChatRequestFile(bad.string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos);
  }
  const auto good = dir / "good.json";
  std::ofstream(good) << R"([{"role": "user", "content": "hi"}])";
  EXPECT_EQ(LoadChatRequestFile(good.string()).messages.size(), 1u);
  std::filesystem::remove_all(dir);
}

TEST(ChatRequestJson, HostileNestingAndNumbersAreErrors) {
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  const std::string texts[] = {
      R"([{"role": "user", "content": )" + deep + "}]",
      R"([{"role": "user", "content": [{"type": "text", "text": )" + deep + "}]}]",
      R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f",
          "parameters": )" +
          deep + "}}]}",
  };
  for (const std::string& text : texts) {
    EXPECT_THAT(ErrorOf([&] { ParseChatRequestText(text, "m.json"); }),
                ::testing::StartsWith("m.json: JSON nested deeper than 128 levels"));
  }
  EXPECT_THAT(ErrorOf([] { ParseChatRequestText(R"([{"role": "user", "content": 1e400}])", "m.json"); }),
              ::testing::StartsWith("m.json: not valid JSON: number overflow parsing '1e400'"));
  // Nesting within the limit renders (Python's spelling, no recursion trouble).
  const std::string nested = std::string(100, '[') + std::string(100, ']');
  const ChatRequest request = ParseChatRequestText(
      R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f",
          "parameters": )" +
          nested + "}}]}",
      "m.json");
  EXPECT_NE(RenderChatPrompt(request.messages, request.options).find(nested), std::string::npos);
  // Values built in memory: the json overload and PyJsonDumps refuse what they cannot bound.
  nlohmann::json built = 1;
  for (int i = 0; i < 100'000; ++i) built = nlohmann::json::array({std::move(built)});
  EXPECT_THAT(ErrorOf([&] { ParseChatRequestJson(built); }), ::testing::HasSubstr("nested deeper than 128 levels"));
  nlohmann::ordered_json ordered = 1;
  for (int i = 0; i < 100'000; ++i) ordered = nlohmann::ordered_json::array({std::move(ordered)});
  EXPECT_THAT(ErrorOf([&] { PyJsonDumps(ordered); }), ::testing::HasSubstr("nested deeper than 256 levels"));
}

TEST(ChatRequestFile, RejectsFilesThatAreNotRegular) {
  EXPECT_THAT(ErrorOf([] { LoadChatRequestFile("/dev/zero"); }),
              ::testing::StartsWith("messages file /dev/zero: not a regular file (a character device)"));
  EXPECT_THAT(ErrorOf([] { LoadChatRequestFile("/"); }),
              ::testing::StartsWith("messages file /: not a regular file (a directory)"));
}

TEST(PyJson, FloatReprMatchesPython) {
  // Expected strings are Python 3 repr() values.
  EXPECT_EQ(PyFloatRepr(0.0), "0.0");
  EXPECT_EQ(PyFloatRepr(-0.0), "-0.0");
  EXPECT_EQ(PyFloatRepr(1.0), "1.0");
  EXPECT_EQ(PyFloatRepr(1.5), "1.5");
  EXPECT_EQ(PyFloatRepr(0.1), "0.1");
  EXPECT_EQ(PyFloatRepr(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(PyFloatRepr(1e-4), "0.0001");
  EXPECT_EQ(PyFloatRepr(1e-5), "1e-05");
  EXPECT_EQ(PyFloatRepr(1.5e-7), "1.5e-07");
  EXPECT_EQ(PyFloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(PyFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PyFloatRepr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(PyFloatRepr(12345678901234567.0), "1.2345678901234568e+16");
  EXPECT_EQ(PyFloatRepr(1.5e300), "1.5e+300");
  EXPECT_EQ(PyFloatRepr(5e-324), "5e-324");
  EXPECT_EQ(PyFloatRepr(123456789.125), "123456789.125");
  EXPECT_EQ(PyFloatRepr(-2.5e-10), "-2.5e-10");
}

TEST(PyJson, DumpsLikePython) {
  const auto value = nlohmann::ordered_json::parse(
      R"({"z": 1, "a": [true, null, -3, 18446744073709551615, 2.0], "s": "é\"\\\n\t\u0001\u007f", "e": {}, "l": []})");
  EXPECT_EQ(PyJsonDumps(value),
            "{\"z\": 1, \"a\": [true, null, -3, 18446744073709551615, 2.0], \"s\": \"é\\\"\\\\\\n\\t\\u0001\x7f\", "
            "\"e\": {}, \"l\": []}");
}

}  // namespace
}  // namespace deepinfer
