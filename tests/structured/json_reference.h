// An independent reference for the JSON language of structured output, written from the
// specifications and from the policies json_grammar.h / json_schema.h state, sharing no code
// with the automaton: a strict parser (RFC 8259 plus the whitespace policy, no lone surrogates)
// and a JSON Schema validator (exact decimal comparisons by aligning digit strings, PCRE2 for
// patterns, hand-written checkers for the formats, the member-order policy).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "structured/pcre_reference.h"

namespace deepinfer::reference {

using Json = nlohmann::ordered_json;

struct Value {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool boolean = false;
  std::string text;  // kNumber: the spelling; kString: the decoded UTF-8
  std::vector<Value> items;
  // Not std::pair: a pair of an incomplete type is undefined, and clang's libstdc++ build rejects it.
  struct Member;
  std::vector<Member> members;
};
struct Value::Member {
  std::string key;
  Value value;
};

class Parser {
 public:
  explicit Parser(std::string_view text) : t_(text) {}
  // The whole text as one value under the policy, or nullopt.
  std::optional<Value> Parse() {
    Value v;
    if (!ParseValue(v, 0) || i_ != t_.size()) return std::nullopt;
    return v;
  }

 private:
  bool SkipWs() {
    if (i_ < t_.size() && t_[i_] == ' ') {
      ++i_;
    } else if (i_ < t_.size() && t_[i_] == '\n') {
      ++i_;
      int indent = 0;
      while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t') && indent < 20) ++i_, ++indent;
    }
    // A second run (or a run the policy does not allow) makes the text invalid.
    return !(i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r'));
  }
  bool Eat(char c) {
    if (i_ < t_.size() && t_[i_] == c) return ++i_, true;
    return false;
  }
  bool Literal(std::string_view word) {
    if (t_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }
  bool Hex4(unsigned* out) {
    if (i_ + 4 > t_.size()) return false;
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = t_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v |= c - 'A' + 10;
      } else {
        return false;
      }
    }
    *out = v;
    return true;
  }
  static void Append(unsigned c, std::string& out) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 63));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 63));
      out += static_cast<char>(0x80 | (c & 63));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 63));
      out += static_cast<char>(0x80 | ((c >> 6) & 63));
      out += static_cast<char>(0x80 | (c & 63));
    }
  }
  bool ParseString(std::string& out) {
    if (!Eat('"')) return false;
    while (i_ < t_.size()) {
      const unsigned char c = static_cast<unsigned char>(t_[i_]);
      if (c == '"') return ++i_, true;
      if (c < 0x20) return false;
      if (c == '\\') {
        ++i_;
        if (i_ >= t_.size()) return false;
        const char e = t_[i_++];
        static const std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
        if (const size_t k = kFrom.find(e); k != std::string_view::npos) {
          out += kTo[k];
          continue;
        }
        unsigned u = 0;
        if (e != 'u' || !Hex4(&u)) return false;
        if (u >= 0xDC00 && u <= 0xDFFF) return false;  // a lone low surrogate
        if (u >= 0xD800 && u <= 0xDBFF) {
          unsigned low = 0;
          if (!Literal("\\u") || !Hex4(&low) || low < 0xDC00 || low > 0xDFFF) return false;
          u = 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
        }
        Append(u, out);
        continue;
      }
      // Raw UTF-8: decode strictly (shortest form, no surrogates, <= U+10FFFF).
      int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (n == 0 || i_ + n > t_.size()) return false;
      unsigned cp = n == 1 ? c : c & (0x7F >> n);
      for (int k = 1; k < n; ++k) {
        const unsigned char cc = static_cast<unsigned char>(t_[i_ + k]);
        if ((cc >> 6) != 2) return false;
        cp = (cp << 6) | (cc & 63);
      }
      static const unsigned kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
      out.append(t_.substr(i_, n));
      i_ += n;
    }
    return false;
  }
  bool ParseNumber(std::string& out) {
    const size_t start = i_;
    Eat('-');
    if (Eat('0')) {
    } else if (i_ < t_.size() && t_[i_] >= '1' && t_[i_] <= '9') {
      while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) ++i_;
    } else {
      return false;
    }
    if (Eat('.')) {
      const size_t d = i_;
      while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) ++i_;
      if (i_ == d) return false;
    }
    if (Eat('e') || Eat('E')) {
      if (!Eat('+')) Eat('-');
      const size_t d = i_;
      while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) ++i_;
      if (i_ == d) return false;
    }
    out = std::string(t_.substr(start, i_ - start));
    return true;
  }
  bool ParseValue(Value& v, int depth) {
    if (depth > 200 || i_ >= t_.size()) return false;
    const char c = t_[i_];
    if (c == '{') {
      ++i_;
      v.kind = Value::kObject;
      if (!SkipWs()) return false;
      if (Eat('}')) return true;
      for (;;) {
        std::string key;
        Value member;
        if (!ParseString(key) || !SkipWs() || !Eat(':') || !SkipWs() || !ParseValue(member, depth + 1) || !SkipWs()) {
          return false;
        }
        v.members.push_back({std::move(key), std::move(member)});
        if (Eat('}')) return true;
        if (!Eat(',') || !SkipWs()) return false;
      }
    }
    if (c == '[') {
      ++i_;
      v.kind = Value::kArray;
      if (!SkipWs()) return false;
      if (Eat(']')) return true;
      for (;;) {
        Value item;
        if (!ParseValue(item, depth + 1) || !SkipWs()) return false;
        v.items.push_back(std::move(item));
        if (Eat(']')) return true;
        if (!Eat(',') || !SkipWs()) return false;
      }
    }
    if (c == '"') return v.kind = Value::kString, ParseString(v.text);
    if (Literal("true")) return v.kind = Value::kBool, v.boolean = true, true;
    if (Literal("false")) return v.kind = Value::kBool, true;
    if (Literal("null")) return v.kind = Value::kNull, true;
    return v.kind = Value::kNumber, ParseNumber(v.text);
  }

  std::string_view t_;
  size_t i_ = 0;
};

// A number spelling as sign + integer digits + fraction digits, no leading/trailing zeros.
struct FixedPoint {
  bool negative = false;
  std::string integer, fraction;
};

inline FixedPoint ToFixedPoint(const std::string& text) {
  FixedPoint f;
  size_t i = 0;
  bool negative = false;
  if (text[i] == '-') negative = true, ++i;
  std::string digits;
  long point = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) digits += text[i++], ++point;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) digits += text[i++];
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) point += std::stol(text.substr(i + 1));
  if (point < 0) digits = std::string(-point, '0') + digits, point = 0;
  if (point > static_cast<long>(digits.size())) digits += std::string(point - digits.size(), '0');
  f.integer = digits.substr(0, point);
  f.fraction = digits.substr(point);
  while (!f.integer.empty() && f.integer[0] == '0') f.integer.erase(0, 1);
  while (!f.fraction.empty() && f.fraction.back() == '0') f.fraction.pop_back();
  f.negative = negative && !(f.integer.empty() && f.fraction.empty());
  return f;
}

inline int CompareNumbers(const std::string& a_text, const std::string& b_text) {
  const FixedPoint a = ToFixedPoint(a_text), b = ToFixedPoint(b_text);
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int m = 0;
  if (a.integer.size() != b.integer.size()) {
    m = a.integer.size() < b.integer.size() ? -1 : 1;
  } else if (a.integer != b.integer) {
    m = a.integer < b.integer ? -1 : 1;
  } else {
    const size_t n = std::max(a.fraction.size(), b.fraction.size());
    const std::string fa = a.fraction + std::string(n - a.fraction.size(), '0');
    const std::string fb = b.fraction + std::string(n - b.fraction.size(), '0');
    m = fa < fb ? -1 : (fa > fb ? 1 : 0);
  }
  return a.negative ? -m : m;
}

// The schema number's spelling: nlohmann keeps integers exact; a float is compared as the
// shortest text that reads back as it (what the schema's author wrote).
inline std::string NumberText(const Json& n) {
  if (n.is_number_integer()) return n.dump();
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.17g", n.get<double>());
  for (int precision = 1; precision <= 17; ++precision) {
    char shorter[64];
    std::snprintf(shorter, sizeof(shorter), "%.*g", precision, n.get<double>());
    if (std::strtod(shorter, nullptr) == n.get<double>()) return shorter;
  }
  return buffer;
}

inline size_t CodePoints(const std::string& utf8) {
  size_t n = 0;
  for (unsigned char c : utf8) n += (c >> 6) != 2;
  return n;
}

inline bool Digits(const std::string& s, size_t at, size_t n) {
  if (at + n > s.size()) return false;
  for (size_t k = 0; k < n; ++k) {
    if (!std::isdigit(static_cast<unsigned char>(s[at + k]))) return false;
  }
  return true;
}

inline int Number(const std::string& s, size_t at, size_t n) { return std::stoi(s.substr(at, n)); }

inline bool IsDate(const std::string& s) {
  if (s.size() != 10 || !Digits(s, 0, 4) || s[4] != '-' || !Digits(s, 5, 2) || s[7] != '-' || !Digits(s, 8, 2)) {
    return false;
  }
  const int y = Number(s, 0, 4), m = Number(s, 5, 2), d = Number(s, 8, 2);
  if (y < 1 || m < 1 || m > 12 || d < 1) return false;
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return d <= kDays[m - 1] + (m == 2 && leap ? 1 : 0);
}

inline bool IsTime(const std::string& s) {
  if (s.size() < 9 || !Digits(s, 0, 2) || s[2] != ':' || !Digits(s, 3, 2) || s[5] != ':' || !Digits(s, 6, 2)) {
    return false;
  }
  if (Number(s, 0, 2) > 23 || Number(s, 3, 2) > 59 || Number(s, 6, 2) > 59) return false;
  size_t i = 8;
  if (s[i] == '.') {
    const size_t start = ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == start) return false;
  }
  if (i < s.size() && s[i] == 'Z') return i + 1 == s.size();
  if (i + 6 != s.size() || (s[i] != '+' && s[i] != '-') || !Digits(s, i + 1, 2) || s[i + 3] != ':' ||
      !Digits(s, i + 4, 2)) {
    return false;
  }
  return Number(s, i + 1, 2) <= 23 && Number(s, i + 4, 2) <= 59;
}

inline bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)); }

inline bool IsUuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < 36; ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !IsHex(s[i])) return false;
  }
  return true;
}

inline bool IsIpv4(const std::string& s) {
  size_t i = 0;
  for (int octet = 0; octet < 4; ++octet) {
    if (octet > 0 && (i >= s.size() || s[i++] != '.')) return false;
    const size_t start = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    const size_t n = i - start;
    if (n == 0 || n > 3 || (n > 1 && s[start] == '0') || Number(s, start, n) > 255) return false;
  }
  return i == s.size();
}

inline bool IsEmail(const std::string& s) {
  const size_t at = s.find('@');
  if (at == std::string::npos || at == 0) return false;
  const std::string local = s.substr(0, at), domain = s.substr(at + 1);
  static const std::string kAtom = "!#$%&'*+/=?^_`{|}~-";
  bool previous_dot = true;
  for (char c : local) {
    if (c == '.') {
      if (previous_dot) return false;
      previous_dot = true;
    } else if (std::isalnum(static_cast<unsigned char>(c)) || kAtom.find(c) != std::string::npos) {
      previous_dot = false;
    } else {
      return false;
    }
  }
  if (previous_dot) return false;
  std::vector<std::string> labels = {""};
  for (char c : domain) {
    if (c == '.') {
      labels.emplace_back();
    } else {
      labels.back() += c;
    }
  }
  if (labels.size() < 2) return false;
  for (const std::string& label : labels) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    }
  }
  return std::isalpha(static_cast<unsigned char>(labels.back()[0]));
}

class Validator {
 public:
  explicit Validator(const Json& root) : root_(root) {}

  bool Valid(const Value& v, const Json& schema) {
    if (schema.is_boolean()) return schema.get<bool>();
    if (const auto it = schema.find("$ref"); it != schema.end()) return Valid(v, Resolve(it->get<std::string>()));
    if (const auto it = schema.find("anyOf"); it != schema.end()) {
      for (const Json& s : *it) {
        if (Valid(v, s)) return true;
      }
      return false;
    }
    if (const auto it = schema.find("oneOf"); it != schema.end()) {
      int matches = 0;
      for (const Json& s : *it) matches += Valid(v, s);
      return matches == 1;
    }
    if (const auto it = schema.find("allOf"); it != schema.end()) {
      for (const Json& s : *it) {
        if (!Valid(v, s)) return false;
      }
      return true;
    }
    if (const auto it = schema.find("const"); it != schema.end() && !Equal(v, *it)) return false;
    if (const auto it = schema.find("enum"); it != schema.end()) {
      bool found = false;
      for (const Json& e : *it) found |= Equal(v, e);
      if (!found) return false;
    }
    if (const auto it = schema.find("type"); it != schema.end()) {
      bool found = false;
      const auto check = [&](const std::string& t) { found |= HasType(v, t); };
      if (it->is_array()) {
        for (const Json& t : *it) check(t.get<std::string>());
      } else {
        check(it->get<std::string>());
      }
      if (!found) return false;
    }
    switch (v.kind) {
      case Value::kString:
        return ValidString(v.text, schema);
      case Value::kNumber:
        return ValidNumber(v.text, schema);
      case Value::kArray:
        return ValidArray(v, schema);
      case Value::kObject:
        return ValidObject(v, schema);
      default:
        return true;
    }
  }

 private:
  const Json& Resolve(const std::string& ref) {
    const Json* node = &root_;
    std::string path = ref.substr(1);
    size_t start = 1;
    while (!path.empty() && start <= path.size()) {
      const size_t end = std::min(path.find('/', start), path.size());
      std::string token = path.substr(start, end - start);
      for (size_t k; (k = token.find("~1")) != std::string::npos;) token.replace(k, 2, "/");
      for (size_t k; (k = token.find("~0")) != std::string::npos;) token.replace(k, 2, "~");
      node = &(*node)[token];
      start = end + 1;
    }
    return *node;
  }

  static bool HasType(const Value& v, const std::string& t) {
    switch (v.kind) {
      case Value::kNull:
        return t == "null";
      case Value::kBool:
        return t == "boolean";
      case Value::kString:
        return t == "string";
      case Value::kArray:
        return t == "array";
      case Value::kObject:
        return t == "object";
      case Value::kNumber:
        // Policy: "integer" is written without fraction or exponent.
        return t == "number" || (t == "integer" && v.text.find_first_of(".eE") == std::string::npos);
    }
    return false;
  }

  // Equality with a listed value; objects compare members in order (the generation policy).
  static bool Equal(const Value& v, const Json& j) {
    switch (v.kind) {
      case Value::kNull:
        return j.is_null();
      case Value::kBool:
        return j.is_boolean() && j.get<bool>() == v.boolean;
      case Value::kNumber:
        return j.is_number() && CompareNumbers(v.text, NumberText(j)) == 0;
      case Value::kString:
        return j.is_string() && j.get<std::string>() == v.text;
      case Value::kArray: {
        if (!j.is_array() || j.size() != v.items.size()) return false;
        for (size_t i = 0; i < v.items.size(); ++i) {
          if (!Equal(v.items[i], j[i])) return false;
        }
        return true;
      }
      case Value::kObject: {
        if (!j.is_object() || j.size() != v.members.size()) return false;
        size_t i = 0;
        for (const auto& [key, value] : j.items()) {
          if (v.members[i].key != key || !Equal(v.members[i].value, value)) return false;
          ++i;
        }
        return true;
      }
    }
    return false;
  }

  static bool ValidString(const std::string& s, const Json& schema) {
    const size_t n = CodePoints(s);
    if (schema.contains("minLength") && n < schema["minLength"].get<size_t>()) return false;
    if (schema.contains("maxLength") && n > schema["maxLength"].get<size_t>()) return false;
    if (schema.contains("pattern") && !PcreReference(schema["pattern"].get<std::string>(), true, true).Matches(s)) {
      return false;
    }
    if (schema.contains("format")) {
      const std::string f = schema["format"].get<std::string>();
      if (f == "date" && !IsDate(s)) return false;
      if (f == "time" && !IsTime(s)) return false;
      if (f == "date-time") {
        const size_t t = s.find('T');
        if (t == std::string::npos || !IsDate(s.substr(0, t)) || !IsTime(s.substr(t + 1))) return false;
      }
      if (f == "uuid" && !IsUuid(s)) return false;
      if (f == "email" && !IsEmail(s)) return false;
      if (f == "ipv4" && !IsIpv4(s)) return false;
    }
    return true;
  }

  static bool ValidNumber(const std::string& text, const Json& schema) {
    const auto bound = [&](const char* key, bool lower, bool exclusive) {
      if (!schema.contains(key) || schema[key].is_boolean()) return true;
      const int c = CompareNumbers(text, NumberText(schema[key]));
      return lower ? (exclusive ? c > 0 : c >= 0) : (exclusive ? c < 0 : c <= 0);
    };
    const bool min_exclusive = schema.value("exclusiveMinimum", Json(false)).is_boolean() &&
                               schema.value("exclusiveMinimum", Json(false)).get<bool>();
    const bool max_exclusive = schema.value("exclusiveMaximum", Json(false)).is_boolean() &&
                               schema.value("exclusiveMaximum", Json(false)).get<bool>();
    return bound("minimum", true, min_exclusive) && bound("maximum", false, max_exclusive) &&
           bound("exclusiveMinimum", true, true) && bound("exclusiveMaximum", false, true);
  }

  bool ValidArray(const Value& v, const Json& schema) {
    const size_t n = v.items.size();
    if (schema.contains("minItems") && n < schema["minItems"].get<size_t>()) return false;
    if (schema.contains("maxItems") && n > schema["maxItems"].get<size_t>()) return false;
    Json prefix = Json::array();
    Json rest = true;
    if (schema.contains("prefixItems")) prefix = schema["prefixItems"];
    if (schema.contains("items")) {
      if (schema["items"].is_array()) {
        prefix = schema["items"];
        rest = schema.value("additionalItems", Json(true));
      } else {
        rest = schema["items"];
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (!Valid(v.items[i], i < prefix.size() ? prefix[i] : rest)) return false;
    }
    return true;
  }

  bool ValidObject(const Value& v, const Json& schema) {
    const Json properties = schema.value("properties", Json::object());
    std::vector<std::string> declared;
    for (const auto& [name, s] : properties.items()) declared.push_back(name);
    const Json required = schema.value("required", Json::array());
    for (const Json& r : required) {
      if (!properties.contains(r.get<std::string>())) declared.push_back(r.get<std::string>());
    }
    // Policy: declared members once each, in order, before all others.
    size_t next = 0;
    bool additional_seen = false;
    for (const auto& [key, member] : v.members) {
      const auto it = std::find(declared.begin(), declared.end(), key);
      if (it == declared.end()) {
        additional_seen = true;
        continue;
      }
      const size_t index = static_cast<size_t>(it - declared.begin());
      if (additional_seen || index < next) return false;
      next = index + 1;
    }
    for (const Json& r : required) {
      bool present = false;
      for (const auto& [key, member] : v.members) present |= key == r.get<std::string>();
      if (!present) return false;
    }
    const Json additional = schema.value("additionalProperties", Json(true));
    for (const auto& [key, member] : v.members) {
      if (properties.contains(key)) {
        if (!Valid(member, properties[key])) return false;
      } else if (!Valid(member, additional)) {
        return false;
      }
    }
    return true;
  }

  const Json& root_;
};

// The whole check: parses under the policy, then validates.
inline bool Accepts(const Json& schema, std::string_view text) {
  const std::optional<Value> v = Parser(text).Parse();
  return v && Validator(schema).Valid(*v, schema);
}

}  // namespace deepinfer::reference
