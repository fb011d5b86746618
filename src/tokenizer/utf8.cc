#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

// Allowed range of the second byte for each lead byte (Unicode Table 3-7); later
// continuation bytes are always 0x80..0xBF.
struct LeadInfo {
  int length;  // 0: the byte can never start a sequence
  uint8_t second_low;
  uint8_t second_high;
};

LeadInfo ClassifyLead(uint8_t lead) {
  if (lead < 0x80) return {1, 0, 0};
  if (lead < 0xC2) return {0, 0, 0};
  if (lead < 0xE0) return {2, 0x80, 0xBF};
  if (lead == 0xE0) return {3, 0xA0, 0xBF};
  if (lead == 0xED) return {3, 0x80, 0x9F};  // excludes UTF-16 surrogates
  if (lead < 0xF0) return {3, 0x80, 0xBF};
  if (lead == 0xF0) return {4, 0x90, 0xBF};
  if (lead < 0xF4) return {4, 0x80, 0xBF};
  if (lead == 0xF4) return {4, 0x80, 0x8F};  // caps code points at U+10FFFF
  return {0, 0, 0};
}

}  // namespace

Utf8Step DecodeUtf8Step(std::string_view bytes) {
  const auto byte_at = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  const uint8_t lead = byte_at(0);
  const LeadInfo info = ClassifyLead(lead);
  if (info.length == 0) return {1, false, kReplacementChar};
  if (info.length == 1) return {1, true, lead};
  char32_t code_point = lead & (0xFF >> (info.length + 1));
  for (int i = 1; i < info.length; ++i) {
    if (static_cast<size_t>(i) >= bytes.size()) return {static_cast<size_t>(i), false, kReplacementChar};
    const uint8_t byte = byte_at(i);
    const uint8_t low = i == 1 ? info.second_low : 0x80;
    const uint8_t high = i == 1 ? info.second_high : 0xBF;
    if (byte < low || byte > high) return {static_cast<size_t>(i), false, kReplacementChar};
    code_point = (code_point << 6) | (byte & 0x3F);
  }
  return {static_cast<size_t>(info.length), true, code_point};
}

bool IsValidUtf8(std::string_view bytes) {
  size_t offset = 0;
  while (offset < bytes.size()) {
    if (static_cast<uint8_t>(bytes[offset]) < 0x80) {
      ++offset;
      continue;
    }
    const Utf8Step step = DecodeUtf8Step(bytes.substr(offset));
    if (!step.valid) return false;
    offset += step.length;
  }
  return true;
}

std::string Utf8Lossy(std::string_view bytes) {
  if (IsValidUtf8(bytes)) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  size_t offset = 0;
  while (offset < bytes.size()) {
    const Utf8Step step = DecodeUtf8Step(bytes.substr(offset));
    if (step.valid) {
      out.append(bytes.substr(offset, step.length));
    } else {
      AppendUtf8(kReplacementChar, out);
    }
    offset += step.length;
  }
  return out;
}

void AppendUtf8(char32_t code_point, std::string& out) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

bool IsUnicodeWhiteSpace(char32_t code_point) {
  switch (code_point) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:  // clang-format off
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:  // clang-format on
      return true;
    default:
      return code_point >= 0x2000 && code_point <= 0x200A;
  }
}

}  // namespace deepinfer
