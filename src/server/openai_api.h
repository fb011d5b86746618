// The OpenAI-compatible request and response shapes of `deepinfer serve`, free of any HTTP
// code: JSON bodies in, Engine requests out; Engine events in, JSON / SSE text out.
//
// Requests. Every known field is type- and range-checked and errors name it (400, OpenAI's
// error object); unknown top-level fields are ignored (clients send newer fields). Known
// fields this server cannot honour (echo, suffix, best_of > 1, response_format other than
// text, tool_choice other than auto/none, parallel_tool_calls false, min_tokens,
// prompt_logprobs) are refused with a 400 naming them rather than silently dropped. Token ids
// of the prompt must lie inside the model's vocabulary (a model smaller than its tokenizer
// cannot take arbitrary text), and prompt plus max_tokens must fit the context.
//
// Responses. `ResponseBuilder` turns one submission's ChoiceEvents into the body (non-streamed)
// or SSE events (streamed): chat output goes through the V4.1 output parser, so reasoning
// arrives as `reasoning_content`, DSML tool calls as `tool_calls` (streamed as OpenAI argument
// deltas: each call's id and name, then its arguments, when its DSML block closes) with finish
// reason "tool_calls".
//
// Not thread-safe per object; the functions are reentrant. Throws ApiError.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/output_parser.h"
#include "core/bounded_json.h"
#include "core/error.h"
#include "engine/engine.h"
#include "server/engine_loop.h"
#include "structured/token_vocabulary.h"

namespace deepinfer {

class Tokenizer;

using Json = nlohmann::ordered_json;

// An error response: HTTP status and OpenAI's {"error": {"message", "type", "param", "code"}}.
class ApiError : public Error {
 public:
  ApiError(int status, std::string type, std::string code, std::string param, const std::string& message);
  int status() const { return status_; }
  // The JSON body.
  std::string Body() const;

 private:
  int status_;
  std::string type_;
  std::string code_;
  std::string param_;
};

// 400 invalid_request_error; `param` names the field ("" for none).
ApiError InvalidRequest(std::string param, const std::string& message, std::string code = "invalid_value");

// What request handling needs to know about the served model.
struct ModelInfo {
  std::string name;  // --served-model-name
  const Tokenizer* tokenizer = nullptr;
  int64_t vocab_size = 0;     // the model's (may be smaller than the tokenizer's)
  int64_t max_model_len = 0;  // context limit: prompt + completion
  // The longest token in bytes: a text of B bytes has at least ceil(B / max_token_bytes)
  // tokens, so oversized text is refused before it is tokenized.
  size_t max_token_bytes = 1;
  int64_t created = 0;  // unix time the server started (GET /v1/models)
  // The tokenizer's token bytes for structured output, indexed once at start (not per request).
  std::shared_ptr<const TokenVocabulary> vocabulary;
};

ModelInfo DescribeModel(std::string name, const Tokenizer& tokenizer, int64_t vocab_size, int64_t max_model_len);

enum class ApiKind { kChat, kCompletion };

struct GenerationRequest {
  ApiKind kind = ApiKind::kChat;
  std::vector<std::vector<int32_t>> prompts;  // chat: exactly one
  int n = 1;
  RequestParams params;  // everything but the prompt; choice i gets seed + (i % n) when seeded
  bool stream = false;
  bool include_usage = false;
  // Chat: logprobs true -> top_logprobs (0..20). Completions: logprobs N (0..20). Unset: off.
  std::optional<int32_t> logprobs;
  bool thinking = false;   // chat: the prompt opened a <think> block
  bool tool_calls = true;  // chat: parse DSML tool calls (false with tool_choice "none")
};

// Parse + validate + render + tokenize. `body` must be a JSON object (else 400).
GenerationRequest ParseChatCompletionRequest(const Json& body, const ModelInfo& model);
GenerationRequest ParseCompletionRequest(const Json& body, const ModelInfo& model);

// The one Submission choice list (prompt-major, n per prompt).
std::vector<RequestParams> ExpandChoices(const GenerationRequest& request);

// "model" when present must be the served name (404 otherwise).
void CheckModelName(const Json& body, const ModelInfo& model);

// POST /tokenize and /detokenize (vLLM's shapes), GET /v1/models.
Json TokenizeResponse(const Json& body, const ModelInfo& model);
Json DetokenizeResponse(const Json& body, const ModelInfo& model);
Json ModelsResponse(const ModelInfo& model);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

class ResponseBuilder {
 public:
  ResponseBuilder(const GenerationRequest& request, const ModelInfo& model, std::string id, int64_t created);

  // Streamed: the SSE text ("data: {...}\n\n" events) for these events; may be empty.
  std::string StreamEvents(const std::vector<ChoiceEvent>& events);
  // Streamed, after every choice finished: the usage chunk (if asked for) and "data: [DONE]".
  std::string StreamEnd() const;
  // Non-streamed: takes the events in; Body() once done().
  void Collect(const std::vector<ChoiceEvent>& events);
  std::string Body() const;

  bool done() const { return finished_ == choices_.size(); }
  // The first engine refusal (Engine::Add threw), if any: the whole request is a 400.
  const std::optional<std::string>& rejection() const { return rejection_; }
  // The first failure during generation, or an abort the client did not ask for (shutdown).
  const std::optional<std::string>& failure() const { return failure_; }
  Usage usage() const;
  // Seconds from `start` to the first token of any choice, if one came.
  std::optional<Clock::time_point> first_token_time() const { return first_token_; }

 private:
  struct LogprobEntry {
    int32_t token = 0;
    float logprob = 0.0f;
    std::vector<TokenLogprob> top;
    size_t text_offset = 0;  // of the token's text in the choice's (completions' text_offset)
  };
  struct Choice {
    std::optional<ChatOutputParser> parser;
    std::string text;  // completions; chat: content
    std::string reasoning;
    std::vector<ParsedToolCall> tool_calls;
    std::vector<std::string> tool_call_ids;
    std::vector<LogprobEntry> logprobs;
    int64_t generated = 0;
    size_t token_text_bytes = 0;  // the tokens' texts so far (logprob text offsets)
    int64_t cached_tokens = 0;
    int64_t prompt_tokens = 0;
    FinishReason finish = FinishReason::kNone;
    bool sent_role = false;
  };
  // Applies one event to its choice; returns the new output of the event.
  struct Delta {
    ChatOutputDelta chat;
    std::string text;
    std::vector<LogprobEntry> logprobs;
    size_t first_new_call = 0;
  };
  Delta Apply(const ChoiceEvent& event);
  std::string FinishReasonOf(const Choice& choice) const;
  Json LogprobsJson(const std::vector<LogprobEntry>& entries) const;
  Json UsageJson() const;
  Json ChunkHeader() const;

  const GenerationRequest& request_;
  const ModelInfo& model_;
  std::string id_;
  int64_t created_;
  std::vector<Choice> choices_;
  size_t finished_ = 0;
  std::optional<std::string> rejection_;
  std::optional<std::string> failure_;
  std::optional<Clock::time_point> first_token_;
};

// "chatcmpl-..." / "cmpl-..." / "call_...": a prefix and 24 random alphanumerics.
std::string RandomId(std::string_view prefix);

// A request body parsed with the shared bounded-JSON helper (core/bounded_json.h) within
// `limits`: a body over the byte limit, nested too deep or not JSON is a 400 (invalid_json)
// that says where the text is bad. A repeated key keeps its last value, as Python's json.loads
// (the reference servers') does.
Json ParseRequestJson(std::string_view body, const JsonLimits& limits);

// json.dump that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string DumpJson(const Json& value);

}  // namespace deepinfer
