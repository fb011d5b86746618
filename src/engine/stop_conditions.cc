#include "engine/stop_conditions.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

// Where a trailing, not yet complete UTF-8 character starts (a valid lead byte followed only by
// valid continuation bytes, too few of them); s.size() when there is none. Invalid bytes are not
// held: no later byte could make them valid.
size_t IncompleteUtf8TailStart(std::string_view s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const size_t start = s.size() - back;
    const uint8_t byte = static_cast<uint8_t>(s[start]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    if (byte < 0xC2 || byte > 0xF4) return s.size();
    const Utf8Step step = DecodeUtf8Step(s.substr(start));
    return !step.valid && step.length == back ? start : s.size();
  }
  return s.size();
}

// The checks that need no vocabulary size.
void ValidateStopFields(const StopParams& params) {
  if (params.max_tokens && *params.max_tokens < 1) {
    throw MakeError("stop: max_tokens must be >= 1, got ", *params.max_tokens);
  }
  for (size_t i = 0; i < params.stop.size(); ++i) {
    if (params.stop[i].empty()) throw MakeError("stop: stop string ", i, " is empty");
    if (!IsValidUtf8(params.stop[i])) throw MakeError("stop: stop string ", i, " is not valid UTF-8");
  }
}

}  // namespace

std::string_view OpenAiFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStopToken:
    case FinishReason::kStopString:
      return "stop";
    case FinishReason::kMaxTokens:
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

void ValidateStopParams(const StopParams& params, size_t vocab_size) {
  ValidateStopFields(params);
  for (int32_t id : params.stop_token_ids) {
    if (id < 0 || static_cast<size_t>(id) >= vocab_size) {
      throw MakeError("stop: stop_token_ids names token id ", id, ", outside the vocabulary of ", vocab_size,
                      " tokens");
    }
  }
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings, bool include_stop_string)
    : stops_(std::move(stop_strings)), include_stop_string_(include_stop_string) {
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) throw MakeError("stop: stop string ", i, " is empty");
    max_stop_size_ = std::max(max_stop_size_, stops_[i].size());
  }
}

StopStringMatcher::Result StopStringMatcher::Feed(std::string_view bytes) {
  Result result;
  if (matched_) return result;
  pending_.append(bytes);
  // Everything before pending_ was checked to start no stop string, so a match lies inside it.
  size_t best_start = std::string::npos;
  size_t best_end = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t start = pending_.find(stops_[i]);
    if (start == std::string::npos) continue;
    const size_t end = start + stops_[i].size();
    if (end < best_end || (end == best_end && start < best_start)) {
      best_start = start;
      best_end = end;
      result.matched = i;
    }
  }
  if (result.matched) {
    result.text = Utf8Lossy(std::string_view(pending_).substr(0, include_stop_string_ ? best_end : best_start));
    pending_.clear();
    matched_ = true;
    return result;
  }
  // Hold back the longest tail that is a proper prefix of some stop string. A stop string is
  // valid UTF-8, so such a tail starts on a character boundary.
  size_t hold_from = pending_.size();
  const size_t longest_tail = std::min(pending_.size(), max_stop_size_ > 0 ? max_stop_size_ - 1 : 0);
  for (size_t start = pending_.size() - longest_tail; start < pending_.size() && hold_from == pending_.size();
       ++start) {
    const size_t tail = pending_.size() - start;
    for (const std::string& stop : stops_) {
      if (stop.size() > tail && stop.compare(0, tail, pending_, start, tail) == 0) {
        hold_from = start;
        break;
      }
    }
  }
  hold_from = std::min(hold_from, IncompleteUtf8TailStart(pending_));
  result.text = Utf8Lossy(std::string_view(pending_).substr(0, hold_from));
  pending_.erase(0, hold_from);
  return result;
}

std::string StopStringMatcher::Flush() {
  std::string text = Utf8Lossy(pending_);
  pending_.clear();
  return text;
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::Append(int32_t token) {
  ids_.push_back(token);
  // Decode from the previous boundary on, so the new text is read in context; both boundaries
  // fall between complete characters, so the old text is a prefix of the new.
  const std::span<const int32_t> ids(ids_);
  const std::string old_text =
      tokenizer_->Decode(ids.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = tokenizer_->Decode(ids.subspan(prefix_offset_), skip_special_tokens_);
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  if (new_text.size() <= old_text.size() || new_text.ends_with(kReplacement)) return "";
  DI_CHECK(new_text.starts_with(old_text), "detokenizer: decoding is not prefix-stable at token ", ids_.size() - 1);
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return new_text.substr(old_text.size());
}

std::string IncrementalDetokenizer::Flush() {
  const std::span<const int32_t> ids(ids_);
  const std::string old_text =
      tokenizer_->Decode(ids.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = tokenizer_->Decode(ids.subspan(prefix_offset_), skip_special_tokens_);
  prefix_offset_ = read_offset_ = ids_.size();
  if (new_text.size() <= old_text.size()) return "";
  return new_text.substr(old_text.size());
}

StopChecker::StopChecker(StopParams params, std::optional<int32_t> eos_token_id, const Tokenizer* tokenizer)
    : params_(std::move(params)),
      eos_token_id_(eos_token_id),
      matcher_(params_.stop, params_.include_stop_string_in_output) {
  ValidateStopFields(params_);
  if (tokenizer != nullptr) {
    detokenizer_.emplace(*tokenizer, params_.skip_special_tokens);
  } else if (!params_.stop.empty()) {
    throw MakeError("stop: stop strings need a tokenizer to read the generated text");
  }
}

bool StopChecker::IsStopToken(int32_t token) const {
  if (eos_token_id_ && token == *eos_token_id_ && !params_.ignore_eos) return true;
  return std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(), token) != params_.stop_token_ids.end();
}

StopStringMatcher::Result StopChecker::FlushText() {
  if (!detokenizer_) return {};
  // The last incomplete character, now U+FFFD, may still complete a stop string.
  StopStringMatcher::Result result = matcher_.Feed(detokenizer_->Flush());
  // The stream ends here: a held tail that was only the start of a stop string is plain text.
  result.text += matcher_.Flush();
  return result;
}

StopStep StopChecker::Append(int32_t token) {
  DI_CHECK(!finished_, "stop: token appended to a finished sequence");
  ++num_tokens_;
  StopStep step;
  if (IsStopToken(token)) {
    if (detokenizer_ && params_.include_stop_string_in_output)
      step.text = matcher_.Feed(detokenizer_->Append(token)).text;
    // The stop token's own text is dropped (unless included above); the rest is released.
    step.text += FlushText().text;
    step.finish = FinishReason::kStopToken;
    step.stop_token = token;
    finished_ = true;
    return step;
  }
  if (detokenizer_) {
    StopStringMatcher::Result fed = matcher_.Feed(detokenizer_->Append(token));
    step.text = std::move(fed.text);
    if (fed.matched) {
      step.finish = FinishReason::kStopString;
      step.stop_string = params_.stop[*fed.matched];
      finished_ = true;
      return step;
    }
  }
  if (params_.max_tokens && num_tokens_ >= *params_.max_tokens) {
    StopStringMatcher::Result last = FlushText();
    step.text += last.text;
    step.finish = last.matched ? FinishReason::kStopString : FinishReason::kMaxTokens;
    if (last.matched) step.stop_string = params_.stop[*last.matched];
    finished_ = true;
  }
  return step;
}

std::string StopChecker::Flush() {
  DI_CHECK(!finished_, "stop: Flush on a finished sequence");
  finished_ = true;
  return FlushText().text;
}

}  // namespace deepinfer
