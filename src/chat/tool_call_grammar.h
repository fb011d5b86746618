// The grammar of a forced DeepSeek-V4.1 tool call (OpenAI tool_choice "required" or a named
// function): a DSML block exactly as chat_encoding.cc renders an assistant's tool calls, so the
// output parser (output_parser.h) reads it back as tool calls.
//
//   "\n\n<｜DSML｜ calls>\n" invoke ("\n" invoke)* "\n</｜DSML｜ calls>"      (then EOS)
//   invoke ::= "<｜DSML｜ invoke name=\"NAME\">\n" parameters "\n</｜DSML｜ invoke>"
//   parameter ::= "<｜DSML｜ parameter name=\"P\" string=\"true\">" RAW "</｜DSML｜ parameter>"
//               | "<｜DSML｜ parameter name=\"P\" string=\"false\">" JSON "</｜DSML｜ parameter>"
//
// Parameters follow the function's `parameters` schema (an object schema; its properties in
// order, "\n" between them, required ones present): the official encoder's rule is that a
// string value is written raw with string="true" and every other value as JSON with
// string="false", so a parameter gets the string branch of its schema raw and the rest as JSON
// (json_schema.h). A raw value never contains "/｜DSML｜ parameter" (the parser would end the
// parameter there) and JSON strings escape U+FF5C, so what the model writes always parses back
// to arguments that validate. Properties beyond the declared ones are not generated.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "structured/grammar.h"

namespace deepinfer {

struct ToolCallChoice {
  // Unset: any of the tools (tool_choice "required"); set: that function.
  std::optional<std::string> function;
  // More than one call in the block (OpenAI parallel_tool_calls); a named function is called once.
  bool parallel = true;
};

// `tools`: OpenAI's [{"type": "function", "function": {"name", "parameters", ...}}]. Throws Error
// naming the field ("tools[1].function.parameters: #/properties/x: unsupported ...").
std::shared_ptr<const Grammar> CompileToolCallGrammar(const nlohmann::ordered_json& tools,
                                                      const ToolCallChoice& choice);

}  // namespace deepinfer
