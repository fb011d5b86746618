// Error handling: user-facing problems (bad files, bad config, bad requests) are
// `deepinfer::Error` exceptions carrying a complete one-line message; callers at the
// boundary (CLI, server) catch and report them. Internal invariants use DI_CHECK,
// which names the file and line so a broken invariant is never mistaken for bad input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace deepinfer {

// Every message is one line: messages quote the user's own text (a key, a role, a tensor name, a
// pattern), and a control byte in it (a newline, an escape sequence) becomes '?' here, once for
// every error, so no log line or HTTP error body can be split or spoofed by one.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(OneLine(message)) {}

 private:
  static std::string OneLine(std::string text);
};

namespace detail {
template <typename... Args>
std::string Concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition, const std::string& message);
}  // namespace detail

// Builds an Error from streamable pieces: throw MakeError("tensor ", name, ": expected ", n).
template <typename... Args>
Error MakeError(const Args&... args) {
  return Error(detail::Concat(args...));
}

// `text` as it may appear inside a one-line message: control and non-ASCII bytes become '?',
// and anything past `max_chars` becomes "...". For names and snippets taken from hostile input.
std::string Printable(std::string_view text, size_t max_chars = 200);

}  // namespace deepinfer

#define DI_CHECK(condition, ...)                                                                    \
  do {                                                                                              \
    if (!(condition)) {                                                                             \
      ::deepinfer::detail::CheckFailed(__FILE__, __LINE__, #condition,                              \
                                       ::deepinfer::detail::Concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                               \
  } while (0)
