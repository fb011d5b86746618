// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it.
//
// The DeepSeek-V4.1 prompt embeds tool schemas and non-string tool arguments serialized by Python,
// so byte-exact prompts need Python's spelling: ", " and ": " separators, non-ASCII kept raw,
// control characters as lower-case \u00xx, floats as repr() (1e-05, 1e+16, 1.0, -0.0), and
// objects in insertion order (hence nlohmann::ordered_json; plain nlohmann::json sorts keys).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace deepinfer {

// json.dumps(value, ensure_ascii=False).
std::string PyJsonDumps(const nlohmann::ordered_json& value);

// json.dumps(text, ensure_ascii=False) for a string: the quoted, escaped literal. Bytes >= 0x80 are
// copied unchanged, so valid UTF-8 stays valid UTF-8.
std::string PyJsonQuote(std::string_view text);

// repr(float(value)): the shortest round-trip digits, fixed notation for exponents in [-5, 15]
// ("0.0001", "1000000000000000.0"), scientific otherwise ("1e-05", "1.5e+300"); "NaN",
// "Infinity" and "-Infinity" as json.dumps spells them.
std::string PyFloatRepr(double value);

}  // namespace deepinfer
