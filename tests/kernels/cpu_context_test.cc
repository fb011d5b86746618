// The kernel plan's names and its forced choice (--kernel-plan): every plan has a name that parses
// back to it, unknown names parse to nothing, and forcing a plan that needs AVX512-BF16 on a CPU
// without it is refused with the plan named.
#include "kernels/cpu/cpu_context.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "core/error.h"

namespace deepinfer {
namespace {

constexpr Bf16Dot kPlans[] = {Bf16Dot::kNone, Bf16Dot::kFp8Gemv, Bf16Dot::kQuantized};

TEST(KernelPlan, NamesParseBack) {
  for (Bf16Dot plan : kPlans) EXPECT_EQ(ParseBf16Dot(Bf16DotName(plan)), plan) << Bf16DotName(plan);
  EXPECT_EQ(Bf16DotName(Bf16Dot::kNone), "fma");
  EXPECT_EQ(Bf16DotName(Bf16Dot::kFp8Gemv), "fp8-gemv-dot");
  EXPECT_EQ(Bf16DotName(Bf16Dot::kQuantized), "quantized-dot");
  for (const char* bad : {"", "dot", "FMA", "quantized-dot ", "none"})
    EXPECT_EQ(ParseBf16Dot(bad), std::nullopt) << bad;
}

TEST(KernelPlan, ForcedPlanNeedsItsInstructions) {
  EXPECT_EQ(ChooseBf16Dot(std::nullopt), ChooseBf16Dot());
  EXPECT_EQ(ChooseBf16Dot(Bf16Dot::kNone), Bf16Dot::kNone);  // FMAs: every AVX-512 CPU
  for (Bf16Dot plan : {Bf16Dot::kFp8Gemv, Bf16Dot::kQuantized}) {
    if (CpuHasAvx512Bf16()) {
      EXPECT_EQ(ChooseBf16Dot(plan), plan);
      continue;
    }
    try {
      ChooseBf16Dot(plan);
      ADD_FAILURE() << Bf16DotName(plan) << " was accepted on a CPU without AVX512-BF16";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "kernel plan " + std::string(Bf16DotName(plan)) +
                                           " needs AVX512-BF16, which this CPU lacks (its plan: fma)");
    }
  }
  // The default plan never needs what the CPU lacks.
  EXPECT_TRUE(ChooseBf16Dot() == Bf16Dot::kNone || CpuHasAvx512Bf16());
}

TEST(KernelPlan, ContextCarriesTheCpusPlanByDefault) {
  ThreadPool pool(1);
  const CpuContext ctx{pool, IsaLevel::kScalar};
  EXPECT_EQ(ctx.dot, ChooseBf16Dot());
}

}  // namespace
}  // namespace deepinfer
