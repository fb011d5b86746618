// AnalyzeNumberPrefix against brute force. The oracle is independent of the analysis: a complete
// text's value is compared with the bounds by aligning both as fixed-point digit strings, and
// prefix viability is checked both ways: (1) every prefix of a valid number found by enumerating
// all strings up to 6 bytes must be viable; (2) every prefix the analysis calls viable must have
// a completion (searched breadth-first) that the oracle accepts.
#include "structured/number_range.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <regex>
#include <set>

#include "structured/all_strings.h"

namespace deepinfer {
namespace {

// A JSON number as sign + integer digits + fraction digits (no leading / trailing zeros).
struct Fixed {
  bool negative = false;
  std::string integer;   // "" for 0
  std::string fraction;  // "" for none
};

std::optional<Fixed> ParseFixed(const std::string& text) {
  static const std::regex number(R"(^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$)");
  std::smatch m;
  if (!std::regex_match(text, m, number)) return std::nullopt;
  std::string digits = m[2].str() + m[3].str();
  long point = static_cast<long>(m[2].length());  // digits before the point
  if (m[4].matched) point += std::stol(m[4].str());
  // Pad so the point falls inside the digit string.
  if (point < 0) {
    digits = std::string(static_cast<size_t>(-point), '0') + digits;
    point = 0;
  }
  if (point > static_cast<long>(digits.size())) digits += std::string(point - digits.size(), '0');
  Fixed f;
  f.integer = digits.substr(0, point);
  f.fraction = digits.substr(point);
  f.integer.erase(
      0, f.integer.find_first_not_of('0') == std::string::npos ? f.integer.size() : f.integer.find_first_not_of('0'));
  while (!f.fraction.empty() && f.fraction.back() == '0') f.fraction.pop_back();
  f.negative = m[1].matched && m[1].length() > 0 && !(f.integer.empty() && f.fraction.empty());
  return f;
}

// ParseFixed, memoized (std::regex is slow and the same texts come back for every range).
std::optional<Fixed> ToFixed(const std::string& text) {
  static std::map<std::string, std::optional<Fixed>> cache;
  auto it = cache.find(text);
  if (it == cache.end()) it = cache.emplace(text, ParseFixed(text)).first;
  return it->second;
}

int CompareFixed(const Fixed& a, const Fixed& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int magnitude = 0;
  if (a.integer.size() != b.integer.size()) {
    magnitude = a.integer.size() < b.integer.size() ? -1 : 1;
  } else if (a.integer != b.integer) {
    magnitude = a.integer < b.integer ? -1 : 1;
  } else {
    const size_t n = std::max(a.fraction.size(), b.fraction.size());
    const std::string fa = a.fraction + std::string(n - a.fraction.size(), '0');
    const std::string fb = b.fraction + std::string(n - b.fraction.size(), '0');
    magnitude = fa < fb ? -1 : (fa > fb ? 1 : 0);
  }
  return a.negative ? -magnitude : magnitude;
}

struct TestRange {
  bool integer;
  std::optional<std::string> lower;
  bool lower_exclusive;
  std::optional<std::string> upper;
  bool upper_exclusive;

  NumberRange Build() const {
    NumberRange r;
    r.kind = integer ? NumberRange::Kind::kInteger : NumberRange::Kind::kNumber;
    if (lower) r.lower = NumberBound{*Decimal::Parse(*lower), lower_exclusive};
    if (upper) r.upper = NumberBound{*Decimal::Parse(*upper), upper_exclusive};
    return r;
  }
  // The oracle for a complete text.
  bool Valid(const std::string& text) const {
    const std::optional<Fixed> f = ToFixed(text);
    if (!f) return false;
    if (integer && text.find_first_of(".eE") != std::string::npos) return false;
    if (lower) {
      const int c = CompareFixed(*f, *ToFixed(*lower));
      if (c < 0 || (c == 0 && lower_exclusive)) return false;
    }
    if (upper) {
      const int c = CompareFixed(*f, *ToFixed(*upper));
      if (c > 0 || (c == 0 && upper_exclusive)) return false;
    }
    return true;
  }
};

std::string Name(const TestRange& r) { return r.Build().Describe(); }

const std::vector<TestRange>& Ranges() {
  static const std::vector<TestRange> ranges = {
      {false, std::nullopt, false, std::nullopt, false},
      {false, "0", false, std::nullopt, false},
      {false, "0", true, std::nullopt, false},
      {false, std::nullopt, false, "0", true},
      {false, "-5", false, "5", false},
      {false, "-5", true, "5", true},
      {false, "1.5", false, "2.5", false},
      {false, "0.1", true, "0.2", true},
      {false, "100", false, "100", false},
      {false, "0.001", false, "0.01", false},
      {false, "-0.5", true, "0.5", false},
      {false, "-1000", false, "-999", false},
      {false, "0", false, "0", false},
      {false, "25", false, "25.5", true},
      {false, "-9", false, "-1", true},
      {true, std::nullopt, false, std::nullopt, false},
      {true, "0", false, std::nullopt, false},
      {true, "10", false, "20", false},
      {true, "-12", false, "7", false},
      {true, "5", true, "6", true},
      {true, "0.5", false, "2.5", false},
      {true, std::nullopt, false, "-3", true},
      {true, "-1", false, "0", false},
      {true, "95", false, "105", false},
      {true, "1", true, "1000", false},
  };
  return ranges;
}

// A completion of `prefix` the oracle accepts, breadth-first over all number bytes, following
// only prefixes the analysis calls viable (so a wrong "viable" shows up as no witness).
std::optional<std::string> FindWitness(const TestRange& range, const NumberRange& built, const std::string& prefix) {
  static const std::string bytes = "0123456789-+.eE";
  std::deque<std::string> queue = {prefix};
  std::set<std::string> seen;
  for (size_t visited = 0; !queue.empty() && visited < 5000; ++visited) {
    const std::string text = queue.front();
    queue.pop_front();
    if (AnalyzeNumberPrefix(built, text).complete)
      return range.Valid(text) ? std::optional<std::string>(text) : std::nullopt;
    if (text.size() >= prefix.size() + 9) continue;
    for (char c : bytes) {
      const std::string next = text + c;
      if (AnalyzeNumberPrefix(built, next).viable && seen.insert(next).second) queue.push_back(next);
    }
  }
  return std::nullopt;
}

TEST(NumberRangeTest, CompleteTextsMatchTheOracle) {
  const std::vector<std::string> texts = AllStrings("-0159.eE+", 5);
  for (const TestRange& range : Ranges()) {
    const NumberRange built = range.Build();
    for (const std::string& text : texts) {
      ASSERT_EQ(AnalyzeNumberPrefix(built, text).complete, range.Valid(text)) << Name(range) << " \"" << text << "\"";
    }
  }
}

TEST(NumberRangeTest, PrefixViabilityIsExact) {
  const std::vector<std::string> texts = AllStrings("-0159.e+", 5);
  for (const TestRange& range : Ranges()) {
    const NumberRange built = range.Build();
    std::set<std::string> oracle_viable;
    for (const std::string& text : texts) {
      if (!range.Valid(text)) continue;
      for (size_t n = 0; n <= text.size(); ++n) oracle_viable.insert(text.substr(0, n));
    }
    for (const std::string& text : texts) {
      if (text.size() > 4) continue;
      const bool viable = AnalyzeNumberPrefix(built, text).viable;
      if (oracle_viable.count(text)) {
        ASSERT_TRUE(viable) << Name(range) << " \"" << text << "\" has a valid completion";
      }
      if (viable && text.size() <= 3) {
        const std::optional<std::string> witness = FindWitness(range, built, text);
        ASSERT_TRUE(witness.has_value()) << Name(range) << " \"" << text << "\" called viable without a completion";
      }
    }
  }
}

TEST(NumberRangeTest, ExponentsReachAcrossScales) {
  NumberRange r;
  r.lower = NumberBound{*Decimal::Parse("0.5"), false};
  r.upper = NumberBound{*Decimal::Parse("1"), false};
  EXPECT_TRUE(AnalyzeNumberPrefix(r, "0.0000005").viable);  // 0.0000005e6
  EXPECT_TRUE(AnalyzeNumberPrefix(r, "0.0000005e6").complete);
  EXPECT_FALSE(AnalyzeNumberPrefix(r, "0.0000005e5").viable);  // 0.05 and more digits only grow it
  EXPECT_TRUE(AnalyzeNumberPrefix(r, "0.0000005e").viable);
  EXPECT_FALSE(AnalyzeNumberPrefix(r, "0.0000002e6").complete);
  EXPECT_TRUE(AnalyzeNumberPrefix(r, "7").viable);   // 7e-1
  EXPECT_FALSE(AnalyzeNumberPrefix(r, "3").viable);  // [0.3, 0.4) and [3, 4) at every scale
  EXPECT_TRUE(AnalyzeNumberPrefix(r, "7e").viable);
  EXPECT_FALSE(AnalyzeNumberPrefix(r, "7e+").viable);
  EXPECT_FALSE(AnalyzeNumberPrefix(r, "-").viable);
  // Exactness beyond double precision.
  NumberRange below_one;
  below_one.upper = NumberBound{*Decimal::Parse("1"), true};
  EXPECT_TRUE(AnalyzeNumberPrefix(below_one, "0.99999999999999999999").complete);
  EXPECT_FALSE(AnalyzeNumberPrefix(below_one, "1.00000000000000000001").complete);
  EXPECT_TRUE(AnalyzeNumberPrefix(below_one, "1.00000000000000000001").viable);  // ...e-1
}

TEST(NumberRangeTest, DecimalsParseAndCompare) {
  EXPECT_EQ(Decimal::FromDouble(0.1).ToString(), "0.1");
  EXPECT_EQ(Decimal::FromDouble(-2.5e-7).ToString(), "-0.00000025");
  EXPECT_EQ(Decimal::FromDouble(1e20).ToString(), "100000000000000000000");
  EXPECT_EQ(Decimal::FromInt(-9223372036854775807LL - 1).ToString(), "-9223372036854775808");
  EXPECT_EQ(Compare(*Decimal::Parse("1.0"), *Decimal::Parse("10e-1")), 0);
  EXPECT_LT(Compare(*Decimal::Parse("-0.5"), *Decimal::Parse("-0.25")), 0);
  EXPECT_EQ(Compare(*Decimal::Parse("-0"), *Decimal::Parse("0.0")), 0);
  EXPECT_FALSE(Decimal::Parse("01").has_value());
  EXPECT_FALSE(Decimal::Parse("1.").has_value());
  NumberRange empty;
  empty.kind = NumberRange::Kind::kInteger;
  empty.lower = NumberBound{*Decimal::Parse("5"), true};
  empty.upper = NumberBound{*Decimal::Parse("6"), true};
  EXPECT_FALSE(empty.HasValue());
  EXPECT_EQ(empty.Describe(), "integer in (5, 6)");
}

}  // namespace
}  // namespace deepinfer
