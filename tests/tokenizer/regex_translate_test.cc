#include "tokenizer/regex_translate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kWhiteSpace[] =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

TEST(TokenizerRegexTest, WhiteSpaceEscapesBecomeExplicitSets) {
  EXPECT_EQ(TranslateOnigurumaPattern("\\s+(?!\\S)"), std::string("[") + kWhiteSpace + "]+(?![^" + kWhiteSpace + "])");
  EXPECT_THAT(TranslateOnigurumaPattern("[\\s\\d]"), StartsWith(std::string("[") + kWhiteSpace + "\\p{Nd}"));
}

TEST(TokenizerRegexTest, PropertiesGainUnicode16Additions) {
  // U+105C0 (Todhri, Unicode 16.0) is a letter; U+1FAE8 (Unicode 15.0) a symbol.
  EXPECT_THAT(TranslateOnigurumaPattern("\\p{L}"), StartsWith("[\\p{L}"));
  EXPECT_THAT(TranslateOnigurumaPattern("\\p{L}"), HasSubstr("\\x{105C0}-\\x{105F3}"));
  EXPECT_THAT(TranslateOnigurumaPattern("[^\\r\\n\\p{S}]"), HasSubstr("\\x{1FAE8}"));
  EXPECT_THAT(TranslateOnigurumaPattern("\\P{L}"), StartsWith("[^\\p{L}"));
  EXPECT_EQ(TranslateOnigurumaPattern("\\p{Han}"), "\\p{Han}");  // scripts are passed through
}

TEST(TokenizerRegexTest, OtherSyntaxIsUnchangedOrRejected) {
  const std::string ascii = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|\\\\s";
  EXPECT_EQ(TranslateOnigurumaPattern(ascii), ascii);  // escaped backslash: "\\s" is not \s
  EXPECT_EQ(TranslateOnigurumaPattern("[]a]\\h"), "[]a][0-9A-Fa-f]");
  EXPECT_EQ(TranslateOnigurumaPattern("[[:alpha:]x]"), "[[:alpha:]x]");
  EXPECT_THROW(TranslateOnigurumaPattern("[a[bc]]"), Error);
  EXPECT_THROW(TranslateOnigurumaPattern("[\\S]"), Error);
  EXPECT_THROW(TranslateOnigurumaPattern("\\p{L"), Error);
}

}  // namespace
}  // namespace deepinfer
