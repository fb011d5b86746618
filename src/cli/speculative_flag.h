// --speculative and --speculative-length, declared once for every command that decodes. Options
// must have `bool speculative` (default false) and `int speculative_length` (default 0) members.
#pragma once

#include <string>

#include "cli/flags.h"
#include "core/error.h"

namespace deepinfer {

inline bool ParseSpeculativeFlag(const std::string& value) {
  if (value == "dspark") return true;
  if (value == "off") return false;
  throw MakeError("--speculative: expected dspark or off, got '", value, "'");
}

template <typename Options>
Flag<Options> SpeculativeFlag() {
  return {"--speculative", "dspark|off",
          "DSpark speculative decoding with the model's draft head (default off): exact, greedy output unchanged",
          [](Options& o, const std::string& v) { o.speculative = ParseSpeculativeFlag(v); }};
}

template <typename Options>
Flag<Options> SpeculativeLengthFlag() {
  return {"--speculative-length", "K",
          "drafts verified per step with --speculative dspark: 0 = chosen each step from the draft's confidence "
          "and the bytes a verify reads (default), 1..block a fixed count",
          [](Options& o, const std::string& v) {
            o.speculative_length = static_cast<int>(ParseIntFlag("--speculative-length", v, 0, 256));
          }};
}

}  // namespace deepinfer
