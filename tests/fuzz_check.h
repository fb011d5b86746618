// The one invariant check of the libFuzzer targets: a broken invariant aborts, which libFuzzer
// reports as a finding (with the input that caused it).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace deepinfer {

inline void FuzzCheck(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz check failed: %s\n", what);
    std::abort();
  }
}

}  // namespace deepinfer
