#include "server/chat_page.h"

#include "core/embedded_file.h"

// DEEPINFER_SERVER_DIR is set by CMake to src/server.
DEEPINFER_EMBED_FILE(di_chat_page, DEEPINFER_SERVER_DIR "/chat_page.html")

namespace deepinfer {

std::string_view ChatPageHtml() { return std::string_view(di_chat_page_begin, di_chat_page_end - di_chat_page_begin); }

}  // namespace deepinfer
