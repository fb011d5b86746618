// The JSON text language of structured output, as grammar pieces. One policy, used by every
// JSON source (json_object, json_schema, the arguments of forced tool calls):
//
//   - Whitespace: between two tokens of the JSON text at most one run, which is either a single
//     space or a newline followed by at most kMaxIndent spaces or tabs (llama.cpp's rule), so
//     pretty-printed output up to 20 columns of indentation is allowed and a model cannot loop on
//     whitespace. No whitespace before or after the top-level value.
//   - Strings: every spelling of every character (codepoints.h), no lone surrogates.
//   - Numbers: JSON's syntax; integers (type "integer") without fraction or exponent.
//   - Objects: each member at most once (schema-declared members in the schema's order, then
//     any others), see json_schema.h.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "structured/codepoints.h"
#include "structured/grammar.h"
#include "structured/number_range.h"

namespace deepinfer {

inline constexpr int kMaxIndent = 20;

class JsonGrammar {
 public:
  using Expr = GrammarBuilder::Expr;
  // `never_raw`: characters every string must escape (DSML arguments keep U+FF5C out of view).
  explicit JsonGrammar(GrammarBuilder& b, CodepointSet never_raw = {});

  GrammarBuilder& builder() { return b_; }
  const CodepointSet& never_raw() const { return never_raw_; }

  Expr Ws();
  Expr Char(const CodepointSet& set) { return JsonCharExpr(b_, set, never_raw_); }
  Expr AnyString();
  Expr StringLiteral(std::string_view utf8) { return JsonStringLiteralExpr(b_, utf8, never_raw_); }
  Expr Integer();  // any integer, no fraction or exponent
  Expr Number();   // any JSON number
  // A number in a range (kInteger: integer spellings only).
  Expr NumberIn(const NumberRange& range);
  // Any JSON value; excluding strings when `strings` is false.
  Expr AnyValue(bool strings = true);
  // Every spelling of `value`: numbers by value (1, 1.0 and 1e0 alike, integer spellings only when
  // `integer_numbers`), object members in the order `value` lists them.
  Expr Literal(const nlohmann::ordered_json& value, bool integer_numbers = false);

 private:
  RuleId AnyRule(bool strings);
  Expr ValueBody(RuleId value, bool strings);

  GrammarBuilder& b_;
  CodepointSet never_raw_;
  std::optional<RuleId> any_value_, any_non_string_;
};

// A JSON number's exact value.
Decimal JsonNumberValue(const nlohmann::ordered_json& number);

}  // namespace deepinfer
