#include "server/chat_page.h"

#include "core/embedded_file.h"

// DEEPINFER_CHAT_PAGE is set by CMake to src/server/chat_page.html.
DEEPINFER_EMBED_FILE(di_chat_page, DEEPINFER_CHAT_PAGE)

namespace deepinfer {

std::string_view ChatPageHtml() { return std::string_view(di_chat_page_begin, di_chat_page_end - di_chat_page_begin); }

}  // namespace deepinfer
