// Whether this test binary is built with AddressSanitizer: gcc says so with __SANITIZE_ADDRESS__,
// clang only through __has_feature.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define DEEPINFER_ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DEEPINFER_ASAN_BUILD 1
#endif
#endif
#ifndef DEEPINFER_ASAN_BUILD
#define DEEPINFER_ASAN_BUILD 0
#endif
