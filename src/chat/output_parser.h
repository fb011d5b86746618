// Incremental parser for DeepSeek-V4.1 completions: splits streamed text into reasoning, content
// and tool calls.
//
// On every completion the official parser (parse_message_from_completion_text in sglang's
// encoding_dsv41.py) accepts, the result is exactly the official one, however the text is chunked.
// The official parser raises on anything else; a streaming parser has emitted text by then, so
// this one is lenient instead, by a rule that never depends on chunking:
//   - thinking mode: text before the first "</think>" is reasoning (all of it if none comes);
//   - then content, where each "\n\n<｜DSML｜ calls" opens a tool-call block parsed with the
//     official grammar. A block that parses yields its calls (emitted together when it closes) and
//     content resumes after it. A block that cannot parse is content: its marker is emitted as
//     text and scanning resumes right after the marker, so malformed or unterminated DSML is never
//     dropped;
//   - "<｜end▁of▁sentence｜>" is dropped only when it ends the text outside a tool block.
// tools/golden/chat/make_fixtures.py states the same rule in Python over the official helpers.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

struct ParsedToolCall {
  std::string name;
  // JSON object text built like the official decode_dsml_to_arguments(): string="true" values are
  // JSON-quoted, string="false" values are inserted verbatim (not validated).
  std::string arguments;

  bool operator==(const ParsedToolCall&) const = default;
};

// What one Feed()/Finish() call produced. Concatenating all deltas gives the parsed message.
struct ChatOutputDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;

  bool empty() const { return reasoning_content.empty() && content.empty() && tool_calls.empty(); }
};

class ChatOutputParser {
 public:
  // `thinking`: the prompt ended with "<think>", so the completion starts with reasoning.
  // `tool_calls` false: DSML is never parsed, every tool-block marker stays content (a request
  // that offered no tools, OpenAI's tool_choice "none").
  explicit ChatOutputParser(bool thinking, bool tool_calls = true);

  // Consumes the next piece of completion text; any byte split is fine (tags, UTF-8 sequences).
  // Text that might still be the start of a tag is held back until the next call.
  ChatOutputDelta Feed(std::string_view chunk);

  // Ends the text and flushes everything held back. The parser accepts no more input afterwards.
  ChatOutputDelta Finish();

 private:
  enum class State { kReasoning, kContent, kToolBlock };
  // Where the tool-block parse stands; each step mirrors one _read_until_stop() of the official.
  enum class BlockStep { kOpen, kInvokeHeader, kParameter, kParameterEnd };
  enum class Outcome { kNeedMore, kProgress, kComplete, kFail };
  struct Parameter {
    std::string name;
    std::string value;
    bool is_string = false;
  };

  void Run(bool at_end, ChatOutputDelta& out);
  bool StepText(bool at_end, ChatOutputDelta& out);
  Outcome StepBlock(bool at_end);
  Outcome ExpectNewlineThen(bool at_end, std::string_view first, std::string_view second, int* matched);
  void FinishCall();

  State state_;
  bool tool_calls_;
  bool finished_ = false;
  // Unconsumed text. In kToolBlock it starts right after the block marker and is kept whole until
  // the block completes or fails, because a failed block is re-read as content.
  std::string buffer_;
  std::size_t pos_ = 0;   // Parse position inside buffer_ (tool block only).
  std::size_t scan_ = 0;  // Token searches may start here: no token starts in [pos_, scan_).
  BlockStep step_ = BlockStep::kOpen;
  std::vector<ParsedToolCall> block_calls_;
  std::string call_name_;
  std::vector<Parameter> call_parameters_;
};

// Parses a whole completion (Feed + Finish).
ChatOutputDelta ParseChatOutput(std::string_view text, bool thinking);

}  // namespace deepinfer
