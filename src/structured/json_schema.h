// JSON Schema to grammar: the JSON texts a schema admits, in the language of json_grammar.h.
//
// Supported (drafts 4 to 2020-12 spellings): type (one name or a list), enum, const,
// properties, required, additionalProperties (true, false or a schema), items (a schema, or the
// draft-4 tuple list with additionalItems), prefixItems, minItems, maxItems, minLength,
// maxLength, pattern (regex.h, search semantics), format (date, date-time, time, uuid, email,
// ipv4), minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, or draft-4 booleans),
// anyOf, oneOf (alternatives that are provably exclusive), allOf with one schema, $ref to "#..."
// JSON pointers (recursion included) with $defs / definitions. Annotations are accepted and do
// not constrain: title, description, default, examples, $comment, $schema, $id (root only),
// deprecated, readOnly, writeOnly, discriminator.
//
// Exact semantics, with these generation policies:
//   - a keyword constrains only values of its type ({"minimum": 1} admits any string);
//   - objects: declared properties in the order of `properties` (required ones present, others
//     optional), then members named otherwise if additionalProperties allows them; a declared
//     name never appears twice, and required names missing from `properties` come after them;
//   - enum / const: a value is written as any spelling of it (1, 1.0 and 1e0 for 1), object
//     members in the order the listed value has them; with sibling keywords, the listed values
//     that fail them are dropped (listed objects and arrays take only a `type` sibling);
//   - oneOf: the alternatives must be exclusive by type, by const / enum values, or by a
//     required property whose const / enum values differ (a discriminator); otherwise an Error
//     says so (use anyOf);
//   - a keyword beside $ref / anyOf / oneOf / allOf other than an annotation is an Error.
// Anything else (uniqueItems, multipleOf, patternProperties, if/then/else, remote refs, ...)
// is an Error naming the keyword and where it is: "#/properties/tags: unsupported JSON
// Schema keyword \"uniqueItems\"".
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/json_grammar.h"

namespace deepinfer {

class JsonSchemaCompiler {
 public:
  using Expr = GrammarBuilder::Expr;
  // The forms a value can take: JSON text, JSON text that is not a string, or a string's raw
  // UTF-8 (no quotes, no escapes) -- a DSML tool call writes string arguments raw.
  enum class Form { kJson, kJsonNotString, kRawString };

  // `root` must outlive the compiler ($ref targets are read from it).
  JsonSchemaCompiler(JsonGrammar& json, const nlohmann::ordered_json& root);

  // The texts valid under `schema` (found at JSON pointer `pointer`, for messages and $ref).
  Expr Value(const nlohmann::ordered_json& schema, const std::string& pointer, Form form = Form::kJson);

 private:
  struct Shape;
  Expr Ref(const nlohmann::ordered_json& schema, const std::string& pointer, Form form);
  Expr Enumeration(const nlohmann::ordered_json& schema, const std::string& pointer, Form form);
  Expr Typed(const nlohmann::ordered_json& schema, const std::string& pointer, Form form);
  Expr String(const nlohmann::ordered_json& schema, const std::string& pointer, Form form);
  Expr Numeric(const nlohmann::ordered_json& schema, const std::string& pointer, bool integer);
  Expr Array(const nlohmann::ordered_json& schema, const std::string& pointer);
  Expr Object(const nlohmann::ordered_json& schema, const std::string& pointer);
  void CheckExclusive(const nlohmann::ordered_json& alternatives, const std::string& pointer);
  Shape ShapeOf(const nlohmann::ordered_json& schema, const std::string& pointer, int depth);
  const nlohmann::ordered_json& Resolve(const std::string& ref, const std::string& pointer, std::string* target);

  JsonGrammar& json_;
  GrammarBuilder& b_;
  const nlohmann::ordered_json& root_;
  std::map<std::pair<std::string, Form>, RuleId> ref_rules_;
  std::vector<std::string> inline_refs_;  // raw-string refs being inlined (recursion guard)
};

// The grammar of JSON texts valid under `schema`. Throws Error as described above.
std::shared_ptr<const Grammar> CompileJsonSchema(const nlohmann::ordered_json& schema);

}  // namespace deepinfer
