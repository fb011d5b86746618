#include "core/error.h"

#include <gtest/gtest.h>

#include <string>

namespace deepinfer {
namespace {

// Messages quote the user's text; whatever it holds, an error stays one line.
TEST(Error, EveryMessageIsOneLine) {
  EXPECT_STREQ(MakeError("unknown role \"a\nb\r\x1b[31m\"").what(), "unknown role \"a?b??[31m\"");
  EXPECT_STREQ(Error(std::string("nul\0byte", 8)).what(), "nul?byte");
  EXPECT_STREQ(MakeError("tab\tand del\x7f").what(), "tab?and del?");
  // Non-ASCII text (UTF-8 names) is kept.
  EXPECT_STREQ(MakeError("name \"caf\xc3\xa9\"").what(), "name \"caf\xc3\xa9\"");
}

TEST(Error, PrintableMakesHostileSnippetsShortAndAscii) {
  EXPECT_EQ(Printable("a\nb\xc3\xa9"), "a?b??");
  EXPECT_EQ(Printable("abcdef", 3), "abc...");
}

}  // namespace
}  // namespace deepinfer
