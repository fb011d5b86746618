// The grammar compiler and the stack matcher: random expressions against PCRE2 on every
// string up to 6 bytes, recursion against a counting oracle, and the build-time checks.
#include "structured/grammar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "structured/all_strings.h"
#include "structured/matcher.h"
#include "structured/pcre_reference.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;

// A random expression as both a builder expression and a PCRE2 pattern.
struct RandomExpr {
  GrammarBuilder::Expr expr;
  std::string regex;
};

RandomExpr Generate(GrammarBuilder& b, std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> pick(0, depth > 0 ? 6 : 1);
  switch (pick(rng)) {
    case 0: {
      const char c = "abc"[rng() % 3];
      return {b.Literal(std::string(1, c)), std::string(1, c)};
    }
    case 1:
      return rng() % 2 ? RandomExpr{b.Bytes(ByteSet::Chars("ab")), "[ab]"} : RandomExpr{b.Empty(), "(?:)"};
    case 2: {
      RandomExpr x = Generate(b, rng, depth - 1), y = Generate(b, rng, depth - 1);
      return {b.Seq({x.expr, y.expr}), "(?:" + x.regex + ")(?:" + y.regex + ")"};
    }
    case 3: {
      RandomExpr x = Generate(b, rng, depth - 1), y = Generate(b, rng, depth - 1);
      return {b.Alt({x.expr, y.expr}), "(?:" + x.regex + "|" + y.regex + ")"};
    }
    case 4: {
      RandomExpr x = Generate(b, rng, depth - 1);
      const int min = static_cast<int>(rng() % 3), extra = static_cast<int>(rng() % 3);
      return {b.Repeat(x.expr, min, min + extra),
              "(?:" + x.regex + "){" + std::to_string(min) + "," + std::to_string(min + extra) + "}"};
    }
    case 5: {
      RandomExpr x = Generate(b, rng, depth - 1);
      return {b.Star(x.expr), "(?:" + x.regex + ")*"};
    }
    default: {
      // A graph: a -> b on x, b -> b on y, finals {a, b}: x y* or empty.
      RandomExpr x = Generate(b, rng, depth - 1), y = Generate(b, rng, depth - 1);
      return {b.Graph(2, 0, {0, 1}, {{0, 1, x.expr}, {1, 1, y.expr}}), "(?:(?:" + x.regex + ")(?:" + y.regex + ")*)?"};
    }
  }
}

TEST(GrammarTest, RandomExpressionsMatchPcre) {
  std::mt19937 rng(7);
  const std::vector<std::string> texts = AllStrings("abc", 6);
  for (int round = 0; round < 60; ++round) {
    GrammarBuilder b;
    const RandomExpr e = Generate(b, rng, 4);
    const std::shared_ptr<const Grammar> g = b.Build(b.MakeRule("root", e.expr));
    const PcreReference re(e.regex);
    for (const std::string& text : texts) {
      ASSERT_EQ(g->Accepts(text), re.Matches(text)) << e.regex << " on \"" << text << "\"";
    }
  }
}

TEST(GrammarTest, IntersectAndSubtractMatchTheirOperands) {
  std::mt19937 rng(11);
  const std::vector<std::string> texts = AllStrings("abc", 6);
  for (int round = 0; round < 40; ++round) {
    GrammarBuilder b;
    const RandomExpr x = Generate(b, rng, 3), y = Generate(b, rng, 3);
    const bool subtract = round % 2 == 1;
    std::shared_ptr<const Grammar> g;
    try {
      g = b.Build(b.MakeRule("root", subtract ? b.Subtract(x.expr, y.expr) : b.Intersect(x.expr, y.expr)));
    } catch (const Error& e) {
      ASSERT_THAT(e.what(), HasSubstr("admits no output"));  // an empty result; checked below
    }
    const PcreReference rx(x.regex), ry(y.regex);
    for (const std::string& text : texts) {
      const bool in_x = rx.Matches(text), in_y = ry.Matches(text);
      const bool accepted = g && g->Accepts(text);
      ASSERT_EQ(accepted, subtract ? in_x && !in_y : in_x && in_y)
          << x.regex << (subtract ? " - " : " & ") << y.regex << " on \"" << text << "\"";
    }
  }
}

// S ::= "(" S ")" S | "" -- balanced parentheses, through calls.
std::shared_ptr<const Grammar> Balanced() {
  GrammarBuilder b;
  const RuleId s = b.DeclareRule("s");
  b.DefineRule(s, b.Alt({b.Seq({b.Literal("("), b.Call(s), b.Literal(")"), b.Call(s)}), b.Empty()}));
  return b.Build(s);
}

bool IsBalanced(const std::string& text) {
  int depth = 0;
  for (char c : text) {
    depth += c == '(' ? 1 : -1;
    if (depth < 0) return false;
  }
  return depth == 0;
}

TEST(GrammarTest, RecursionThroughCalls) {
  const auto g = Balanced();
  for (const std::string& text : AllStrings("()", 10)) {
    ASSERT_EQ(g->Accepts(text), IsBalanced(text)) << text;
  }
}

TEST(GrammarTest, StacksAreSharedAndTailCallsDoNotGrow) {
  // a ::= "x" a | "y": right recursion in tail position keeps the stack flat.
  GrammarBuilder b;
  const RuleId a = b.DeclareRule("a");
  b.DefineRule(a, b.Alt({b.Seq({b.Literal("x"), b.Call(a)}), b.Literal("y")}));
  const auto g = b.Build(a);
  StackArena arena;
  StackMachine machine(*g, arena);
  MatchState state;
  machine.Initial(state);
  ASSERT_TRUE(machine.Feed(state, std::string(1000, 'x')));
  EXPECT_LT(arena.num_nodes(), 10u);
  ASSERT_TRUE(machine.Feed(state, "y"));
  EXPECT_TRUE(state.can_end);
}

TEST(GrammarTest, NumberRulesAreElements) {
  GrammarBuilder b;
  NumberRange r;
  r.kind = NumberRange::Kind::kInteger;
  r.lower = NumberBound{*Decimal::Parse("10"), false};
  r.upper = NumberBound{*Decimal::Parse("20"), false};
  const RuleId n = b.NumberRule("n", r);
  const auto g = b.Build(b.MakeRule("root", b.Seq({b.Literal("["), b.Call(n), b.Literal("]")})));
  EXPECT_TRUE(g->Accepts("[10]"));
  EXPECT_TRUE(g->Accepts("[20]"));
  EXPECT_FALSE(g->Accepts("[21]"));
  EXPECT_FALSE(g->Accepts("[9]"));
  EXPECT_FALSE(g->Accepts("[1]"));
  EXPECT_FALSE(g->Accepts("[015]"));
}

std::string BuildError(const std::function<void(GrammarBuilder&, RuleId&)>& make) {
  try {
    GrammarBuilder b;
    RuleId root = -1;
    make(b, root);
    b.Build(root);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GrammarTest, BuildRejectsWhatCannotBeMatched) {
  EXPECT_THAT(BuildError([](GrammarBuilder& b, RuleId& root) {
                root = b.DeclareRule("a");
                const RuleId c = b.DeclareRule("c");
                b.DefineRule(root, b.Alt({b.Call(c), b.Literal("x")}));
                b.DefineRule(c, b.Seq({b.Call(root), b.Literal("y")}));
              }),
              HasSubstr("left recursion: 'a' -> 'c' -> 'a'"));
  EXPECT_THAT(BuildError([](GrammarBuilder& b, RuleId& root) {
                root = b.DeclareRule("a");
                b.DefineRule(root, b.Seq({b.Literal("x"), b.Call(root)}));  // never ends
              }),
              HasSubstr("admits no output at all"));
  EXPECT_THAT(BuildError([](GrammarBuilder& b, RuleId& root) {
                root = b.DeclareRule("a");
                b.DefineRule(root, b.Call(b.DeclareRule("b")));
              }),
              HasSubstr("'b' is used but never defined"));
  EXPECT_THAT(BuildError([](GrammarBuilder& b, RuleId& root) {
                root = b.MakeRule("a", b.Repeat(b.Literal("abcdefghij"), 0, 1000000));
              }),
              HasSubstr("too large"));
}

TEST(GrammarTest, TrimmingRemovesDeadAlternatives) {
  // "x" then a rule that can never finish: that branch is cut, the rest still matches, and no
  // reachable state is a dead end.
  GrammarBuilder b;
  const RuleId dead = b.DeclareRule("dead");
  b.DefineRule(dead, b.Seq({b.Literal("z"), b.Call(dead)}));
  const auto g = b.Build(b.MakeRule("root", b.Alt({b.Seq({b.Literal("x"), b.Call(dead)}), b.Literal("xy")})));
  EXPECT_TRUE(g->Accepts("xy"));
  StackArena arena;
  StackMachine machine(*g, arena);
  MatchState state;
  machine.Initial(state);
  ASSERT_TRUE(machine.Feed(state, "x"));
  MatchState next;
  machine.Step(state, 'z', next);
  EXPECT_TRUE(next.dead());
}

}  // namespace
}  // namespace deepinfer
