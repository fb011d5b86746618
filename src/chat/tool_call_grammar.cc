#include "chat/tool_call_grammar.h"

#include <set>

#include "chat/chat_tokens.h"
#include "core/error.h"
#include "structured/json_schema.h"

namespace deepinfer {
namespace {

namespace tok = chat_tokens;
using Json = nlohmann::ordered_json;
using Expr = GrammarBuilder::Expr;

// U+FF5C FULLWIDTH VERTICAL LINE: the bar of every DSML tag.
constexpr char32_t kDsmlBar = 0xFF5C;

bool IsOpenAiName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

// The keywords a function's parameters schema may have at its top (an object schema).
bool IsTopLevelParametersKey(const std::string& key) {
  static const std::set<std::string> kKeys = {"type",    "properties",  "required", "additionalProperties",
                                              "$defs",   "definitions", "title",    "description",
                                              "$schema", "$comment",    "examples", "default",
                                              "strict"};
  return kKeys.count(key) > 0;
}

class ToolCallBuilder {
 public:
  ToolCallBuilder() : json_(b_, CodepointSet::Of(kDsmlBar)) {}

  // One invoke of `function`; `where` names it in errors.
  Expr Invoke(const Json& function, const std::string& where) {
    const std::string name = function.at("name").get<std::string>();
    const Json parameters = function.value("parameters", Json::object());
    const std::string at = where + ".parameters";
    if (!parameters.is_object()) throw MakeError(at, ": expected an object schema");
    for (const auto& [key, value] : parameters.items()) {
      if (!IsTopLevelParametersKey(key)) {
        throw MakeError(at, ": \"", key,
                        "\" at the top of the parameters schema is not supported (expected an "
                        "object schema with properties)");
      }
    }
    if (parameters.contains("type") && parameters["type"] != "object") {
      throw MakeError(at, ": \"type\" must be \"object\"");
    }
    JsonSchemaCompiler compiler(json_, parameters);
    const Json properties = parameters.value("properties", Json::object());
    if (!properties.is_object()) throw MakeError(at, ": \"properties\" must be an object");
    std::set<std::string> required;
    for (const Json& r : parameters.value("required", Json::array())) {
      if (!r.is_string()) throw MakeError(at, ": \"required\" must list property names");
      if (!properties.contains(r.get<std::string>())) {
        throw MakeError(at, ": required parameter \"", r.get<std::string>(), "\" is not in \"properties\"");
      }
      required.insert(r.get<std::string>());
    }
    struct Param {
      Expr expr;
      bool required;
    };
    std::vector<Param> params;
    for (const auto& [param, schema] : properties.items()) {
      if (param.empty() || param.find_first_of("\"<>\n") != std::string::npos ||
          param.find("\xEF\xBD\x9C") != std::string::npos) {
        throw MakeError(at, ": parameter name \"", param, "\" cannot be written in DSML");
      }
      params.push_back(
          {ParameterExpr(compiler, param, schema, "#/properties/" + param, at), required.count(param) > 0});
    }
    // Parameters in order, "\n" between the present ones (nodes as for JSON object members).
    const int n = static_cast<int>(params.size());
    std::vector<GrammarBuilder::Edge> edges;
    for (int i = 0; i < n; ++i) {
      edges.push_back({i, n + 1 + i + 1, params[i].expr});
      edges.push_back({n + 1 + i, n + 1 + i + 1, b_.Seq({b_.Literal("\n"), params[i].expr})});
      if (!params[i].required) {
        edges.push_back({i, i + 1, b_.Empty()});
        edges.push_back({n + 1 + i, n + 1 + i + 1, b_.Empty()});
      }
    }
    return b_.Seq({b_.Literal(std::string(tok::kInvokeStart) + " name=\"" + name + "\">\n"),
                   b_.Graph(2 * n + 2, 0, {n, 2 * n + 1}, std::move(edges)), b_.Literal("\n"),
                   b_.Literal(tok::kInvokeClose)});
  }

  Expr Block(std::vector<Expr> invokes, bool many) {
    const Expr invoke = b_.Alt(std::move(invokes));
    const Expr calls = many ? b_.Seq({invoke, b_.Star(b_.Seq({b_.Literal("\n"), invoke}))}) : invoke;
    return b_.Seq({b_.Literal("\n\n"), b_.Literal(tok::kCallsOpen), b_.Literal("\n"), calls, b_.Literal("\n"),
                   b_.Literal(tok::kCallsClose)});
  }

  std::shared_ptr<const Grammar> Build(Expr block) { return b_.Build(b_.MakeRule("tool call", block)); }

 private:
  Expr ParameterExpr(JsonSchemaCompiler& compiler, const std::string& name, const Json& schema,
                     const std::string& pointer, const std::string& where) {
    const std::string open = std::string(tok::kParameterStart) + " name=\"" + name + "\" string=\"";
    Expr raw, json;
    try {
      raw = compiler.Value(schema, pointer, JsonSchemaCompiler::Form::kRawString);
      json = compiler.Value(schema, pointer, JsonSchemaCompiler::Form::kJsonNotString);
    } catch (const Error& e) {
      throw MakeError(where, ": ", e.what());
    }
    // The parser ends a parameter at the first "/｜DSML｜ parameter": a raw value cannot hold it.
    const Expr any = b_.Star(Utf8Expr(b_, CodepointSet::All()));
    const Expr end_tag = b_.Seq({any, b_.Literal(tok::kParameterEnd), any});
    return b_.Alt({b_.Seq({b_.Literal(open + "true\">"), b_.Subtract(raw, end_tag), b_.Literal(tok::kParameterClose)}),
                   b_.Seq({b_.Literal(open + "false\">"), json, b_.Literal(tok::kParameterClose)})});
  }

  GrammarBuilder b_;
  JsonGrammar json_;
};

}  // namespace

std::shared_ptr<const Grammar> CompileToolCallGrammar(const Json& tools, const ToolCallChoice& choice) {
  if (!tools.is_array() || tools.empty()) throw MakeError("tools: a forced tool call needs a non-empty tools array");
  ToolCallBuilder builder;
  std::vector<Expr> invokes;
  std::set<std::string> names;
  bool found = false;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const Json& tool = tools[i];
    if (!tool.is_object() || !tool.contains("type") || tool["type"] != "function" || !tool.contains("function") ||
        !tool["function"].is_object()) {
      throw MakeError(where, ": expected {\"type\": \"function\", \"function\": {...}}");
    }
    const Json& function = tool["function"];
    if (!function.contains("name") || !function["name"].is_string() ||
        !IsOpenAiName(function["name"].get<std::string>())) {
      throw MakeError(where, ".function.name: expected a name matching ^[a-zA-Z0-9_-]{1,64}$");
    }
    const std::string name = function["name"].get<std::string>();
    if (!names.insert(name).second) throw MakeError(where, ".function.name: \"", name, "\" is defined twice");
    if (choice.function && *choice.function != name) continue;
    found = true;
    invokes.push_back(builder.Invoke(function, where + ".function"));
  }
  if (!found) throw MakeError("tool_choice.function.name: no tool named \"", choice.function.value_or(""), "\"");
  return builder.Build(builder.Block(std::move(invokes), choice.parallel && !choice.function));
}

}  // namespace deepinfer
