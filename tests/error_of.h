// The one way tests take the message of an expected deepinfer::Error.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "core/error.h"

namespace deepinfer {

// Checks the shape every user-facing message must have, and that it is not a broken invariant.
inline void ExpectWellFormed(const std::string& message) {
  EXPECT_FALSE(message.empty());
  EXPECT_EQ(message.find('\n'), std::string::npos) << "message spans several lines: " << message;
  EXPECT_EQ(message.find('\r'), std::string::npos) << message;
  EXPECT_THAT(message, ::testing::Not(::testing::HasSubstr("internal error"))) << "bad input reached a DI_CHECK";
}

// The message of the deepinfer::Error `f` throws (checked by ExpectWellFormed); fails the test if
// it throws nothing or anything else.
template <typename F>
std::string ErrorOf(F f) {
  try {
    f();
  } catch (const Error& e) {
    ExpectWellFormed(e.what());
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-deepinfer::Error exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

}  // namespace deepinfer
