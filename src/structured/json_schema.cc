// Each schema becomes an expression inlined into its parent (one automaton for a whole
// non-recursive schema, so whitespace and member boundaries stay inside one mask-cache key);
// only $ref targets become rules, which is what makes recursion possible.
#include "structured/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <set>

#include "core/error.h"
#include "structured/regex.h"

namespace deepinfer {
namespace {

using Json = nlohmann::ordered_json;
using Expr = GrammarBuilder::Expr;

enum class Group { kAnnotation, kDefinitions, kRootId, kComposition, kValue, kType, kString, kNumber, kArray, kObject };

struct Keyword {
  const char* name;
  Group group;
};

constexpr Keyword kKeywords[] = {
    {"title", Group::kAnnotation},
    {"description", Group::kAnnotation},
    {"default", Group::kAnnotation},
    {"examples", Group::kAnnotation},
    {"$comment", Group::kAnnotation},
    {"$schema", Group::kAnnotation},
    {"deprecated", Group::kAnnotation},
    {"readOnly", Group::kAnnotation},
    {"writeOnly", Group::kAnnotation},
    {"discriminator", Group::kAnnotation},  // OpenAPI: names the property whose const tells oneOf apart
    {"$defs", Group::kDefinitions},
    {"definitions", Group::kDefinitions},
    {"$id", Group::kRootId},
    {"$ref", Group::kComposition},
    {"anyOf", Group::kComposition},
    {"oneOf", Group::kComposition},
    {"allOf", Group::kComposition},
    {"enum", Group::kValue},
    {"const", Group::kValue},
    {"type", Group::kType},
    {"minLength", Group::kString},
    {"maxLength", Group::kString},
    {"pattern", Group::kString},
    {"format", Group::kString},
    {"minimum", Group::kNumber},
    {"maximum", Group::kNumber},
    {"exclusiveMinimum", Group::kNumber},
    {"exclusiveMaximum", Group::kNumber},
    {"items", Group::kArray},
    {"prefixItems", Group::kArray},
    {"additionalItems", Group::kArray},
    {"minItems", Group::kArray},
    {"maxItems", Group::kArray},
    {"properties", Group::kObject},
    {"required", Group::kObject},
    {"additionalProperties", Group::kObject},
};

const Keyword* FindKeyword(std::string_view name) {
  for (const Keyword& k : kKeywords) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

// Formats as anchored ASCII regexes. date: RFC 3339 full-date with real calendar days (leap
// years by the Gregorian rule), years 0001-9999 (what Python's date.fromisoformat accepts).
struct Format {
  const char* name;
  std::string regex;
};

const std::vector<Format>& Formats() {
  static const std::vector<Format> formats = [] {
    const std::string year = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)";
    const std::string leap = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)";
    const std::string month_day =
        "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|"
        "02-(?:0[1-9]|1[0-9]|2[0-8]))";
    const std::string date = "(?:" + year + "-" + month_day + "|" + leap + "-02-29)";
    const std::string time =
        "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
    const std::string octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    const std::string atom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    const std::string label = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    return std::vector<Format>{
        {"date", date},
        {"time", time},
        {"date-time", date + "T" + time},
        {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
        {"email", atom + "(?:\\." + atom + ")*@(?:" + label + "\\.)+[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"},
        {"ipv4", octet + "(?:\\." + octet + "){3}"},
    };
  }();
  return formats;
}

std::string Child(const std::string& pointer, std::string_view token) {
  std::string out = pointer + "/";
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

template <typename... Args>
[[noreturn]] void Fail(const std::string& pointer, const Args&... args) {
  throw MakeError(pointer, ": ", args...);
}

std::optional<int64_t> Count(const Json& schema, const char* key, const std::string& pointer) {
  const auto it = schema.find(key);
  if (it == schema.end()) return std::nullopt;
  // The int64_t range is checked before any conversion: casting a double at or past 2^63 (a
  // fuzzer sent 9.1e126) is undefined, and unsigned values past INT64_MAX would turn negative.
  constexpr double kTwoTo63 = 9223372036854775808.0;
  const bool fits = it->is_number_unsigned()  ? it->get<uint64_t>() <= uint64_t{INT64_MAX}
                    : it->is_number_integer() ? it->get<int64_t>() >= 0
                    : it->is_number_float()   ? it->get<double>() >= 0 && it->get<double>() < kTwoTo63 &&
                                                  it->get<double>() == std::floor(it->get<double>())
                                            : false;
  if (!fits) Fail(pointer, "\"", key, "\" must be a non-negative integer below 2^63, got ", it->dump());
  return it->is_number_float() ? static_cast<int64_t>(it->get<double>()) : it->get<int64_t>();
}

// The types a schema names ("type" absent: every type).
std::set<std::string> TypeNames(const Json& schema, const std::string& pointer) {
  static const std::set<std::string> kAll = {"null", "boolean", "integer", "number", "string", "array", "object"};
  const auto it = schema.find("type");
  if (it == schema.end()) return kAll;
  std::set<std::string> names;
  const auto add = [&](const Json& name) {
    if (!name.is_string() || !kAll.count(name.get<std::string>())) {
      Fail(pointer, "\"type\": unknown type ", name.dump(),
           " (expected null, boolean, integer, number, string, array or object)");
    }
    names.insert(name.get<std::string>());
  };
  if (it->is_array()) {
    for (const Json& name : *it) add(name);
  } else {
    add(*it);
  }
  return names;
}

bool HasType(const Json& value, const std::set<std::string>& types) {
  switch (value.type()) {
    case Json::value_t::null:
      return types.count("null");
    case Json::value_t::boolean:
      return types.count("boolean");
    case Json::value_t::string:
      return types.count("string");
    case Json::value_t::array:
      return types.count("array");
    case Json::value_t::object:
      return types.count("object");
    default:
      return types.count("number") || (types.count("integer") && JsonNumberValue(value).is_integer());
  }
}

// A value's plainest JSON spelling (numbers as exact decimals: "1" for 1.0).
std::string Spelling(const Json& value) {
  if (value.is_number()) return JsonNumberValue(value).ToString();
  return value.dump();
}

constexpr uint8_t kNullBit = 1, kBooleanBit = 2, kNumberBit = 4, kStringBit = 8, kArrayBit = 16, kObjectBit = 32;
constexpr uint8_t kAllTypes = 63;

uint8_t TypeBit(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return kNullBit;
    case Json::value_t::boolean:
      return kBooleanBit;
    case Json::value_t::string:
      return kStringBit;
    case Json::value_t::array:
      return kArrayBit;
    case Json::value_t::object:
      return kObjectBit;
    default:
      return kNumberBit;
  }
}

}  // namespace

struct JsonSchemaCompiler::Shape {
  uint8_t types = kAllTypes;
  std::optional<std::vector<Json>> values;        // const / enum
  std::map<std::string, std::vector<Json>> tags;  // required property -> its const / enum values
};

JsonSchemaCompiler::JsonSchemaCompiler(JsonGrammar& json, const Json& root)
    : json_(json), b_(json.builder()), root_(root) {}

const Json& JsonSchemaCompiler::Resolve(const std::string& ref, const std::string& pointer, std::string* target) {
  if (ref.empty() || ref[0] != '#') Fail(pointer, "$ref \"", ref, "\": only local references (\"#...\") are supported");
  std::string fragment;
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
      fragment += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      fragment += ref[i];
    }
  }
  const Json* node = &root_;
  *target = "#";
  if (!fragment.empty() && fragment[0] != '/') {
    Fail(pointer, "$ref \"", ref, "\": anchors are not supported, use a JSON pointer (\"#/$defs/name\")");
  }
  size_t start = 1;
  while (!fragment.empty() && start <= fragment.size()) {
    const size_t end = std::min(fragment.find('/', start), fragment.size());
    std::string token;
    for (size_t i = start; i < end; ++i) {
      if (fragment[i] == '~' && i + 1 < end && (fragment[i + 1] == '0' || fragment[i + 1] == '1')) {
        token += fragment[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        token += fragment[i];
      }
    }
    if (node->is_object() && node->contains(token)) {
      node = &(*node)[token];
    } else if (node->is_array() && !token.empty() && token.find_first_not_of("0123456789") == std::string::npos &&
               std::stoull(token) < node->size()) {
      node = &(*node)[std::stoull(token)];
    } else {
      Fail(pointer, "$ref \"", ref, "\" does not resolve");
    }
    *target = Child(*target, token);
    start = end + 1;
  }
  return *node;
}

Expr JsonSchemaCompiler::Value(const Json& schema, const std::string& pointer, Form form) {
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) return b_.Nothing();
    if (form == Form::kRawString) return b_.Star(Utf8Expr(b_, CodepointSet::All()));
    return json_.AnyValue(form == Form::kJson);
  }
  if (!schema.is_object()) Fail(pointer, "expected a schema (an object or a boolean), got ", schema.type_name());
  std::string composition;
  std::string constraining;
  for (const auto& [key, value] : schema.items()) {
    const Keyword* keyword = FindKeyword(key);
    if (keyword == nullptr) Fail(pointer, "unsupported JSON Schema keyword \"", key, "\"");
    switch (keyword->group) {
      case Group::kAnnotation:
      case Group::kDefinitions:
        break;
      case Group::kRootId:
        if (pointer != "#") Fail(pointer, "\"$id\" in a subschema is not supported (it would change what $ref means)");
        break;
      case Group::kComposition:
        if (!composition.empty()) Fail(pointer, "\"", composition, "\" beside \"", key, "\" is not supported");
        composition = key;
        break;
      default:
        if (constraining.empty()) constraining = key;
    }
  }
  if (!composition.empty()) {
    if (!constraining.empty()) {
      Fail(pointer, "\"", constraining, "\" beside \"", composition,
           "\" is not supported (move it into the referenced schema or each alternative)");
    }
    const Json& arg = schema[composition];
    const std::string at = Child(pointer, composition);
    if (composition == "$ref") {
      if (!arg.is_string()) Fail(pointer, "\"$ref\" must be a string");
      return Ref(schema, pointer, form);
    }
    if (!arg.is_array() || arg.empty()) Fail(pointer, "\"", composition, "\" must be a non-empty array of schemas");
    if (composition == "allOf") {
      if (arg.size() != 1) Fail(pointer, "\"allOf\" with ", arg.size(), " schemas is not supported (only one)");
      return Value(arg[0], Child(at, "0"), form);
    }
    if (composition == "oneOf") CheckExclusive(arg, at);
    std::vector<Expr> options;
    for (size_t i = 0; i < arg.size(); ++i) options.push_back(Value(arg[i], Child(at, std::to_string(i)), form));
    return b_.Alt(std::move(options));
  }
  if (schema.contains("enum") || schema.contains("const")) return Enumeration(schema, pointer, form);
  return Typed(schema, pointer, form);
}

Expr JsonSchemaCompiler::Ref(const Json& schema, const std::string& pointer, Form form) {
  const std::string& ref = schema["$ref"].get_ref<const std::string&>();
  std::string target_pointer;
  const Json& target = Resolve(ref, pointer, &target_pointer);
  if (form == Form::kRawString) {
    // Raw strings must stay call-free (a DSML argument subtracts its end tag from them).
    if (std::find(inline_refs_.begin(), inline_refs_.end(), target_pointer) != inline_refs_.end()) {
      Fail(pointer, "$ref \"", ref, "\": a recursive reference cannot describe a raw string value");
    }
    inline_refs_.push_back(target_pointer);
    const Expr e = Value(target, target_pointer, form);
    inline_refs_.pop_back();
    return e;
  }
  const auto key = std::make_pair(target_pointer, form);
  if (auto it = ref_rules_.find(key); it != ref_rules_.end()) return b_.Call(it->second);
  const RuleId rule = b_.DeclareRule(target_pointer);
  ref_rules_.emplace(key, rule);
  b_.DefineRule(rule, Value(target, target_pointer, form));
  return b_.Call(rule);
}

Expr JsonSchemaCompiler::Enumeration(const Json& schema, const std::string& pointer, Form form) {
  std::vector<Json> values;
  if (const auto it = schema.find("enum"); it != schema.end()) {
    if (!it->is_array()) Fail(pointer, "\"enum\" must be an array");
    values.assign(it->begin(), it->end());
  }
  if (const auto it = schema.find("const"); it != schema.end()) {
    if (schema.contains("enum")) {
      std::erase_if(values, [&](const Json& v) { return v != *it; });
    } else {
      values = {*it};
    }
  }
  // The sibling keywords that constrain: listed values must satisfy them too.
  Json rest = Json::object();
  std::vector<std::string> siblings;
  for (const auto& [key, value] : schema.items()) {
    const Group group = FindKeyword(key)->group;
    if (group != Group::kAnnotation && group != Group::kDefinitions && group != Group::kRootId &&
        group != Group::kValue) {
      rest[key] = value;
      siblings.push_back(key);
    }
  }
  const std::set<std::string> types = TypeNames(schema, pointer);
  const bool integer_only = types == std::set<std::string>{"integer"};
  std::shared_ptr<const Grammar> check;
  bool none_pass = false;
  const bool scalar_checks =
      std::any_of(siblings.begin(), siblings.end(), [](const std::string& k) { return k != "type"; });
  if (scalar_checks) {
    try {
      check = CompileJsonSchema(rest);
    } catch (const Error& e) {
      if (std::string_view(e.what()).find("admits no output") == std::string_view::npos) throw;
      none_pass = true;
    }
  }
  std::vector<Expr> options;
  for (const Json& v : values) {
    if (form == Form::kRawString && !v.is_string()) continue;
    if (form == Form::kJsonNotString && v.is_string()) continue;
    if (!HasType(v, types)) continue;
    if (v.is_object() || v.is_array()) {
      if (scalar_checks) {
        Fail(pointer, "\"enum\" / \"const\" with object or array values beside \"",
             *std::find_if(siblings.begin(), siblings.end(), [](const std::string& k) { return k != "type"; }),
             "\" is not supported");
      }
    } else if (scalar_checks && (none_pass || !check->Accepts(Spelling(v)))) {
      continue;
    }
    if (form == Form::kRawString) {
      options.push_back(b_.Literal(v.get_ref<const std::string&>()));
    } else {
      options.push_back(json_.Literal(v, integer_only));
    }
  }
  return b_.Alt(std::move(options));
}

Expr JsonSchemaCompiler::Typed(const Json& schema, const std::string& pointer, Form form) {
  const std::set<std::string> types = TypeNames(schema, pointer);
  const bool raw = form == Form::kRawString;
  std::vector<Expr> options;
  // Every group's keywords are checked, also for types the schema does not admit.
  const Expr string = String(schema, pointer, form == Form::kJsonNotString ? Form::kJson : form);
  if (types.count("string") && form != Form::kJsonNotString) options.push_back(string);
  if (raw) return b_.Alt(std::move(options));
  if (types.count("null")) options.push_back(b_.Literal("null"));
  if (types.count("boolean")) options.push_back(b_.Alt({b_.Literal("true"), b_.Literal("false")}));
  if (types.count("number")) {
    options.push_back(Numeric(schema, pointer, false));
  } else if (types.count("integer")) {
    options.push_back(Numeric(schema, pointer, true));
  } else {
    Numeric(schema, pointer, false);
  }
  const bool has_array_keywords = schema.contains("items") || schema.contains("prefixItems") ||
                                  schema.contains("minItems") || schema.contains("maxItems") ||
                                  schema.contains("additionalItems");
  if (types.count("array")) {
    options.push_back(Array(schema, pointer));
  } else if (has_array_keywords) {
    Array(schema, pointer);
  }
  const bool has_object_keywords =
      schema.contains("properties") || schema.contains("required") || schema.contains("additionalProperties");
  if (types.count("object")) {
    options.push_back(Object(schema, pointer));
  } else if (has_object_keywords) {
    Object(schema, pointer);
  }
  return b_.Alt(std::move(options));
}

Expr JsonSchemaCompiler::String(const Json& schema, const std::string& pointer, Form form) {
  const bool raw = form == Form::kRawString;
  const int64_t min = Count(schema, "minLength", pointer).value_or(0);
  const std::optional<int64_t> max = Count(schema, "maxLength", pointer);
  if (max && *max < min) return b_.Nothing();
  const Expr one = raw ? Utf8Expr(b_, CodepointSet::All()) : json_.Char(CodepointSet::All());
  bool plain = min == 0 && !max;
  Expr content = b_.Repeat(one, min, max);
  RegexOptions regex{raw ? RegexOptions::Spelling::kUtf8 : RegexOptions::Spelling::kJsonString, false,
                     json_.never_raw()};
  const auto narrow = [&](Expr e) {
    content = plain ? e : b_.Intersect(content, e);
    plain = false;
  };
  if (const auto it = schema.find("pattern"); it != schema.end()) {
    if (!it->is_string()) Fail(pointer, "\"pattern\" must be a string");
    regex.search = true;
    try {
      narrow(CompileRegex(b_, it->get<std::string>(), regex));
    } catch (const Error& e) {
      Fail(pointer, "\"pattern\": ", e.what());
    }
    regex.search = false;
  }
  if (const auto it = schema.find("format"); it != schema.end()) {
    if (!it->is_string()) Fail(pointer, "\"format\" must be a string");
    const std::string name = it->get<std::string>();
    const auto& formats = Formats();
    const auto format = std::find_if(formats.begin(), formats.end(), [&](const Format& f) { return name == f.name; });
    if (format == formats.end()) {
      Fail(pointer, "\"format\": \"", name,
           "\" is not supported (supported: date, date-time, time, uuid, email, ipv4)");
    }
    narrow(CompileRegex(b_, format->regex, regex));
  }
  if (raw) return content;
  return b_.Seq({b_.Literal("\""), content, b_.Literal("\"")});
}

Expr JsonSchemaCompiler::Numeric(const Json& schema, const std::string& pointer, bool integer) {
  NumberRange range;
  range.kind = integer ? NumberRange::Kind::kInteger : NumberRange::Kind::kNumber;
  const auto number = [&](const char* key) -> std::optional<Decimal> {
    const auto it = schema.find(key);
    if (it == schema.end() || it->is_boolean()) return std::nullopt;
    if (!it->is_number()) Fail(pointer, "\"", key, "\" must be a number, got ", it->dump());
    return JsonNumberValue(*it);
  };
  const auto draft4_exclusive = [&](const char* key, const char* bound) {
    const auto it = schema.find(key);
    if (it == schema.end() || !it->is_boolean()) return false;
    if (it->get<bool>() && !schema.contains(bound)) Fail(pointer, "\"", key, "\": true needs \"", bound, "\"");
    return it->get<bool>();
  };
  // The stricter of an inclusive and an exclusive bound; `sign` is +1 for lower bounds.
  const auto tighter = [](std::optional<NumberBound> a, std::optional<NumberBound> b, int sign) {
    if (!a) return b;
    if (!b) return a;
    const int c = Compare(a->value, b->value) * sign;
    if (c != 0) return c > 0 ? a : b;
    return a->exclusive ? a : b;
  };
  const std::optional<Decimal> minimum = number("minimum"), maximum = number("maximum");
  const std::optional<Decimal> exclusive_minimum = number("exclusiveMinimum");
  const std::optional<Decimal> exclusive_maximum = number("exclusiveMaximum");
  const bool min_exclusive = draft4_exclusive("exclusiveMinimum", "minimum");
  const bool max_exclusive = draft4_exclusive("exclusiveMaximum", "maximum");
  range.lower = tighter(minimum ? std::optional<NumberBound>({*minimum, min_exclusive}) : std::nullopt,
                        exclusive_minimum ? std::optional<NumberBound>({*exclusive_minimum, true}) : std::nullopt, 1);
  range.upper = tighter(maximum ? std::optional<NumberBound>({*maximum, max_exclusive}) : std::nullopt,
                        exclusive_maximum ? std::optional<NumberBound>({*exclusive_maximum, true}) : std::nullopt, -1);
  if (!range.HasValue()) return b_.Nothing();
  return json_.NumberIn(range);
}

Expr JsonSchemaCompiler::Array(const Json& schema, const std::string& pointer) {
  std::vector<Expr> prefix;
  std::optional<Expr> rest;  // unset: no items beyond the prefix
  const auto items = schema.find("items");
  const auto prefix_items = schema.find("prefixItems");
  const auto additional_items = schema.find("additionalItems");
  const auto schemas = [&](const Json& list, const std::string& at) {
    for (size_t i = 0; i < list.size(); ++i) prefix.push_back(Value(list[i], Child(at, std::to_string(i))));
  };
  if (prefix_items != schema.end()) {
    if (!prefix_items->is_array()) Fail(pointer, "\"prefixItems\" must be an array of schemas");
    if (items != schema.end() && items->is_array()) Fail(pointer, "\"items\" as an array beside \"prefixItems\"");
    schemas(*prefix_items, Child(pointer, "prefixItems"));
  }
  if (items != schema.end() && items->is_array()) {
    schemas(*items, Child(pointer, "items"));  // the draft-4 tuple form
    if (additional_items == schema.end()) {
      rest = json_.AnyValue();
    } else {
      rest = Value(*additional_items, Child(pointer, "additionalItems"));
    }
  } else if (items != schema.end()) {
    rest = Value(*items, Child(pointer, "items"));
  } else {
    rest = json_.AnyValue();
  }
  // additionalItems without the tuple form of items has no effect (JSON Schema), but its value
  // must still be a schema.
  if (additional_items != schema.end() && !(items != schema.end() && items->is_array())) {
    Value(*additional_items, Child(pointer, "additionalItems"));
  }
  const int64_t min = Count(schema, "minItems", pointer).value_or(0);
  std::optional<int64_t> max = Count(schema, "maxItems", pointer);
  const int64_t fixed = static_cast<int64_t>(prefix.size());
  if (!rest) max = std::min(max.value_or(fixed), fixed);
  if (max && *max < min) return b_.Nothing();
  const int64_t nodes = max ? *max : std::max<int64_t>({fixed, min, 1});
  if (nodes > 100000) Fail(pointer, "\"maxItems\" ", nodes, " is too large (at most 100000 are supported)");
  // Many bounded copies of a big item schema: one rule, called from each position.
  if (rest && max && static_cast<size_t>(nodes - fixed) * b_.Size(*rest) > 20000) {
    rest = b_.Call(b_.MakeRule(Child(pointer, "items"), *rest));
  }
  std::vector<GrammarBuilder::Edge> edges;
  const auto element = [&](int64_t j) {
    const Expr item = j < fixed ? prefix[j] : *rest;
    return j == 0 ? b_.Seq({json_.Ws(), item}) : b_.Seq({json_.Ws(), b_.Literal(","), json_.Ws(), item});
  };
  for (int64_t j = 0; j < nodes; ++j) edges.push_back({static_cast<int>(j), static_cast<int>(j + 1), element(j)});
  if (!max) edges.push_back({static_cast<int>(nodes), static_cast<int>(nodes), element(nodes)});
  std::vector<int> finals;
  for (int64_t j = min; j <= nodes; ++j) finals.push_back(static_cast<int>(j));
  return b_.Seq({b_.Literal("["), b_.Graph(static_cast<int>(nodes + 1), 0, finals, std::move(edges)), json_.Ws(),
                 b_.Literal("]")});
}

Expr JsonSchemaCompiler::Object(const Json& schema, const std::string& pointer) {
  static const Json kEmpty = Json::object();
  const Json* properties = &kEmpty;
  if (const auto it = schema.find("properties"); it != schema.end()) {
    if (!it->is_object()) Fail(pointer, "\"properties\" must be an object of schemas");
    properties = &*it;
  }
  std::vector<std::string> required;
  if (const auto it = schema.find("required"); it != schema.end()) {
    if (!it->is_array()) Fail(pointer, "\"required\" must be an array of property names");
    for (const Json& name : *it) {
      if (!name.is_string()) Fail(pointer, "\"required\" must be an array of property names, got ", name.dump());
      if (std::find(required.begin(), required.end(), name.get<std::string>()) != required.end()) {
        Fail(pointer, "\"required\" lists \"", name.get<std::string>(), "\" twice");
      }
      required.push_back(name.get<std::string>());
    }
  }
  const Json additional = schema.value("additionalProperties", Json(true));
  const std::string additional_at = Child(pointer, "additionalProperties");
  const bool additional_allowed = !(additional.is_boolean() && !additional.get<bool>());
  const auto additional_value = [&] { return Value(additional, additional_at); };

  struct Member {
    std::string name;
    Expr value;
    bool required;
  };
  std::vector<Member> members;
  for (const auto& [name, sub] : properties->items()) {
    const bool is_required = std::find(required.begin(), required.end(), name) != required.end();
    members.push_back({name, Value(sub, Child(Child(pointer, "properties"), name)), is_required});
  }
  for (const std::string& name : required) {
    if (properties->contains(name)) continue;
    // Required but not declared: an additional property that must be there.
    members.push_back({name, additional_allowed ? additional_value() : b_.Nothing(), true});
  }
  const auto key_value = [&](Expr key, Expr value) {
    return b_.Seq({key, json_.Ws(), b_.Literal(":"), json_.Ws(), value});
  };
  const int n = static_cast<int>(members.size());
  // Node i: before member i with nothing written yet; node n + 1 + i: before member i after some.
  std::vector<GrammarBuilder::Edge> edges;
  std::vector<Expr> declared_keys;
  for (int i = 0; i < n; ++i) {
    const Expr member = key_value(json_.StringLiteral(members[i].name), members[i].value);
    declared_keys.push_back(json_.StringLiteral(members[i].name));
    edges.push_back({i, n + 1 + i + 1, b_.Seq({json_.Ws(), member})});
    edges.push_back({n + 1 + i, n + 1 + i + 1, b_.Seq({json_.Ws(), b_.Literal(","), json_.Ws(), member})});
    if (!members[i].required) {
      edges.push_back({i, i + 1, b_.Empty()});
      edges.push_back({n + 1 + i, n + 1 + i + 1, b_.Empty()});
    }
  }
  if (additional_allowed) {
    const Expr key =
        declared_keys.empty() ? json_.AnyString() : b_.Subtract(json_.AnyString(), b_.Alt(std::move(declared_keys)));
    const Expr value = additional_value();
    edges.push_back({n, 2 * n + 1, b_.Seq({json_.Ws(), key_value(key, value)})});
    edges.push_back({2 * n + 1, 2 * n + 1, b_.Seq({json_.Ws(), b_.Literal(","), json_.Ws(), key_value(key, value)})});
  }
  return b_.Seq(
      {b_.Literal("{"), b_.Graph(2 * n + 2, 0, {n, 2 * n + 1}, std::move(edges)), json_.Ws(), b_.Literal("}")});
}

JsonSchemaCompiler::Shape JsonSchemaCompiler::ShapeOf(const Json& schema, const std::string& pointer, int depth) {
  Shape shape;
  if (depth > 32) return shape;
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) shape.types = 0;
    return shape;
  }
  if (!schema.is_object()) return shape;
  if (const auto it = schema.find("$ref"); it != schema.end() && it->is_string()) {
    std::string target;
    return ShapeOf(Resolve(it->get<std::string>(), pointer, &target), target, depth + 1);
  }
  if (const auto it = schema.find("allOf"); it != schema.end() && it->is_array() && it->size() == 1) {
    return ShapeOf((*it)[0], pointer, depth + 1);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (const auto it = schema.find(key); it != schema.end() && it->is_array()) {
      shape.types = 0;
      for (const Json& alternative : *it) shape.types |= ShapeOf(alternative, pointer, depth + 1).types;
      return shape;
    }
  }
  if (schema.contains("type")) {
    shape.types = 0;
    for (const std::string& name : TypeNames(schema, pointer)) {
      shape.types |= name == "null"      ? kNullBit
                     : name == "boolean" ? kBooleanBit
                     : name == "string"  ? kStringBit
                     : name == "array"   ? kArrayBit
                     : name == "object"  ? kObjectBit
                                         : kNumberBit;
    }
  }
  if (const auto it = schema.find("const"); it != schema.end()) {
    shape.values = std::vector<Json>{*it};
  } else if (const auto e = schema.find("enum"); e != schema.end() && e->is_array()) {
    shape.values = std::vector<Json>(e->begin(), e->end());
  }
  if (shape.values) {
    uint8_t types = 0;
    for (const Json& v : *shape.values) types |= TypeBit(v);
    shape.types &= types;
  }
  const auto properties = schema.find("properties");
  const auto required = schema.find("required");
  if ((shape.types & kObjectBit) && properties != schema.end() && properties->is_object() && required != schema.end() &&
      required->is_array()) {
    for (const Json& name : *required) {
      if (!name.is_string() || !properties->contains(name.get<std::string>())) continue;
      const Shape property = ShapeOf((*properties)[name.get<std::string>()], pointer, depth + 1);
      if (property.values) shape.tags[name.get<std::string>()] = *property.values;
    }
  }
  return shape;
}

void JsonSchemaCompiler::CheckExclusive(const Json& alternatives, const std::string& pointer) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i < alternatives.size(); ++i) {
    shapes.push_back(ShapeOf(alternatives[i], Child(pointer, std::to_string(i)), 0));
  }
  const auto disjoint_values = [](const std::vector<Json>& a, const std::vector<Json>& b) {
    for (const Json& x : a) {
      for (const Json& y : b) {
        if (x == y) return false;
      }
    }
    return true;
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (size_t j = i + 1; j < shapes.size(); ++j) {
      const Shape& a = shapes[i];
      const Shape& b = shapes[j];
      const uint8_t common = a.types & b.types;
      if (common == 0) continue;
      if (a.values && b.values && disjoint_values(*a.values, *b.values)) continue;
      bool tagged = false;
      if (common == kObjectBit) {
        for (const auto& [name, values] : a.tags) {
          const auto other = b.tags.find(name);
          if (other != b.tags.end() && disjoint_values(values, other->second)) tagged = true;
        }
      }
      if (tagged) continue;
      Fail(pointer, "alternatives ", i, " and ", j,
           " may both match one value; \"oneOf\" is supported for provably exclusive alternatives (different "
           "types, different const/enum values, or a required property with different const/enum values): use "
           "\"anyOf\"");
    }
  }
}

std::shared_ptr<const Grammar> CompileJsonSchema(const Json& schema) {
  GrammarBuilder b;
  JsonGrammar json(b);
  JsonSchemaCompiler compiler(json, schema);
  const Expr value = compiler.Value(schema, "#");
  return b.Build(b.MakeRule("json_schema", value));
}

}  // namespace deepinfer
