#include "chat/structured_output.h"

#include <vector>

#include "chat/chat_encoding.h"
#include "chat/chat_tokens.h"
#include "chat/tool_call_grammar.h"
#include "core/bounded_json.h"
#include "structured/json_schema.h"
#include "structured/regex.h"

namespace deepinfer {
namespace {

using Json = nlohmann::ordered_json;

struct Source {
  std::string field;  // top-level field, for errors
  std::shared_ptr<const Grammar> grammar;
  std::string description;
};

[[noreturn]] void Fail(const std::string& field, const std::string& message) {
  throw StructuredOutputError(field, message);
}

// Runs `compile`, turning its Error into one about `field` (`where` prefixes the message). A JSON
// type exception that a compiler's checks missed becomes such an error too, not a crash.
template <typename F>
std::shared_ptr<const Grammar> Guard(const std::string& field, const std::string& where, F&& compile) {
  const std::string prefix = where.empty() ? "" : where + ": ";
  try {
    return compile();
  } catch (const StructuredOutputError&) {
    throw;
  } catch (const Error& e) {
    Fail(field, prefix + e.what());
  } catch (const Json::exception& e) {
    Fail(field, prefix + "unexpected JSON structure (" + e.what() + ")");
  }
}

Json SchemaValue(const Json& value, const std::string& field, const std::string& where) {
  if (value.is_object() || value.is_boolean()) return value;
  if (value.is_string()) {  // vLLM accepts the schema as JSON text too, parsed like the request
    try {
      return ParseOrderedJsonBounded(value.get<std::string>(), where, kChatJsonLimits);
    } catch (const Error& e) {
      Fail(field, e.what());
    }
  }
  Fail(field, where + ": expected a JSON Schema object, got " + value.type_name());
}

std::shared_ptr<const Grammar> JsonObjectGrammar() { return CompileJsonSchema(Json{{"type", "object"}}); }

std::shared_ptr<const Grammar> RegexGrammar(const Json& value, const std::string& field, const std::string& where) {
  if (!value.is_string()) Fail(field, where + ": expected a string");
  return Guard(field, where, [&] {
    GrammarBuilder b;
    const auto e = CompileRegex(b, value.get<std::string>(), RegexOptions{});
    return b.Build(b.MakeRule("regex", e));
  });
}

std::shared_ptr<const Grammar> ChoiceGrammar(const Json& value, const std::string& field, const std::string& where) {
  if (!value.is_array() || value.empty()) Fail(field, where + ": expected a non-empty array of strings");
  GrammarBuilder b;
  std::vector<GrammarBuilder::Expr> options;
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) Fail(field, where + "[" + std::to_string(i) + "]: expected a string");
    options.push_back(b.Literal(value[i].get<std::string>()));
  }
  return Guard(field, where, [&] { return b.Build(b.MakeRule("choice", b.Alt(std::move(options)))); });
}

std::optional<Source> ResponseFormat(const Json& format) {
  const std::string field = "response_format";
  if (!format.is_object()) Fail(field, "expected an object");
  const Json type = format.value("type", Json());
  if (type == "text") return std::nullopt;
  if (type == "json_object") return Source{field, JsonObjectGrammar(), "response_format json_object"};
  if (type != "json_schema") {
    Fail(field, "type: expected \"text\", \"json_object\" or \"json_schema\", got " + type.dump());
  }
  if (!format.contains("json_schema") || !format["json_schema"].is_object()) {
    Fail(field, "json_schema: expected an object {\"name\", \"schema\", \"strict\"}");
  }
  const Json& spec = format["json_schema"];
  for (const auto& [key, value] : spec.items()) {
    if (key != "name" && key != "schema" && key != "strict" && key != "description") {
      Fail(field, "json_schema." + key + ": unknown field (expected name, schema, strict, description)");
    }
  }
  if (spec.contains("name") && !spec["name"].is_string()) Fail(field, "json_schema.name: expected a string");
  if (spec.contains("strict") && !spec["strict"].is_boolean() && !spec["strict"].is_null()) {
    Fail(field, "json_schema.strict: expected a boolean");
  }
  if (!spec.contains("schema")) Fail(field, "json_schema.schema: missing");
  const Json schema = SchemaValue(spec["schema"], field, "json_schema.schema");
  const std::string name = spec.value("name", "");
  return Source{field, Guard(field, "json_schema.schema", [&] { return CompileJsonSchema(schema); }),
                "json_schema \"" + name + "\""};
}

std::optional<Source> StructuredOutputs(const Json& spec) {
  const std::string field = "structured_outputs";
  if (!spec.is_object()) Fail(field, "expected an object");
  std::optional<Source> source;
  const auto set = [&](const std::string& key, std::shared_ptr<const Grammar> grammar) {
    if (source) Fail(field, "give exactly one of json, regex, choice, json_object");
    source = Source{field, std::move(grammar), "structured_outputs." + key};
  };
  for (const auto& [key, value] : spec.items()) {
    if (value.is_null()) continue;
    if (key == "json") {
      const Json schema = SchemaValue(value, field, "json");
      set(key, Guard(field, "json", [&] { return CompileJsonSchema(schema); }));
    } else if (key == "regex") {
      set(key, RegexGrammar(value, field, "regex"));
    } else if (key == "choice") {
      set(key, ChoiceGrammar(value, field, "choice"));
    } else if (key == "json_object") {
      if (value != true) Fail(field, "json_object: expected true");
      set(key, JsonObjectGrammar());
    } else {
      Fail(field, key + ": not supported (supported: json, regex, choice, json_object)");
    }
  }
  if (!source) Fail(field, "give one of json, regex, choice, json_object");
  return source;
}

std::optional<Source> ForcedToolCall(const Json& request) {
  const std::string field = "tool_choice";
  const Json& choice = request["tool_choice"];
  ToolCallChoice forced;
  if (choice.is_null() || (choice.is_string() && !ForcesToolCall(choice))) return std::nullopt;
  if (choice.is_string()) {
    if (choice != "required") Fail(field, "expected \"auto\", \"none\", \"required\" or a named function");
  } else if (choice.is_object()) {
    if (choice.value("type", Json()) != "function" || !choice.contains("function") || !choice["function"].is_object() ||
        !choice["function"].contains("name") || !choice["function"]["name"].is_string()) {
      Fail(field, "expected {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    forced.function = choice["function"]["name"].get<std::string>();
  } else {
    Fail(field, "expected a string or an object");
  }
  if (request.contains("parallel_tool_calls") && !request["parallel_tool_calls"].is_null()) {
    if (!request["parallel_tool_calls"].is_boolean()) Fail("parallel_tool_calls", "expected a boolean");
    forced.parallel = request["parallel_tool_calls"].get<bool>();
  }
  const Json tools = request.value("tools", Json());
  if (!tools.is_array() || tools.empty()) Fail(field, "a forced tool call needs a non-empty \"tools\" array");
  const auto grammar = Guard(field, "", [&] { return CompileToolCallGrammar(tools, forced); });
  return Source{field, grammar, forced.function ? "tool call \"" + *forced.function + "\"" : "tool call"};
}

bool ThinkingFromKwargs(const Json& request) {
  const auto it = request.find("chat_template_kwargs");
  if (it == request.end() || it->is_null()) return false;
  if (!it->is_object()) Fail("chat_template_kwargs", "expected an object");
  for (const char* key : {"thinking", "enable_thinking"}) {
    if (const auto k = it->find(key); k != it->end() && !k->is_null()) {
      if (!k->is_boolean()) Fail("chat_template_kwargs", std::string(key) + ": expected a boolean");
      return k->get<bool>();
    }
  }
  return false;
}

}  // namespace

std::shared_ptr<const Constraint> CompileStructuredOutput(const Json& request,
                                                          std::shared_ptr<const TokenVocabulary> vocabulary,
                                                          const StructuredOutputOptions& options) {
  if (!request.is_object()) Fail("request", "expected a JSON object");
  std::vector<Source> sources;
  const auto present = [&](const char* key) { return request.contains(key) && !request[key].is_null(); };
  if (present("response_format")) {
    if (auto s = ResponseFormat(request["response_format"])) sources.push_back(std::move(*s));
  }
  if (present("structured_outputs")) sources.push_back(*StructuredOutputs(request["structured_outputs"]));
  if (present("guided_json")) {
    const Json schema = SchemaValue(request["guided_json"], "guided_json", "guided_json");
    sources.push_back(
        {"guided_json", Guard("guided_json", "", [&] { return CompileJsonSchema(schema); }), "guided_json"});
  }
  if (present("guided_regex")) {
    sources.push_back({"guided_regex", RegexGrammar(request["guided_regex"], "guided_regex", ""), "guided_regex"});
  }
  if (present("guided_choice")) {
    sources.push_back({"guided_choice", ChoiceGrammar(request["guided_choice"], "guided_choice", ""), "guided_choice"});
  }
  for (const char* unsupported : {"guided_grammar", "guided_whitespace_pattern"}) {
    if (present(unsupported)) Fail(unsupported, "not supported");
  }
  if (present("guided_decoding_backend") && request["guided_decoding_backend"] != "auto") {
    Fail("guided_decoding_backend", "only \"auto\" (deepinfer has one structured-output backend)");
  }
  if (options.tool_choice && present("tool_choice")) {
    if (auto s = ForcedToolCall(request)) sources.push_back(std::move(*s));
  }
  if (sources.empty()) return nullptr;
  if (sources.size() > 1) {
    Fail(sources[1].field, "cannot be combined with " + sources[0].field + " (one output constraint per request)");
  }
  const bool reasoning = options.thinking.has_value() ? *options.thinking : ThinkingFromKwargs(request);
  ConstraintOptions constraint;
  constraint.description = sources[0].description;
  if (reasoning) constraint.free_until = std::string(chat_tokens::kThinkEnd);
  return std::make_shared<Constraint>(sources[0].grammar, std::move(vocabulary), std::move(constraint));
}

bool ForcesToolCall(const Json& tool_choice) {
  if (tool_choice.is_string()) return tool_choice != "auto" && tool_choice != "none";
  return tool_choice.is_object();
}

}  // namespace deepinfer
