// What `deepinfer --version` reports about this binary.
#pragma once

#include <string>
#include <string_view>

namespace deepinfer {

// `git describe --always --dirty` of the source tree at build time (generated each build).
std::string_view GitCommit();

// The --version text: version, commit, build type and compiler, the SIMD levels compiled in and
// the one this CPU supports.
std::string VersionText();

}  // namespace deepinfer
