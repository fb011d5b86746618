// GET /: the built-in chat page, src/server/chat_page.html compiled into the binary (one
// self-contained HTML file: no CDN, no build step). It streams replies from
// /v1/chat/completions, shows reasoning collapsed and tool calls as such, and has a settings
// panel (system prompt, temperature, max tokens, thinking, API key).
#pragma once

#include <string_view>

namespace deepinfer {

std::string_view ChatPageHtml();

}  // namespace deepinfer
