// Feeds a completion to the streaming output parser in pieces and concatenates every delta:
// shared by the parser tests and its fuzz target (which check chunked == whole).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <utility>

#include "chat/output_parser.h"

namespace deepinfer {

// Piece sizes come from `next_size()`.
template <typename NextSize>
ChatOutputDelta ParseInChunks(std::string_view text, bool thinking, NextSize next_size) {
  ChatOutputParser parser(thinking);
  ChatOutputDelta total;
  auto add = [&](ChatOutputDelta delta) {
    total.reasoning_content += delta.reasoning_content;
    total.content += delta.content;
    for (auto& call : delta.tool_calls) total.tool_calls.push_back(std::move(call));
  };
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t size = std::min(next_size(), text.size() - pos);
    add(parser.Feed(text.substr(pos, size)));
    pos += size;
  }
  add(parser.Finish());
  return total;
}

}  // namespace deepinfer
