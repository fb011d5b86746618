#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

// Printable Latin-1 bytes stand for themselves; the rest are shifted past U+00FF in byte order.
bool IsSelfMapped(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

}  // namespace

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_for_char_.fill(-1);
  char32_t next_shifted = 256;
  for (int byte = 0; byte < 256; ++byte) {
    const char32_t code_point = IsSelfMapped(byte) ? static_cast<char32_t>(byte) : next_shifted++;
    char_for_byte_[byte] = code_point;
    byte_for_char_[code_point] = static_cast<int16_t>(byte);
  }
}

std::optional<uint8_t> ByteLevelAlphabet::ByteForChar(char32_t code_point) const {
  if (code_point >= byte_for_char_.size() || byte_for_char_[code_point] < 0) return std::nullopt;
  return static_cast<uint8_t>(byte_for_char_[code_point]);
}

std::string ByteLevelAlphabet::Encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char byte : bytes) AppendUtf8(char_for_byte_[static_cast<uint8_t>(byte)], out);
  return out;
}

void ByteLevelAlphabet::AppendTokenBytes(std::string_view token, std::string& out) const {
  const size_t original_size = out.size();
  size_t offset = 0;
  while (offset < token.size()) {
    const Utf8Step step = DecodeUtf8Step(token.substr(offset));
    const std::optional<uint8_t> byte = step.valid ? ByteForChar(step.code_point) : std::nullopt;
    if (!byte) {
      out.resize(original_size);
      out.append(token);
      return;
    }
    out.push_back(static_cast<char>(*byte));
    offset += step.length;
  }
}

}  // namespace deepinfer
