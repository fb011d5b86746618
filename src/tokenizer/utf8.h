// UTF-8 helpers shared by the tokenizer: decoding one code point, encoding one, and the lossy
// conversion that both Rust's `String::from_utf8_lossy` and Python's `bytes.decode("utf-8",
// "replace")` perform (each maximal invalid subsequence becomes one U+FFFD).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Length of the longest prefix of `bytes` (at most 4) that is a valid UTF-8 sequence or a
// prefix of one, following the Unicode "maximal subpart" rule. Returns `valid = true` when the
// prefix is a complete, well-formed code point.
struct Utf8Step {
  size_t length;
  bool valid;
  char32_t code_point;
};
Utf8Step DecodeUtf8Step(std::string_view bytes);

bool IsValidUtf8(std::string_view bytes);

// Replaces each maximal invalid subsequence with U+FFFD; valid input is returned unchanged.
std::string Utf8Lossy(std::string_view bytes);

void AppendUtf8(char32_t code_point, std::string& out);

// The Unicode White_Space property (PropList.txt), which Rust's `char::is_whitespace` and
// regex `\s` use; utf8proc does not expose it. The set has been stable since Unicode 6.3.
bool IsUnicodeWhiteSpace(char32_t code_point);

// Calls `visit(code_point, byte_offset, byte_length)` for each code point of valid UTF-8.
template <typename Visitor>
void ForEachCodePoint(std::string_view valid_utf8, Visitor&& visit) {
  size_t offset = 0;
  while (offset < valid_utf8.size()) {
    const Utf8Step step = DecodeUtf8Step(valid_utf8.substr(offset));
    visit(step.code_point, offset, step.length);
    offset += step.length;
  }
}

}  // namespace deepinfer
