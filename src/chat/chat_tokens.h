// DeepSeek-V4.1 chat-format literals, spelled exactly as in the official encoder (sglang
// encoding_dsv41.py). The bars are U+FF5C FULLWIDTH VERTICAL LINE and the word separator in the
// sentence tokens is U+2581; a plain '|' or '_' would silently produce a different prompt.
#pragma once

#include <string_view>

namespace deepinfer::chat_tokens {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kSystem = "<｜System｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kImagePlaceholder = "<｜deepseek_image｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";

// DSML tags. V4.1 tag names start with a space ("<｜DSML｜ calls>"). The parser's tokens below are
// deliberately the official parser's partial tags: the invoke/parameter tokens omit their closing
// '>' (and the parameter end token its leading '<') because the official grammar checks those
// characters as part of the surrounding text.
inline constexpr std::string_view kCallsOpen = "<｜DSML｜ calls>";
inline constexpr std::string_view kCallsClose = "</｜DSML｜ calls>";
inline constexpr std::string_view kInvokeClose = "</｜DSML｜ invoke>";
inline constexpr std::string_view kParameterClose = "</｜DSML｜ parameter>";

// "\n\n<｜DSML｜ calls": where a tool-call block starts in a completion.
inline constexpr std::string_view kToolBlockMarker = "\n\n<｜DSML｜ calls";
inline constexpr std::string_view kInvokeStart = "<｜DSML｜ invoke";
inline constexpr std::string_view kInvokeEnd = "</｜DSML｜ invoke";
inline constexpr std::string_view kParameterStart = "<｜DSML｜ parameter";
inline constexpr std::string_view kParameterEnd = "/｜DSML｜ parameter";

}  // namespace deepinfer::chat_tokens
