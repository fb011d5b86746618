// libFuzzer target: on arbitrary bytes the streaming parser must not crash, must give the same
// result for every chunking as for the whole text, and must not lose text outside tool blocks.
// Input layout: byte 0 bit 0 = thinking mode, bytes 0-1 seed the chunk sizes, the rest is the text.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "../../fuzz_check.h"
#include "../parse_in_chunks.h"
#include "chat/chat_tokens.h"
#include "chat/output_parser.h"

namespace {

using deepinfer::FuzzCheck;

using deepinfer::ChatOutputDelta;
using deepinfer::ChatOutputParser;
using deepinfer::ParseInChunks;

bool Same(const ChatOutputDelta& a, const ChatOutputDelta& b) {
  return a.reasoning_content == b.reasoning_content && a.content == b.content && a.tool_calls == b.tool_calls;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tok = deepinfer::chat_tokens;
  if (size < 2) return 0;
  const bool thinking = (data[0] & 1) != 0;
  std::uint32_t state = (static_cast<std::uint32_t>(data[0]) << 8 | data[1]) * 2654435761u + 1;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  const ChatOutputDelta whole = deepinfer::ParseChatOutput(text, thinking);
  FuzzCheck(Same(ParseInChunks(text, thinking, [] { return std::size_t{1}; }), whole), "1-byte chunks differ");
  const auto random_size = [&] {
    state = state * 1664525u + 1013904223u;
    return std::size_t{1} + (state >> 16) % 37;
  };
  FuzzCheck(Same(ParseInChunks(text, thinking, random_size), whole), "random chunks differ");

  // With no tool block that could have parsed (those need "</｜DSML｜ calls>" or end at the marker),
  // every byte comes back except "</think>" and a final end-of-sentence token.
  if (whole.tool_calls.empty() && text.find(tok::kCallsClose) == std::string_view::npos &&
      !text.ends_with(tok::kToolBlockMarker)) {
    std::string rebuilt = whole.reasoning_content;
    if (thinking && text.find(tok::kThinkEnd) != std::string_view::npos) rebuilt += tok::kThinkEnd;
    rebuilt += whole.content;
    std::string_view expected = text;
    if (expected.ends_with(tok::kEos)) expected.remove_suffix(tok::kEos.size());
    FuzzCheck(rebuilt == expected, "text was lost");
  }
  return 0;
}
