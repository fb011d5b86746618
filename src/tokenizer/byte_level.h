// The GPT-2 "byte-level" alphabet used by the ByteLevel pre-tokenizer and decoder: every byte
// maps to one printable code point so that BPE vocabularies can be stored as text.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace deepinfer {

class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();

  char32_t CharForByte(uint8_t byte) const { return char_for_byte_[byte]; }
  std::optional<uint8_t> ByteForChar(char32_t code_point) const;

  // Maps each byte of `bytes` to its alphabet character, as UTF-8.
  std::string Encode(std::string_view bytes) const;

  // The HF ByteLevel decoder rule for one token: the bytes its characters stand for, or the
  // token's own UTF-8 when any character is outside the alphabet (e.g. added tokens like
  // "<｜User｜>"). Appends to `out`, which may end up holding invalid UTF-8.
  void AppendTokenBytes(std::string_view token, std::string& out) const;

 private:
  std::array<char32_t, 256> char_for_byte_;
  // Alphabet characters all lie below U+0144; index by code point.
  std::array<int16_t, 324> byte_for_char_;
};

}  // namespace deepinfer
