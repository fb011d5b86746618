// The analysis works on magnitudes: the sign is fixed by the first byte, so the range becomes an
// interval M of magnitudes (MagnitudesFor), and each state of the text reaches a known set of
// magnitudes:
//   - nothing written yet ("" or "-"): every magnitude (every integer for kInteger);
//   - kInteger digits I: I itself, and I * 10^k + r for k >= 1, 0 <= r < 10^k, i.e. the
//     integer intervals [I0...0, I9...9] with k digits appended;
//   - kNumber mantissa digits with significant part P (leading zeros dropped, trailing zeros
//     kept), before any exponent: an exponent can still be written, so exactly the union over
//     all integers u of [P * 10^u, (P + 1) * 10^u) (all magnitudes if P is empty: "0.000");
//   - in the exponent, with mantissa value N: N * 10^e for the exponents e the exponent digits
//     can still become.
// The text is viable iff that set meets M; each case below is an exact interval computation.
#include "structured/number_range.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "core/error.h"

namespace deepinfer {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

Decimal Normalized(bool negative, std::string digits, int64_t exponent) {
  size_t lead = 0;
  while (lead < digits.size() && digits[lead] == '0') ++lead;
  digits.erase(0, lead);
  size_t trail = 0;
  while (trail < digits.size() && digits[digits.size() - 1 - trail] == '0') ++trail;
  digits.resize(digits.size() - trail);
  exponent += static_cast<int64_t>(trail);
  if (digits.empty()) return Decimal{};
  return Decimal{negative, std::move(digits), exponent};
}

// The position of the leading digit: a nonzero magnitude lies in [10^(order-1), 10^order).
int64_t Order(const Decimal& m) { return static_cast<int64_t>(m.digits.size()) + m.exponent; }

int CompareMagnitude(const Decimal& a, const Decimal& b) {
  if (a.is_zero() || b.is_zero()) return a.is_zero() ? (b.is_zero() ? 0 : -1) : 1;
  if (Order(a) != Order(b)) return Order(a) < Order(b) ? -1 : 1;
  const size_t n = std::max(a.digits.size(), b.digits.size());
  for (size_t i = 0; i < n; ++i) {
    const char da = i < a.digits.size() ? a.digits[i] : '0';
    const char db = i < b.digits.size() ? b.digits[i] : '0';
    if (da != db) return da < db ? -1 : 1;
  }
  return 0;
}

Decimal Scaled(const Decimal& m, int64_t power) {
  if (m.is_zero()) return m;
  Decimal out = m;
  out.exponent += power;
  return out;
}

// Digit strings of nonnegative integers ("0" is zero): the kInteger bounds.
using IntegerText = std::string;

IntegerText IntegerDigits(const Decimal& m) {  // m integral, nonnegative
  if (m.is_zero()) return "0";
  return m.digits + std::string(static_cast<size_t>(m.exponent), '0');
}

int CompareInteger(const IntegerText& a, const IntegerText& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a < b ? -1 : (a > b ? 1 : 0);
}

IntegerText Increment(IntegerText n) {
  for (size_t i = n.size(); i-- > 0;) {
    if (n[i] != '9') {
      ++n[i];
      return n;
    }
    n[i] = '0';
  }
  return "1" + n;
}

IntegerText Decrement(IntegerText n) {  // n >= 1
  for (size_t i = n.size(); i-- > 0;) {
    if (n[i] != '0') {
      --n[i];
      break;
    }
    n[i] = '9';
  }
  if (n.size() > 1 && n[0] == '0') n.erase(0, 1);
  return n;
}

// floor(m) for a nonnegative magnitude, and whether m was already an integer.
IntegerText Floor(const Decimal& m, bool* integral) {
  *integral = m.is_integer();
  if (m.is_integer()) return IntegerDigits(m);
  const int64_t kept = Order(m);
  if (kept <= 0) return "0";
  return m.digits.substr(0, static_cast<size_t>(kept));
}

// The magnitudes m (>= 0) whose signed value (negative ? -m : m) lies in the range.
struct MagnitudeInterval {
  bool empty = false;
  Decimal lo;  // >= 0
  bool lo_exclusive = false;
  std::optional<Decimal> hi;  // nullopt: unbounded
  bool hi_exclusive = false;
};

MagnitudeInterval MagnitudesFor(const NumberRange& range, bool negative) {
  MagnitudeInterval m;
  // The bound on the magnitude's low side comes from the range's bound nearest zero.
  const std::optional<NumberBound>& near = negative ? range.upper : range.lower;
  const std::optional<NumberBound>& far = negative ? range.lower : range.upper;
  if (near) {
    Decimal v = near->value;
    if (negative) v.negative = !v.negative && !v.is_zero();
    // v is now the bound expressed as a magnitude-side value: m >= v (or > v).
    if (v.negative) {
      m.lo = Decimal{};
      m.lo_exclusive = false;
    } else {
      m.lo = v;
      m.lo_exclusive = near->exclusive;
    }
  }
  if (far) {
    Decimal v = far->value;
    if (negative) v.negative = !v.negative && !v.is_zero();
    if (v.negative) {
      m.empty = true;
      return m;
    }
    m.hi = v;
    m.hi_exclusive = far->exclusive;
  }
  if (m.hi) {
    const int c = CompareMagnitude(m.lo, *m.hi);
    if (c > 0 || (c == 0 && (m.lo_exclusive || m.hi_exclusive))) m.empty = true;
  }
  return m;
}

bool AboveLow(const MagnitudeInterval& m, const Decimal& x) {
  const int c = CompareMagnitude(x, m.lo);
  return c > 0 || (c == 0 && !m.lo_exclusive);
}

bool BelowHigh(const MagnitudeInterval& m, const Decimal& x) {
  if (!m.hi) return true;
  const int c = CompareMagnitude(x, *m.hi);
  return c < 0 || (c == 0 && !m.hi_exclusive);
}

bool Inside(const MagnitudeInterval& m, const Decimal& x) { return !m.empty && AboveLow(m, x) && BelowHigh(m, x); }

// Whether [left, right) meets M (0 < left < right).
bool HalfOpenMeets(const MagnitudeInterval& m, const Decimal& left, const Decimal& right) {
  // Lower end: the larger of left (closed) and lo; upper end: the smaller of right (open) and hi.
  bool lower_closed = true;
  const Decimal* lower = &left;
  const int lc = CompareMagnitude(left, m.lo);
  if (lc < 0 || (lc == 0 && m.lo_exclusive)) {
    lower = &m.lo;
    lower_closed = !m.lo_exclusive;
  }
  bool upper_closed = false;
  const Decimal* upper = &right;
  if (m.hi) {
    const int uc = CompareMagnitude(*m.hi, right);
    if (uc < 0) {
      upper = &*m.hi;
      upper_closed = !m.hi_exclusive;
    }
  }
  const int c = CompareMagnitude(*lower, *upper);
  return c < 0 || (c == 0 && lower_closed && upper_closed);
}

// The integers inside M: [first, last] (last unset: unbounded); false when there are none.
bool IntegerSpan(const MagnitudeInterval& m, IntegerText* first, std::optional<IntegerText>* last) {
  if (m.empty) return false;
  bool integral = false;
  *first = Floor(m.lo, &integral);  // the smallest integer >= lo, or > lo when exclusive
  if (!integral || m.lo_exclusive) *first = Increment(*first);
  last->reset();
  if (m.hi) {
    IntegerText top = Floor(*m.hi, &integral);
    if (integral && m.hi_exclusive) {
      if (top == "0") return false;
      top = Decrement(top);
    }
    if (CompareInteger(*first, top) > 0) return false;
    *last = top;
  }
  return true;
}

// kInteger with digits `written` (no leading zero unless it is "0").
bool IntegerDigitsViable(const MagnitudeInterval& m, const std::string& written) {
  IntegerText first;
  std::optional<IntegerText> last;
  if (!IntegerSpan(m, &first, &last)) return false;
  if (written == "0") return CompareInteger("0", first) >= 0 && (!last || CompareInteger("0", *last) <= 0);
  // With k more digits the text reaches [written 0..0, written 9..9]. The first k whose top end
  // reaches `first` has the smallest bottom end; it is viable iff that bottom is <= last.
  size_t k = 0;
  while (CompareInteger(written + std::string(k, '9'), first) < 0) ++k;
  return !last || CompareInteger(written + std::string(k, '0'), *last) <= 0;
}

// kNumber mantissa with significant digits `p` (nonempty, no leading zero), exponent still open.
bool MantissaViable(const MagnitudeInterval& m, const std::string& p) {
  if (m.empty) return false;
  if (!m.hi) return true;  // a large enough exponent
  if (m.hi->is_zero()) return false;
  if (m.lo.is_zero()) return true;  // a small enough exponent lands in (0, hi)
  // M spans a factor of at least 100: some [p 10^u, (p+1) 10^u) (a factor <= 2) fits inside.
  if (Order(*m.hi) - Order(m.lo) >= 3) return true;
  const Decimal low = Normalized(false, p, 0);
  const Decimal high = Normalized(false, Increment(p), 0);
  const int64_t base = Order(m.lo) - Order(low);
  for (int64_t u = base - 2; u <= base + 4; ++u) {
    if (HalfOpenMeets(m, Scaled(low, u), Scaled(high, u))) return true;
  }
  return false;
}

// The exponents e with n * 10^e inside M: [*e_lo, *e_hi], either side unbounded when nullopt.
bool ExponentSpan(const MagnitudeInterval& m, const Decimal& n, std::optional<int64_t>* e_lo,
                  std::optional<int64_t>* e_hi) {
  e_lo->reset();
  e_hi->reset();
  if (!m.lo.is_zero()) {
    const int64_t e0 = Order(m.lo) - Order(n);
    *e_lo = AboveLow(m, Scaled(n, e0)) ? e0 : e0 + 1;
  }
  if (m.hi) {
    if (m.hi->is_zero()) return false;
    const int64_t e0 = Order(*m.hi) - Order(n);
    *e_hi = BelowHigh(m, Scaled(n, e0)) ? e0 : e0 - 1;
  }
  return !(*e_lo && *e_hi && **e_lo > **e_hi);
}

// Whether an exponent whose digits so far are `x` (possibly empty) can become a value in
// [lo, hi] (hi nullopt: unbounded); lo >= 0.
bool ExponentDigitsReach(std::string_view x, int64_t lo, std::optional<int64_t> hi) {
  if (hi && *hi < lo) return false;
  size_t lead = 0;
  while (lead < x.size() && x[lead] == '0') ++lead;
  const std::string_view v = x.substr(lead);
  if (v.empty()) return true;  // "" or "00": any value >= 0 still
  if (!hi) return true;        // append digits until it is large enough
  if (v.size() > 18) return false;
  int64_t value = 0;
  std::from_chars(v.data(), v.data() + v.size(), value);
  // value, then [value * 10^k, value * 10^k + 10^k - 1] for k >= 1.
  for (int64_t scale = 1; value <= *hi / scale; scale *= 10) {
    const int64_t bottom = value * scale;
    if (bottom <= *hi && bottom + scale - 1 >= lo) return true;
    if (scale > *hi / 10) break;
  }
  return false;
}

struct ParsedPrefix {
  bool ok = false;
  bool negative = false;
  std::string_view integer, fraction, exponent_digits;
  bool point = false, exponent = false;
  int exponent_sign = 0;  // 0: none written yet, +1 / -1
};

ParsedPrefix ParsePrefix(std::string_view p, bool integer_kind) {
  ParsedPrefix r;
  size_t i = 0;
  if (i < p.size() && p[i] == '-') {
    r.negative = true;
    ++i;
  }
  const size_t int_start = i;
  while (i < p.size() && IsDigit(p[i])) ++i;
  r.integer = p.substr(int_start, i - int_start);
  if (r.integer.size() > 1 && r.integer[0] == '0') return r;
  if (i == p.size()) {
    r.ok = true;
    return r;
  }
  if (r.integer.empty() || integer_kind) return r;
  if (p[i] == '.') {
    r.point = true;
    const size_t start = ++i;
    while (i < p.size() && IsDigit(p[i])) ++i;
    r.fraction = p.substr(start, i - start);
    if (i == p.size()) {
      r.ok = true;
      return r;
    }
    if (r.fraction.empty()) return r;
  }
  if (p[i] != 'e' && p[i] != 'E') return r;
  r.exponent = true;
  ++i;
  if (i < p.size() && (p[i] == '+' || p[i] == '-')) {
    r.exponent_sign = p[i] == '+' ? 1 : -1;
    ++i;
  }
  const size_t start = i;
  while (i < p.size() && IsDigit(p[i])) ++i;
  r.exponent_digits = p.substr(start, i - start);
  r.ok = i == p.size();
  return r;
}

NumberPrefixStatus AnalyzeExponent(const MagnitudeInterval& m, const ParsedPrefix& parsed) {
  NumberPrefixStatus status;
  const Decimal n = Normalized(false, std::string(parsed.integer) + std::string(parsed.fraction),
                               -static_cast<int64_t>(parsed.fraction.size()));
  if (n.is_zero()) {
    status.viable = Inside(m, Decimal{});
    status.complete = status.viable && !parsed.exponent_digits.empty();
    return status;
  }
  std::optional<int64_t> e_lo, e_hi;
  if (!ExponentSpan(m, n, &e_lo, &e_hi)) return status;
  // x >= 0 with sign s gives e = s * x: x in [max(0, s e_lo), s e_hi] (bounds swap for s = -1).
  const auto reach = [&](int sign) {
    if (sign > 0) return ExponentDigitsReach(parsed.exponent_digits, std::max<int64_t>(0, e_lo.value_or(0)), e_hi);
    const int64_t lo = e_hi ? std::max<int64_t>(0, -*e_hi) : 0;
    const std::optional<int64_t> hi = e_lo ? std::optional<int64_t>(-*e_lo) : std::nullopt;
    if (hi && *hi < 0) return false;
    return ExponentDigitsReach(parsed.exponent_digits, lo, hi);
  };
  status.viable = parsed.exponent_sign == 0 ? (reach(1) || (parsed.exponent_digits.empty() && reach(-1)))
                                            : reach(parsed.exponent_sign);
  if (!parsed.exponent_digits.empty()) {
    // The written exponent, or +-huge when it does not fit (then the value is 0+ or huge).
    size_t lead = 0;
    while (lead < parsed.exponent_digits.size() && parsed.exponent_digits[lead] == '0') ++lead;
    const std::string_view v = parsed.exponent_digits.substr(lead);
    const int sign = parsed.exponent_sign < 0 ? -1 : 1;
    if (v.size() > 18) {
      status.complete = sign > 0 ? !m.hi : (m.lo.is_zero() && (!m.hi || !m.hi->is_zero()));
    } else {
      int64_t value = 0;
      std::from_chars(v.data(), v.data() + v.size(), value);
      status.complete = Inside(m, Scaled(n, sign * value));
    }
  }
  return status;
}

}  // namespace

std::optional<Decimal> Decimal::Parse(std::string_view text) {
  const ParsedPrefix p = ParsePrefix(text, false);
  if (!p.ok || p.integer.empty() || (p.point && p.fraction.empty()) || (p.exponent && p.exponent_digits.empty())) {
    return std::nullopt;
  }
  int64_t exponent = 0;
  if (p.exponent) {
    size_t lead = 0;
    while (lead < p.exponent_digits.size() && p.exponent_digits[lead] == '0') ++lead;
    const std::string_view v = p.exponent_digits.substr(lead);
    if (v.size() > 15) return std::nullopt;  // beyond any double
    std::from_chars(v.data(), v.data() + v.size(), exponent);
    if (p.exponent_sign < 0) exponent = -exponent;
  }
  Decimal d = Normalized(p.negative, std::string(p.integer) + std::string(p.fraction),
                         exponent - static_cast<int64_t>(p.fraction.size()));
  return d;
}

Decimal Decimal::FromDouble(double value) {
  DI_CHECK(value == value && value != std::numeric_limits<double>::infinity() &&
               value != -std::numeric_limits<double>::infinity(),
           "Decimal::FromDouble of a non-finite value");
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  // to_chars writes "1e+20" and "5e-07": JSON accepts both forms.
  const std::optional<Decimal> d = Parse(text);
  DI_CHECK(d.has_value(), "to_chars gave an unparsable number ", text);
  return *d;
}

Decimal Decimal::FromInt(int64_t value) {
  if (value < 0) {
    Decimal d = FromUint(static_cast<uint64_t>(-(value + 1)) + 1);
    d.negative = true;
    return d;
  }
  return FromUint(static_cast<uint64_t>(value));
}

Decimal Decimal::FromUint(uint64_t value) { return Normalized(false, std::to_string(value), 0); }

std::string Decimal::ToString() const {
  if (is_zero()) return "0";
  std::string out = negative ? "-" : "";
  const int64_t order = Order(*this);
  if (exponent >= 0 && order <= 30) return out + digits + std::string(static_cast<size_t>(exponent), '0');
  if (exponent < 0 && order > 0) return out + digits.substr(0, order) + "." + digits.substr(order);
  if (exponent < 0 && order > -30) return out + "0." + std::string(static_cast<size_t>(-order), '0') + digits;
  return out + digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + "e" +
         std::to_string(order - 1);
}

int Compare(const Decimal& a, const Decimal& b) {
  const bool a_negative = a.negative && !a.is_zero();
  const bool b_negative = b.negative && !b.is_zero();
  if (a_negative != b_negative) return a_negative ? -1 : 1;
  const int magnitude = CompareMagnitude(a, b);
  return a_negative ? -magnitude : magnitude;
}

bool NumberRange::Contains(const Decimal& value) const {
  if (kind == Kind::kInteger && !value.is_integer()) return false;
  if (lower) {
    const int c = Compare(value, lower->value);
    if (c < 0 || (c == 0 && lower->exclusive)) return false;
  }
  if (upper) {
    const int c = Compare(value, upper->value);
    if (c > 0 || (c == 0 && upper->exclusive)) return false;
  }
  return true;
}

bool NumberRange::HasValue() const {
  // The empty prefix is viable iff either sign can still reach a value.
  return AnalyzeNumberPrefix(*this, "").viable;
}

bool NumberRange::operator==(const NumberRange& other) const {
  const auto same = [](const std::optional<NumberBound>& a, const std::optional<NumberBound>& b) {
    return a.has_value() == b.has_value() && (!a || (a->value == b->value && a->exclusive == b->exclusive));
  };
  return kind == other.kind && same(lower, other.lower) && same(upper, other.upper);
}

std::string NumberRange::Describe() const {
  std::string out = kind == Kind::kInteger ? "integer" : "number";
  if (!lower && !upper) return out;
  out += " in ";
  out += lower ? (lower->exclusive ? "(" : "[") + lower->value.ToString() : "(-inf";
  out += ", ";
  out += upper ? upper->value.ToString() + (upper->exclusive ? ")" : "]") : "+inf)";
  return out;
}

NumberPrefixStatus AnalyzeNumberPrefix(const NumberRange& range, std::string_view prefix) {
  const bool integer_kind = range.kind == NumberRange::Kind::kInteger;
  NumberPrefixStatus status;
  if (prefix.empty()) {
    // Before the sign: either sign may still come.
    for (bool negative : {false, true}) {
      const MagnitudeInterval m = MagnitudesFor(range, negative);
      IntegerText first;
      std::optional<IntegerText> last;
      status.viable |= integer_kind ? IntegerSpan(m, &first, &last) : !m.empty;
    }
    return status;
  }
  const ParsedPrefix parsed = ParsePrefix(prefix, integer_kind);
  if (!parsed.ok) return status;
  const MagnitudeInterval m = MagnitudesFor(range, parsed.negative);
  if (m.empty) return status;
  if (parsed.exponent) return AnalyzeExponent(m, parsed);
  if (parsed.integer.empty()) {  // just "-"
    IntegerText first;
    std::optional<IntegerText> last;
    status.viable = integer_kind ? IntegerSpan(m, &first, &last) : true;
    return status;
  }
  const std::string mantissa = std::string(parsed.integer) + std::string(parsed.fraction);
  const Decimal value = Normalized(false, mantissa, -static_cast<int64_t>(parsed.fraction.size()));
  if (integer_kind) {
    status.viable = IntegerDigitsViable(m, std::string(parsed.integer));
  } else {
    size_t lead = 0;
    while (lead < mantissa.size() && mantissa[lead] == '0') ++lead;
    status.viable = lead == mantissa.size() ? !m.empty : MantissaViable(m, mantissa.substr(lead));
  }
  status.complete = status.viable && !(parsed.point && parsed.fraction.empty()) && Inside(m, value);
  return status;
}

}  // namespace deepinfer
