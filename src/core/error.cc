#include "core/error.h"

namespace deepinfer {

std::string Error::OneLine(std::string text) {
  for (char& c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) c = '?';
  }
  return text;
}

std::string Printable(std::string_view text, size_t max_chars) {
  std::string out;
  for (const char c : text) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const auto byte = static_cast<unsigned char>(c);
    out += (byte < 0x20 || byte >= 0x7f) ? '?' : c;
  }
  return out;
}

}  // namespace deepinfer

namespace deepinfer::detail {

void CheckFailed(const char* file, int line, const char* condition, const std::string& message) {
  throw Error(Concat("internal error at ", file, ":", line, ": check `", condition, "` failed",
                     message.empty() ? "" : ": ", message));
}

}  // namespace deepinfer::detail
