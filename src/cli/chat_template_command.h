// `deepinfer chat-template`: prints the DeepSeek-V4.1 prompt rendered for a messages file.
#pragma once

#include <string>
#include <vector>

namespace deepinfer {

// `args` are the arguments after "chat-template":
//   --messages FILE.json [--thinking] [--reasoning-effort N|low|high|xhigh|max]
// FILE.json holds a message array or a request object (see ParseChatRequestJson); the flags
// override the file's "thinking" and "reasoning_effort". Writes the prompt to stdout exactly (no
// trailing newline, so it can be piped into a tokenizer). Returns 0 on success, 1 for bad input
// (reported on stderr), 2 for bad usage.
int RunChatTemplateCommand(const std::vector<std::string>& args);

}  // namespace deepinfer
