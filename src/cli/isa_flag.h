// --isa and --kernel-plan, declared once for every command that runs the model. Options must have
// `std::optional<IsaLevel> isa` and `std::optional<Bf16Dot> kernel_plan` members; empty means the
// best level this CPU supports, and its CPU vendor's plan.
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

inline Bf16Dot ParseKernelPlanFlag(const std::string& value) {
  const std::optional<Bf16Dot> plan = ParseBf16Dot(value);
  if (!plan) throw MakeError("--kernel-plan: expected fma, fp8-gemv-dot or quantized-dot, got '", value, "'");
  return *plan;
}

template <typename Options>
Flag<Options> KernelPlanFlag() {
  return {"--kernel-plan", "PLAN",
          "where the avx512 linears use vdpbf16ps: fma (nowhere), fp8-gemv-dot (the FP8 GEMV: Intel's default) or "
          "quantized-dot (every FP8/FP4 GEMV and GEMM: AMD's default); the same bits either way (default: by CPU "
          "vendor, fma without AVX512-BF16)",
          [](Options& o, const std::string& v) { o.kernel_plan = ParseKernelPlanFlag(v); }};
}

// The plan to run with at `isa`: the flag's, which needs the avx512 kernels (the only ones with a
// choice) and, for the dot plans, AVX512-BF16; or this CPU's.
inline Bf16Dot ChooseKernelPlanFlag(std::optional<Bf16Dot> flag, IsaLevel isa) {
  if (flag && isa != IsaLevel::kAvx512) {
    throw MakeError("--kernel-plan: only the avx512 kernels have a plan to choose; this run uses isa ", IsaName(isa));
  }
  try {
    return ChooseBf16Dot(flag);
  } catch (const Error& e) {
    throw MakeError("--kernel-plan: ", e.what());
  }
}

}  // namespace deepinfer
