// Mirrors encode_messages() of the official encoder step by step: merge tool results into user
// turns, sort them into call order, drop earlier reasoning, then render message by message. Each
// step keeps the official code's quirks, because the model was trained on exactly its output.
#include "chat/chat_encoding.h"

#include <algorithm>
#include <unordered_map>

#include "chat/chat_tokens.h"
#include "chat/py_json.h"
#include "core/error.h"

namespace deepinfer {
namespace {

namespace tok = chat_tokens;

constexpr std::string_view kToolsPrefix =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
    "writing a \"<｜DSML｜ calls>\" block like the following:\n\n"
    "<｜DSML｜ calls>\n"
    "<｜DSML｜ invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    "<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    "</｜DSML｜ calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
    "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
constexpr std::string_view kToolsSuffix =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

// A user turn's content after tool messages are merged in: text, or a <tool_result>.
struct Block {
  bool tool_result = false;
  std::optional<std::string> text;  // nullopt only for a tool result whose content was null.
  std::string tool_use_id;
};

// A message after preprocessing. Non-user messages point back at the caller's message.
struct Turn {
  const ChatMessage* source = nullptr;
  std::string_view role;
  bool has_blocks = false;  // Every user turn has blocks after merging, possibly none.
  std::vector<Block> blocks;
};

bool HasTools(const nlohmann::ordered_json& tools) {
  if (tools.is_null()) return false;
  if (!tools.is_array()) throw MakeError("tools must be a JSON array, got ", tools.type_name());
  return !tools.empty();
}

std::string RenderTools(const nlohmann::ordered_json& tools) {
  std::string out(kToolsPrefix);
  bool first = true;
  for (const auto& tool : tools) {
    if (!tool.is_object() || !tool.contains("function")) {
      throw MakeError("each tool must be an object with a \"function\" member, got ", BoundedDump(tool, 200));
    }
    if (!first) out += '\n';
    first = false;
    out += PyJsonDumps(tool["function"]);
  }
  out += kToolsSuffix;
  return out;
}

std::string RenderToolCall(const ChatToolCall& call) {
  const nlohmann::ordered_json arguments = ParseOrderedJsonBounded(
      call.arguments, "tool call \"" + Printable(call.name, 100) + "\": arguments", kChatJsonLimits);
  if (!arguments.is_object()) {
    throw MakeError("tool call \"", Printable(call.name, 100), "\": arguments must be a JSON object, got ",
                    Printable(call.arguments, 200));
  }
  std::string out = "<｜DSML｜ invoke name=\"" + call.name + "\">\n";
  bool first = true;
  for (const auto& [key, value] : arguments.items()) {
    if (!first) out += '\n';
    first = false;
    const bool is_string = value.is_string();
    out += "<｜DSML｜ parameter name=\"" + key + "\" string=\"" + (is_string ? "true" : "false") + "\">";
    out += is_string ? value.get_ref<const std::string&>() : PyJsonDumps(value);
    out += tok::kParameterClose;
  }
  out += '\n';
  out += tok::kInvokeClose;
  return out;
}

std::vector<Turn> MergeToolMessages(const std::vector<ChatMessage>& messages) {
  std::vector<Turn> merged;
  for (const ChatMessage& message : messages) {
    const bool last_is_user_turn = !merged.empty() && merged.back().role == "user" && merged.back().has_blocks;
    if (message.role == "tool") {
      Block block{true, message.content, message.tool_call_id};
      if (last_is_user_turn) {
        merged.back().blocks.push_back(std::move(block));
      } else {
        merged.push_back(Turn{nullptr, "user", true, {std::move(block)}});
      }
    } else if (message.role == "user") {
      std::vector<Block> blocks;
      if (message.content) blocks.push_back(Block{false, message.content, ""});
      if (last_is_user_turn) {
        for (Block& block : blocks) merged.back().blocks.push_back(std::move(block));
      } else {
        merged.push_back(Turn{&message, "user", true, std::move(blocks)});
      }
    } else {
      merged.push_back(Turn{&message, message.role, false, {}});
    }
  }
  return merged;
}

void SortToolResultsByCallOrder(std::vector<Turn>& turns) {
  std::unordered_map<std::string, int> call_order;
  for (Turn& turn : turns) {
    if (turn.role == "assistant" && !turn.source->tool_calls.empty()) {
      call_order.clear();
      for (std::size_t i = 0; i < turn.source->tool_calls.size(); ++i) {
        const std::string& id = turn.source->tool_calls[i].id;
        if (!id.empty()) call_order[id] = static_cast<int>(i);
      }
    } else if (turn.role == "user" && !turn.blocks.empty()) {
      std::vector<Block> results;
      for (const Block& block : turn.blocks) {
        if (block.tool_result) results.push_back(block);
      }
      if (results.size() < 2 || call_order.empty()) continue;
      // Results for unknown ids sort as 0, like the official dict.get(id, 0); the sort is stable.
      auto order = [&](const Block& block) {
        auto it = call_order.find(block.tool_use_id);
        return it == call_order.end() ? 0 : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const Block& a, const Block& b) { return order(a) < order(b); });
      std::size_t next = 0;
      for (Block& block : turn.blocks) {
        if (block.tool_result) block = results[next++];
      }
    }
  }
}

// Index of the last user or developer turn; a system message after index 0 counts as a user turn.
int FindLastUserIndex(const std::vector<Turn>& turns) {
  for (int i = static_cast<int>(turns.size()) - 1; i >= 0; --i) {
    const std::string_view role = turns[i].role;
    if (role == "user" || role == "developer" || (role == "system" && i > 0)) return i;
  }
  return -1;
}

// Drops developer turns before the last user turn (reasoning there is never rendered anyway).
std::vector<Turn> DropThinkingTurns(std::vector<Turn> turns) {
  const int last_user = FindLastUserIndex(turns);
  std::vector<Turn> kept;
  for (int i = 0; i < static_cast<int>(turns.size()); ++i) {
    const std::string_view role = turns[i].role;
    if (role == "developer" && i < last_user) continue;
    kept.push_back(std::move(turns[i]));
  }
  return kept;
}

std::string RenderUserBlocks(const Turn& turn) {
  std::string out;
  for (std::size_t i = 0; i < turn.blocks.size(); ++i) {
    if (i > 0) out += "\n\n";
    const Block& block = turn.blocks[i];
    if (block.tool_result) {
      out += "<tool_result>" + block.text.value_or("None") + "</tool_result>";
    } else {
      out += *block.text;
    }
  }
  return out;
}

struct RenderContext {
  const std::vector<Turn>& turns;
  bool thinking;
  bool drop_thinking;
  int budget;
  int last_user;
};

std::string RenderTurn(const RenderContext& ctx, int index) {
  const Turn& turn = ctx.turns[index];
  const std::string_view role = turn.role;
  const ChatMessage* message = turn.source;

  std::string prompt;
  const bool effort_line = index == 0 && ctx.thinking;
  if (index == 0 && (effort_line || role == "system")) prompt += tok::kSystem;
  if (effort_line) {
    prompt += "Reasoning Effort: " + std::to_string(ctx.budget) +
              " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
  }

  if (role == "system") {
    if (index > 0) prompt += tok::kSystem;
    prompt += message->content.value_or("");
    if (HasTools(message->tools)) prompt += "\n\n" + RenderTools(message->tools);
  } else if (role == "developer") {
    if (!message->content || message->content->empty()) throw MakeError("developer messages must have content");
    prompt += tok::kUser;
    prompt += *message->content;
    if (HasTools(message->tools)) prompt += "\n\n" + RenderTools(message->tools);
  } else if (role == "user") {
    prompt += tok::kUser;
    prompt += RenderUserBlocks(turn);
  } else if (role == "latest_reminder") {
    prompt += tok::kLatestReminder;
    prompt += message->content.value_or("None");
  } else {
    DI_CHECK(role == "assistant", "unexpected role ", role);
    if (ctx.thinking && (!ctx.drop_thinking || index > ctx.last_user)) {
      prompt += message->reasoning_content;
      prompt += tok::kThinkEnd;
    }
    prompt += message->content.value_or("");
    if (!message->tool_calls.empty()) {
      prompt += "\n\n";
      prompt += tok::kCallsOpen;
      prompt += '\n';
      for (std::size_t i = 0; i < message->tool_calls.size(); ++i) {
        if (i > 0) prompt += '\n';
        prompt += RenderToolCall(message->tool_calls[i]);
      }
      prompt += '\n';
      prompt += tok::kCallsClose;
    }
    prompt += tok::kEos;
  }

  // The generation header follows a user-like turn unless another user-like turn comes next.
  const bool has_next = index + 1 < static_cast<int>(ctx.turns.size());
  if (has_next && ctx.turns[index + 1].role != "assistant" && ctx.turns[index + 1].role != "latest_reminder") {
    return prompt;
  }
  if (role == "user" || role == "developer" || (role == "system" && index > 0)) {
    prompt += tok::kAssistant;
    const bool open_thinking = ctx.thinking && (!ctx.drop_thinking || index >= ctx.last_user);
    prompt += open_thinking ? tok::kThinkStart : tok::kThinkEnd;
  }
  return prompt;
}

void RejectImagePlaceholders(const std::vector<ChatMessage>& messages) {
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    if ((message.content && message.content->find(tok::kImagePlaceholder) != std::string::npos) ||
        message.reasoning_content.find(tok::kImagePlaceholder) != std::string::npos) {
      throw MakeError("messages[", i, "] contains the image placeholder token ", tok::kImagePlaceholder,
                      "; images are not supported as text");
    }
  }
}

}  // namespace

bool IsChatRole(std::string_view role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool" || role == "developer" ||
         role == "latest_reminder";
}

int ResolveReasoningEffort(const ReasoningEffort& effort) {
  constexpr std::string_view kExpected = "expected an integer in [1, 100] or one of low, high, xhigh, max";
  if (const int* value = std::get_if<int>(&effort)) {
    if (*value < 1 || *value > 100) throw MakeError("reasoning effort ", *value, " is out of range: ", kExpected);
    return *value;
  }
  const std::string name = std::holds_alternative<std::string>(effort) ? std::get<std::string>(effort) : "high";
  if (name == "low") return 25;
  if (name == "high") return 50;
  if (name == "xhigh") return 75;
  if (name == "max") return 100;
  throw MakeError("unknown reasoning effort \"", name, "\": ", kExpected);
}

std::string RenderChatPrompt(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (!IsChatRole(messages[i].role)) {
      throw MakeError("messages[", i, "]: unknown role \"", messages[i].role,
                      "\" (expected system, user, assistant, tool, developer or latest_reminder)");
    }
  }
  RejectImagePlaceholders(messages);

  std::vector<ChatMessage> with_tools;
  const std::vector<ChatMessage>* source = &messages;
  if (HasTools(options.tools)) {
    with_tools = messages;
    if (with_tools.empty() || with_tools.front().role != "system") {
      ChatMessage system;
      system.role = "system";
      system.content = "";
      with_tools.insert(with_tools.begin(), std::move(system));
    }
    with_tools.front().tools = options.tools;
    source = &with_tools;
  }

  std::string prompt(tok::kBos);
  if (source->empty()) return prompt;
  // The official encoder validates the effort for every message, in chat mode too.
  const int budget = ResolveReasoningEffort(options.reasoning_effort);

  std::vector<Turn> turns = MergeToolMessages(*source);
  SortToolResultsByCallOrder(turns);
  // Tools anywhere keep all reasoning. Like the official check, this looks at turns after merging,
  // so tools on a tool message or on a user message merged into the previous turn do not count.
  bool drop_thinking = options.drop_thinking;
  for (const Turn& turn : turns) {
    if (turn.source != nullptr && HasTools(turn.source->tools)) drop_thinking = false;
  }
  if (options.thinking && drop_thinking) turns = DropThinkingTurns(std::move(turns));

  const RenderContext ctx{turns, options.thinking, drop_thinking, budget, FindLastUserIndex(turns)};
  for (int i = 0; i < static_cast<int>(turns.size()); ++i) prompt += RenderTurn(ctx, i);
  return prompt;
}

}  // namespace deepinfer
