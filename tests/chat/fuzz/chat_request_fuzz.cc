// libFuzzer target: arbitrary text as a chat request (a --messages file, later an HTTP body).
// Parsing and rendering must end in a prompt or one deepinfer::Error, never a crash, a stack
// overflow on deep nesting, or an exception of another type.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "../../fuzz_check.h"
#include "chat/chat_encoding.h"
#include "core/error.h"

using deepinfer::FuzzCheck;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const deepinfer::ChatRequest request = deepinfer::ParseChatRequestText(text, "request.json");
    const std::string prompt = deepinfer::RenderChatPrompt(request.messages, request.options);
    FuzzCheck(!prompt.empty(), "an empty prompt");
  } catch (const deepinfer::Error& e) {
    FuzzCheck(std::string_view(e.what()).find('\n') == std::string_view::npos, "a multi-line error");
  }
  return 0;
}
