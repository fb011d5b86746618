#include "core/error.h"

namespace deepinfer::detail {

void CheckFailed(const char* file, int line, const char* condition, const std::string& message) {
  throw Error(Concat("internal error at ", file, ":", line, ": check `", condition, "` failed",
                     message.empty() ? "" : ": ", message));
}

}  // namespace deepinfer::detail
