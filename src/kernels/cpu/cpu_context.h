// What every CPU kernel call needs besides its operands: the thread pool and the SIMD level
// the kernels dispatch to (chosen once at start-up from what the CPU and OS support, or
// forced lower for testing).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "core/thread_scratch.h"

namespace deepinfer {

enum class IsaLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

std::string_view IsaName(IsaLevel level);
std::optional<IsaLevel> ParseIsa(std::string_view name);  // "scalar", "avx2", "avx512"

// The best level this CPU and OS support: AVX2+FMA+F16C, or AVX-512 F/BW/VL/DQ (+BF16 where
// present); the OS must save the wider registers (XCR0).
IsaLevel DetectIsa();
bool CpuHasAvx512Bf16();
// AVX512-VBMI (byte permutes): the FP8 decode of the interleaved copy needs it.
bool CpuHasAvx512Vbmi();

// The kernel plan: where the AVX-512 linear kernels use vdpbf16ps. The bits are the same either
// way (it performs exactly the canonical FMA pair, linear_simd.h); this is a speed choice by core
// kind:
//   kNone      FMAs everywhere (the only plan without AVX512-BF16).
//   kFp8Gemv   Intel: vdpbf16ps runs at half the FMA rate, so it only pays where it saves decode
//              work (FP8 GEMV, whose e4m3 decode yields bf16 words directly).
//   kQuantized AMD Zen 4 and later: vdpbf16ps runs at twice the FMA rate (measured: 235 vs
//              117 GFLOP/s per core), so every FP8/FP4 GEMV tile and GEMM panel uses it.
enum class Bf16Dot { kNone, kFp8Gemv, kQuantized };
// kNone without AVX512-BF16; otherwise by CPU vendor as above.
Bf16Dot ChooseBf16Dot();
// `forced` where given (throws Error if it needs AVX512-BF16 and this CPU lacks it), else the above.
Bf16Dot ChooseBf16Dot(std::optional<Bf16Dot> forced);
std::string_view Bf16DotName(Bf16Dot dot);                   // "fma", "fp8-gemv-dot", "quantized-dot"
std::optional<Bf16Dot> ParseBf16Dot(std::string_view name);  // the names above
// Every level up to the detected one, lowest first: what tests run each fast path against.
std::vector<IsaLevel> SupportedIsaLevels();
// Every level this binary has kernels for (scalar, AVX2, AVX-512: all are always built).
std::vector<IsaLevel> CompiledIsaLevels();

struct CpuContext {
  ThreadPool& pool;
  IsaLevel isa;
  // Per-thread buffers the SIMD kernels keep between calls (the CPU backend's); without them
  // each call allocates its temporaries. The scalar oracles always allocate.
  ThreadScratch* scratch = nullptr;
  // The AVX-512 linears' kernel plan (read only at IsaLevel::kAvx512).
  Bf16Dot dot = ChooseBf16Dot();
};

// The detected level, or `forced` when given; throws Error if `forced` exceeds the CPU.
IsaLevel ChooseIsa(std::optional<IsaLevel> forced);

}  // namespace deepinfer
