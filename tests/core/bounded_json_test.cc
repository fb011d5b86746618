#include "core/bounded_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "error_of.h"

namespace deepinfer {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr JsonLimits kLimits{1 << 20, 8};

std::string Nested(int depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

TEST(BoundedJson, ParsesValidTextInBothForms) {
  const std::string text = R"({"b": [1, 2.5, "x", null, true], "a": {"c": -3}})";
  const nlohmann::json sorted = ParseJsonBounded(text, "t.json", kLimits);
  EXPECT_EQ(sorted["b"][1], 2.5);
  EXPECT_EQ(sorted["a"]["c"], -3);
  EXPECT_EQ(sorted.begin().key(), "a");
  const nlohmann::ordered_json ordered = ParseOrderedJsonBounded(text, "t.json", kLimits);
  EXPECT_EQ(ordered.begin().key(), "b");
  EXPECT_EQ(ordered.dump(), nlohmann::ordered_json::parse(text).dump());
  EXPECT_EQ(ParseJsonBounded("7", "t", kLimits), 7);
}

TEST(BoundedJson, RejectsTextOverTheSizeLimit) {
  EXPECT_THAT(ErrorOf([] {
                ParseJsonBounded(std::string(100, ' ') + "1", "big.json", JsonLimits{64, 8});
              }),
              StartsWith("big.json: 101 bytes exceed the 64-byte limit"));
}

TEST(BoundedJson, DepthIsCheckedBeforeAnythingRecurses) {
  EXPECT_NO_THROW(ParseJsonBounded(Nested(8), "t", kLimits));
  EXPECT_THAT(ErrorOf([] { ParseJsonBounded(Nested(9), "deep.json", kLimits); }),
              AllOf(StartsWith("deep.json: JSON nested deeper than 8 levels (at /0/0/0/0/0/0/0/0)")));
  // 200,000 levels would overflow the stack of any recursive parser or dump.
  const std::string deep = std::string(200'000, '[');
  EXPECT_THAT(ErrorOf([&] {
                ParseJsonBounded(deep, "deep.json", JsonLimits{1 << 20, 64});
              }),
              HasSubstr("nested deeper than 64 levels"));
  EXPECT_THAT(ErrorOf([&] {
                ParseOrderedJsonBounded("{\"a\":" + deep, "deep.json", JsonLimits{1 << 20, 64});
              }),
              StartsWith("deep.json: JSON nested deeper than 64 levels (at /a/0/0/0"));
  // The path in the message stays short however deep the limit.
  EXPECT_THAT(ErrorOf([&] {
                ParseJsonBounded(deep, "deep.json", JsonLimits{1 << 20, 1000});
              }),
              AllOf(HasSubstr("nested deeper than 1000 levels (at /0/0/0"), HasSubstr("/...)")));
  // Brackets inside strings are text, not nesting.
  EXPECT_NO_THROW(ParseJsonBounded("[\"" + std::string(1000, '[') + "\"]", "t", kLimits));
}

TEST(BoundedJson, LibraryExceptionsBecomeErrorsNamingTheSource) {
  EXPECT_THAT(ErrorOf([] { ParseJsonBounded(R"({"x": 1e400})", "cfg.json", kLimits); }),
              StartsWith("cfg.json: not valid JSON: number overflow parsing '1e400'"));
  EXPECT_THAT(ErrorOf([] { ParseOrderedJsonBounded("[-1e400]", "m.json", kLimits); }),
              StartsWith("m.json: not valid JSON: number overflow"));
  EXPECT_THAT(ErrorOf([] { ParseJsonBounded("{\"a\": tru}", "x.json", kLimits); }),
              StartsWith("x.json: not valid JSON: parse error at line 1, column"));
  EXPECT_THAT(ErrorOf([] { ParseJsonBounded("\"\xff\"", "u.json", kLimits); }), StartsWith("u.json: not valid JSON"));
  EXPECT_THAT(ErrorOf([] { ParseJsonBounded("", "e.json", kLimits); }), StartsWith("e.json: not valid JSON"));
  EXPECT_THAT(ErrorOf([] { ParseJsonBounded("[1] [2]", "two.json", kLimits); }),
              StartsWith("two.json: not valid JSON"));
  // Control bytes echoed from the input never break the one-line message.
  EXPECT_THAT(ErrorOf([] { ParseJsonBounded("[\n\x01]", "c.json", kLimits); }), StartsWith("c.json: not valid JSON"));
}

TEST(BoundedJson, DuplicateKeysAreRejectedInBothForms) {
  const std::string text = R"({"a": {"k": 1, "j": 2, "k": 3}})";
  EXPECT_THAT(ErrorOf([&] { ParseJsonBounded(text, "d.json", kLimits); }),
              StartsWith("d.json: key 'k' appears twice in one object (at /a/k)"));
  EXPECT_THAT(ErrorOf([&] { ParseOrderedJsonBounded(text, "d.json", kLimits); }),
              StartsWith("d.json: key 'k' appears twice in one object (at /a/k)"));
  // Python's reading: the last value, at the first key's position.
  const JsonLimits python{1 << 20, 8, DuplicateKeys::kLastWins};
  EXPECT_EQ(ParseOrderedJsonBounded(text, "d.json", python).dump(), R"({"a":{"k":3,"j":2}})");
  EXPECT_EQ(ParseJsonBounded(text, "d.json", python).dump(), R"({"a":{"j":2,"k":3}})");
  EXPECT_EQ(ParseOrderedJsonBounded(R"({"k": {"x": 1}, "k": [2]})", "d", python).dump(), R"({"k":[2]})");
  // The same key in different objects is fine.
  EXPECT_NO_THROW(ParseOrderedJsonBounded(R"([{"k": 1}, {"k": 2}])", "t", kLimits));
}

TEST(BoundedJson, ManyKeysParseInLinearTime) {
  // 200k members: quadratic duplicate detection (or nlohmann's callback parser) would take minutes.
  std::string text = "{";
  for (int i = 0; i < 200'000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  text += "}";
  const JsonLimits limits{64 << 20, 4};
  EXPECT_EQ(ParseJsonBounded(text, "t", limits).size(), 200'000u);
  const nlohmann::ordered_json ordered = ParseOrderedJsonBounded(text, "t", limits);
  ASSERT_EQ(ordered.size(), 200'000u);
  EXPECT_EQ(ordered.begin().key(), "k0");
  EXPECT_EQ(ordered["k199999"], 199999);
}

TEST(BoundedJson, BoundedDumpIsShortAndNeverDeep) {
  EXPECT_EQ(BoundedDump(nlohmann::json::parse(R"([-4,0])"), 100), "[-4,0]");
  EXPECT_EQ(BoundedDump(nlohmann::json(1.5), 100), "1.5");
  const nlohmann::json long_string = std::string(100'000, 'x');
  EXPECT_EQ(BoundedDump(long_string, 10), "\"xxxxxxxxx...");
  nlohmann::json deep = 1;
  for (int i = 0; i < 100'000; ++i) deep = nlohmann::json::array({std::move(deep)});
  const std::string dumped = BoundedDump(deep, 1000);
  EXPECT_EQ(dumped, "[[[[[[[[[...]]]]]]]]]");  // 8 levels, then the 9th elided
  nlohmann::json wide = nlohmann::json::array();
  for (int i = 0; i < 100'000; ++i) wide.push_back(i);
  EXPECT_EQ(BoundedDump(wide, 12), "[0,1,2,3,4,5...");
  EXPECT_EQ(BoundedDump(nlohmann::json(std::string("\xff")), 10), "\"\xEF\xBF\xBD\"");
}

TEST(BoundedJson, NestingDepthIsBoundedAndIterative) {
  EXPECT_EQ(JsonNestingDepth(nlohmann::json(1), 10), 1);
  EXPECT_EQ(JsonNestingDepth(nlohmann::json::parse(R"({"a": [[1], {"b": []}]})"), 10), 4);
  nlohmann::json deep = 1;
  for (int i = 0; i < 100'000; ++i) deep = nlohmann::json::array({std::move(deep)});
  EXPECT_EQ(JsonNestingDepth(deep, 64), 64);
}

}  // namespace
}  // namespace deepinfer
