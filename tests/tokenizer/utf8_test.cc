#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace deepinfer {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

std::string Replacements(int count) {
  std::string out;
  for (int i = 0; i < count; ++i) out += kReplacement;
  return out;
}

// Expected outputs are Python's bytes.decode("utf-8", "replace"), which agrees with Rust's
// String::from_utf8_lossy: one U+FFFD per maximal invalid subsequence.
TEST(TokenizerUtf8Test, ReplacesMaximalInvalidSubsequences) {
  EXPECT_EQ(Utf8Lossy("plain \xE4\xB8\xAD"), "plain \xE4\xB8\xAD");
  EXPECT_EQ(Utf8Lossy("\xE4\xB8"), Replacements(1));          // truncated 3-byte sequence
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98"), Replacements(1));      // truncated 4-byte sequence
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), Replacements(3));      // surrogate: ED allows only 80..9F next
  EXPECT_EQ(Utf8Lossy("\xF4\x90\x80\x80"), Replacements(4));  // above U+10FFFF
  EXPECT_EQ(Utf8Lossy("\xC0\xAF"), Replacements(2));          // overlong
  EXPECT_EQ(Utf8Lossy("\xE0\x80\x80"), Replacements(3));      // overlong 3-byte
  EXPECT_EQ(Utf8Lossy("a\x80"
                      "b\xFF"),
            "a" + kReplacement + "b" + kReplacement);
  EXPECT_EQ(Utf8Lossy("\xE4\xB8"
                      "a"),
            kReplacement + "a");
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98\xF0\x9F\x98\x80"), kReplacement + "\xF0\x9F\x98\x80");
}

TEST(TokenizerUtf8Test, ValidityAndWhiteSpace) {
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC2"));
  EXPECT_TRUE(IsUnicodeWhiteSpace(0x85));
  EXPECT_TRUE(IsUnicodeWhiteSpace(0x3000));
  EXPECT_FALSE(IsUnicodeWhiteSpace(0x200B));
  EXPECT_FALSE(IsUnicodeWhiteSpace(0x180E));
}

}  // namespace
}  // namespace deepinfer
