// JSON Schema grammars against the independent reference (json_reference.h). Property-based,
// seeded: documents drawn from the automaton must all be valid; thousands of variants of them
// (random byte edits, other spellings of the same values, swapped members) must get the same
// verdict from the automaton and the reference. Then the errors for what is not supported.
#include "structured/json_schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "structured/json_reference.h"
#include "structured/matcher.h"
#include "structured/random_document.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

const std::vector<std::string>& Schemas() {
  static const std::vector<std::string> schemas = {
      R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name"], "additionalProperties": false})",
      R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}}})",
      R"({"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 99}},
          "required": ["id", "extra"], "additionalProperties": {"type": "number", "exclusiveMinimum": 0}})",
      R"({"type": "array", "items": {"type": "integer", "exclusiveMaximum": 10, "minimum": -3}, "minItems": 1,
          "maxItems": 4})",
      R"({"type": "array", "prefixItems": [{"type": "string", "maxLength": 2}, {"type": "number"}],
          "items": false})",
      R"({"type": "array", "items": [{"const": "x"}], "additionalItems": {"type": "boolean"}})",
      R"({"type": "string", "minLength": 2, "maxLength": 5})",
      R"({"type": "string", "pattern": "^[a-c]+\\d?$"})",
      R"({"type": "string", "pattern": "é|z", "maxLength": 3})",
      R"({"type": "string", "format": "date"})",
      R"({"type": "string", "format": "date-time"})",
      R"({"type": "string", "format": "time"})",
      R"({"type": "string", "format": "uuid"})",
      R"({"type": "string", "format": "email"})",
      R"({"type": "string", "format": "ipv4"})",
      R"({"enum": ["red", "green", 3, 2.5, null, true, {"k": [1]}, [1, "a"]]})",
      R"({"type": "string", "enum": ["a", "bb", "ccc", 7], "minLength": 2})",
      R"({"const": {"x": 1, "y": "\u00e9"}})",
      R"({"type": ["string", "null", "integer"], "minLength": 1, "maximum": 5})",
      R"({"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer", "minimum": 0}]})",
      R"({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "v": {"type": "integer"}},
                     "required": ["kind"], "additionalProperties": false},
                    {"type": "object", "properties": {"kind": {"const": "b"}, "w": {"type": "string"}},
                     "required": ["kind", "w"], "additionalProperties": false}]})",
      R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
          "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"],
          "additionalProperties": false}}, "$ref": "#/$defs/node"})",
      R"({"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2},
          "n": {"type": "number", "minimum": -1.5, "maximum": 1e2}}, "additionalProperties": false})",
      R"({"definitions": {"s": {"type": "string", "maxLength": 3}}, "type": "object",
          "properties": {"a~b": {"$ref": "#/definitions/s"}, "c/d": {"allOf": [{"$ref": "#/definitions/s"}]}},
          "additionalProperties": false})",
      R"({})",
      R"({"type": "object"})",
      R"({"type": "number", "minimum": 0.1, "exclusiveMaximum": 0.3})",
      R"({"type": "integer", "maximum": 5, "exclusiveMaximum": true})",
      R"({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})",
  };
  return schemas;
}

// Another spelling of the same values: whitespace, string escapes, number forms, and now and
// then two members swapped (which the member-order policy may refuse).
void Respell(const reference::Value& v, std::mt19937& rng, std::string& out) {
  const auto ws = [&] {
    switch (rng() % 4) {
      case 0:
        return std::string();
      case 1:
        return std::string(" ");
      default:
        return "\n" + std::string(rng() % 21, rng() % 2 ? ' ' : '\t');
    }
  };
  const auto string = [&](const std::string& s) {
    out += '"';
    for (size_t i = 0; i < s.size();) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      unsigned cp = n == 1 ? c : c & (0x7F >> n);
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 63);
      const bool must = cp < 0x20 || cp == '"' || cp == '\\';
      char buffer[16];
      if (!must && rng() % 3) {
        out.append(s, i, n);
      } else if (cp > 0xFFFF) {
        std::snprintf(buffer, sizeof(buffer), "\\u%04x\\u%04X", 0xD800 + ((cp - 0x10000) >> 10),
                      0xDC00 + ((cp - 0x10000) & 0x3FF));
        out += buffer;
      } else if (cp == '"' || cp == '\\') {
        out += '\\';
        out += static_cast<char>(cp);
      } else {
        std::snprintf(buffer, sizeof(buffer), rng() % 2 ? "\\u%04x" : "\\u%04X", cp);
        out += buffer;
      }
      i += n;
    }
    out += '"';
  };
  switch (v.kind) {
    case reference::Value::kNull:
      out += "null";
      return;
    case reference::Value::kBool:
      out += v.boolean ? "true" : "false";
      return;
    case reference::Value::kNumber: {
      const int choice = static_cast<int>(rng() % 5);
      if (choice == 0) {
        out += v.text + (v.text.find_first_of(".eE") == std::string::npos ? ".0" : "");
      } else if (choice == 1 && v.text.find_first_of("eE") == std::string::npos) {
        out += v.text + "e0";
      } else if (choice == 2 && v.text.find_first_of(".eE") == std::string::npos) {
        out += v.text + "0e-1";
      } else {
        out += v.text;
      }
      return;
    }
    case reference::Value::kString:
      string(v.text);
      return;
    case reference::Value::kArray:
      out += '[';
      out += ws();
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i > 0) out += ws() + "," + ws();
        Respell(v.items[i], rng, out);
      }
      out += ws() + "]";
      return;
    case reference::Value::kObject: {
      std::vector<reference::Value::Member> members = v.members;
      if (members.size() > 1 && rng() % 8 == 0) std::swap(members[0], members[1 + rng() % (members.size() - 1)]);
      out += '{';
      out += ws();
      for (size_t i = 0; i < members.size(); ++i) {
        if (i > 0) out += ws() + "," + ws();
        string(members[i].key);
        out += ws() + ":" + ws();
        Respell(members[i].value, rng, out);
      }
      out += ws() + "}";
      return;
    }
  }
}

std::string Mutate(std::string text, std::mt19937& rng) {
  static const std::string kBytes = "{}[]\":,0123456789-.eE+ \n\\utrfalsenabcxé";
  const int edits = 1 + static_cast<int>(rng() % 2);
  for (int e = 0; e < edits; ++e) {
    const size_t at = text.empty() ? 0 : rng() % (text.size() + 1);
    const char c = kBytes[rng() % kBytes.size()];
    switch (rng() % 3) {
      case 0:
        text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c);
        break;
      case 1:
        if (at < text.size()) text.erase(at, 1);
        break;
      default:
        if (at < text.size()) text[at] = c;
    }
  }
  return text;
}

TEST(JsonSchemaTest, AutomatonAndReferenceAgreeOnThousandsOfDocuments) {
  std::mt19937 rng(2024);
  size_t documents = 0, variants = 0, accepted_variants = 0;
  for (const std::string& text : Schemas()) {
    const Json schema = Json::parse(text);
    const auto grammar = CompileJsonSchema(schema);
    int found = 0;
    for (int attempt = 0; attempt < 400 && found < 40; ++attempt) {
      const std::optional<std::string> doc = RandomDocument(*grammar, rng, 160);
      if (!doc) continue;
      ++found;
      ++documents;
      ASSERT_TRUE(reference::Accepts(schema, *doc)) << text << "\nautomaton produced: " << *doc;
      const std::optional<reference::Value> value = reference::Parser(*doc).Parse();
      for (int k = 0; k < 12; ++k) {
        std::string variant;
        if (k % 2 == 0) {
          Respell(*value, rng, variant);
        } else {
          variant = Mutate(*doc, rng);
        }
        const bool expected = reference::Accepts(schema, variant);
        ASSERT_EQ(grammar->Accepts(variant), expected) << text << "\nvariant: " << variant;
        ++variants;
        accepted_variants += expected;
      }
    }
    ASSERT_GE(found, 10) << "the walk rarely completes for " << text;
  }
  EXPECT_GT(documents, 800u);
  EXPECT_GT(variants, 10000u);
  // Both verdicts occur often: the variants test acceptance and refusal.
  EXPECT_GT(accepted_variants, variants / 5);
  EXPECT_LT(accepted_variants, variants * 4 / 5);
}

TEST(JsonSchemaTest, PolicyExamples) {
  const auto accepts = [](const std::string& schema, const std::string& doc) {
    return CompileJsonSchema(Json::parse(schema))->Accepts(doc);
  };
  const std::string person = Schemas()[0];
  EXPECT_TRUE(accepts(person, R"({"name": "Ann", "age": 3})"));
  EXPECT_TRUE(accepts(person, "{\n  \"name\": \"A\\u006en\"\n}"));
  EXPECT_FALSE(accepts(person, R"({"age": 3, "name": "Ann"})"));    // schema order
  EXPECT_FALSE(accepts(person, R"({"name": "Ann",  "age": 3})"));   // two spaces
  EXPECT_FALSE(accepts(person, R"( {"name": "Ann"})"));             // no whitespace around the value
  EXPECT_FALSE(accepts(person, R"({"name": "Ann", "age": 3.0})"));  // integers without a fraction
  EXPECT_FALSE(accepts(person, R"({"name": "Ann", "x": 1})"));
  EXPECT_FALSE(accepts(person, R"({"name": "\ud800"})"));  // lone surrogate
  EXPECT_TRUE(accepts(person, R"({"name": "\ud83d\ude00"})"));
  EXPECT_FALSE(accepts(person, "{\n" + std::string(21, ' ') + "\"name\": \"A\"}"));
  EXPECT_TRUE(accepts(person, "{\n" + std::string(20, ' ') + "\"name\": \"A\"}"));
  // Additional members come after the declared ones and never repeat a declared name.
  const std::string open = Schemas()[28];
  EXPECT_TRUE(accepts(open, R"({"q": "x", "z": [1, {"r": null}]})"));
  EXPECT_FALSE(accepts(open, R"({"q": "x", "q": "y"})"));
  EXPECT_FALSE(accepts(open, R"({"q": "x", "\u0071": "y"})"));
  EXPECT_FALSE(accepts(open, R"({"z": 1, "q": "x"})"));
  // Numbers are compared exactly, in any spelling.
  const std::string small = Schemas()[26];
  EXPECT_TRUE(accepts(small, "0.1"));
  EXPECT_TRUE(accepts(small, "2.9999e-1"));
  EXPECT_FALSE(accepts(small, "0.3"));
  EXPECT_FALSE(accepts(small, "0.09999999999999999999999"));
  EXPECT_TRUE(accepts(R"({"const": 1})", "1.000e0"));
  EXPECT_TRUE(accepts(R"({"type": "integer", "const": 1})", "1"));
  EXPECT_FALSE(accepts(R"({"type": "integer", "const": 1})", "1.0"));
  EXPECT_TRUE(accepts(R"({"format": "date", "type": "string"})", "\"2024-02-29\""));
  EXPECT_FALSE(accepts(R"({"format": "date", "type": "string"})", "\"2023-02-29\""));
  EXPECT_FALSE(accepts(R"({"format": "date", "type": "string"})", "\"1900-02-29\""));
  EXPECT_TRUE(accepts(R"({"format": "date", "type": "string"})", "\"2000-02-29\""));
  // A keyword constrains its own type only.
  EXPECT_TRUE(accepts(R"({"minimum": 5})", "\"text\""));
  EXPECT_FALSE(accepts(R"({"minimum": 5})", "4"));
}

std::string ErrorOf(const std::string& schema) {
  try {
    CompileJsonSchema(Json::parse(schema));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchemaTest, UnsupportedKeywordsAreNamed) {
  EXPECT_EQ(ErrorOf(R"({"type": "array", "uniqueItems": true})"), "#: unsupported JSON Schema keyword \"uniqueItems\"");
  EXPECT_EQ(ErrorOf(R"({"properties": {"tags": {"type": "array", "contains": {}}}})"),
            "#/properties/tags: unsupported JSON Schema keyword \"contains\"");
  EXPECT_THAT(ErrorOf(R"({"type": "number", "multipleOf": 2})"), HasSubstr("\"multipleOf\""));
  EXPECT_THAT(ErrorOf(R"({"patternProperties": {"a": {}}})"), HasSubstr("\"patternProperties\""));
  EXPECT_THAT(ErrorOf(R"({"if": {}, "then": {}})"), HasSubstr("\"if\""));
  EXPECT_THAT(ErrorOf(R"({"type": "object", "nullable": true})"), HasSubstr("\"nullable\""));
  EXPECT_THAT(ErrorOf(R"({"type": "strng"})"), HasSubstr("unknown type \"strng\""));
  EXPECT_THAT(ErrorOf(R"({"type": "string", "format": "uri"})"),
              HasSubstr("\"format\": \"uri\" is not supported (supported: date, date-time, time, uuid, email, ipv4)"));
  EXPECT_THAT(ErrorOf(R"({"type": "string", "pattern": "(a)\\1"})"),
              HasSubstr("#: \"pattern\": regex /(a)\\1/: backreferences are not supported"));
  EXPECT_THAT(ErrorOf(R"({"$ref": "http://example.com/s.json"})"), HasSubstr("only local references"));
  EXPECT_THAT(ErrorOf(R"({"$ref": "#/$defs/missing"})"), HasSubstr("does not resolve"));
  EXPECT_THAT(ErrorOf(R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})"),
              HasSubstr("admits no output"));
  EXPECT_THAT(ErrorOf(R"({"$ref": "#/$defs/a", "type": "object", "$defs": {"a": {}}})"),
              HasSubstr("\"type\" beside \"$ref\" is not supported"));
  EXPECT_THAT(ErrorOf(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})"),
              HasSubstr("\"allOf\" with 2 schemas is not supported"));
  EXPECT_THAT(ErrorOf(R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]})"),
              HasSubstr("#/oneOf: alternatives 0 and 1 may both match one value"));
  EXPECT_EQ(ErrorOf(R"({"oneOf": [{"type": "string"}, {"type": "integer"}, {"enum": [true, null]}]})"), "");
  EXPECT_THAT(ErrorOf(R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})"), HasSubstr("alternatives 0 and 1"));
  EXPECT_THAT(ErrorOf(R"({"type": "string", "minLength": -1})"),
              HasSubstr("\"minLength\" must be a non-negative integer"));
  // Counts past int64_t are refused before any conversion (a fuzzer's 9.1e126 was an undefined
  // double -> int64_t cast); 2^63 - 1 as an integer and 2^62 as a double are counts, too large
  // for a grammar.
  for (const char* count : {"9.1e126", "9223372036854775808", "18446744073709551615", "9.3e18", "2.5"}) {
    EXPECT_THAT(ErrorOf(std::string(R"({"type": "string", "maxLength": )") + count + "}"),
                HasSubstr("\"maxLength\" must be a non-negative integer below 2^63"))
        << count;
  }
  for (const char* count : {"9223372036854775807", "4.611686018427387904e18"}) {
    EXPECT_THAT(ErrorOf(std::string(R"({"type": "string", "maxLength": )") + count + "}"),
                HasSubstr("the grammar is too large"))
        << count;
  }
  EXPECT_THAT(ErrorOf(R"({"properties": {"a": 5}})"), HasSubstr("#/properties/a: expected a schema"));
  // Keys are the user's text: a newline in one does not make a multi-line message.
  EXPECT_EQ(ErrorOf(R"({"properties": {"a\nb": {"x\ny": 1}}})"),
            "#/properties/a?b: unsupported JSON Schema keyword \"x?y\"");
  EXPECT_THAT(ErrorOf(R"({"type": "integer", "minimum": 3, "maximum": 2})"), HasSubstr("admits no output"));
  EXPECT_THAT(ErrorOf(R"({"enum": [{"a": 1}], "minProperties": 1})"), HasSubstr("\"minProperties\""));
  EXPECT_THAT(ErrorOf(R"({"enum": [{"a": 1}], "maxLength": 1})"),
              HasSubstr("with object or array values beside \"maxLength\""));
  EXPECT_THAT(ErrorOf(R"({"type": "object", "properties": {"a": {"$id": "x"}}})"), HasSubstr("\"$id\" in a subschema"));
  EXPECT_THAT(ErrorOf(R"({"type": "string", "maxLength": 1000000})"), HasSubstr("too large"));
}

}  // namespace
}  // namespace deepinfer
