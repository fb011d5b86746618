// OpenAI-style request JSON -> ChatMessage/ChatOptions, mapping null, absent and array content to
// what the official encoder does with each per role (see ChatMessage::content).
#include <algorithm>
#include <charconv>
#include <limits>

#include "chat/chat_encoding.h"
#include "chat/py_json.h"
#include "core/bounded_json.h"
#include "core/error.h"
#include "core/regular_file.h"

namespace deepinfer {
namespace {

using Json = nlohmann::ordered_json;

std::string Where(std::size_t index, std::string_view field) {
  return "messages[" + std::to_string(index) + "]" + (field.empty() ? "" : ".") + std::string(field);
}

const std::string& RequireString(const Json& value, const std::string& where) {
  if (!value.is_string()) throw MakeError(where, ": expected a string, got ", value.type_name());
  return value.get_ref<const std::string&>();
}

// Content arrays: the official encoder joins the text parts with "\n\n". Images and other parts
// are rejected: deepinfer has no vision path, so a placeholder would only mislead the model.
std::string JoinTextParts(const Json& parts, const std::string& where) {
  std::string joined;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Json& part = parts[i];
    const std::string part_where = where + "[" + std::to_string(i) + "]";
    if (!part.is_object() || part.value("type", Json()) != "text") {
      throw MakeError(part_where, ": only {\"type\": \"text\"} content parts are supported, got ",
                      BoundedDump(part, 200));
    }
    if (i > 0) joined += "\n\n";
    joined += RequireString(part.contains("text") ? part["text"] : Json(), part_where + ".text");
  }
  return joined;
}

std::optional<std::string> ParseContent(const Json& message, const std::string& role, std::size_t index) {
  const std::string where = Where(index, "content");
  if (!message.contains("content")) {
    // Absent: user and tool read it with a "" default, the other roles get None.
    if (role == "user" || role == "tool") return std::string();
    return std::nullopt;
  }
  const Json& content = message["content"];
  if (content.is_null()) {
    if (role == "user") throw MakeError(where, ": user content must be a string or an array of text parts, not null");
    return std::nullopt;
  }
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw MakeError(where, ": expected a string or an array of text parts, got ", content.type_name());
  }
  if (content.empty()) {
    // An empty array is dropped by the official preprocessing: no block for users, "" for tools
    // (their default), None for everything else.
    if (role == "tool") return std::string();
    return std::nullopt;
  }
  return JoinTextParts(content, where);
}

ChatToolCall ParseToolCall(const Json& call, const std::string& where) {
  if (!call.is_object()) throw MakeError(where, ": expected an object, got ", call.type_name());
  if (!call.contains("function") || !call["function"].is_object()) {
    throw MakeError(where, ": missing \"function\" object");
  }
  const Json& function = call["function"];
  ChatToolCall result;
  // Official: tc.get("id") or tc["function"].get("id", "").
  if (call.contains("id") && call["id"].is_string() && !call["id"].get_ref<const std::string&>().empty()) {
    result.id = call["id"].get<std::string>();
  } else if (function.contains("id") && function["id"].is_string()) {
    result.id = function["id"].get<std::string>();
  }
  if (!function.contains("name")) throw MakeError(where, ".function: missing \"name\"");
  result.name = RequireString(function["name"], where + ".function.name");
  if (!function.contains("arguments")) throw MakeError(where, ".function: missing \"arguments\"");
  const Json& arguments = function["arguments"];
  if (arguments.is_string()) {
    result.arguments = arguments.get<std::string>();
  } else if (arguments.is_object()) {
    result.arguments = arguments.dump();  // Re-parsed when rendered; dump() round-trips exactly.
  } else {
    throw MakeError(where, ".function.arguments: expected a JSON object or its text, got ", arguments.type_name());
  }
  return result;
}

ChatMessage ParseMessage(const Json& message, std::size_t index) {
  if (!message.is_object()) throw MakeError(Where(index, ""), ": expected an object, got ", message.type_name());
  if (!message.contains("role")) throw MakeError(Where(index, ""), ": missing \"role\"");
  ChatMessage result;
  result.role = RequireString(message["role"], Where(index, "role"));
  if (!IsChatRole(result.role)) {
    throw MakeError(Where(index, "role"), ": unknown role \"", result.role,
                    "\" (expected system, user, assistant, tool, developer or latest_reminder)");
  }
  result.content = ParseContent(message, result.role, index);
  if (message.contains("reasoning_content") && !message["reasoning_content"].is_null()) {
    result.reasoning_content = RequireString(message["reasoning_content"], Where(index, "reasoning_content"));
  }
  if (result.role == "assistant" && message.contains("tool_calls") && !message["tool_calls"].is_null()) {
    const Json& calls = message["tool_calls"];
    if (!calls.is_array()) throw MakeError(Where(index, "tool_calls"), ": expected an array");
    for (std::size_t i = 0; i < calls.size(); ++i) {
      result.tool_calls.push_back(ParseToolCall(calls[i], Where(index, "tool_calls[" + std::to_string(i) + "]")));
    }
  }
  if (message.contains("tool_call_id") && !message["tool_call_id"].is_null()) {
    result.tool_call_id = RequireString(message["tool_call_id"], Where(index, "tool_call_id"));
  }
  if (message.contains("name") && !message["name"].is_null()) {
    result.name = RequireString(message["name"], Where(index, "name"));
  }
  if (message.contains("tools") && !message["tools"].is_null()) {
    if (!message["tools"].is_array()) throw MakeError(Where(index, "tools"), ": expected an array");
    result.tools = message["tools"];
  }
  return result;
}

ReasoningEffort ParseEffortJson(const Json& effort) {
  if (effort.is_null()) return std::monostate();
  if (effort.is_string()) return effort.get<std::string>();
  if (effort.is_number_integer()) {
    // Values beyond int are out of [1, 100] all the same; clamping keeps them out of range.
    if (effort.is_number_unsigned()) {
      return static_cast<int>(std::min<std::uint64_t>(effort.get<std::uint64_t>(), std::numeric_limits<int>::max()));
    }
    const std::int64_t value = effort.get<std::int64_t>();
    if (value > std::numeric_limits<int>::max()) return std::numeric_limits<int>::max();
    if (value < std::numeric_limits<int>::min()) return std::numeric_limits<int>::min();
    return static_cast<int>(value);
  }
  throw MakeError("reasoning_effort: expected an integer in [1, 100] or one of low, high, xhigh, max, got ",
                  BoundedDump(effort, 200));
}

bool ParseBool(const Json& request, const char* key, bool fallback) {
  if (!request.contains(key) || request[key].is_null()) return fallback;
  if (!request[key].is_boolean()) {
    throw MakeError(key, ": expected true or false, got ", BoundedDump(request[key], 200));
  }
  return request[key].get<bool>();
}

}  // namespace

ChatRequest ParseChatRequestJson(const nlohmann::ordered_json& request) {
  ChatRequest result;
  const Json* messages = &request;
  if (request.is_object()) {
    if (!request.contains("messages")) throw MakeError("request: missing \"messages\"");
    messages = &request["messages"];
    result.options.thinking = ParseBool(request, "thinking", false);
    result.options.drop_thinking = ParseBool(request, "drop_thinking", true);
    if (request.contains("reasoning_effort")) {
      result.options.reasoning_effort = ParseEffortJson(request["reasoning_effort"]);
    }
    if (request.contains("tools") && !request["tools"].is_null()) {
      if (!request["tools"].is_array()) throw MakeError("tools: expected an array, got ", request["tools"].type_name());
      result.options.tools = request["tools"];
    }
  }
  if (!messages->is_array()) {
    throw MakeError("messages: expected an array of messages, got ", messages->type_name());
  }
  for (std::size_t i = 0; i < messages->size(); ++i) result.messages.push_back(ParseMessage((*messages)[i], i));
  return result;
}

ChatRequest ParseChatRequestJson(const nlohmann::json& request) {
  // Through text, which keeps the (sorted) key order; dump() recurses, so the depth is checked first.
  if (JsonNestingDepth(request, kChatJsonLimits.max_depth + 1) > kChatJsonLimits.max_depth) {
    throw MakeError("request: JSON nested deeper than ", kChatJsonLimits.max_depth, " levels");
  }
  return ParseChatRequestText(request.dump(), "request");
}

ChatRequest ParseChatRequestText(std::string_view text, const std::string& source) {
  const Json request = ParseOrderedJsonBounded(text, source, kChatJsonLimits);
  try {
    return ParseChatRequestJson(request);
  } catch (const Error& e) {
    throw MakeError(source, ": ", e.what());
  }
}

ChatRequest LoadChatRequestFile(const std::string& path) {
  std::string text;
  try {
    text = ReadRegularFile(path, kChatJsonLimits.max_bytes);
  } catch (const Error& e) {
    throw MakeError("messages file ", e.what());
  }
  return ParseChatRequestText(text, path);
}

ReasoningEffort ParseReasoningEffort(std::string_view text) {
  int value = 0;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  if (result.ec == std::errc() && result.ptr == text.data() + text.size()) {
    ResolveReasoningEffort(value);
    return value;
  }
  ReasoningEffort name = std::string(text);
  ResolveReasoningEffort(name);
  return name;
}

}  // namespace deepinfer
