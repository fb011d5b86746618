#include "chat/output_parser.h"

#include <algorithm>

#include "chat/chat_tokens.h"
#include "chat/dsml_syntax.h"
#include "chat/py_json.h"
#include "core/error.h"

namespace deepinfer {
namespace {

namespace tok = chat_tokens;

// Length of the longest suffix of `text` that must wait for more input: a proper prefix of `stop`
// (it may complete into the tag), or a prefix of the end-of-sentence token including the whole
// token (dropped only if nothing follows it).
std::size_t HeldSuffixLength(std::string_view text, std::string_view stop) {
  const std::size_t longest = std::min(text.size(), std::max(stop.size() - 1, tok::kEos.size()));
  for (std::size_t k = longest; k > 0; --k) {
    const std::string_view suffix = text.substr(text.size() - k);
    if ((k < stop.size() && stop.starts_with(suffix)) || tok::kEos.starts_with(suffix)) return k;
  }
  return 0;
}

bool IsProperPrefix(std::string_view text, std::string_view token) {
  return text.size() < token.size() && token.starts_with(text);
}

void Append(ChatOutputDelta& into, ChatOutputDelta&& delta) {
  into.reasoning_content += delta.reasoning_content;
  into.content += delta.content;
  for (ParsedToolCall& call : delta.tool_calls) into.tool_calls.push_back(std::move(call));
}

}  // namespace

ChatOutputParser::ChatOutputParser(bool thinking, bool tool_calls)
    : state_(thinking ? State::kReasoning : State::kContent), tool_calls_(tool_calls) {}

ChatOutputDelta ChatOutputParser::Feed(std::string_view chunk) {
  DI_CHECK(!finished_, "ChatOutputParser::Feed after Finish");
  ChatOutputDelta out;
  buffer_.append(chunk);
  Run(/*at_end=*/false, out);
  return out;
}

ChatOutputDelta ChatOutputParser::Finish() {
  DI_CHECK(!finished_, "ChatOutputParser::Finish called twice");
  finished_ = true;
  ChatOutputDelta out;
  Run(/*at_end=*/true, out);
  DI_CHECK(buffer_.empty(), "parser left ", buffer_.size(), " bytes unflushed");
  return out;
}

void ChatOutputParser::Run(bool at_end, ChatOutputDelta& out) {
  while (true) {
    if (state_ != State::kToolBlock) {
      if (!StepText(at_end, out)) return;
      continue;
    }
    switch (StepBlock(at_end)) {
      case Outcome::kNeedMore:
        return;
      case Outcome::kProgress:
        break;
      case Outcome::kComplete:
        for (ParsedToolCall& call : block_calls_) out.tool_calls.push_back(std::move(call));
        block_calls_.clear();
        buffer_.erase(0, pos_);
        state_ = State::kContent;
        break;
      case Outcome::kFail:
        // Not a tool block after all: its marker is content and the rest is read again as content.
        block_calls_.clear();
        out.content += tok::kToolBlockMarker;
        state_ = State::kContent;
        break;
    }
  }
}

// Reasoning or content: emit text up to the state's stop tag. Returns whether the state changed.
bool ChatOutputParser::StepText(bool at_end, ChatOutputDelta& out) {
  const bool reasoning = state_ == State::kReasoning;
  const std::string_view stop = reasoning ? tok::kThinkEnd : tok::kToolBlockMarker;
  std::string& sink = reasoning ? out.reasoning_content : out.content;
  const std::size_t at = buffer_.find(stop);
  if (at != std::string::npos) {
    sink.append(buffer_, 0, at);
    buffer_.erase(0, at + stop.size());
    if (reasoning) {
      state_ = State::kContent;
    } else if (!tool_calls_) {
      sink.append(stop);
    } else {
      state_ = State::kToolBlock;
      step_ = BlockStep::kOpen;
      pos_ = scan_ = 0;
    }
    return true;
  }
  const std::size_t keep = at_end ? 0 : HeldSuffixLength(buffer_, stop);
  std::string_view emit(buffer_.data(), buffer_.size() - keep);
  if (at_end && emit.ends_with(tok::kEos)) emit.remove_suffix(tok::kEos.size());
  sink.append(emit);
  buffer_.erase(0, buffer_.size() - keep);
  return false;
}

// Official: content before the next `first`/`second` token must be exactly ">\n".
ChatOutputParser::Outcome ChatOutputParser::ExpectNewlineThen(bool at_end, std::string_view first,
                                                              std::string_view second, int* matched) {
  *matched = 0;
  const std::string_view rest = std::string_view(buffer_).substr(pos_);
  if (rest.empty()) return at_end ? Outcome::kFail : Outcome::kNeedMore;
  if (rest[0] != '>') return Outcome::kFail;
  if (rest.size() < 2) return at_end ? Outcome::kFail : Outcome::kNeedMore;
  if (rest[1] != '\n') return Outcome::kFail;
  const std::string_view next = rest.substr(2);
  if (next.starts_with(first)) {
    pos_ += 2 + first.size();
    *matched = 1;
    return Outcome::kProgress;
  }
  if (next.starts_with(second)) {
    pos_ += 2 + second.size();
    *matched = 2;
    return Outcome::kProgress;
  }
  if (!at_end && (IsProperPrefix(next, first) || IsProperPrefix(next, second))) return Outcome::kNeedMore;
  return Outcome::kFail;
}

ChatOutputParser::Outcome ChatOutputParser::StepBlock(bool at_end) {
  const std::string_view text(buffer_);
  switch (step_) {
    case BlockStep::kOpen: {
      // The official loop also ends, successfully, when the text ends right here.
      if (pos_ == text.size()) return at_end ? Outcome::kComplete : Outcome::kNeedMore;
      int matched = 0;
      const Outcome outcome = ExpectNewlineThen(at_end, tok::kInvokeStart, tok::kCallsClose, &matched);
      if (matched == 2) return Outcome::kComplete;
      if (matched == 1) {
        step_ = BlockStep::kInvokeHeader;
        scan_ = pos_;
      }
      return outcome;
    }
    case BlockStep::kInvokeHeader: {
      const std::size_t parameter = text.find(tok::kParameterStart, scan_);
      const std::size_t invoke_end = text.find(tok::kInvokeEnd, scan_);
      const std::size_t at = std::min(parameter, invoke_end);
      call_parameters_.clear();
      if (at == std::string_view::npos) {
        if (!at_end) {
          const std::size_t longest = std::max(tok::kParameterStart.size(), tok::kInvokeEnd.size());
          scan_ = std::max(scan_, text.size() >= longest ? text.size() - longest + 1 : 0);
          return Outcome::kNeedMore;
        }
        // The official parser reads the rest as the header; a valid one is a call without parameters.
        if (!dsml::MatchInvokeHeader(text.substr(pos_), &call_name_)) return Outcome::kFail;
        FinishCall();
        pos_ = text.size();
        return Outcome::kComplete;
      }
      if (!dsml::MatchInvokeHeader(text.substr(pos_, at - pos_), &call_name_)) return Outcome::kFail;
      if (at == parameter) {
        pos_ = scan_ = at + tok::kParameterStart.size();
        step_ = BlockStep::kParameter;
      } else {
        pos_ = at + tok::kInvokeEnd.size();
        FinishCall();
        step_ = BlockStep::kOpen;
      }
      return Outcome::kProgress;
    }
    case BlockStep::kParameter: {
      const std::size_t at = text.find(tok::kParameterEnd, scan_);
      if (at == std::string_view::npos) {
        // Even a well-formed parameter fails at the end: the official then expects ">\n" and finds "".
        if (at_end) return Outcome::kFail;
        const std::size_t size = tok::kParameterEnd.size();
        scan_ = std::max(scan_, text.size() >= size ? text.size() - size + 1 : 0);
        return Outcome::kNeedMore;
      }
      Parameter parameter;
      if (!dsml::MatchParameter(text.substr(pos_, at - pos_), &parameter.name, &parameter.is_string,
                                &parameter.value)) {
        return Outcome::kFail;
      }
      for (const Parameter& seen : call_parameters_) {
        if (seen.name == parameter.name) return Outcome::kFail;  // Official: duplicate parameter name.
      }
      call_parameters_.push_back(std::move(parameter));
      pos_ = at + tok::kParameterEnd.size();
      step_ = BlockStep::kParameterEnd;
      return Outcome::kProgress;
    }
    case BlockStep::kParameterEnd: {
      // Exactly ">\n" ending the text closes the call and the block (the official reads no token
      // and stops at the end of the text).
      if (at_end && text.substr(pos_) == ">\n") {
        FinishCall();
        pos_ = text.size();
        return Outcome::kComplete;
      }
      int matched = 0;
      const Outcome outcome = ExpectNewlineThen(at_end, tok::kParameterStart, tok::kInvokeEnd, &matched);
      if (matched == 1) {
        step_ = BlockStep::kParameter;
        scan_ = pos_;
      } else if (matched == 2) {
        FinishCall();
        step_ = BlockStep::kOpen;
      }
      return outcome;
    }
  }
  DI_CHECK(false, "unreachable block step");
  return Outcome::kFail;
}

// Official decode_dsml_to_arguments(): {"name": value, ...} with ", " and ": " separators.
void ChatOutputParser::FinishCall() {
  std::string arguments = "{";
  for (std::size_t i = 0; i < call_parameters_.size(); ++i) {
    const Parameter& parameter = call_parameters_[i];
    if (i > 0) arguments += ", ";
    arguments += PyJsonQuote(parameter.name);
    arguments += ": ";
    arguments += parameter.is_string ? PyJsonQuote(parameter.value) : parameter.value;
  }
  arguments += '}';
  block_calls_.push_back(ParsedToolCall{call_name_, std::move(arguments)});
  call_parameters_.clear();
}

ChatOutputDelta ParseChatOutput(std::string_view text, bool thinking) {
  ChatOutputParser parser(thinking);
  ChatOutputDelta result = parser.Feed(text);
  Append(result, parser.Finish());
  return result;
}

}  // namespace deepinfer
