// Structured output at the request level: forced DSML tool calls read back by the output parser
// into arguments that validate (against the independent reference), calls rendered by the chat
// encoder accepted by the grammar, and the front door's sources, conflicts and errors.
#include "chat/structured_output.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "chat/chat_encoding.h"
#include "chat/chat_tokens.h"
#include "chat/output_parser.h"
#include "chat/tool_call_grammar.h"
#include "structured/json_reference.h"
#include "structured/random_document.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

const Json& Tools() {
  static const Json tools = Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["city"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
        "query": {"type": ["string", "null"]},
        "filters": {"type": "object", "properties": {"tag": {"type": "string"}, "max": {"type": "number"}},
                    "additionalProperties": false},
        "ids": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
        "exact": {"type": "boolean"}},
        "required": ["query", "exact"]}}},
    {"type": "function", "function": {"name": "ping"}}
  ])");
  return tools;
}

const Json& ParametersOf(const std::string& name) {
  for (const Json& tool : Tools()) {
    if (tool["function"]["name"] == name) {
      static const Json kEmpty = Json{{"type", "object"}, {"additionalProperties", false}};
      return tool["function"].contains("parameters") ? tool["function"]["parameters"] : kEmpty;
    }
  }
  throw std::runtime_error("no tool " + name);
}

TEST(ToolCallGrammarTest, GeneratedCallsParseIntoValidArguments) {
  std::mt19937 rng(5);
  for (const std::optional<std::string>& forced :
       {std::optional<std::string>(), std::optional<std::string>("search")}) {
    const auto grammar = CompileToolCallGrammar(Tools(), ToolCallChoice{forced, true});
    int documents = 0, calls = 0;
    for (int attempt = 0; attempt < 600 && documents < 60; ++attempt) {
      const std::optional<std::string> doc = RandomDocument(*grammar, rng, 900);
      if (!doc) continue;
      ++documents;
      const ChatOutputDelta parsed = ParseChatOutput(*doc, /*thinking=*/false);
      ASSERT_EQ(parsed.content, "") << *doc;
      ASSERT_FALSE(parsed.tool_calls.empty()) << *doc;
      for (const ParsedToolCall& call : parsed.tool_calls) {
        ++calls;
        if (forced) {
          ASSERT_EQ(call.name, *forced);
        }
        ASSERT_TRUE(reference::Accepts(ParametersOf(call.name), call.arguments))
            << call.name << " " << call.arguments << "\nfrom " << *doc;
      }
      if (forced) {
        ASSERT_EQ(parsed.tool_calls.size(), 1u);
      }
    }
    EXPECT_GE(documents, 30);
    EXPECT_GE(calls, documents);
  }
}

TEST(ToolCallGrammarTest, AcceptsCallsTheEncoderRenders) {
  const auto grammar = CompileToolCallGrammar(Tools(), ToolCallChoice{});
  const std::vector<std::vector<ChatToolCall>> cases = {
      {{"1", "get_weather", R"({"city": "Paris", "days": 3})"}},
      {{"1", "get_weather", R"({"city": "a\nb<c", "unit": "celsius"})"},
       {"2", "search", R"({"query": null, "filters": {"tag": "x", "max": 1.5e-07}, "exact": true})"}},
      {{"1", "ping", "{}"}},
      {{"1", "search", R"({"query": "", "ids": [1, -2], "exact": false})"}},
  };
  for (const auto& calls : cases) {
    ChatMessage user, assistant;
    user.role = "user";
    user.content = "hi";
    assistant.role = "assistant";
    assistant.content = "";
    assistant.tool_calls = calls;
    const std::string prompt = RenderChatPrompt({user, assistant}, ChatOptions{});
    const size_t begin = prompt.find(chat_tokens::kToolBlockMarker);
    const size_t end = prompt.rfind(chat_tokens::kEos);
    ASSERT_NE(begin, std::string::npos);
    const std::string block = prompt.substr(begin, end - begin);
    EXPECT_TRUE(grammar->Accepts(block)) << block;
  }
  // Strings go raw with string="true"; JSON for a string is not what the encoder writes.
  const std::string open = "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n";
  const std::string close = "\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  EXPECT_TRUE(
      grammar->Accepts(open + "<｜DSML｜ parameter name=\"city\" string=\"true\">Rome</｜DSML｜ parameter>" + close));
  EXPECT_FALSE(grammar->Accepts(
      open + "<｜DSML｜ parameter name=\"city\" string=\"false\">\"Rome\"</｜DSML｜ parameter>" + close));
  EXPECT_FALSE(grammar->Accepts(open + "<｜DSML｜ parameter name=\"days\" string=\"false\">3</｜DSML｜ parameter>" +
                                close));  // city is required
  EXPECT_FALSE(grammar->Accepts(open + "<｜DSML｜ parameter name=\"city\" string=\"true\">Rome</｜DSML｜ parameter>\n" +
                                "<｜DSML｜ parameter name=\"days\" string=\"false\">15</｜DSML｜ parameter>" + close));
  // A raw value may not contain the parameter end tag.
  EXPECT_FALSE(grammar->Accepts(open + "<｜DSML｜ parameter name=\"city\" string=\"true\">a/｜DSML｜ parameter" +
                                "</｜DSML｜ parameter>" + close));
}

TEST(ToolCallGrammarTest, ForcedChoicesAndErrors) {
  const auto one = CompileToolCallGrammar(Tools(), ToolCallChoice{std::nullopt, false});
  const std::string ping = "<｜DSML｜ invoke name=\"ping\">\n\n</｜DSML｜ invoke>";
  EXPECT_TRUE(one->Accepts("\n\n<｜DSML｜ calls>\n" + ping + "\n</｜DSML｜ calls>"));
  EXPECT_FALSE(one->Accepts("\n\n<｜DSML｜ calls>\n" + ping + "\n" + ping + "\n</｜DSML｜ calls>"));
  const auto many = CompileToolCallGrammar(Tools(), ToolCallChoice{});
  EXPECT_TRUE(many->Accepts("\n\n<｜DSML｜ calls>\n" + ping + "\n" + ping + "\n</｜DSML｜ calls>"));
  const auto error = [](const Json& tools, ToolCallChoice choice) {
    try {
      CompileToolCallGrammar(tools, choice);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(error(Tools(), ToolCallChoice{"nope", true}), HasSubstr("no tool named \"nope\""));
  EXPECT_THAT(error(Json::array(), ToolCallChoice{}), HasSubstr("non-empty tools array"));
  EXPECT_THAT(error(Json::parse(R"([{"type": "function", "function": {"name": "a b"}}])"), ToolCallChoice{}),
              HasSubstr("tools[0].function.name"));
  // A "type" that is not a string is an error naming the tool, not a JSON type exception (a
  // fuzzer found it; corpus/chat_request/tool_type_array.json).
  for (const char* type : {R"([{"role": "user"}])", "7", "null", R"({"a": 1})"}) {
    EXPECT_THAT(
        error(Json::parse(std::string(R"([{"type": )") + type + R"(, "function": {"name": "f"}}])"), ToolCallChoice{}),
        HasSubstr("tools[0]: expected {\"type\": \"function\""))
        << type;
  }
  EXPECT_THAT(
      error(Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters":
                  {"type": "object", "properties": {"x": {"type": "array", "uniqueItems": true}}}}}])"),
            ToolCallChoice{}),
      HasSubstr("tools[0].function.parameters: #/properties/x: unsupported JSON Schema keyword \"uniqueItems\""));
  EXPECT_THAT(error(Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters":
                  {"anyOf": [{"type": "object"}]}}}])"),
                    ToolCallChoice{}),
              HasSubstr("\"anyOf\" at the top of the parameters schema is not supported"));
}

std::shared_ptr<const TokenVocabulary> SmallVocabulary() {
  std::vector<std::string> bytes = {"<eos>"};
  std::vector<bool> text = {false};
  for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b))), text.push_back(true);
  bytes.push_back("</think>");
  text.push_back(true);
  return TokenVocabulary::FromTokens(std::move(bytes), std::move(text));
}

std::string FrontDoorError(const std::string& request) {
  try {
    CompileStructuredOutput(Json::parse(request), SmallVocabulary());
  } catch (const StructuredOutputError& e) {
    return e.field() + " | " + e.what();
  }
  return "";
}

bool Allows(const std::shared_ptr<const Constraint>& c, std::string_view text) {
  ConstraintMatcher m(c, {0});
  for (char ch : text) {
    if (!m.Accept(static_cast<unsigned char>(ch))) return false;
  }
  return m.can_end();
}

TEST(StructuredOutputTest, EverySourceCompiles) {
  const auto v = SmallVocabulary();
  const auto compile = [&](const std::string& request) { return CompileStructuredOutput(Json::parse(request), v); };
  EXPECT_EQ(compile(R"({"messages": []})"), nullptr);
  EXPECT_EQ(compile(R"({"response_format": {"type": "text"}, "tool_choice": "auto", "tools": []})"), nullptr);
  const auto object = compile(R"({"response_format": {"type": "json_object"}})");
  EXPECT_TRUE(Allows(object, R"({"a": [1, {}]})"));
  EXPECT_FALSE(Allows(object, "[1]"));
  const auto schema = compile(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "n",
      "strict": true, "schema": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
      "additionalProperties": false}}}})");
  EXPECT_TRUE(Allows(schema, R"({"x": 5})"));
  EXPECT_FALSE(Allows(schema, R"({"x": "5"})"));
  EXPECT_EQ(schema->options().description, "json_schema \"n\"");
  const auto as_text = compile(R"({"guided_json": "{\"type\": \"boolean\"}"})");
  EXPECT_TRUE(Allows(as_text, "false"));
  EXPECT_TRUE(Allows(compile(R"({"structured_outputs": {"regex": "[0-9]{3}-x"}})"), "123-x"));
  EXPECT_FALSE(Allows(compile(R"({"guided_regex": "[0-9]{3}-x"})"), "12-x"));
  EXPECT_TRUE(Allows(compile(R"({"structured_outputs": {"choice": ["yes", "no"]}})"), "no"));
  EXPECT_FALSE(Allows(compile(R"({"guided_choice": ["yes", "no"]})"), "nope"));
  EXPECT_TRUE(Allows(compile(R"({"structured_outputs": {"json_object": true}})"), "{}"));
  const auto tool = compile(R"({"tool_choice": {"type": "function", "function": {"name": "ping"}},
      "tools": [{"type": "function", "function": {"name": "ping"}}]})");
  EXPECT_TRUE(
      Allows(tool, "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"ping\">\n\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));
}

TEST(StructuredOutputTest, ToolChoiceIsIgnoredWhereTheApiHasNoTools) {
  const auto v = SmallVocabulary();
  const Json forced = Json::parse(
      R"({"tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})");
  EXPECT_NE(CompileStructuredOutput(forced, v), nullptr);
  EXPECT_EQ(CompileStructuredOutput(forced, v, {.tool_choice = false}), nullptr);
  EXPECT_EQ(CompileStructuredOutput(Json::parse(R"({"tool_choice": 7})"), v, {.tool_choice = false}), nullptr);
}

TEST(StructuredOutputTest, WhichToolChoicesForceACall) {
  EXPECT_TRUE(ForcesToolCall("required"));
  EXPECT_TRUE(ForcesToolCall(Json::parse(R"({"type": "function", "function": {"name": "f"}})")));
  EXPECT_FALSE(ForcesToolCall("auto"));
  EXPECT_FALSE(ForcesToolCall("none"));
  EXPECT_FALSE(ForcesToolCall(Json()));
}

TEST(StructuredOutputTest, ThinkingFreesTheReasoning) {
  const auto v = SmallVocabulary();
  const auto c = CompileStructuredOutput(
      Json::parse(R"({"guided_choice": ["A", "B"], "chat_template_kwargs": {"thinking": true}})"), v);
  EXPECT_EQ(c->options().free_until, "</think>");
  EXPECT_TRUE(Allows(c, "Let me think: it is not C.</think>B"));
  EXPECT_FALSE(Allows(c, "Let me think: it is not C.</think>C"));
  ConstraintMatcher m(c, {0});
  EXPECT_FALSE(m.IsAllowed(0));                         // no end before the answer
  EXPECT_TRUE(m.IsAllowed(static_cast<int32_t>(256)));  // "</think>"
  // The caller's own knowledge wins over chat_template_kwargs.
  EXPECT_EQ(
      CompileStructuredOutput(Json::parse(R"({"guided_choice": ["A"], "chat_template_kwargs": {"thinking": true}})"), v,
                              {.thinking = false})
          ->options()
          .free_until,
      "");
}

TEST(StructuredOutputTest, ErrorsNameTheField) {
  EXPECT_EQ(FrontDoorError(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema":
      {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": true}}}}}})"),
            "response_format | response_format: json_schema.schema: #/properties/tags: unsupported JSON Schema keyword "
            "\"uniqueItems\"");
  EXPECT_THAT(FrontDoorError(R"({"response_format": {"type": "yaml"}})"), HasSubstr("response_format | "));
  EXPECT_THAT(FrontDoorError(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "n"}}})"),
              HasSubstr("json_schema.schema: missing"));
  EXPECT_THAT(FrontDoorError(R"({"response_format": {"type": "json_schema", "json_schema": {"schema": {},
      "strictly": true}}})"),
              HasSubstr("json_schema.strictly: unknown field"));
  EXPECT_THAT(FrontDoorError(R"({"guided_regex": "(a)\\1"})"), HasSubstr("guided_regex | guided_regex: regex"));
  EXPECT_THAT(FrontDoorError(R"({"guided_choice": []})"), HasSubstr("non-empty array of strings"));
  EXPECT_THAT(FrontDoorError(R"({"structured_outputs": {"grammar": "root ::= x"}})"),
              HasSubstr("structured_outputs: grammar: not supported"));
  // A key or pattern with a newline (found by chat_request_fuzz) still gives a one-line error.
  EXPECT_THAT(FrontDoorError(R"({"structured_outputs": {"rege\nx": "[)*:\nab"}})"),
              HasSubstr("structured_outputs: rege?x: not supported"));
  EXPECT_THAT(FrontDoorError(R"({"guided_regex": "[)*:\nab"})"), HasSubstr("regex /[)*:?ab/: missing ']'"));
  EXPECT_THAT(FrontDoorError(R"({"structured_outputs": {"regex": "a", "choice": ["a"]}})"), HasSubstr("exactly one"));
  EXPECT_THAT(FrontDoorError(R"({"guided_regex": "a", "response_format": {"type": "json_object"}})"),
              HasSubstr("guided_regex | guided_regex: cannot be combined with response_format"));
  EXPECT_THAT(FrontDoorError(R"({"tool_choice": "required"})"), HasSubstr("tool_choice | "));
  EXPECT_THAT(
      FrontDoorError(R"({"tool_choice": "always", "tools": [{"type": "function", "function": {"name": "f"}}]})"),
      HasSubstr("expected \"auto\", \"none\", \"required\""));
  EXPECT_THAT(FrontDoorError(R"({"guided_decoding_backend": "outlines", "guided_regex": "a"})"),
              HasSubstr("guided_decoding_backend | "));
  EXPECT_THAT(FrontDoorError(R"({"guided_grammar": "x"})"),
              HasSubstr("guided_grammar | guided_grammar: not supported"));
}

// A schema given as JSON text (vLLM's guided_json) is parsed within the chat-request limits.
TEST(StructuredOutputTest, SchemaTextIsParsedWithinTheRequestLimits) {
  EXPECT_THAT(FrontDoorError(R"({"guided_json": "{\"type\": "})"), HasSubstr("guided_json | guided_json: "));
  EXPECT_THAT(FrontDoorError(R"({"guided_json": "{\"type\": "})"), HasSubstr("not valid JSON"));
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "[";
  EXPECT_THAT(FrontDoorError(nlohmann::ordered_json{{"guided_json", deep}}.dump()),
              HasSubstr("JSON nested deeper than 128 levels"));
  EXPECT_NO_THROW(
      CompileStructuredOutput(Json::parse(R"({"guided_json": "{\"type\": \"integer\"}"})"), SmallVocabulary()));
}

}  // namespace
}  // namespace deepinfer
