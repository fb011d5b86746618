#include "tokenizer/regex_translate.h"

#include <cstdio>

#include "core/error.h"

namespace deepinfer {
namespace {

struct CategoryRange {
  char32_t first;
  char32_t last;
  const char* category;  // two-letter general category
};

constexpr CategoryRange kUnicode16Additions[] = {
#include "tokenizer/unicode_additions.inc"
};

// Unicode White_Space, as class-body text.
constexpr std::string_view kWhiteSpaceBody =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";
constexpr std::string_view kHexDigitBody = "0-9A-Fa-f";

std::string CodePointEscape(char32_t code_point) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "\\x{%X}", static_cast<unsigned>(code_point));
  return buffer;
}

// Class-body ranges of the Unicode 16.0 additions to a general category ("L" or "Lu" style).
std::string AdditionsBody(std::string_view property) {
  std::string body;
  if (property.empty() || property.size() > 2) return body;  // scripts and others: no additions
  for (const CategoryRange& range : kUnicode16Additions) {
    const std::string_view category(range.category);
    if (category.substr(0, property.size()) != property) continue;
    body += CodePointEscape(range.first);
    if (range.last != range.first) {
      body += '-';
      body += CodePointEscape(range.last);
    }
  }
  return body;
}

class Translator {
 public:
  explicit Translator(std::string_view pattern) : pattern_(pattern) {}

  std::string Run() {
    while (position_ < pattern_.size()) {
      const char character = pattern_[position_];
      if (character == '\\' && position_ + 1 < pattern_.size()) {
        TranslateEscape();
      } else if (character == '[' && !in_class_) {
        OpenClass();
      } else if (character == '[' && in_class_) {
        CopyPosixClass();
      } else {
        if (character == ']' && in_class_) in_class_ = false;
        output_ += character;
        ++position_;
      }
    }
    return output_;
  }

 private:
  void OpenClass() {
    in_class_ = true;
    output_ += '[';
    ++position_;
    if (position_ < pattern_.size() && pattern_[position_] == '^') output_ += pattern_[position_++];
    // A ']' right after the opening bracket is a literal in both dialects.
    if (position_ < pattern_.size() && pattern_[position_] == ']') output_ += pattern_[position_++];
  }

  // "[:alpha:]" inside a class means the same in both dialects; any other '[' inside a class
  // opens a nested class in Oniguruma but is a literal in PCRE2.
  void CopyPosixClass() {
    const size_t close = pattern_.find(":]", position_);
    if (pattern_.substr(position_, 2) != "[:" || close == std::string_view::npos) {
      throw MakeError("tokenizer regex \"", pattern_, "\": nested character classes are not supported");
    }
    output_ += pattern_.substr(position_, close + 2 - position_);
    position_ = close + 2;
  }

  // Emits a set given as class-body text, negated or not, in or out of a class.
  void EmitSet(const std::string& body, bool negated, std::string_view escape) {
    if (!in_class_) {
      output_ += negated ? "[^" : "[";
      output_ += body + "]";
    } else if (!negated) {
      output_ += body;
    } else {
      throw MakeError("tokenizer regex \"", pattern_, "\": ", escape, " inside a character class is not supported");
    }
  }

  void TranslateEscape() {
    const char kind = pattern_[position_ + 1];
    const size_t start = position_;
    position_ += 2;
    switch (kind) {
      case 's':
      case 'S':
        EmitSet(std::string(kWhiteSpaceBody), kind == 'S', pattern_.substr(start, 2));
        return;
      case 'h':
      case 'H':
        EmitSet(std::string(kHexDigitBody), kind == 'H', pattern_.substr(start, 2));
        return;
      case 'd':
        EmitSet("\\p{Nd}" + AdditionsBody("Nd"), false, "\\d");
        return;
      case 'p':
      case 'P':
        TranslateProperty(kind == 'P', start);
        return;
      default:
        output_ += pattern_.substr(start, 2);
    }
  }

  void TranslateProperty(bool negated, size_t start) {
    std::string_view name;
    if (position_ < pattern_.size() && pattern_[position_] == '{') {
      const size_t close = pattern_.find('}', position_);
      if (close == std::string_view::npos) {
        throw MakeError("tokenizer regex \"", pattern_, "\": unterminated \\p{ at offset ", start);
      }
      name = pattern_.substr(position_ + 1, close - position_ - 1);
      position_ = close + 1;
    } else if (position_ < pattern_.size()) {
      name = pattern_.substr(position_, 1);
      position_ += 1;
    }
    if (!name.empty() && name[0] == '^') {
      negated = !negated;
      name.remove_prefix(1);
    }
    const std::string additions = AdditionsBody(name);
    const std::string property = "\\p{" + std::string(name) + "}";
    if (additions.empty()) {
      output_ += (negated ? "\\P{" : "\\p{") + std::string(name) + "}";
      return;
    }
    EmitSet(property + additions, negated, pattern_.substr(start, position_ - start));
  }

  std::string_view pattern_;
  size_t position_ = 0;
  bool in_class_ = false;
  std::string output_;
};

}  // namespace

std::string TranslateOnigurumaPattern(std::string_view pattern) { return Translator(pattern).Run(); }

}  // namespace deepinfer
