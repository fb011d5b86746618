// A SIGBUS caught by GuardMappedReads abandons the frames it jumps out of, leaking what they held
// (core/mapped_file.h). Tests that provoke one keep an AbandonedFramesMayLeak alive meanwhile, so
// that LeakSanitizer (in the sanitizer build) ignores those allocations and reports the rest.
#pragma once

#include "sanitizer_build.h"

#if DEEPINFER_ASAN_BUILD
#include <sanitizer/lsan_interface.h>
#endif

namespace deepinfer {

class AbandonedFramesMayLeak {
 public:
#if !DEEPINFER_ASAN_BUILD
  AbandonedFramesMayLeak() = default;
#else
  AbandonedFramesMayLeak() { __lsan_disable(); }
  ~AbandonedFramesMayLeak() { __lsan_enable(); }
#endif
  AbandonedFramesMayLeak(const AbandonedFramesMayLeak&) = delete;
  AbandonedFramesMayLeak& operator=(const AbandonedFramesMayLeak&) = delete;
};

}  // namespace deepinfer
