#include "chat/dsml_syntax.h"

namespace deepinfer::dsml {
namespace {

// Python's '$' without MULTILINE: the end of the text, or just before a newline that ends it.
bool AtDollar(std::string_view text, std::size_t pos) {
  return pos == text.size() || (pos + 1 == text.size() && text[pos] == '\n');
}

// The smallest end >= from at which `literal` occurs followed by '$' (a lazy ".*?" then literal$).
// Only two ends can satisfy '$', so this checks those instead of scanning.
std::size_t LazyLiteralAtEnd(std::string_view text, std::size_t from, std::string_view literal) {
  for (std::size_t tail : {literal.size() + 1, literal.size()}) {
    if (text.size() < tail || text.size() - tail < from) continue;
    const std::size_t at = text.size() - tail;
    if (text.substr(at, literal.size()) == literal && AtDollar(text, at + literal.size())) return at;
  }
  return std::string_view::npos;
}

}  // namespace

std::size_t PythonSpaceLength(std::string_view text, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return i < text.size() ? static_cast<unsigned char>(text[i]) : 0u; };
  const unsigned b0 = byte(pos);
  if ((b0 >= 0x09 && b0 <= 0x0d) || (b0 >= 0x1c && b0 <= 0x20)) return 1;
  const unsigned b1 = byte(pos + 1), b2 = byte(pos + 2);
  if (b0 == 0xc2 && (b1 == 0x85 || b1 == 0xa0)) return 2;  // U+0085, U+00A0
  if (b0 == 0xe1 && b1 == 0x9a && b2 == 0x80) return 3;    // U+1680
  if (b0 == 0xe2 && b1 == 0x80 && ((b2 >= 0x80 && b2 <= 0x8a) || b2 == 0xa8 || b2 == 0xa9 || b2 == 0xaf)) {
    return 3;  // U+2000..200A, 2028, 2029, 202F
  }
  if (b0 == 0xe2 && b1 == 0x81 && b2 == 0x9f) return 3;  // U+205F
  if (b0 == 0xe3 && b1 == 0x80 && b2 == 0x80) return 3;  // U+3000
  return 0;
}

bool MatchInvokeHeader(std::string_view header, std::string* name) {
  // '\s*' is greedy and the next character must be 'n', so backtracking never gives anything back.
  std::size_t pos = 0;
  while (std::size_t len = PythonSpaceLength(header, pos)) pos += len;
  constexpr std::string_view kPrefix = "name=\"";
  if (header.substr(pos, kPrefix.size()) != kPrefix) return false;
  const std::size_t start = pos + kPrefix.size();
  const std::size_t end = LazyLiteralAtEnd(header, start, "\">\n");
  if (end == std::string_view::npos) return false;
  *name = std::string(header.substr(start, end - start));
  return true;
}

bool MatchParameter(std::string_view text, std::string* name, bool* is_string, std::string* value) {
  constexpr std::string_view kPrefix = " name=\"";
  constexpr std::string_view kStringAttr = "\" string=\"";
  if (text.substr(0, kPrefix.size()) != kPrefix) return false;
  const std::size_t name_start = kPrefix.size();
  // The lazy name group tries every '" string="' in order; the first that lets the rest match wins.
  for (std::size_t at = text.find(kStringAttr, name_start); at != std::string_view::npos;
       at = text.find(kStringAttr, at + 1)) {
    const std::size_t flag_start = at + kStringAttr.size();
    for (std::string_view flag : {std::string_view("true\">"), std::string_view("false\">")}) {
      if (text.substr(flag_start, flag.size()) != flag) continue;
      const std::size_t value_start = flag_start + flag.size();
      const std::size_t value_end = LazyLiteralAtEnd(text, value_start, "<");
      if (value_end == std::string_view::npos) continue;
      *name = std::string(text.substr(name_start, at - name_start));
      *is_string = flag[0] == 't';
      *value = std::string(text.substr(value_start, value_end - value_start));
      return true;
    }
  }
  return false;
}

}  // namespace deepinfer::dsml
