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
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"

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

// The same checks for a reader that validates a document as it streams instead of building it
// (the safetensors header, whose DOM would cost ~20x its 100 MB limit): nlohmann's iterative SAX
// parser feeds `handler` (nlohmann's json_sax event methods, without parse_error) after the size
// check, with nesting deeper than max_depth stopped before the handler sees it. Syntax errors and
// library exceptions become Error("<source>: not valid JSON: ..."). A handler rejects the document
// by returning false from an event after storing a complete message in its `error()`.
// (Duplicate keys are the handler's business: it sees every key.)
template <typename Handler>
void SaxParseBounded(std::string_view text, std::string_view source, const JsonLimits& limits, Handler& handler);

// Compact JSON text of `value`, cut to at most `max_chars` characters (then ending in "...");
// nesting beyond a few levels prints as [...] / {...}. Invalid UTF-8 in strings is replaced.
std::string BoundedDump(const nlohmann::json& value, size_t max_chars);
std::string BoundedDump(const nlohmann::ordered_json& value, size_t max_chars);

// The nesting depth of `value` (a scalar is 1, [] is 1, [[]] is 2), counting no further than
// `stop_at` (so the walk is bounded); iterative, for values built in memory rather than parsed.
int JsonNestingDepth(const nlohmann::json& value, int stop_at);

// ---------------------------------------------------------------------------------------------

namespace detail {

// "parse error at line 1, column 9: ..." from a library exception (its "[json.exception...] " id
// dropped), printable and short.
std::string JsonErrorReason(const std::exception& error);
void CheckJsonSize(std::string_view text, std::string_view source, const JsonLimits& limits);

template <typename Handler>
class BoundedSax {
 public:
  BoundedSax(Handler& handler, int max_depth) : handler_(handler), max_depth_(max_depth) {}
  using Json = nlohmann::json;

  bool null() { return handler_.null(); }
  bool boolean(bool value) { return handler_.boolean(value); }
  bool number_integer(Json::number_integer_t value) { return handler_.number_integer(value); }
  bool number_unsigned(Json::number_unsigned_t value) { return handler_.number_unsigned(value); }
  bool number_float(Json::number_float_t value, const Json::string_t& text) {
    return handler_.number_float(value, text);
  }
  bool string(Json::string_t& value) { return handler_.string(value); }
  bool binary(Json::binary_t&) { return Fail("not valid JSON: binary value"); }
  bool key(Json::string_t& key) { return handler_.key(key); }
  bool start_object(size_t elements) { return Deeper() && handler_.start_object(elements); }
  bool start_array(size_t elements) { return Deeper() && handler_.start_array(elements); }
  bool end_object() {
    --depth_;
    return handler_.end_object();
  }
  bool end_array() {
    --depth_;
    return handler_.end_array();
  }
  template <typename Exception>
  bool parse_error(size_t, const std::string&, const Exception& error) {
    return Fail("not valid JSON: " + JsonErrorReason(error));
  }

  const std::string& error() const { return error_; }

 private:
  bool Deeper() {
    if (++depth_ <= max_depth_) return true;
    return Fail("JSON nested deeper than " + std::to_string(max_depth_) + " levels");
  }
  bool Fail(std::string message) {
    error_ = std::move(message);
    return false;
  }

  Handler& handler_;
  int max_depth_;
  int depth_ = 0;
  std::string error_;  // the parser's own, without the source
};

}  // namespace detail

template <typename Handler>
void SaxParseBounded(std::string_view text, std::string_view source, const JsonLimits& limits, Handler& handler) {
  detail::CheckJsonSize(text, source, limits);
  detail::BoundedSax<Handler> sax(handler, limits.max_depth);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text.data(), text.data() + text.size(), &sax);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(std::string(source) + ": not valid JSON: " + detail::JsonErrorReason(e));
  }
  if (ok) return;
  if (!sax.error().empty()) throw Error(std::string(source) + ": " + sax.error());
  if (!handler.error().empty()) throw Error(handler.error());
  throw Error(std::string(source) + ": not valid JSON");
}

}  // namespace deepinfer
