#include "cli/build_info.h"

#include "kernels/cpu/cpu_context.h"

namespace deepinfer {
namespace {

#if defined(__clang__)
constexpr const char* kCompiler = "clang " __clang_version__;
#else
constexpr const char* kCompiler = "gcc " __VERSION__;
#endif

}  // namespace

std::string VersionText() {
  std::string compiled;
  for (const IsaLevel level : CompiledIsaLevels())
    compiled += (compiled.empty() ? "" : ", ") + std::string(IsaName(level));
  std::string text = "deepinfer " DEEPINFER_VERSION "\n";
  text += "commit   " + std::string(GitCommit()) + "\n";
  text += "build    " DEEPINFER_BUILD_TYPE ", " + std::string(kCompiler) + "\n";
  text += "isa      compiled: " + compiled + "; this CPU: " + std::string(IsaName(DetectIsa())) + "\n";
  if (DetectIsa() == IsaLevel::kAvx512) {
    text += "plan     this CPU's avx512 kernel plan: " + std::string(Bf16DotName(ChooseBf16Dot())) +
            " (--kernel-plan: fma, fp8-gemv-dot, quantized-dot)\n";
  }
  return text;
}

}  // namespace deepinfer
