#include "cli/chat_template_command.h"

#include <cstdio>
#include <iostream>
#include <optional>
#include <variant>

#include "chat/chat_encoding.h"
#include "core/error.h"

namespace deepinfer {
namespace {

constexpr const char* kUsage =
    "usage: deepinfer chat-template --messages FILE.json [--thinking] [--reasoning-effort N|low|high|xhigh|max]\n"
    "  Prints the DeepSeek-V4.1 prompt for the messages in FILE.json (a JSON array of OpenAI-style messages,\n"
    "  or an object with \"messages\" and optionally \"tools\", \"thinking\", \"reasoning_effort\").\n"
    "  --thinking            render for thinking mode (the prompt ends with <think>)\n"
    "  --reasoning-effort E  1-100, or low (25), high (50, the default), xhigh (75), max (100);\n"
    "                        rendered in thinking mode only\n";

int UsageError(const std::string& message) {
  std::cerr << "deepinfer chat-template: " << message << "\n" << kUsage;
  return 2;
}

}  // namespace

int RunChatTemplateCommand(const std::vector<std::string>& args) {
  std::optional<std::string> messages_path;
  bool thinking = false;
  std::optional<std::string> effort_text;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--thinking") {
      thinking = true;
    } else if (arg == "--messages" || arg == "--reasoning-effort") {
      if (i + 1 >= args.size()) return UsageError(arg + " needs a value");
      (arg == "--messages" ? messages_path : effort_text) = args[++i];
    } else {
      return UsageError("unknown argument \"" + arg + "\"");
    }
  }
  if (!messages_path) return UsageError("--messages FILE.json is required");

  try {
    ChatRequest request = LoadChatRequestFile(*messages_path);
    if (thinking) request.options.thinking = true;
    if (effort_text) {
      try {
        request.options.reasoning_effort = ParseReasoningEffort(*effort_text);
      } catch (const Error& e) {
        throw MakeError("--reasoning-effort: ", e.what());
      }
    }
    if (!request.options.thinking && !std::holds_alternative<std::monostate>(request.options.reasoning_effort)) {
      std::cerr << "deepinfer chat-template: note: reasoning effort is only rendered in thinking mode\n";
    }
    std::string prompt;
    try {
      prompt = RenderChatPrompt(request.messages, request.options);
    } catch (const Error& e) {
      throw MakeError(*messages_path, ": ", e.what());
    }
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
  } catch (const Error& e) {
    std::cerr << "deepinfer chat-template: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace deepinfer
