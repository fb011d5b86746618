// SIMD fast paths of QuantizedLinear and DenseLinear (AVX2+FMA+F16C, AVX-512 with FMA or with
// AVX512-BF16 `vdpbf16ps`), and the numeric contract they all share.
//
// One canonical operation sequence per output element
// ----------------------------------------------------
// Every SIMD path computes each y[r, n] with the same floating-point operations in the same order,
// so the bits do not depend on M, on which rows share the call, on the thread count, on the loop
// structure (GEMV streaming vs GEMM panels) or even on the ISA level:
//   1. K is walked in groups of 32 in K order (the last dense group is zero-padded). Inside a
//      group the 32 elements form 16 pairs; pair i is (k_even(i), k_odd(i)), a per-format order
//      chosen so that decoding needs no shuffles (PairK below).
//   2. Lane i of a 16-lane fp32 accumulator does, for each group in turn,
//          acc_i = fl(acc_i + x[k_odd] * w[k_odd]);  acc_i = fl(acc_i + x[k_even] * w[k_even]).
//      For the quantized formats every product is exact in fp32 (<= 8 significant bits), so this
//      is both two FMAs and exactly one `vdpbf16ps` on (even, odd) bf16 pairs: measured on Intel
//      Xeon and AMD Zen 4, vdpbf16ps adds the odd product first and rounds after each add (see the
//      test).
//      Dense weights use FMAs, except where a call proves vdpbf16ps exact (DensePairsAreExact):
//      BF16 or FP8 weights, bf16-exact activations, exponent ranges under which every product is
//      exact and every product and partial sum is 0 or a normal fp32 (vdpbf16ps flushes
//      subnormals; FMA does not).
//   3. The 16 lanes are summed as a fixed tree: (i, i+8), then (i, i+4), (i, i+2), (i, i+1).
//   4. Output: NaN becomes the canonical quiet NaN; quantized (and round_to_bf16) outputs are
//      rounded to bf16 with round-to-nearest-even.
//
// FP8/FP4: scales folded into the operands
// ----------------------------------------
// The activation is act-quantized exactly as the scalar oracle does (bit-identical e4m3 codes and
// power-of-two scales sa per 32), and the operands become x' = code * sa and w' = code * sw (the
// weight scale goes into the decode: an exponent bias for FP8, a pre-scaled lookup table for
// FP4). Multiplying by a power of two is exact, so each product equals code_x * code_w * sa * sw
// exactly; what differs from the oracle is only the summation order (one running sum over K in
// 16 lanes instead of per-32 partials scaled and added in K order), so outputs match it to fp32
// rounding before the bf16 rounding (see tests/kernels/linear_simd_test.cc for the measured
// differences). FoldIsExact() gives the exponent ranges under which this holds and no fp32
// subnormal can occur (vdpbf16ps flushes subnormals, FMA does not); elements outside them (scale
// bytes 0 or 255, absurd activations) are recomputed with an exact replica of the scalar oracle,
// which depends only on that element's inputs.
//
// Why the driver below is a template: the ISA translation units are compiled with -mavx2 /
// -mavx512*; any inline function with external linkage they emit could be picked by the linker
// for the whole program and crash an older CPU. Everything shared here is therefore a template
// instantiated with a TU-local ISA type (internal linkage), and the ISA files call no other
// inline function with external linkage that is not inlined (`nm` on their objects lists no weak
// symbols).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>

#include "core/numeric.h"
#include "core/thread_pool.h"
#include "core/thread_scratch.h"
#include "io/weight_matrix.h"
#include "kernels/cpu/cpu_context.h"

namespace deepinfer {

// Entry points; callers check the CPU first (CpuContext::isa comes from ChooseIsa). `dot` says
// which AVX-512 kernels use vdpbf16ps (anything but kNone needs AVX512-BF16, ChooseBf16Dot); the
// bits are the same either way.
// `scratch` (optional): per-thread buffers kept between calls; without it each call allocates.
void QuantizedLinearAvx512(const WeightMatrix& w, const float* x, int64_t m, float* y, ThreadPool& pool, Bf16Dot dot,
                           ThreadScratch* scratch = nullptr);
void DenseLinearAvx512(const WeightMatrix& w, const float* x, int64_t m, float* y, bool round_to_bf16, ThreadPool& pool,
                       Bf16Dot dot, ThreadScratch* scratch = nullptr);
void QuantizedLinearAvx2(const WeightMatrix& w, const float* x, int64_t m, float* y, ThreadPool& pool,
                         ThreadScratch* scratch = nullptr);
void DenseLinearAvx2(const WeightMatrix& w, const float* x, int64_t m, float* y, bool round_to_bf16, ThreadPool& pool,
                     ThreadScratch* scratch = nullptr);

namespace linear_simd {

inline constexpr int64_t kGroup = 32;      // K elements per canonical group (16 pairs)
inline constexpr int64_t kPanelN = 4;      // GEMM: weight rows per decoded panel
inline constexpr int64_t kPanelM = 4;      // GEMM: activation rows per register tile
inline constexpr int64_t kMaxK = 1 << 20;  // FoldIsExact's overflow bound assumes K <= 2^20

// Position inside its group of the even / odd member of pair i (0..15).
//   FP8, BF16 : (2i, 2i+1)                      - bytes/words in memory order
//   F32       : (i, 16+i)                       - the two halves of the group
//   FP4       : (8(i%4) + i/4, 8(i%4) + 4 + i/4) - what a 16-byte broadcast to every 128-bit lane
//               plus a per-lane shift puts at the bottom of dword i, so each half of the pairs is
//               one shift + one 16-entry table lookup
constexpr int PairK(MatrixFormat format, int pair, bool odd) {
  switch (format) {
    case MatrixFormat::kFP4Row32:
      return 8 * (pair % 4) + pair / 4 + (odd ? 4 : 0);
    case MatrixFormat::kF32:
      return pair + (odd ? 16 : 0);
    default:
      return 2 * pair + (odd ? 1 : 0);
  }
}

// Unbiased exponent range of a set of power-of-two scales.
struct ExpRange {
  int lo = 0;
  int hi = 0;
};

// Everything a kernel needs; read-only while the threads run.
struct Job {
  const WeightMatrix* w = nullptr;
  int64_t m = 0;       // activation rows
  int64_t groups = 0;  // ceil(K / 32)
  // Exactly one of xs / xb is set: the kernels run on fp32 FMAs, or (Isa::UsesPairs) on
  // vdpbf16ps.
  const float* xs = nullptr;     // [m][xstride]: groups x [even 16 | odd 16] canonical fp32
  const uint32_t* xb = nullptr;  // [m][xstride]: groups x 16 bf16 pairs (odd << 16 | even)
  int64_t xstride = 0;           // elements from one activation row of xs / xb to the next
  bool round_to_bf16 = false;
  float* y = nullptr;        // [m][w->rows]
  int64_t stream_max_m = 0;  // m up to which the call streams the weights (Isa::StreamMaxM), else GEMM
};

// Rounds (or not) a finished sum the same way on every path; NaN is made canonical so that the
// bits agree even where FMA and vdpbf16ps would propagate different NaN payloads.
template <class Isa>
float Finish(float sum, bool round_to_bf16) {
  uint32_t u = std::bit_cast<uint32_t>(sum);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::bit_cast<float>(0x7fc00000u);
  if (round_to_bf16) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  return std::bit_cast<float>(u);
}

// Exponent ranges (a: activation scales of row r, b: weight scales touching row n) under which
// the folded operands are exact, every product and partial sum is 0 or a normal fp32, and no
// overflow is possible for K <= 2^20. Derivation: e4m3 codes are multiples of 2^-9 up to 448,
// e2m1 codes multiples of 2^-1 up to 6; all products are multiples of
// 2^(-18 + min(a+b)) (FP8) or 2^(-10 + min(a+b)) (FP4), and so is every rounded sum of them.
template <class Isa>
bool FoldIsExact(MatrixFormat format, ExpRange a, ExpRange b) {
  if (a.lo < -117 || a.hi > 118) return false;  // x' = code * sa must be a normal fp32/bf16
  if (format == MatrixFormat::kFP8Block32) {
    return b.lo >= -117 && b.hi <= 118 && a.lo + b.lo >= -108 && a.hi + b.hi <= 90;
  }
  return b.lo >= -125 && b.hi <= 125 && a.lo + b.lo >= -116 && a.hi + b.hi <= 90;
}

// Dense operands on vdpbf16ps: every nonzero element is a multiple of 2^quantum and below
// 2^bound in magnitude. A bf16 value with exponent e is a multiple of 2^(e-7) below 2^(e+1); an
// FP8 weight e4m3 * 2^s a multiple of 2^(s-9) below 2^(s+9).
struct DenseOperand {
  int quantum = 0;
  int bound = 0;
};
constexpr DenseOperand Bf16Operand(ExpRange exponents) { return {exponents.lo - 7, exponents.hi + 1}; }
constexpr DenseOperand Fp8Operand(ExpRange scales) { return {scales.lo - 9, scales.hi + 9}; }
// Products are multiples of 2^(qx + qw), and so is every rounded partial sum: all nonzero ones are
// normal when that is >= 2^-126. Their magnitudes stay below 2^(bx + bw + 20) for K <= 2^20.
constexpr bool DensePairsAreExact(DenseOperand x, DenseOperand w) {
  return x.quantum + w.quantum >= -126 && x.bound + w.bound <= 100;
}

// What the activation side of a dense vdpbf16ps call found, per row: whether every element is
// bf16-exact and normal or zero, and the exponent range of the nonzero ones (empty: lo > hi).
struct DenseRow {
  bool pairs_ok = true;
  ExpRange exponents{1 << 20, -(1 << 20)};
};

// Drives one call: prepares the activations, partitions the weight rows statically over the
// pool and falls back to the oracle replica where FoldIsExact fails. Isa provides:
//   ExpRange PrepareQuantizedRow(x, k, format, xs_row, xb_row)  one of them null (activation scales)
//   void PrepareDenseRow(x, k, format, xs_row)
//   ExpRange ScaleRange(ue8m0 bytes, count)
//   bool UsesPairs(format, m, dot)                 whether the kernels read Job::xb
//   optional, for dense vdpbf16ps:
//   bool DenseUsesPairs(format, m, dot)            whether to try it (K % 32 == 0 is checked here)
//   DenseRow PrepareDensePairsRow(x, k, xb_row)    bf16 pairs of one row, and what it found
//   int64_t kActivationRowPad                       fp32 elements after each row of Job::xs
//   size_t ScratchBytes(format, groups, m)
//   int64_t StreamMaxM(w, dot)                     rows up to which StreamRows runs
//   void StreamRows(job, n_begin, n_end, scratch)   m <= job.stream_max_m: weights streamed
//   void PanelRows(job, n_begin, n_end, scratch)    GEMM: decoded panels reused over M
template <class Isa>
class Driver {
 public:
  static void Quantized(const WeightMatrix& w, const float* x, int64_t m, float* y, ThreadPool& pool, Bf16Dot dot,
                        ThreadScratch* scratch) {
    if (m == 0 || w.rows == 0) return;
    const int64_t groups = w.cols / kGroup;
    const bool pairs = Isa::UsesPairs(w.format, m, dot);
    const int64_t stream_max = Isa::StreamMaxM(w, dot);
    const int64_t xstride = pairs ? PairsStride(groups) : FloatsStride(groups);
    Array<float> xs = Activations<float>(pairs ? 0 : m, xstride, scratch, kActivationsSlot);
    Array<uint32_t> xb = Activations<uint32_t>(pairs ? m : 0, xstride, scratch, kPairsSlot);
    Array<ExpRange> act(m, scratch, 0, kRangesSlot);
    ForRows(pool, m, groups, [&](int64_t r) {
      act[r] = Isa::PrepareQuantizedRow(x + r * w.cols, w.cols, w.format, pairs ? nullptr : xs.data() + r * xstride,
                                        pairs ? xb.data() + r * xstride : nullptr);
    });
    ExpRange all = act[0];
    for (int64_t r = 1; r < m; ++r) all = {std::min(all.lo, act[r].lo), std::max(all.hi, act[r].hi)};
    const Job job{.w = &w,
                  .m = m,
                  .groups = groups,
                  .xs = xs.data(),
                  .xb = xb.data(),
                  .xstride = xstride,
                  .round_to_bf16 = true,
                  .y = y,
                  .stream_max_m = stream_max};
    RunSplit(job, pool, scratch,
             [&](size_t begin, size_t end) { RecomputeInexact(w, x, m, y, act.data(), all, begin, end); });
  }

  // BF16, F32, or FP8 weights standing for their bf16 dequantization (DenseLinear).
  static void Dense(const WeightMatrix& w, const float* x, int64_t m, float* y, bool round_to_bf16, ThreadPool& pool,
                    Bf16Dot dot, ThreadScratch* scratch) {
    if (m == 0 || w.rows == 0) return;
    const bool fp8 = w.format == MatrixFormat::kFP8Block32;
    const ExpRange fp8_scales = fp8 ? Isa::ScaleRange(w.scales, w.scale_rows() * w.scale_cols()) : ExpRange{};
    if (fp8 && !Fp8DecodesToBf16(fp8_scales)) {
      // Scales where e4m3 * 2^s is not a normal bf16: run on the bf16 dequantization itself.
      Array<bf16_t> dense(w.rows * w.cols);
      Array<float> row(w.cols);
      for (int64_t n = 0; n < w.rows; ++n) {
        w.DequantizedRow(n, row.data());
        for (int64_t c = 0; c < w.cols; ++c) dense[n * w.cols + c] = FloatToBF16(row[c]);
      }
      const WeightMatrix bf16{MatrixFormat::kBF16, w.rows, w.cols, reinterpret_cast<const uint8_t*>(dense.data())};
      return Dense(bf16, x, m, y, round_to_bf16, pool, dot, scratch);
    }
    if constexpr (requires { Isa::PrepareDensePairsRow; }) {
      if (DensePairs(w, fp8_scales, x, m, y, round_to_bf16, pool, dot, scratch)) return;
    }
    const int64_t groups = (w.cols + kGroup - 1) / kGroup, stream_max = Isa::StreamMaxM(w, dot);
    const int64_t xstride = FloatsStride(groups);
    Array<float> xs = Activations<float>(m, xstride, scratch, kActivationsSlot);
    ForRows(pool, m, groups,
            [&](int64_t r) { Isa::PrepareDenseRow(x + r * w.cols, w.cols, w.format, xs.data() + r * xstride); });
    RunSplit(Job{.w = &w,
                 .m = m,
                 .groups = groups,
                 .xs = xs.data(),
                 .xstride = xstride,
                 .round_to_bf16 = round_to_bf16,
                 .y = y,
                 .stream_max_m = stream_max},
             pool, scratch, [](size_t, size_t) {});
  }

  // Row strides of the activations: fp32 rows padded by the Isa's kActivationRowPad (64-byte
  // aligned), bf16 pair rows as they are.
  static int64_t FloatsStride(int64_t groups) {
    static_assert(Isa::kActivationRowPad % 16 == 0, "rows stay 64-byte aligned");
    return groups * kGroup + Isa::kActivationRowPad;
  }
  static int64_t PairsStride(int64_t groups) { return groups * (kGroup / 2); }

 private:
  // The ThreadScratch slots of a call: the caller's activations, pairs and scale ranges; each
  // thread's tile scratch.
  static constexpr int kActivationsSlot = 0;
  static constexpr int kPairsSlot = 1;
  static constexpr int kRangesSlot = 2;
  static constexpr int kTileSlot = 3;

  // 64-byte aligned, uninitialised array: borrowed from (thread, slot) of `scratch`, or, without
  // one, allocated for the call (or the thread).
  template <class T>
  class Array {
   public:
    explicit Array(int64_t count, ThreadScratch* scratch = nullptr, int thread = 0, int slot = 0) : count_(count) {
      if (count_ <= 0) return;
      if (scratch != nullptr) {
        data_ = scratch->Get<T>(thread, slot, static_cast<size_t>(count_));
        owned_ = false;
      } else {
        data_ = static_cast<T*>(::operator new (sizeof(T) * count_, std::align_val_t{64}));
      }
    }
    Array(Array&& other) noexcept : count_(other.count_), data_(other.data_), owned_(other.owned_) {
      other.data_ = nullptr;
    }
    ~Array() {
      if (data_ != nullptr && owned_) ::operator delete (data_, std::align_val_t{64});
    }
    Array(const Array&) = delete;
    Array& operator=(const Array&) = delete;
    T* data() const { return data_; }
    T& operator[](int64_t i) const { return data_[i]; }

   private:
    int64_t count_;
    T* data_ = nullptr;
    bool owned_ = true;
  };

  // The dense call on vdpbf16ps when the weights' exponents are known and the activations turn out
  // bf16-exact with ranges that make it exact (DensePairsAreExact); false: run it on FMAs instead.
  // `fp8_scales`: the scale range of FP8 weights.
  static bool DensePairs(const WeightMatrix& w, ExpRange fp8_scales, const float* x, int64_t m, float* y,
                         bool round_to_bf16, ThreadPool& pool, Bf16Dot dot, ThreadScratch* scratch) {
    if (w.cols % kGroup != 0 || !Isa::DenseUsesPairs(w.format, m, dot)) return false;
    DenseOperand weights;
    if (w.format == MatrixFormat::kBF16) {
      if (!w.bf16_exponents.known) return false;
      weights = Bf16Operand({w.bf16_exponents.lo, w.bf16_exponents.hi});
    } else {
      weights = Fp8Operand(fp8_scales);
    }
    const int64_t groups = w.cols / kGroup, stream_max = Isa::StreamMaxM(w, dot);
    const int64_t xstride = PairsStride(groups);
    Array<uint32_t> xb = Activations<uint32_t>(m, xstride, scratch, kPairsSlot);
    Array<DenseRow> rows(m, scratch, 0, kRangesSlot);
    ForRows(pool, m, groups,
            [&](int64_t r) { rows[r] = Isa::PrepareDensePairsRow(x + r * w.cols, w.cols, xb.data() + r * xstride); });
    DenseRow all;
    for (int64_t r = 0; r < m; ++r) {
      all.pairs_ok = all.pairs_ok && rows[r].pairs_ok;
      all.exponents = {std::min(all.exponents.lo, rows[r].exponents.lo),
                       std::max(all.exponents.hi, rows[r].exponents.hi)};
    }
    if (!all.pairs_ok) return false;
    if (all.exponents.lo <= all.exponents.hi && !DensePairsAreExact(Bf16Operand(all.exponents), weights)) return false;
    RunSplit(Job{.w = &w,
                 .m = m,
                 .groups = groups,
                 .xb = xb.data(),
                 .xstride = xstride,
                 .round_to_bf16 = round_to_bf16,
                 .y = y,
                 .stream_max_m = stream_max},
             pool, scratch, [](size_t, size_t) {});
    return true;
  }

  // Splits the job's weight rows statically between the threads (an interleaved matrix in whole
  // tiles), runs each part with its thread's tile scratch, then `after(begin, end)` on the part.
  template <class After>
  static void RunSplit(const Job& job, ThreadPool& pool, ThreadScratch* scratch, const After& after) {
    const WeightMatrix& w = *job.w;
    const size_t unit = w.interleaved ? static_cast<size_t>(InterleavedTiles::kRows) : 1;
    const size_t units = (static_cast<size_t>(w.rows) + unit - 1) / unit;
    const size_t tile_bytes = Isa::ScratchBytes(w.format, job.groups, job.m);
    if (scratch != nullptr) scratch->Reserve(kTileSlot, tile_bytes);
    pool.ParallelForThreads(units, (MinRowsPerPart(job) + unit - 1) / unit, [&](size_t begin, size_t end, int thread) {
      begin *= unit;
      end = std::min(end * unit, static_cast<size_t>(w.rows));
      Array<unsigned char> tile(static_cast<int64_t>(tile_bytes), scratch, thread, kTileSlot);
      Run(job, begin, end, tile.data());
      after(begin, end);
    });
  }

  // Small matrices run on fewer threads (ThreadPool::kMinBytesPerPart), counting a part's work as
  // bytes of a batch-1 row: each further activation row adds about half a row's batch-1 time
  // (measured on the embedded model, AVX2: the BF16 / FP8 / FP4 linears of a batch-16 step take
  // 8.8 / 8.5 / 9.5x their batch-1 time). Counting only the weight bytes kept a small model's
  // batched linears on one thread although each was worth tens of microseconds.
  static size_t MinRowsPerPart(const Job& job) {
    const uint64_t row_bytes = job.w->bytes() / static_cast<uint64_t>(job.w->rows);
    return ThreadPool::MinItemsPerPart(
        static_cast<size_t>(row_bytes + row_bytes * static_cast<uint64_t>(job.m - 1) / 2));
  }

  // Whether every e4m3 code times its block scale is a normal bf16 (or zero / NaN for the NaN
  // codes): then the kernels' FP8 decoders produce exactly FloatToBF16(E4M3ToFloat(c) * scale).
  // Scale bytes 10..245 (the FoldIsExact weight range); `scales`: the matrix's scale range.
  static bool Fp8DecodesToBf16(ExpRange scales) { return scales.lo >= -117 && scales.hi <= 118; }

  // Canonical activation rows (fp32 or bf16 pairs) of `row_size` elements; m = 0: none. (The GEMM
  // tiles take the rows after the last whole quad as a 1-3 row tile, so no zero rows follow.)
  template <class T>
  static Array<T> Activations(int64_t m, int64_t row_size, ThreadScratch* scratch, int slot) {
    return Array<T>(m * row_size, scratch, 0, slot);
  }

  static void Run(const Job& job, size_t begin, size_t end, unsigned char* scratch) {
    if (job.m <= job.stream_max_m) {
      Isa::StreamRows(job, static_cast<int64_t>(begin), static_cast<int64_t>(end), scratch);
    } else {
      Isa::PanelRows(job, static_cast<int64_t>(begin), static_cast<int64_t>(end), scratch);
    }
  }

  // Activation preparation: rows in parallel where a part's rows (each reading and writing a row
  // of fp32 activations) pay for a hand-off, as the CPU backend's row-wise ops. (A threshold of
  // 4096 groups kept a 512-token prefill of the embedded model, K = 192, on the caller: 4% of it.)
  template <class Body>
  static void ForRows(ThreadPool& pool, int64_t m, int64_t groups, const Body& body) {
    const size_t row_bytes = 2 * sizeof(float) * static_cast<size_t>(groups * kGroup);
    pool.ForEachItem(static_cast<size_t>(m), row_bytes, [&](size_t r, int) { body(static_cast<int64_t>(r)); });
  }

  // Weight rows [begin, end): elements whose scales make folding inexact get the oracle's bits.
  // One pass over the rows' (contiguous) scale bytes settles the usual case.
  static void RecomputeInexact(const WeightMatrix& w, const float* x, int64_t m, float* y, const ExpRange* act,
                               ExpRange all, size_t begin, size_t end) {
    const int64_t blocks = w.scale_cols();
    const bool fp8 = w.format == MatrixFormat::kFP8Block32;
    // The interleaved copy knows its scale range, which spares a pass over the scales.
    if (w.interleaved &&
        FoldIsExact<Isa>(w.format, all, {w.interleaved.scale_min - 127, w.interleaved.scale_max - 127}))
      return;
    const int64_t first = fp8 ? static_cast<int64_t>(begin) / kQuantBlock : static_cast<int64_t>(begin);
    const int64_t last = fp8 ? (static_cast<int64_t>(end) - 1) / kQuantBlock : static_cast<int64_t>(end) - 1;
    if (FoldIsExact<Isa>(w.format, all, Isa::ScaleRange(w.scales + first * blocks, (last - first + 1) * blocks)))
      return;
    Oracle oracle(w);
    for (int64_t n = static_cast<int64_t>(begin); n < static_cast<int64_t>(end);) {
      const int64_t stop =
          fp8 ? std::min<int64_t>(static_cast<int64_t>(end), (n / kQuantBlock + 1) * kQuantBlock) : n + 1;
      const uint8_t* scales = w.scales + (fp8 ? n / kQuantBlock : n) * blocks;
      const ExpRange b = Isa::ScaleRange(scales, blocks);
      if (!FoldIsExact<Isa>(w.format, all, b)) {
        for (int64_t r = 0; r < m; ++r) {
          if (FoldIsExact<Isa>(w.format, act[r], b)) continue;
          for (int64_t row = n; row < stop; ++row) y[r * w.rows + row] = oracle.Element(x + r * w.cols, row);
        }
      }
      n = stop;
    }
  }

  // A replica of the scalar QuantizedLinear loop for one element (same operations, same order).
  class Oracle {
   public:
    explicit Oracle(const WeightMatrix& w) : w_(w), blocks_(w.cols / kQuantBlock) {}
    float Element(const float* x_row, int64_t n) {
      if (x_codes_.data() == nullptr) Allocate();
      if (x_row != cached_row_) {
        QuantizeFP8PowerOfTwo({x_row, static_cast<size_t>(w_.cols)}, kQuantBlock,
                              {codes_.data(), static_cast<size_t>(w_.cols)},
                              {x_scales_.data(), static_cast<size_t>(blocks_)});
        for (int64_t c = 0; c < w_.cols; ++c) x_codes_[c] = E4M3ToFloat(codes_[c]);
        cached_row_ = x_row;
      }
      w_.UnscaledRow(n, w_row_.data());
      float acc = 0.0f;
      for (int64_t kb = 0; kb < blocks_; ++kb) {
        float partial = 0.0f;
        for (int64_t k = kb * kQuantBlock; k < (kb + 1) * kQuantBlock; ++k) partial += x_codes_[k] * w_row_[k];
        acc += partial * x_scales_[kb] * w_.BlockScale(n, kb);
      }
      return BF16ToFloat(FloatToBF16(acc));
    }

   private:
    void Allocate() {
      x_codes_ = ArrayOwner<float>(w_.cols);
      w_row_ = ArrayOwner<float>(w_.cols);
      x_scales_ = ArrayOwner<float>(blocks_);
      codes_ = ArrayOwner<uint8_t>(w_.cols);
    }
    // Movable holder for the lazily allocated buffers (only pathological scales need them).
    template <class T>
    class ArrayOwner {
     public:
      ArrayOwner() = default;
      explicit ArrayOwner(int64_t count) : data_(new T[count]()) {}
      ArrayOwner(ArrayOwner&& other) noexcept : data_(other.data_) { other.data_ = nullptr; }
      ArrayOwner& operator=(ArrayOwner&& other) noexcept {
        std::swap(data_, other.data_);
        return *this;
      }
      ~ArrayOwner() { delete[] data_; }
      T* data() const { return data_; }
      T& operator[](int64_t i) const { return data_[i]; }

     private:
      T* data_ = nullptr;
    };

    const WeightMatrix& w_;
    int64_t blocks_;
    const float* cached_row_ = nullptr;
    ArrayOwner<float> x_codes_, w_row_, x_scales_;
    ArrayOwner<uint8_t> codes_;
  };
};

}  // namespace linear_simd
}  // namespace deepinfer
