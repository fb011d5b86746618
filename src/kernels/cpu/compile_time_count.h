// Run-time small counts (activation rows of a tile, heads of an attention group) to the
// compile-time ones the SIMD loops are templates on.
#pragma once

#include <cstdint>

#include "core/error.h"

namespace deepinfer {
namespace detail {

template <int kN, int kHi, class Fn>
[[gnu::always_inline]] inline void WithCountFrom(int64_t n, Fn& fn) {
  if constexpr (kN < kHi) {
    if (n > kN) return WithCountFrom<kN + 1, kHi>(n, fn);
  }
  fn.template operator()<kN>();
}

}  // namespace detail

// Runs fn.template operator()<N>() for N = n; kLo <= n <= kHi, else an Error naming `what`.
template <int kLo, int kHi, class Fn>
[[gnu::always_inline]] inline void WithCount(int64_t n, const char* what, Fn&& fn) {
  DI_CHECK(n >= kLo && n <= kHi, what, ": ", n, " outside ", kLo, "..", kHi);
  detail::WithCountFrom<kLo, kHi>(n, fn);
}

}  // namespace deepinfer
