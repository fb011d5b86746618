#include "chat/py_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace deepinfer {
namespace {

void AppendQuoted(std::string_view text, std::string& out) {
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escape[8];
          std::snprintf(escape, sizeof(escape), "\\u%04x", static_cast<unsigned>(c));
          out += escape;
        } else {
          out += c;  // Includes DEL and every UTF-8 byte: ensure_ascii=False escapes neither.
        }
    }
  }
  out += '"';
}

// Deeper than any JSON the bounded parsers let in (kChatJsonLimits): a value built in memory that
// nests further is refused instead of overflowing the stack.
constexpr int kMaxDumpDepth = 256;

void AppendValue(const nlohmann::ordered_json& value, int depth, std::string& out) {
  using Type = nlohmann::ordered_json::value_t;
  if (depth > kMaxDumpDepth && value.is_structured()) {
    throw MakeError("cannot serialize JSON nested deeper than ", kMaxDumpDepth, " levels");
  }
  switch (value.type()) {
    case Type::null:
      out += "null";
      return;
    case Type::boolean:
      out += value.get<bool>() ? "true" : "false";
      return;
    case Type::number_integer:
      out += std::to_string(value.get<std::int64_t>());
      return;
    case Type::number_unsigned:
      out += std::to_string(value.get<std::uint64_t>());
      return;
    case Type::number_float:
      out += PyFloatRepr(value.get<double>());
      return;
    case Type::string:
      AppendQuoted(value.get_ref<const std::string&>(), out);
      return;
    case Type::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ", ";
        first = false;
        AppendValue(item, depth + 1, out);
      }
      out += ']';
      return;
    }
    case Type::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        AppendQuoted(key, out);
        out += ": ";
        AppendValue(item, depth + 1, out);
      }
      out += '}';
      return;
    }
    case Type::binary:
    case Type::discarded:
      break;
  }
  throw MakeError("cannot serialize a JSON ", value.type_name(), " value the way Python's json module does");
}

}  // namespace

std::string PyJsonQuote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  AppendQuoted(text, out);
  return out;
}

std::string PyJsonDumps(const nlohmann::ordered_json& value) {
  std::string out;
  AppendValue(value, 1, out);
  return out;
}

std::string PyFloatRepr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";

  // std::to_chars gives the same shortest round-trip digits as Python's repr (both pick the
  // shortest string that reads back exactly, nearest to the true value); only the layout differs.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  DI_CHECK(result.ec == std::errc(), "to_chars failed");
  const std::string_view sci(buffer, static_cast<std::size_t>(result.ptr - buffer));

  std::string out;
  std::size_t i = 0;
  if (sci[i] == '-') {
    out += '-';
    ++i;
  }
  const std::size_t e_pos = sci.find('e');
  DI_CHECK(e_pos != std::string_view::npos, "unexpected to_chars output ", sci);
  std::string digits;
  for (; i < e_pos; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  // Python's float_repr_style 'short': value = 0.DIGITS x 10^decpt, scientific iff decpt is
  // outside (-4, 16].
  const int decpt = exponent + 1;
  const int ndigits = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (ndigits > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char exp_text[16];
    std::snprintf(exp_text, sizeof(exp_text), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp_text;
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<std::size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= ndigits) {
    out += digits;
    out.append(static_cast<std::size_t>(decpt - ndigits), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<std::size_t>(decpt));
    out += '.';
    out.append(digits, static_cast<std::size_t>(decpt), std::string::npos);
  }
  return out;
}

}  // namespace deepinfer
