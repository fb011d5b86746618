// Bounded JSON: the one way deepinfer parses JSON text that comes from outside (model files,
// chat requests, later HTTP bodies).
//
// A hostile file must cost a bounded amount of time, memory and stack, and its problems must
// surface as one deepinfer::Error naming the source. So, before any value is built:
//   * the text is at most `max_bytes` long;
//   * nesting is checked as the parser goes, before anything recurses on it: an array or
//     object opened `max_depth` levels deep (the top-level value is level 1) stops the parse;
//   * every library exception (syntax, invalid UTF-8, numbers out of range such as 1e400, ...)
//     becomes an Error;
//   * a key repeated within one object is an error by default: the library would keep only the
//     last one, silently shadowing the first. Chat requests take Python's json.loads reading
//     instead (the official encoder's), where the last value wins at the first one's place.
//     Either way a repeat is found in O(log n) or O(1), linear overall.
// The parse is linear in the text (nlohmann's SAX parser is iterative; the DOM is built here
// without the library's callback parser, which rescans an object at every member).
//
// Error messages never dump a parsed value whole: BoundedDump prints at most a given number of
// characters and never recurses deeper than a small fixed depth.
//
// All functions are thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace deepinfer {

// What a key repeated within one object means.
enum class DuplicateKeys {
  kReject,    // an Error naming the key (model files)
  kLastWins,  // the last value, at the first one's position, as Python's json.loads (chat requests)
};

struct JsonLimits {
  size_t max_bytes;
  int max_depth;
  DuplicateKeys duplicates = DuplicateKeys::kReject;
};

// Parses `text`; throws Error("<source>: ...") when it breaks the limits or is not JSON.
nlohmann::json ParseJsonBounded(std::string_view text, std::string_view source, const JsonLimits& limits);
// The same, keeping object members in file order.
nlohmann::ordered_json ParseOrderedJsonBounded(std::string_view text, std::string_view source,
                                               const JsonLimits& limits);

// Compact JSON text of `value`, cut to at most `max_chars` characters (then ending in "...");
// nesting beyond a few levels prints as [...] / {...}. Invalid UTF-8 in strings is replaced.
std::string BoundedDump(const nlohmann::json& value, size_t max_chars);
std::string BoundedDump(const nlohmann::ordered_json& value, size_t max_chars);

// The nesting depth of `value` (a scalar is 1, [] is 1, [[]] is 2), counting no further than
// `stop_at` (so the walk is bounded); iterative, for values built in memory rather than parsed.
int JsonNestingDepth(const nlohmann::json& value, int stop_at);

}  // namespace deepinfer
