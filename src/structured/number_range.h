// Exact prefix viability for JSON numbers inside a range: the grammar element behind JSON
// Schema's minimum / maximum / exclusiveMinimum / exclusiveMaximum.
//
// A number's text is matched byte by byte. After each byte, AnalyzeNumberPrefix says whether the
// text so far can still be completed into a JSON number whose value lies inside the range
// ("viable"), and whether it already is one ("complete"). Values are compared exactly as
// decimals (no rounding to double): 1.0000000000000000001 is above 1, and 1e-400 above 0.
//
// The languages: kInteger is -?(0|[1-9][0-9]*) (no fraction or exponent); kNumber is the full
// JSON number -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, any spelling of a value counts
// ("1e2", "100.0" and "1000e-1" are all 100). "-0" is the value 0.
//
// Why exact viability needs more than a regular expression: with an exponent, "0.0000001" can
// still become 0.5 ("0.0000005e6"), and whether a prefix can reach the range depends on how its
// digits compare with the bounds at every scale. The analysis below reasons on intervals of
// reachable values instead (see number_range.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace deepinfer {

// An exact decimal: (negative ? -1 : 1) * digits * 10^exponent, digits without leading or
// trailing zeros ("" is zero, and then negative is false).
struct Decimal {
  bool negative = false;
  std::string digits;
  int64_t exponent = 0;

  // A JSON number's text ("-12.5e3"); nullopt when it is not one.
  static std::optional<Decimal> Parse(std::string_view text);
  // The shortest decimal that round-trips to `value` (what the schema's author wrote for any
  // literal with up to 15 significant digits). Finite values only.
  static Decimal FromDouble(double value);
  static Decimal FromInt(int64_t value);
  static Decimal FromUint(uint64_t value);
  bool is_zero() const { return digits.empty(); }
  bool is_integer() const { return exponent >= 0; }
  std::string ToString() const;  // plain JSON spelling, e.g. "-1.25", "3e+400" when long
  bool operator==(const Decimal&) const = default;
};

// -1, 0, 1 as a < b, a == b, a > b.
int Compare(const Decimal& a, const Decimal& b);

struct NumberBound {
  Decimal value;
  bool exclusive = false;
};

struct NumberRange {
  enum class Kind { kInteger, kNumber };
  Kind kind = Kind::kNumber;
  std::optional<NumberBound> lower;
  std::optional<NumberBound> upper;

  // Whether some value of the kind lies inside (an empty range is a schema error).
  bool HasValue() const;
  bool Contains(const Decimal& value) const;
  // "integer in [0, 10)" and the like, for messages.
  std::string Describe() const;
  bool operator==(const NumberRange& other) const;
};

struct NumberPrefixStatus {
  bool viable = false;    // some completion is a number of the kind inside the range
  bool complete = false;  // the text itself is one
};

// `prefix` is the number's text so far, possibly empty.
NumberPrefixStatus AnalyzeNumberPrefix(const NumberRange& range, std::string_view prefix);

}  // namespace deepinfer
