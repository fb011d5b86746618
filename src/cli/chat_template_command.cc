#include "cli/chat_template_command.h"

#include <cstdio>
#include <iostream>
#include <optional>
#include <variant>

#include "chat/chat_encoding.h"
#include "cli/flags.h"
#include "core/error.h"

namespace deepinfer {
namespace {

constexpr const char* kUsage =
    "usage: deepinfer chat-template --messages FILE.json [--thinking] [--reasoning-effort N|low|high|xhigh|max]\n"
    "  Prints the DeepSeek-V4.1 prompt for the messages in FILE.json (a JSON array of OpenAI-style messages,\n"
    "  or an object with \"messages\" and optionally \"tools\", \"thinking\", \"reasoning_effort\").\n";

struct ChatTemplateOptions {
  std::optional<std::string> messages_path;
  bool thinking = false;
  std::optional<std::string> effort_text;
};

const std::vector<Flag<ChatTemplateOptions>>& Flags() {
  static const std::vector<Flag<ChatTemplateOptions>> flags = {
      {"--messages", "FILE.json", "the messages (required)",
       [](ChatTemplateOptions& o, const std::string& v) { o.messages_path = v; }},
      {"--thinking", nullptr, "render for thinking mode (the prompt ends with <think>)",
       [](ChatTemplateOptions& o, const std::string&) { o.thinking = true; }},
      {"--reasoning-effort", "E",
       "1-100, or low (25), high (50, the default), xhigh (75), max (100); rendered in thinking mode only",
       [](ChatTemplateOptions& o, const std::string& v) { o.effort_text = v; }},
  };
  return flags;
}

void PrintUsage(std::ostream& out) {
  out << kUsage;
  PrintFlagHelp(out, Flags());
}

int UsageError(const std::string& message) {
  std::cerr << "deepinfer chat-template: " << message << "\n";
  PrintUsage(std::cerr);
  return 2;
}

}  // namespace

int RunChatTemplateCommand(const std::vector<std::string>& args) {
  if (WantsHelp(args)) {
    PrintUsage(std::cout);
    return 0;
  }
  ChatTemplateOptions o;
  try {
    ParseFlags("chat-template", args, Flags(), o);
  } catch (const Error& e) {
    return UsageError(e.what());
  }
  if (!o.messages_path) return UsageError("--messages FILE.json is required");
  const std::optional<std::string>& messages_path = o.messages_path;
  const bool thinking = o.thinking;
  const std::optional<std::string>& effort_text = o.effort_text;

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
