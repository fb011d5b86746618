// DeepSeek-V4.1 chat prompt rendering, byte-identical to the official encoder
// (sglang python/sglang/srt/entrypoints/openai/encoding_dsv41.py, encode_messages()).
//
// The format, in short: BOS; in thinking mode the first message is preceded by
// "<｜System｜>Reasoning Effort: N (...)\n\n"; system text follows "<｜System｜>"; users (with tool
// results merged in as <tool_result> blocks, sorted into the assistant's call order) follow
// "<｜User｜>"; every user turn that precedes an assistant turn or ends the conversation is followed
// by "<｜Assistant｜>" and "<think>" or "</think>"; assistant turns are
// "[reasoning</think>]content[\n\n<｜DSML｜ calls>...]<｜end▁of▁sentence｜>". In thinking mode,
// reasoning before the last user turn is dropped unless some message defines tools.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/bounded_json.h"

namespace deepinfer {

// One assistant tool call, as in OpenAI's message.tool_calls[i].
struct ChatToolCall {
  std::string id;  // Used only to sort tool results into call order.
  std::string name;
  std::string arguments;  // JSON object text (OpenAI's function.arguments).
};

// One chat message. Roles: system, user, assistant, tool, developer, latest_reminder.
struct ChatMessage {
  std::string role;
  // std::nullopt reproduces the official encoder's handling of a missing value: "" for system and
  // assistant, "None" for tool and latest_reminder (Python formats None), an error for developer,
  // and for user "contributes no text block" (what an empty content array does). ParseChatRequestJson
  // maps JSON null/absent/[] to the right form per role.
  std::optional<std::string> content;
  std::string reasoning_content;
  std::vector<ChatToolCall> tool_calls;
  std::string tool_call_id;  // role == "tool": which call this result answers.
  std::string name;          // Accepted for OpenAI compatibility; not rendered.
  // Tool definitions carried by this message (OpenAI format: [{"type": "function", "function":
  // {...}}]). The official data model puts them on a message; rendered for system and developer.
  nlohmann::ordered_json tools;
};

// An integer in [1, 100] or one of "low", "high", "xhigh", "max" (25/50/75/100). Empty = "high".
using ReasoningEffort = std::variant<std::monostate, int, std::string>;

struct ChatOptions {
  bool thinking = false;  // "thinking" vs "chat" mode.
  ReasoningEffort reasoning_effort;
  // Request-level tools (OpenAI format). Attached like sglang's serving layer does: to messages[0]
  // when it is a system message, else to an empty system message inserted at the front.
  nlohmann::ordered_json tools;
  // The official encoder's drop_thinking: drop reasoning before the last user turn (thinking mode,
  // and only when no message defines tools).
  bool drop_thinking = true;
};

struct ChatRequest {
  std::vector<ChatMessage> messages;
  ChatOptions options;
};

// Renders the prompt string (BOS included) the official encoder produces. Throws deepinfer::Error
// for input the official encoder rejects: invalid reasoning effort, tool arguments that are not a
// JSON object, image placeholder text, an empty developer message, an unknown role.
std::string RenderChatPrompt(const std::vector<ChatMessage>& messages, const ChatOptions& options);

// Accepts either a JSON array of OpenAI-style messages or an object {"messages": [...], "tools":
// [...], "thinking": bool, "reasoning_effort": int|string, "drop_thinking": bool}; other keys are
// ignored. Content may be a string, null, or an array of {"type": "text", "text": ...} parts.
// Throws deepinfer::Error naming the offending field. Key order matters for rendering tool schemas,
// so pass nlohmann::ordered_json; the nlohmann::json overload renders objects in sorted key order.
ChatRequest ParseChatRequestJson(const nlohmann::ordered_json& request);
ChatRequest ParseChatRequestJson(const nlohmann::json& request);

// The limits on request JSON (a file, later an HTTP body): 16 MiB and 128 levels of nesting,
// room for deeply nested tool schemas and arguments. Repeated keys read as Python's json.loads
// reads them (the official encoder's behaviour): the last value wins.
inline constexpr JsonLimits kChatJsonLimits{16 << 20, 128, DuplicateKeys::kLastWins};

// Parses request text (see ParseChatRequestJson) within kChatJsonLimits; errors start with `source`.
ChatRequest ParseChatRequestText(std::string_view text, const std::string& source);

// Reads (a regular file, at most kChatJsonLimits.max_bytes) and parses a request file.
ChatRequest LoadChatRequestFile(const std::string& path);

// "1".."100" -> int, "low"/"high"/"xhigh"/"max" -> name; throws deepinfer::Error otherwise.
ReasoningEffort ParseReasoningEffort(std::string_view text);

// system, user, assistant, tool, developer or latest_reminder.
bool IsChatRole(std::string_view role);

// The budget an effort resolves to (1..100); throws deepinfer::Error when out of range or unknown.
int ResolveReasoningEffort(const ReasoningEffort& effort);

}  // namespace deepinfer
