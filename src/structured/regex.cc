// A recursive-descent parser that builds grammar expressions as it reads: each character class
// becomes the expression of its spellings (UTF-8 or JSON), so the same regex serves raw text and
// JSON string values.
#include "structured/regex.h"

#include <optional>
#include <string>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

using Expr = GrammarBuilder::Expr;

CodepointSet Digits() { return CodepointSet::Range('0', '9'); }
CodepointSet WordChars() {
  CodepointSet s = CodepointSet::Range('a', 'z');
  s.Add('A', 'Z');
  s.Add('0', '9');
  s.Add('_', '_');
  return s;
}
CodepointSet Spaces() {
  CodepointSet s = CodepointSet::Range('\t', '\r');  // \t \n \v \f \r
  s.Add(' ', ' ');
  return s;
}

class RegexParser {
 public:
  RegexParser(GrammarBuilder& b, std::string_view source, const RegexOptions& options)
      : b_(b), source_(source), options_(options) {
    if (!IsValidUtf8(source)) throw MakeError("regex is not valid UTF-8");
    ForEachCodePoint(source, [&](char32_t c, size_t, size_t) { p_.push_back(c); });
  }

  Expr ParseTop() {
    std::vector<Expr> alternatives;
    for (;;) {
      const bool start_anchor = Eat('^');
      Expr body = ParseConcat(/*top=*/true);
      const bool end_anchor = Eat('$');
      if (end_anchor && !AtEnd() && Peek() != '|') Fail("'$' is only supported at the end of the pattern");
      if (options_.search) {
        body = b_.Seq({start_anchor ? b_.Empty() : AnyText(), body, end_anchor ? b_.Empty() : AnyText()});
      }
      alternatives.push_back(body);
      if (AtEnd()) break;
      if (Peek() == ')') Fail("unbalanced ')'");
      Expect('|');
    }
    return b_.Alt(std::move(alternatives));
  }

 private:
  // The pattern is the user's text and may be long: the message quotes it shortened.
  [[noreturn]] void Fail(const std::string& what) const {
    throw MakeError("regex /", Printable(source_), "/: ", what, " at offset ", i_);
  }
  bool AtEnd() const { return i_ >= p_.size(); }
  char32_t Peek(size_t ahead = 0) const { return i_ + ahead < p_.size() ? p_[i_ + ahead] : 0; }
  bool Eat(char32_t c) {
    if (AtEnd() || p_[i_] != c) return false;
    ++i_;
    return true;
  }
  void Expect(char32_t c) {
    if (!Eat(c)) Fail(std::string("expected '") + static_cast<char>(c) + "'");
  }

  Expr Chars(const CodepointSet& set) {
    return options_.spelling == RegexOptions::Spelling::kUtf8 ? Utf8Expr(b_, set)
                                                              : JsonCharExpr(b_, set, options_.never_raw);
  }
  Expr AnyText() { return b_.Star(Chars(CodepointSet::All())); }

  Expr ParseAlternation() {
    std::vector<Expr> options = {ParseConcat(false)};
    while (Eat('|')) options.push_back(ParseConcat(false));
    return b_.Alt(std::move(options));
  }

  Expr ParseConcat(bool top) {
    std::vector<Expr> parts;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      if (top && Peek() == '$' && (i_ + 1 == p_.size() || Peek(1) == '|')) break;
      parts.push_back(ParseRepeat());
    }
    return b_.Seq(std::move(parts));
  }

  // {n}, {n,}, {n,m}, {,m} at i_; nullopt (nothing consumed) when '{' starts a literal.
  std::optional<std::pair<int64_t, std::optional<int64_t>>> ParseBraces() {
    size_t j = i_ + 1;
    const auto number = [&]() -> std::optional<int64_t> {
      const size_t start = j;
      int64_t value = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        value = value * 10 + (p_[j] - '0');
        if (value > 100000) Fail("repetition count too large");
        ++j;
      }
      return j == start ? std::nullopt : std::optional<int64_t>(value);
    };
    const std::optional<int64_t> min = number();
    std::optional<int64_t> max = min;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      max = number();
      if (!min && !max) return std::nullopt;
    } else if (!min) {
      return std::nullopt;
    }
    if (j >= p_.size() || p_[j] != '}') return std::nullopt;
    i_ = j + 1;
    if (min && max && *max < *min) Fail("repetition {" + std::to_string(*min) + "," + std::to_string(*max) + "}");
    return std::make_pair(min.value_or(0), max);
  }

  Expr ParseRepeat() {
    Expr atom = ParseAtom();
    bool quantified = false;
    for (;;) {
      std::optional<std::pair<int64_t, std::optional<int64_t>>> q;
      if (Peek() == '*') {
        q = {{0, std::nullopt}};
        ++i_;
      } else if (Peek() == '+') {
        q = {{1, std::nullopt}};
        ++i_;
      } else if (Peek() == '?') {
        q = {{0, 1}};
        ++i_;
      } else if (Peek() == '{') {
        q = ParseBraces();
      }
      if (!q) return atom;
      if (quantified) Fail("multiple repeat");
      quantified = true;
      if (Eat('+')) Fail("possessive quantifiers are not supported");
      Eat('?');  // lazy: the same texts match
      atom = b_.Repeat(atom, q->first, q->second);
    }
  }

  Expr ParseAtom() {
    const char32_t c = Peek();
    switch (c) {
      case '(':
        return ParseGroup();
      case '[':
        return Chars(ParseClass());
      case '.':
        ++i_;
        return Chars(CodepointSet::All().Minus(CodepointSet::Of('\n')));
      case '\\':
        return ParseEscape();
      case '^':
      case '$':
        Fail("anchors are only supported at the start and end of the pattern");
      case '*':
      case '+':
      case '?':
        Fail("nothing to repeat");
      default:
        if (c == '{' && ParseBraces()) Fail("nothing to repeat");
        ++i_;
        return Chars(CodepointSet::Of(c));
    }
  }

  Expr ParseGroup() {
    Expect('(');
    if (Eat('?')) {
      if (Eat(':')) {
      } else if (Peek() == 'P' && Peek(1) == '<') {
        i_ += 2;
        SkipGroupName();
      } else if (Peek() == '<' && Peek(1) != '=' && Peek(1) != '!') {
        ++i_;
        SkipGroupName();
      } else if (Peek() == '=' || Peek() == '!' || (Peek() == '<' && (Peek(1) == '=' || Peek(1) == '!'))) {
        Fail("lookaround assertions are not supported");
      } else if (Peek() == 'P' && Peek(1) == '=') {
        Fail("backreferences are not supported");
      } else {
        Fail("inline flags and other (?...) groups are not supported");
      }
    }
    Expr inner = ParseAlternation();
    if (!Eat(')')) Fail("missing ')'");
    return inner;
  }

  void SkipGroupName() {
    const size_t start = i_;
    while (!AtEnd() && Peek() != '>') ++i_;
    if (AtEnd() || i_ == start) Fail("bad group name");
    ++i_;
  }

  uint32_t ParseHex(size_t digits) {
    uint32_t value = 0;
    for (size_t k = 0; k < digits; ++k) {
      const char32_t d = Peek();
      int v = -1;
      if (d >= '0' && d <= '9') v = static_cast<int>(d - '0');
      if (d >= 'a' && d <= 'f') v = static_cast<int>(d - 'a' + 10);
      if (d >= 'A' && d <= 'F') v = static_cast<int>(d - 'A' + 10);
      if (v < 0) Fail("bad hex escape");
      value = value * 16 + static_cast<uint32_t>(v);
      ++i_;
    }
    return value;
  }

  // After '\': one code point, or a class (\d ...). `in_class`: \b is a backspace there.
  CodepointSet ParseEscapeSet(bool in_class, bool* is_class) {
    Expect('\\');
    if (AtEnd()) Fail("trailing backslash");
    const char32_t c = p_[i_++];
    *is_class = true;
    switch (c) {
      case 'd':
        return Digits();
      case 'D':
        return Digits().Complement();
      case 'w':
        return WordChars();
      case 'W':
        return WordChars().Complement();
      case 's':
        return Spaces();
      case 'S':
        return Spaces().Complement();
      default:
        break;
    }
    *is_class = false;
    char32_t value = c;
    switch (c) {
      case 't':
        value = '\t';
        break;
      case 'n':
        value = '\n';
        break;
      case 'r':
        value = '\r';
        break;
      case 'f':
        value = '\f';
        break;
      case 'v':
        value = '\v';
        break;
      case 'a':
        value = 0x07;
        break;
      case 'b':
        if (!in_class) Fail("word boundaries (\\b) are not supported");
        value = 0x08;
        break;
      case '0':
        if (Peek() >= '0' && Peek() <= '7') Fail("octal escapes are not supported");
        value = 0;
        break;
      case 'x':
        if (Eat('{')) {
          size_t n = 0;
          value = 0;
          while (!AtEnd() && Peek() != '}' && n < 6) value = value * 16 + ParseHex(1), ++n;
          if (n == 0 || !Eat('}')) Fail("bad \\x{...} escape");
        } else {
          value = ParseHex(2);
        }
        break;
      case 'u':
        value = ParseHex(4);
        break;
      case 'U':
        value = ParseHex(8);
        break;
      default:
        if ((c >= '1' && c <= '9') || c == 'k' || c == 'g') Fail("backreferences are not supported");
        if (c == 'B' || c == 'A' || c == 'Z' || c == 'z' || c == 'G') Fail("assertions are not supported");
        if (c == 'p' || c == 'P' || c == 'N' || c == 'X') Fail("Unicode property escapes are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          Fail(std::string("unknown escape \\") + static_cast<char>(c));
        }
        break;  // escaped punctuation or any other character stands for itself
    }
    if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) Fail("escape outside the Unicode scalar values");
    return CodepointSet::Of(value);
  }

  Expr ParseEscape() {
    bool is_class = false;
    return Chars(ParseEscapeSet(false, &is_class));
  }

  CodepointSet ParseClass() {
    Expect('[');
    const bool negated = Eat('^');
    CodepointSet set;
    bool first = true;
    for (;;) {
      if (AtEnd()) Fail("missing ']'");
      if (Peek() == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      if (Peek() == '[' && Peek(1) == ':') Fail("POSIX classes are not supported");
      bool is_class = false;
      CodepointSet item;
      if (Peek() == '\\') {
        item = ParseEscapeSet(true, &is_class);
      } else {
        item = CodepointSet::Of(p_[i_++]);
      }
      if (!is_class && Peek() == '-' && Peek(1) != ']' && i_ + 1 < p_.size()) {
        ++i_;
        bool hi_class = false;
        CodepointSet hi_set;
        if (Peek() == '\\') {
          hi_set = ParseEscapeSet(true, &hi_class);
        } else {
          hi_set = CodepointSet::Of(p_[i_++]);
        }
        if (hi_class) Fail("bad character range");
        const char32_t lo = item.ranges()[0].first, hi = hi_set.ranges()[0].first;
        if (hi < lo) Fail("bad character range");
        set.Add(lo, hi);
        continue;
      }
      set.Add(item);
    }
    return negated ? set.Complement() : set;
  }

  GrammarBuilder& b_;
  std::string_view source_;
  const RegexOptions& options_;
  std::u32string p_;
  size_t i_ = 0;
};

}  // namespace

Expr CompileRegex(GrammarBuilder& b, std::string_view pattern, const RegexOptions& options) {
  RegexParser parser(b, pattern, options);
  return parser.ParseTop();
}

}  // namespace deepinfer
