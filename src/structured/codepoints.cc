#include "structured/codepoints.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

constexpr char32_t kMaxCodepoint = 0x10FFFF;
constexpr char32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

// A sequence of byte ranges, one per byte position.
using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

void AppendUtf8Bytes(char32_t c, uint8_t* out, int* n) {
  std::string s;
  AppendUtf8(c, s);
  *n = static_cast<int>(s.size());
  for (int i = 0; i < *n; ++i) out[i] = static_cast<uint8_t>(s[i]);
}

// Splits [lo, hi] (same UTF-8 length) until every byte position is a plain range: the classic
// construction of RE2 and Rust's utf8-ranges.
void Utf8Split(char32_t lo, char32_t hi, std::vector<ByteRanges>& out) {
  uint8_t a[4], z[4];
  int na = 0, nz = 0;
  AppendUtf8Bytes(lo, a, &na);
  AppendUtf8Bytes(hi, z, &nz);
  DI_CHECK(na == nz);
  for (int i = 1; i < na; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Split(lo, lo | m, out);
        Utf8Split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Split(lo, (hi & ~m) - 1, out);
        Utf8Split(hi & ~m, hi, out);
        return;
      }
    }
  }
  ByteRanges seq;
  for (int i = 0; i < na; ++i) seq.emplace_back(a[i], z[i]);
  out.push_back(seq);
}

void Utf8Ranges(char32_t lo, char32_t hi, std::vector<ByteRanges>& out) {
  for (char32_t limit : {char32_t{0x7F}, char32_t{0x7FF}, char32_t{0xFFFF}, kMaxCodepoint}) {
    const char32_t start = limit == 0x7F ? 0 : (limit == 0x7FF ? 0x80 : (limit == 0xFFFF ? 0x800 : 0x10000));
    const char32_t a = std::max(lo, start), z = std::min(hi, limit);
    if (a <= z) Utf8Split(a, z, out);
  }
}

// The same split for 4 hex digits of a 16-bit value.
void HexSplit(uint32_t lo, uint32_t hi, std::vector<std::array<std::pair<int, int>, 4>>& out) {
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (4 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        HexSplit(lo, lo | m, out);
        HexSplit((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        HexSplit(lo, (hi & ~m) - 1, out);
        HexSplit(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::array<std::pair<int, int>, 4> digits;
  for (int i = 0; i < 4; ++i) {
    const int shift = 4 * (3 - i);
    digits[i] = {static_cast<int>((lo >> shift) & 15), static_cast<int>((hi >> shift) & 15)};
  }
  out.push_back(digits);
}

ByteSet HexDigits(int lo, int hi) {
  ByteSet set;
  for (int d = lo; d <= hi; ++d) {
    if (d < 10) {
      set.Add(static_cast<uint8_t>('0' + d));
    } else {
      set.Add(static_cast<uint8_t>('a' + d - 10));
      set.Add(static_cast<uint8_t>('A' + d - 10));
    }
  }
  return set;
}

// "\u" and four hex digits spelling a value in [lo, hi] (16-bit).
GrammarBuilder::Expr HexEscape(GrammarBuilder& b, uint32_t lo, uint32_t hi) {
  std::vector<std::array<std::pair<int, int>, 4>> pieces;
  HexSplit(lo, hi, pieces);
  std::vector<GrammarBuilder::Expr> options;
  for (const auto& digits : pieces) {
    std::vector<GrammarBuilder::Expr> seq = {b.Literal("\\u")};
    for (const auto& [d0, d1] : digits) seq.push_back(b.Bytes(HexDigits(d0, d1)));
    options.push_back(b.Seq(std::move(seq)));
  }
  return b.Alt(std::move(options));
}

}  // namespace

CodepointSet CodepointSet::Range(char32_t lo, char32_t hi) {
  CodepointSet s;
  s.Add(lo, hi);
  return s;
}

CodepointSet CodepointSet::All() { return Range(0, kMaxCodepoint); }

void CodepointSet::Add(char32_t lo, char32_t hi) {
  hi = std::min(hi, kMaxCodepoint);
  if (lo > hi) return;
  // Surrogates are not scalar values.
  if (lo <= kSurrogateHi && hi >= kSurrogateLo) {
    if (lo < kSurrogateLo) Add(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) Add(kSurrogateHi + 1, hi);
    return;
  }
  std::vector<std::pair<char32_t, char32_t>> merged;
  bool placed = false;
  for (const auto& r : ranges_) {
    if (r.second + 1 < lo) {
      merged.push_back(r);
    } else if (hi + 1 < r.first) {
      if (!placed) merged.emplace_back(lo, hi), placed = true;
      merged.push_back(r);
    } else {
      lo = std::min(lo, r.first);
      hi = std::max(hi, r.second);
    }
  }
  if (!placed) merged.emplace_back(lo, hi);
  ranges_ = std::move(merged);
  // Ranges separated only by the surrogate gap stay apart; that is fine for encoding.
}

void CodepointSet::Add(const CodepointSet& other) {
  for (const auto& [lo, hi] : other.ranges_) Add(lo, hi);
}

CodepointSet CodepointSet::Complement() const {
  CodepointSet out;
  char32_t next = 0;
  for (const auto& [lo, hi] : ranges_) {
    if (lo > next) out.Add(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.Add(next, kMaxCodepoint);
  return out;
}

CodepointSet CodepointSet::Minus(const CodepointSet& other) const { return Intersect(other.Complement()); }

CodepointSet CodepointSet::Intersect(const CodepointSet& other) const {
  CodepointSet out;
  for (const auto& [a, b] : ranges_) {
    for (const auto& [c, d] : other.ranges_) {
      const char32_t lo = std::max(a, c), hi = std::min(b, d);
      if (lo <= hi) out.Add(lo, hi);
    }
  }
  return out;
}

bool CodepointSet::Contains(char32_t c) const {
  for (const auto& [lo, hi] : ranges_) {
    if (c >= lo && c <= hi) return true;
  }
  return false;
}

GrammarBuilder::Expr Utf8Expr(GrammarBuilder& b, const CodepointSet& set) {
  std::vector<ByteRanges> sequences;
  for (const auto& [lo, hi] : set.ranges()) Utf8Ranges(lo, hi, sequences);
  std::vector<GrammarBuilder::Expr> options;
  for (const ByteRanges& seq : sequences) {
    std::vector<GrammarBuilder::Expr> parts;
    for (const auto& [lo, hi] : seq) parts.push_back(b.Bytes(ByteSet::Range(lo, hi)));
    options.push_back(b.Seq(std::move(parts)));
  }
  return b.Alt(std::move(options));
}

GrammarBuilder::Expr JsonCharExpr(GrammarBuilder& b, const CodepointSet& set, const CodepointSet& never_raw) {
  CodepointSet must_escape = never_raw;
  must_escape.Add(0, 0x1F);
  must_escape.Add('"', '"');
  must_escape.Add('\\', '\\');
  std::vector<GrammarBuilder::Expr> options = {Utf8Expr(b, set.Minus(must_escape))};
  static constexpr std::pair<char32_t, char> kShort[] = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},  {0x08, 'b'},
                                                         {0x0C, 'f'}, {0x0A, 'n'},  {0x0D, 'r'}, {0x09, 't'}};
  for (const auto& [c, letter] : kShort) {
    if (set.Contains(c)) options.push_back(b.Literal(std::string("\\") + letter));
  }
  const CodepointSet basic = set.Intersect(CodepointSet::Range(0, 0xFFFF));
  for (const auto& [lo, hi] : basic.ranges()) options.push_back(HexEscape(b, lo, hi));
  // Above U+FFFF: c - 0x10000 = (high << 10) | low, spelled \u(D800 + high)\u(DC00 + low).
  const CodepointSet supplementary = set.Intersect(CodepointSet::Range(0x10000, kMaxCodepoint));
  for (const auto& [lo, hi] : supplementary.ranges()) {
    const uint32_t a = lo - 0x10000, z = hi - 0x10000;
    const auto pair = [&](uint32_t high_lo, uint32_t high_hi, uint32_t low_lo, uint32_t low_hi) {
      options.push_back(
          b.Seq({HexEscape(b, 0xD800 + high_lo, 0xD800 + high_hi), HexEscape(b, 0xDC00 + low_lo, 0xDC00 + low_hi)}));
    };
    if ((a >> 10) == (z >> 10)) {
      pair(a >> 10, a >> 10, a & 0x3FF, z & 0x3FF);
      continue;
    }
    pair(a >> 10, a >> 10, a & 0x3FF, 0x3FF);
    if ((a >> 10) + 1 <= (z >> 10) - 1) pair((a >> 10) + 1, (z >> 10) - 1, 0, 0x3FF);
    pair(z >> 10, z >> 10, 0, z & 0x3FF);
  }
  return b.Alt(std::move(options));
}

GrammarBuilder::Expr JsonStringLiteralExpr(GrammarBuilder& b, std::string_view text, const CodepointSet& never_raw) {
  DI_CHECK(IsValidUtf8(text), "JsonStringLiteralExpr needs valid UTF-8");
  std::vector<GrammarBuilder::Expr> parts = {b.Literal("\"")};
  ForEachCodePoint(
      text, [&](char32_t c, size_t, size_t) { parts.push_back(JsonCharExpr(b, CodepointSet::Of(c), never_raw)); });
  parts.push_back(b.Literal("\""));
  return b.Seq(std::move(parts));
}

}  // namespace deepinfer
