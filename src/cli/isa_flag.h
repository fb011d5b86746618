// --isa, declared once for every command that runs the model. Options must have a
// `std::optional<IsaLevel> isa` member; empty means the best level this CPU supports.
#pragma once

#include <optional>
#include <string>

#include "cli/flags.h"
#include "core/error.h"
#include "kernels/cpu/cpu_context.h"

namespace deepinfer {

inline IsaLevel ParseIsaFlag(const std::string& value) {
  const std::optional<IsaLevel> isa = ParseIsa(value);
  if (!isa) throw MakeError("--isa: expected scalar, avx2 or avx512, got '", value, "'");
  return *isa;
}

template <typename Options>
Flag<Options> IsaFlag() {
  return {"--isa", "LEVEL", "scalar, avx2 or avx512 (default: the best this CPU supports)",
          [](Options& o, const std::string& v) { o.isa = ParseIsaFlag(v); }};
}

// The level to run at: the flag's, which must not exceed what this CPU supports, or the best.
inline IsaLevel ChooseIsaFlag(std::optional<IsaLevel> flag) {
  try {
    return ChooseIsa(flag);
  } catch (const Error& e) {
    throw MakeError("--isa: ", e.what());
  }
}

}  // namespace deepinfer
