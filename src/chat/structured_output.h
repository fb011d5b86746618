// The front door of structured output for the OpenAI-compatible server: one call turns a request
// body into the constraint the engine applies (RequestParams::constraint), or into an error that
// names the field (the server answers 400 with it).
//
// Fields read (everything else is left to the caller):
//   response_format     {"type": "text"} (no constraint), {"type": "json_object"} (any JSON object),
//                       {"type": "json_schema", "json_schema": {"name", "schema", "strict",
//                       "description"}} (json_schema.h; strict is accepted either way: the
//                       constraint is always exact)
//   structured_outputs  vLLM: exactly one of {"json": schema}, {"regex": "..."},
//                       {"choice": ["a", "b"]}, {"json_object": true}
//   guided_json, guided_regex, guided_choice      vLLM's older spellings of the same
//   guided_decoding_backend                       "auto" or absent (there is one backend)
//   tool_choice + tools (+ parallel_tool_calls)   "required" or {"type": "function",
//                       "function": {"name"}} force a DSML tool call (tool_call_grammar.h);
//                       "auto", "none" or absent add no constraint
//   chat_template_kwargs.thinking (or enable_thinking)   when `thinking` is not given: with
//                       thinking on, the constraint starts after "</think>"
// At most one source may be set. regex and choice constrain the whole output text; a choice is
// one of the strings exactly.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/error.h"
#include "structured/constraint.h"

namespace deepinfer {

class StructuredOutputError : public Error {
 public:
  StructuredOutputError(std::string field, const std::string& message)
      : Error(field + ": " + message), field_(std::move(field)) {}
  // The top-level request field at fault ("response_format"), for OpenAI's error `param`.
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

struct StructuredOutputOptions {
  // Whether the prompt opened a reasoning block (the server knows); unset: read
  // chat_template_kwargs.
  std::optional<bool> thinking = std::nullopt;
  // Whether tool_choice is read. False for an API without tools (completions), which ignores it
  // as any other unknown field.
  bool tool_choice = true;
};

// nullptr when the request asks for no constraint. Throws StructuredOutputError.
std::shared_ptr<const Constraint> CompileStructuredOutput(const nlohmann::ordered_json& request,
                                                          std::shared_ptr<const TokenVocabulary> vocabulary,
                                                          const StructuredOutputOptions& options = {});

// Whether a tool_choice value forces a tool call: "required" or a named function. False for
// "auto", "none" and null; a value of another shape is CompileStructuredOutput's error to report.
bool ForcesToolCall(const nlohmann::ordered_json& tool_choice);

}  // namespace deepinfer
