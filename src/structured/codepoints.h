// Sets of Unicode scalar values, and the grammar expressions for their spellings: as UTF-8 text,
// and as one character inside a JSON string literal.
//
// JSON spellings of a character: the character itself (not for '"', '\' and U+0000..U+001F, and
// not for characters the caller lists as never raw), a two-character escape (\" \\ \/ \b \f \n
// \r \t), \uXXXX with hex digits of either case, and for characters above U+FFFF a surrogate-pair
// escape \uD8xx\uDCxx. Lone surrogate escapes are not spellings of any character, so every
// generated string is valid Unicode and its length (code points, as JSON Schema counts) is the
// number of spellings it is made of.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "structured/grammar.h"

namespace deepinfer {

class CodepointSet {
 public:
  CodepointSet() = default;
  static CodepointSet Of(char32_t c) { return Range(c, c); }
  static CodepointSet Range(char32_t lo, char32_t hi);
  // Every scalar value (U+0000..U+10FFFF without the surrogates).
  static CodepointSet All();

  void Add(char32_t lo, char32_t hi);
  void Add(const CodepointSet& other);
  CodepointSet Complement() const;  // within All()
  CodepointSet Minus(const CodepointSet& other) const;
  CodepointSet Intersect(const CodepointSet& other) const;
  bool Contains(char32_t c) const;
  bool empty() const { return ranges_.empty(); }
  // Sorted, disjoint, non-adjacent, surrogate-free.
  const std::vector<std::pair<char32_t, char32_t>>& ranges() const { return ranges_; }
  bool operator==(const CodepointSet&) const = default;

 private:
  std::vector<std::pair<char32_t, char32_t>> ranges_;
};

GrammarBuilder::Expr Utf8Expr(GrammarBuilder& b, const CodepointSet& set);
// One character of `set` inside a JSON string, in any of its spellings.
GrammarBuilder::Expr JsonCharExpr(GrammarBuilder& b, const CodepointSet& set, const CodepointSet& never_raw = {});
// A whole JSON string literal (quotes included) spelling exactly `text` (valid UTF-8).
GrammarBuilder::Expr JsonStringLiteralExpr(GrammarBuilder& b, std::string_view text,
                                           const CodepointSet& never_raw = {});

}  // namespace deepinfer
