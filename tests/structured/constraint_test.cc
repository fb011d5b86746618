// Token masks against brute force on small vocabularies: along random token walks, a token is in
// the mask iff its bytes extend the text so far towards a complete document, judged by an oracle
// that knows the language (balanced parentheses with bounded numbers) without the automaton.
// Then rollback, end tokens, the free prefix before "</think>" and dead ends.
#include "structured/constraint.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

namespace deepinfer {
namespace {

// doc ::= "(" doc ")" doc | "<" integer in [10, 300] ">" doc | ""
std::shared_ptr<const Grammar> NestedNumbers() {
  GrammarBuilder b;
  const RuleId doc = b.DeclareRule("doc");
  NumberRange r;
  r.kind = NumberRange::Kind::kInteger;
  r.lower = NumberBound{*Decimal::Parse("10"), false};
  r.upper = NumberBound{*Decimal::Parse("300"), false};
  const RuleId number = b.NumberRule("number", r);
  b.DefineRule(doc, b.Alt({b.Seq({b.Literal("("), b.Call(doc), b.Literal(")"), b.Call(doc)}),
                           b.Seq({b.Literal("<"), b.Call(number), b.Literal(">"), b.Call(doc)}), b.Empty()}));
  return b.Build(doc);
}

// The oracle: can `text` be completed into a document of NestedNumbers()?
bool Viable(const std::string& text) {
  int depth = 0;
  std::string digits;
  bool in_number = false;
  for (char c : text) {
    if (in_number) {
      if (c >= '0' && c <= '9') {
        if (digits.empty() && c == '0') return false;
        digits += c;
        if (digits.size() > 3 || std::stoi(digits) > 300) return false;
        continue;
      }
      if (c != '>' || digits.empty() || std::stoi(digits) < 10) return false;
      in_number = false;
      digits.clear();
      continue;
    }
    if (c == '(') {
      ++depth;
    } else if (c == ')') {
      if (--depth < 0) return false;
    } else if (c == '<') {
      in_number = true;
    } else {
      return false;
    }
  }
  // Inside a number, some digits complete it iff 10 <= digits * 10^k + r <= 300 for some k.
  if (in_number && !digits.empty()) {
    const int d = std::stoi(digits);
    return (d >= 10 && d <= 300) || (d * 10 <= 300) || (d * 100 <= 300 && d * 100 + 99 >= 10);
  }
  return true;
}

bool Complete(const std::string& text) {
  if (!Viable(text)) return false;
  int depth = 0;
  for (char c : text) depth += c == '(' ? 1 : (c == ')' ? -1 : 0);
  return depth == 0 && (text.empty() || text.back() == ')' || text.back() == '>');
}

// Random tokens over the language's bytes (and a few others), plus two special tokens.
std::shared_ptr<const TokenVocabulary> RandomVocabulary(std::mt19937& rng, int count) {
  const std::string alphabet = "()<>0123456789x";
  std::vector<std::string> bytes = {"<eos>", "<pad>"};
  std::vector<bool> text = {false, false};
  for (char c : alphabet) bytes.push_back(std::string(1, c)), text.push_back(true);
  while (static_cast<int>(bytes.size()) < count) {
    std::string t;
    const int length = 2 + static_cast<int>(rng() % 5);
    for (int i = 0; i < length; ++i) t += alphabet[rng() % (i == 0 ? alphabet.size() : 11)];
    bytes.push_back(t);
    text.push_back(true);
  }
  bytes.push_back("((");  // a duplicate spelling of an existing token is fine
  text.push_back(true);
  return TokenVocabulary::FromTokens(std::move(bytes), std::move(text));
}

TEST(ConstraintTest, MasksAreExactAlongRandomWalks) {
  std::mt19937 rng(3);
  const auto vocabulary = RandomVocabulary(rng, 400);
  const auto constraint = std::make_shared<Constraint>(NestedNumbers(), vocabulary);
  const int32_t eos = 0;
  std::vector<uint64_t> mask(vocabulary->words());
  int checked = 0;
  for (int walk = 0; walk < 30; ++walk) {
    ConstraintMatcher matcher(constraint, {eos});
    std::string text;
    for (int step = 0; step < 40; ++step) {
      const bool any = matcher.FillNextTokenMask(mask);
      std::vector<int32_t> allowed;
      for (size_t t = 0; t < vocabulary->size(); ++t) {
        const int32_t id = static_cast<int32_t>(t);
        const bool in_mask = (mask[t >> 6] >> (t & 63)) & 1;
        bool expected = false;
        if (id == eos) {
          expected = Complete(text);
        } else if (vocabulary->is_text(id)) {
          expected = Viable(text + std::string(vocabulary->bytes(id)));
        }
        ASSERT_EQ(in_mask, expected) << "after \"" << text << "\", token \"" << vocabulary->bytes(id) << "\"";
        ASSERT_EQ(matcher.IsAllowed(id), expected);
        if (in_mask) allowed.push_back(id);
        ++checked;
      }
      ASSERT_EQ(any, !allowed.empty());
      ASSERT_FALSE(allowed.empty()) << "dead end after \"" << text << "\"";
      const int32_t token = allowed[rng() % allowed.size()];
      ASSERT_TRUE(matcher.Accept(token));
      if (token == eos) {
        EXPECT_TRUE(matcher.finished());
        EXPECT_FALSE(matcher.FillNextTokenMask(mask));
        break;
      }
      text += vocabulary->bytes(token);
    }
  }
  EXPECT_GT(checked, 100000);
  const Constraint::CacheStats stats = constraint->cache_stats();
  EXPECT_GT(stats.cached, 0u);
}

TEST(ConstraintTest, PrecomputedAndLazyMasksAgree) {
  std::mt19937 rng(5);
  const auto vocabulary = RandomVocabulary(rng, 300);
  const auto lazy = std::make_shared<Constraint>(NestedNumbers(), vocabulary);
  const auto warm = std::make_shared<Constraint>(NestedNumbers(), vocabulary);
  warm->PrecomputeMasks();
  size_t with_bytes = 0;
  for (size_t s = 0; s < warm->grammar().num_states(); ++s) with_bytes += warm->grammar().has_bytes(s);
  EXPECT_EQ(warm->cache_stats().cached, with_bytes);
  ConstraintMatcher a(lazy, {0}), b(warm, {0});
  std::vector<uint64_t> ma(vocabulary->words()), mb(vocabulary->words());
  for (char piece : std::string("(<120>())")) {
    a.FillNextTokenMask(ma);
    b.FillNextTokenMask(mb);
    ASSERT_EQ(ma, mb);
    const int32_t id = 2 + static_cast<int32_t>(std::string("()<>0123456789x").find(piece));  // single bytes
    ASSERT_EQ(vocabulary->bytes(id), std::string(1, piece));
    ASSERT_TRUE(a.Accept(id) && b.Accept(id)) << piece;
  }
}

int32_t Id(const TokenVocabulary& v, std::string_view bytes) {
  for (size_t t = 0; t < v.size(); ++t) {
    if (v.is_text(static_cast<int32_t>(t)) && v.bytes(static_cast<int32_t>(t)) == bytes) return static_cast<int32_t>(t);
  }
  return -1;
}

std::shared_ptr<const TokenVocabulary> WordVocabulary() {
  std::vector<std::string> bytes = {"<eos>",    "yes", "no",    "y", "e",    "s",   "n", "o",
                                    "</think>", "</",  "think", ">", ">yes", "hmm", " ", "ye"};
  std::vector<bool> text(bytes.size(), true);
  text[0] = false;
  return TokenVocabulary::FromTokens(std::move(bytes), std::move(text));
}

std::shared_ptr<const Grammar> YesOrNo() {
  GrammarBuilder b;
  return b.Build(b.MakeRule("choice", b.Alt({b.Literal("yes"), b.Literal("no")})));
}

TEST(ConstraintTest, RollbackRestoresEveryEarlierState) {
  const auto v = WordVocabulary();
  const auto constraint = std::make_shared<Constraint>(YesOrNo(), v);
  ConstraintMatcher m(constraint, {0});
  std::vector<uint64_t> before(v->words()), after(v->words());
  m.FillNextTokenMask(before);
  ASSERT_TRUE(m.Accept(Id(*v, "y")));
  ASSERT_TRUE(m.Accept(Id(*v, "e")));
  EXPECT_FALSE(m.Accept(Id(*v, "e")));  // refused: nothing changes
  EXPECT_EQ(m.num_accepted(), 2u);
  ASSERT_TRUE(m.Accept(Id(*v, "s")));
  EXPECT_TRUE(m.can_end());
  m.Rollback(3);
  EXPECT_EQ(m.num_accepted(), 0u);
  m.FillNextTokenMask(after);
  EXPECT_EQ(before, after);
  ASSERT_TRUE(m.Accept(Id(*v, "no")));
  ASSERT_TRUE(m.Accept(0));
  EXPECT_TRUE(m.finished());
  m.Rollback(1);
  EXPECT_FALSE(m.finished());
  EXPECT_TRUE(m.can_end());
  EXPECT_THROW(m.Rollback(5), std::exception);
}

TEST(ConstraintTest, EndTokensOnlyWhenComplete) {
  const auto v = WordVocabulary();
  const auto constraint = std::make_shared<Constraint>(YesOrNo(), v);
  ConstraintMatcher m(constraint, {0, Id(*v, "hmm")});
  std::vector<uint64_t> mask(v->words());
  m.FillNextTokenMask(mask);
  EXPECT_FALSE(mask[0] & 1);
  EXPECT_FALSE(m.IsAllowed(Id(*v, "hmm")));  // a stop token ends the output: not before the end
  ASSERT_TRUE(m.Accept(Id(*v, "yes")));
  m.FillNextTokenMask(mask);
  EXPECT_EQ(mask[0], (uint64_t{1} << 0) | (uint64_t{1} << Id(*v, "hmm")));
  EXPECT_EQ(m.Expected(), "the end of the output");
}

TEST(ConstraintTest, FreeTextUntilTheTriggerThenTheGrammar) {
  const auto v = WordVocabulary();
  const auto constraint = std::make_shared<Constraint>(YesOrNo(), v, ConstraintOptions{"</think>", "test"});
  ConstraintMatcher m(constraint, {0});
  std::vector<uint64_t> mask(v->words());
  m.FillNextTokenMask(mask);
  // Reasoning: every text token but EOS and the ones that close the reasoning into bad text.
  EXPECT_FALSE(m.IsAllowed(0));
  EXPECT_TRUE(m.IsAllowed(Id(*v, "hmm")));
  EXPECT_TRUE(m.IsAllowed(Id(*v, "no")));
  EXPECT_TRUE(m.IsAllowed(Id(*v, "</think>")));
  ASSERT_TRUE(m.Accept(Id(*v, "hmm")));
  ASSERT_TRUE(m.Accept(Id(*v, "</")));
  ASSERT_TRUE(m.Accept(Id(*v, "think")));
  // ">" closes the reasoning; ">yes" closes it and answers in the same token.
  EXPECT_TRUE(m.IsAllowed(Id(*v, ">")));
  EXPECT_TRUE(m.IsAllowed(Id(*v, ">yes")));
  m.FillNextTokenMask(mask);
  EXPECT_TRUE((mask[0] >> Id(*v, ">yes")) & 1);
  ASSERT_TRUE(m.Accept(Id(*v, ">yes")));
  EXPECT_TRUE(m.in_document());
  EXPECT_TRUE(m.can_end());
  m.Rollback(1);
  EXPECT_FALSE(m.in_document());
  ASSERT_TRUE(m.Accept(Id(*v, ">")));
  EXPECT_FALSE(m.IsAllowed(Id(*v, "hmm")));
  EXPECT_FALSE(m.IsAllowed(Id(*v, ">yes")));
  EXPECT_TRUE(m.IsAllowed(Id(*v, "ye")));
}

TEST(ConstraintTest, ARefusingVocabularyIsADeadEnd) {
  // The grammar needs "q", which no token spells.
  GrammarBuilder b;
  const auto grammar = b.Build(b.MakeRule("q", b.Literal("yq")));
  const auto constraint = std::make_shared<Constraint>(grammar, WordVocabulary());
  ConstraintMatcher m(constraint, {0});
  std::vector<uint64_t> mask(constraint->vocabulary().words());
  ASSERT_TRUE(m.FillNextTokenMask(mask));
  ASSERT_TRUE(m.Accept(Id(constraint->vocabulary(), "y")));
  EXPECT_FALSE(m.FillNextTokenMask(mask));
  EXPECT_EQ(m.Expected(), "one of 'q'");
}

}  // namespace
}  // namespace deepinfer
