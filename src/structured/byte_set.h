// A set of byte values (0..255): the label of a grammar's byte transitions.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace deepinfer {

class ByteSet {
 public:
  constexpr ByteSet() = default;
  static constexpr ByteSet Of(uint8_t byte) {
    ByteSet set;
    set.Add(byte);
    return set;
  }
  static constexpr ByteSet Range(uint8_t lo, uint8_t hi) {
    ByteSet set;
    set.AddRange(lo, hi);
    return set;
  }
  static constexpr ByteSet Chars(std::string_view chars) {
    ByteSet set;
    for (char c : chars) set.Add(static_cast<uint8_t>(c));
    return set;
  }
  static constexpr ByteSet All() { return Range(0, 255); }

  constexpr void Add(uint8_t byte) { words_[byte >> 6] |= uint64_t{1} << (byte & 63); }
  constexpr void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  constexpr bool Has(uint8_t byte) const { return (words_[byte >> 6] >> (byte & 63)) & 1; }
  constexpr bool empty() const { return (words_[0] | words_[1] | words_[2] | words_[3]) == 0; }
  constexpr ByteSet operator|(const ByteSet& other) const {
    ByteSet set;
    for (int i = 0; i < 4; ++i) set.words_[i] = words_[i] | other.words_[i];
    return set;
  }
  constexpr ByteSet operator&(const ByteSet& other) const {
    ByteSet set;
    for (int i = 0; i < 4; ++i) set.words_[i] = words_[i] & other.words_[i];
    return set;
  }
  constexpr ByteSet operator~() const {
    ByteSet set;
    for (int i = 0; i < 4; ++i) set.words_[i] = ~words_[i];
    return set;
  }
  constexpr bool operator==(const ByteSet&) const = default;
  constexpr const std::array<uint64_t, 4>& words() const { return words_; }

 private:
  std::array<uint64_t, 4> words_{};
};

}  // namespace deepinfer
