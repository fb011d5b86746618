// What this machine can do at most, measured in the same run as the thing compared with it
// (`deepinfer bench`; the analytic FLOP count of a forward it compares with is io/forward_flops.h).
//
// The measurements follow /work/shared/docs/machine-notes.md: DRAM read bandwidth is a
// vectorised sum over a large array with 8 independent accumulators per thread, each thread
// reading its own contiguous slice (first touched by that same thread); the FLOP peak runs
// 12 independent dependency chains of one instruction class per thread on every thread of
// the pool. Both report the best of several passes. Nothing here asserts a threshold: shared
// machines are noisy, callers only report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/thread_pool.h"

namespace deepinfer {

// ---- DRAM read bandwidth --------------------------------------------------------------------

// Bytes per second read by `pool` summing `bytes` of memory (rounded up to whole 4 KiB pages;
// at least 1 GiB is what makes it a DRAM number), best of `passes` timed passes after one
// untimed pass. Uses the widest vector loads this CPU and OS support. Throws Error when the
// buffer cannot be allocated or the arguments are not positive.
double MeasureReadBandwidth(ThreadPool& pool, size_t bytes, int passes);

// ---- Arithmetic peak ------------------------------------------------------------------------

enum class PeakKind {
  kScalarFp32,     // scalar fp32 multiply + add (what scalar kernels compile to): 2 FLOP per pair
  kAvx2Fma,        // vfmadd on ymm: 8 lanes x 2 = 16 FLOP per instruction
  kAvx512Fma,      // vfmadd on zmm: 16 lanes x 2 = 32 FLOP per instruction
  kAvx512Bf16Dot,  // vdpbf16ps on zmm: 16 lanes x 2 bf16 products x 2 = 64 FLOP per instruction
};

std::string_view PeakKindName(PeakKind kind);
// Whether this CPU and OS can run `kind` (the CPU flag and the saved register state).
bool PeakKindSupported(PeakKind kind);

// FLOP/s of `kind` on every thread of `pool`: 12 independent chains per thread, the loop
// length calibrated so a pass lasts about `seconds` / 4, best of 3 passes. Throws Error when
// the kind is not supported here or `seconds` is not positive.
double MeasurePeakFlops(ThreadPool& pool, PeakKind kind, double seconds);

}  // namespace deepinfer
