#include "kernels/cpu/cpu_context.h"

#include <cpuid.h>

#include <cstdint>

#include "core/error.h"

namespace deepinfer {
namespace {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512 = false;
  bool avx512_bf16 = false;
  bool avx512_vbmi = false;
  bool amd = false;
};

uint64_t ReadXcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return f;
  f.amd = ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;  // "AuthenticAMD"
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = ecx & (1u << 27);
  const bool fma = ecx & (1u << 12);
  const bool f16c = ecx & (1u << 29);
  if (!osxsave) return f;
  const uint64_t xcr0 = ReadXcr0();
  const bool ymm_saved = (xcr0 & 0x6) == 0x6;
  const bool zmm_saved = (xcr0 & 0xE6) == 0xE6;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  const bool avx2 = ebx & (1u << 5);
  const bool avx512f = ebx & (1u << 16), avx512dq = ebx & (1u << 17), avx512bw = ebx & (1u << 30),
             avx512vl = ebx & (1u << 31);
  f.avx2 = avx2 && fma && f16c && ymm_saved;
  f.avx512 = f.avx2 && avx512f && avx512dq && avx512bw && avx512vl && zmm_saved;
  f.avx512_vbmi = f.avx512 && (ecx & (1u << 1));
  unsigned eax1 = 0, ebx1, ecx1, edx1;
  if (__get_cpuid_count(7, 1, &eax1, &ebx1, &ecx1, &edx1)) f.avx512_bf16 = f.avx512 && (eax1 & (1u << 5));
  return f;
}

// CPUID is a VM exit: read once (the answer cannot change while the process runs).
const CpuFeatures& Features() {
  static const CpuFeatures features = Detect();
  return features;
}

}  // namespace

std::string_view IsaName(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar:
      return "scalar";
    case IsaLevel::kAvx2:
      return "avx2";
    case IsaLevel::kAvx512:
      return "avx512";
  }
  return "?";
}

std::optional<IsaLevel> ParseIsa(std::string_view name) {
  for (IsaLevel level : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    if (IsaName(level) == name) return level;
  }
  return std::nullopt;
}

IsaLevel DetectIsa() {
  const CpuFeatures& f = Features();
  if (f.avx512) return IsaLevel::kAvx512;
  if (f.avx2) return IsaLevel::kAvx2;
  return IsaLevel::kScalar;
}

bool CpuHasAvx512Bf16() { return Features().avx512_bf16; }

bool CpuHasAvx512Vbmi() { return Features().avx512_vbmi; }

Bf16Dot ChooseBf16Dot() {
  const CpuFeatures& f = Features();
  if (!f.avx512_bf16) return Bf16Dot::kNone;
  return f.amd ? Bf16Dot::kQuantized : Bf16Dot::kFp8Gemv;
}

Bf16Dot ChooseBf16Dot(std::optional<Bf16Dot> forced) {
  if (!forced) return ChooseBf16Dot();
  if (*forced != Bf16Dot::kNone && !Features().avx512_bf16) {
    throw MakeError("kernel plan ", Bf16DotName(*forced),
                    " needs AVX512-BF16, which this CPU lacks (its plan: ", Bf16DotName(ChooseBf16Dot()), ")");
  }
  return *forced;
}

std::string_view Bf16DotName(Bf16Dot dot) {
  switch (dot) {
    case Bf16Dot::kNone:
      return "fma";
    case Bf16Dot::kFp8Gemv:
      return "fp8-gemv-dot";
    case Bf16Dot::kQuantized:
      return "quantized-dot";
  }
  return "?";
}

std::optional<Bf16Dot> ParseBf16Dot(std::string_view name) {
  for (Bf16Dot dot : {Bf16Dot::kNone, Bf16Dot::kFp8Gemv, Bf16Dot::kQuantized}) {
    if (Bf16DotName(dot) == name) return dot;
  }
  return std::nullopt;
}

std::vector<IsaLevel> SupportedIsaLevels() {
  std::vector<IsaLevel> levels;
  for (int level = 0; level <= static_cast<int>(DetectIsa()); ++level) levels.push_back(static_cast<IsaLevel>(level));
  return levels;
}

std::vector<IsaLevel> CompiledIsaLevels() { return {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512}; }

IsaLevel ChooseIsa(std::optional<IsaLevel> forced) {
  const IsaLevel detected = DetectIsa();
  if (!forced) return detected;
  if (static_cast<int>(*forced) > static_cast<int>(detected)) {
    throw MakeError("SIMD level ", IsaName(*forced), " requested but this CPU supports at most ", IsaName(detected));
  }
  return *forced;
}

}  // namespace deepinfer
