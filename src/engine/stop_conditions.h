// When a sequence stops, and which text it may show meanwhile. Three pieces, usable alone:
//
//   StopStringMatcher       text in (arbitrary byte chunks), safe text out. Holds back any tail
//                           that could still become a stop string, and any incomplete UTF-8
//                           character; reports a match with the stop string cut off.
//   IncrementalDetokenizer  token ids in, finished UTF-8 text out: text whose last character is
//                           still incomplete (Decode shows it as U+FFFD) waits for more tokens.
//   StopChecker             one per sequence: stop token ids (EOS unless ignore_eos), max_tokens
//                           and stop strings, fed the sampled tokens one at a time.
//
// Checks run in vLLM's order for each new token: stop token, then stop strings, then max_tokens.
// A stop string that completes on the max_tokens-th token is reported as a stop string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

class Tokenizer;

enum class FinishReason {
  kNone,        // still running
  kStopToken,   // EOS or one of stop_token_ids
  kStopString,  // one of the stop strings appeared in the text
  kMaxTokens,   // max_tokens generated
  kLength,      // the model's context is full
  kAbort,       // cancelled by the client
  kError,       // the engine could not serve it (the update says why)
};

// OpenAI's `finish_reason`: "stop", "length", "abort" (vLLM's), "error", or "" while running.
std::string_view OpenAiFinishReason(FinishReason reason);

struct StopParams {
  // Unset: no limit here (the context length still ends the sequence). Otherwise >= 1.
  std::optional<int64_t> max_tokens = std::nullopt;
  // Stop tokens in addition to EOS; ids inside the vocabulary.
  std::vector<int32_t> stop_token_ids = {};
  // EOS no longer stops the sequence (explicit stop_token_ids still do).
  bool ignore_eos = false;
  // Non-empty, valid UTF-8.
  std::vector<std::string> stop = {};
  // vLLM's include_stop_str_in_output: keep the matched stop string, or the stop token's text,
  // at the end of the output. Text after the stop string is always dropped.
  bool include_stop_string_in_output = false;
  // Passed to Tokenizer::Decode.
  bool skip_special_tokens = true;
};

// Throws deepinfer::Error naming the first bad field. Call at request admission with the model's
// vocabulary size; StopChecker re-checks everything but the token ids (which cannot match if out of
// range).
void ValidateStopParams(const StopParams& params, size_t vocab_size);

class StopStringMatcher {
 public:
  struct Result {
    std::string text;                    // safe to emit now (valid UTF-8)
    std::optional<size_t> matched = {};  // index into the stop strings, once one matched
  };

  // Stop strings must be non-empty (checked); include_stop_string keeps the match in the text.
  explicit StopStringMatcher(std::vector<std::string> stop_strings, bool include_stop_string = false);

  // Appends `bytes` and returns what can no longer be part of a stop string. When several stop
  // strings appear, the one that ends first wins (the one a byte-by-byte feed would have found
  // first); on equal ends, the longer one. After a match, further input is ignored.
  Result Feed(std::string_view bytes);

  // End of the stream: releases everything held back (an incomplete UTF-8 character becomes
  // U+FFFD). Returns "" after a match.
  std::string Flush();

  bool matched() const { return matched_; }
  // The text held back now (tests and debugging).
  std::string_view held() const { return pending_; }

 private:
  std::vector<std::string> stops_;
  bool include_stop_string_;
  size_t max_stop_size_ = 0;
  std::string pending_;
  bool matched_ = false;
};

// vLLM/TGI-style incremental detokenization over Tokenizer::Decode: decodes the tokens since the
// last emitted boundary and emits only when the text does not end in U+FFFD, i.e. no UTF-8
// character is split across the next token. A model that really emits U+FFFD (or invalid bytes)
// last therefore waits until a later token or Flush. The Tokenizer must outlive this object.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);

  // Returns the text that became final with `token` (possibly "").
  std::string Append(int32_t token);
  // Returns the rest, incomplete characters as U+FFFD.
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // start of the tokens re-decoded for context
  size_t read_offset_ = 0;    // end of the tokens whose text was emitted
};

struct StopStep {
  std::string text;  // emit now: valid UTF-8, stop strings removed
  FinishReason finish = FinishReason::kNone;
  std::optional<int32_t> stop_token = std::nullopt;       // for kStopToken
  std::optional<std::string> stop_string = std::nullopt;  // for kStopString
  bool finished() const { return finish != FinishReason::kNone; }
};

// One per sequence. `tokenizer` may be null when `params.stop` is empty (then `text` is always
// empty); it must outlive the checker.
class StopChecker {
 public:
  StopChecker(StopParams params, std::optional<int32_t> eos_token_id, const Tokenizer* tokenizer);

  // Feed each sampled token once, in order; not after the sequence finished.
  StopStep Append(int32_t token);
  // The sequence ends for another reason (context full, cancelled): releases the held text.
  std::string Flush();

  int64_t num_tokens() const { return num_tokens_; }
  bool finished() const { return finished_; }

 private:
  bool IsStopToken(int32_t token) const;
  StopStringMatcher::Result FlushText();

  StopParams params_;
  std::optional<int32_t> eos_token_id_;
  std::optional<IncrementalDetokenizer> detokenizer_;
  StopStringMatcher matcher_;
  int64_t num_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace deepinfer
