// kernel_ab: two builds of the SIMD linear kernels (A: a baseline copy of linear_avx2.cc /
// linear_avx512.cc, B: the tree's), timed in one process in alternating blocks of calls, so that
// the minutes of a noisy host (a shared VM's DRAM and L3 move by 30% from one minute to the next)
// fall on both alike. It reports the per-round ratio B / A (median and quartiles), which stays
// steady to a few percent where two separate benchmark runs differ by more than the change.
// Before timing, A and B run once on the same weights and their outputs are compared bit for bit.
//
//   tools/kernel_ab.sh REV [flags]   builds A from revision REV's kernel files and runs this
//   build/bench/kernel_ab [flags]    A/A (or whatever KERNEL_AB_BASELINE_DIR holds)
// Weights are in place (no interleaved copy); cold unless --hot (copies filling 1 GiB, cycled), in
// huge pages unless --small-pages.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench_operands.h"
#include "core/thread_pool.h"
#include "core/thread_scratch.h"
#include "io/weight_matrix.h"
#include "kernels/cpu/cpu_context.h"

namespace deepinfer {

// The two builds' entry points (bench/CMakeLists.txt renames each build's).
#define DI_KERNEL_AB_ENTRY_POINTS(V)                                                                           \
  void QuantizedLinearAvx2_##V(const WeightMatrix& w, const float* x, int64_t m, float* y, ThreadPool& pool,   \
                               ThreadScratch* scratch);                                                        \
  void DenseLinearAvx2_##V(const WeightMatrix& w, const float* x, int64_t m, float* y, bool round_to_bf16,     \
                           ThreadPool& pool, ThreadScratch* scratch);                                          \
  void QuantizedLinearAvx512_##V(const WeightMatrix& w, const float* x, int64_t m, float* y, ThreadPool& pool, \
                                 Bf16Dot dot, ThreadScratch* scratch);                                         \
  void DenseLinearAvx512_##V(const WeightMatrix& w, const float* x, int64_t m, float* y, bool round_to_bf16,   \
                             ThreadPool& pool, Bf16Dot dot, ThreadScratch* scratch);
DI_KERNEL_AB_ENTRY_POINTS(A)
DI_KERNEL_AB_ENTRY_POINTS(B)
#undef DI_KERNEL_AB_ENTRY_POINTS

namespace {

constexpr size_t kColdBytes = size_t{1} << 30;  // > the LLC: cycled copies stream from DRAM

struct Options {
  IsaLevel isa = DetectIsa();
  Bf16Dot dot = ChooseBf16Dot();
  MatrixFormat format = MatrixFormat::kFP8Block32;
  int64_t n = 5120, k = 8192, m = 1;
  int threads = 2, rounds = 20, calls = 0;
  bool hot = false, expect_same_bits = false, plan_given = false, small_pages = false;
};

[[noreturn]] void Usage(const std::string& error) {
  std::fprintf(error.empty() ? stdout : stderr,
               "%s%s"
               "usage: kernel_ab [--isa avx2|avx512] [--plan fma|fp8-gemv-dot|quantized-dot] [--format fp4|fp8|bf16]\n"
               "                 [--n ROWS] [--k COLS] [--m ACTIVATION_ROWS] [--threads T] [--rounds R] [--calls C]\n"
               "                 [--hot] [--small-pages] [--expect-same-bits]\n"
               "  defaults: this CPU's best ISA and plan, fp8 5120 x 8192, m 1, 2 threads, 20 rounds, calls for\n"
               "  ~20 ms a block; --hot: one copy of the weights (cache-resident where it fits) instead of\n"
               "  1 GiB of copies; --small-pages: the weights in 4 KB pages (MADV_NOHUGEPAGE), as a model's\n"
               "  file mapping has them, instead of the anonymous memory's transparent huge pages;\n"
               "  --expect-same-bits: exit 1 if A and B give different outputs\n",
               error.empty() ? "" : "kernel_ab: ", error.empty() ? "" : (error + "\n").c_str());
  std::exit(error.empty() ? 0 : 2);
}

int64_t PositiveInt(std::string_view flag, const char* text, int64_t max) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < 1 || v > max) {
    Usage(std::string(flag) + " wants an integer in [1, " + std::to_string(max) + "], got '" + text + "'");
  }
  return v;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help") Usage("");
    if (flag == "--hot") {
      o.hot = true;
      continue;
    }
    if (flag == "--expect-same-bits") {
      o.expect_same_bits = true;
      continue;
    }
    if (flag == "--small-pages") {
      o.small_pages = true;
      continue;
    }
    if (i + 1 >= argc) Usage(std::string(flag) + " wants a value (or is not a flag)");
    const char* value = argv[++i];
    if (flag == "--isa") {
      const std::optional<IsaLevel> isa = ParseIsa(value);
      if (!isa || *isa == IsaLevel::kScalar) Usage(std::string("--isa wants avx2 or avx512, got '") + value + "'");
      o.isa = *isa;
    } else if (flag == "--plan") {
      const std::optional<Bf16Dot> dot = ParseBf16Dot(value);
      if (!dot) Usage(std::string("--plan wants fma, fp8-gemv-dot or quantized-dot, got '") + value + "'");
      o.dot = *dot;
      o.plan_given = true;
    } else if (flag == "--format") {
      const std::string_view f = value;
      if (f == "fp4") {
        o.format = MatrixFormat::kFP4Row32;
      } else if (f == "fp8") {
        o.format = MatrixFormat::kFP8Block32;
      } else if (f == "bf16") {
        o.format = MatrixFormat::kBF16;
      } else {
        Usage(std::string("--format wants fp4, fp8 or bf16, got '") + value + "'");
      }
    } else if (flag == "--n") {
      o.n = PositiveInt(flag, value, 1 << 20);
    } else if (flag == "--k") {
      o.k = PositiveInt(flag, value, 1 << 20);
    } else if (flag == "--m") {
      o.m = PositiveInt(flag, value, 4096);
    } else if (flag == "--threads") {
      o.threads = static_cast<int>(PositiveInt(flag, value, 1024));
    } else if (flag == "--rounds") {
      o.rounds = static_cast<int>(PositiveInt(flag, value, 100000));
    } else if (flag == "--calls") {
      o.calls = static_cast<int>(PositiveInt(flag, value, 1 << 24));
    } else {
      Usage("unknown flag " + std::string(flag));
    }
  }
  if (o.isa == IsaLevel::kScalar) Usage("this CPU has no AVX2: there is no SIMD kernel to compare");
  if (o.k % kQuantBlock != 0) Usage("--k must be a multiple of 32");
  if (o.isa > DetectIsa()) Usage("--isa " + std::string(IsaName(o.isa)) + " is above what this CPU runs");
  if (o.isa != IsaLevel::kAvx512 && o.plan_given) Usage("--plan is a choice of the avx512 kernels only");
  if (o.isa == IsaLevel::kAvx512 && o.dot != Bf16Dot::kNone && !CpuHasAvx512Bf16()) {
    Usage("--plan " + std::string(Bf16DotName(o.dot)) + " needs AVX512-BF16, which this CPU lacks");
  }
  return o;
}

using bench::SplitMix;

// Anonymous memory, in transparent huge pages where the system gives them, or (small_pages) in
// 4 KB pages, as the page cache holds a model's mapped checkpoint.
class PageMapping {
 public:
  PageMapping() = default;
  PageMapping(size_t bytes, bool small_pages) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "kernel_ab: cannot map %zu bytes for the weights: %s\n", bytes, std::strerror(errno));
      std::exit(1);
    }
    if (madvise(p, bytes, small_pages ? MADV_NOHUGEPAGE : MADV_HUGEPAGE) != 0 && small_pages) {
      std::fprintf(stderr, "kernel_ab: madvise(MADV_NOHUGEPAGE): %s\n", std::strerror(errno));
      std::exit(1);
    }
    data_ = static_cast<uint8_t*>(p);
  }
  PageMapping(PageMapping&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(o.bytes_) {}
  PageMapping& operator=(PageMapping&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~PageMapping() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  uint8_t* get() const { return data_; }

 private:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

// Copies of one random matrix (one with --hot, else enough to fill kColdBytes): every byte pattern
// of the format except FP8's NaN codes (which send a tile to the general decoder), scales
// 2^-7..2^-3, BF16 values near 2^-7.
struct Copies {
  std::unique_ptr<uint8_t[]> scales;
  PageMapping data;
  std::vector<WeightMatrix> matrices;
  uint64_t bytes_each = 0;  // payload plus scales

  explicit Copies(const Options& o) {
    const int64_t payload = MatrixRowBytes(o.format, o.k) * o.n;
    const int64_t count = o.hot ? 1 : std::max<int64_t>(2, static_cast<int64_t>(kColdBytes) / payload);
    const WeightMatrix shape{o.format, o.n, o.k};
    const int64_t scale_bytes = shape.scale_rows() * shape.scale_cols();
    const int64_t stride = (payload + 63) / 64 * 64;
    data = PageMapping(static_cast<size_t>(stride * count), o.small_pages);
    scales = std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(std::max<int64_t>(1, scale_bytes * count)));
    uint64_t seed = 42;
    for (int64_t i = 0; i + 8 <= stride * count; i += 8) {
      uint64_t v = SplitMix(seed);
      if (o.format == MatrixFormat::kFP8Block32) v &= 0xf7f7f7f7f7f7f7f7ull;  // exponent 1111 never: no NaN
      if (o.format == MatrixFormat::kBF16) v = bench::Bf16Weights(v);
      std::memcpy(data.get() + i, &v, 8);
    }
    for (int64_t i = 0; i < scale_bytes * count; ++i) scales[i] = static_cast<uint8_t>(120 + SplitMix(seed) % 5);
    for (int64_t c = 0; c < count; ++c) {
      WeightMatrix w = shape;
      w.data = data.get() + c * stride;
      w.scales = scale_bytes > 0 ? scales.get() + c * scale_bytes : nullptr;
      // What the loader finds: the exponent range of a BF16 matrix, whether an FP8 one holds NaN codes.
      if (o.format == MatrixFormat::kBF16) w.bf16_exponents = ScanBf16Exponents(w);
      if (o.format == MatrixFormat::kFP8Block32) w.fp8_nan_free = ScanFp8NanFree(w);
      matrices.push_back(w);
    }
    bytes_each = static_cast<uint64_t>(payload + scale_bytes);
  }
};

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

int Main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  const Copies copies(o);
  const int64_t count = static_cast<int64_t>(copies.matrices.size());
  const std::vector<float> x = bench::Activations(o.m, o.k);
  std::vector<float> y_a(static_cast<size_t>(o.m * o.n)), y_b(y_a.size());
  ThreadPool pool(o.threads);
  ThreadScratch scratch_a(o.threads), scratch_b(o.threads);
  const bool dense = o.format == MatrixFormat::kBF16;
  const auto call = [&](bool b, const WeightMatrix& w) {
    float* y = b ? y_b.data() : y_a.data();
    ThreadScratch* s = b ? &scratch_b : &scratch_a;
    if (o.isa == IsaLevel::kAvx2) {
      if (dense) return (b ? DenseLinearAvx2_B : DenseLinearAvx2_A)(w, x.data(), o.m, y, false, pool, s);
      return (b ? QuantizedLinearAvx2_B : QuantizedLinearAvx2_A)(w, x.data(), o.m, y, pool, s);
    }
    if (dense) return (b ? DenseLinearAvx512_B : DenseLinearAvx512_A)(w, x.data(), o.m, y, false, pool, o.dot, s);
    return (b ? QuantizedLinearAvx512_B : QuantizedLinearAvx512_A)(w, x.data(), o.m, y, pool, o.dot, s);
  };

  call(false, copies.matrices[0]);
  call(true, copies.matrices[0]);
  const size_t differing = static_cast<size_t>(std::count_if(
      y_a.begin(), y_a.end(), [&](const float& a) { return std::memcmp(&a, &y_b[&a - y_a.data()], 4) != 0; }));

  // Calls per block: about 20 ms of A.
  int calls = o.calls;
  if (calls == 0) {
    const double start = Now();
    int done = 0;
    for (; done < 1000 && Now() - start < 0.02; ++done) call(false, copies.matrices[(done + 1) % count]);
    calls = std::max(1, done);
  }
  int64_t next = 0;
  const auto block = [&](bool b) {
    const double start = Now();
    for (int i = 0; i < calls; ++i) call(b, copies.matrices[next++ % count]);
    return (Now() - start) / calls;
  };
  std::vector<double> a, b, ratio;
  for (int r = 0; r < o.rounds; ++r) {
    const bool b_first = r % 2 == 1;  // alternate the order: drift within a round cancels
    const double first = block(b_first), second = block(!b_first);
    a.push_back(b_first ? second : first);
    b.push_back(b_first ? first : second);
    ratio.push_back(b.back() / a.back());
  }

  const double gb = static_cast<double>(copies.bytes_each) * 1e-9;
  const double flops = 2.0 * static_cast<double>(o.m * o.n * o.k) * 1e-9;
  std::printf("kernel_ab: %s %lld x %lld, M = %lld, isa %s (plan %s), %d threads, %s, %d rounds of %d calls\n",
              o.format == MatrixFormat::kFP4Row32     ? "fp4"
              : o.format == MatrixFormat::kFP8Block32 ? "fp8"
                                                      : "bf16",
              static_cast<long long>(o.n), static_cast<long long>(o.k), static_cast<long long>(o.m),
              std::string(IsaName(o.isa)).c_str(), std::string(Bf16DotName(o.dot)).c_str(), o.threads,
              o.hot ? "hot (one copy)" : "cold (1 GiB of copies)", o.rounds, calls);
  for (const auto& [name, t] : {std::pair{"A", &a}, std::pair{"B", &b}}) {
    const double best = Quantile(*t, 0.0);
    std::printf("  %s  min %10.1f us  median %10.1f us  %7.2f GB/s of weights  %8.2f GFLOP/s (at the min)\n", name,
                best * 1e6, Quantile(*t, 0.5) * 1e6, gb / best, flops / best);
  }
  std::printf("  B / A per round: median %.3f, quartiles %.3f .. %.3f\n", Quantile(ratio, 0.5), Quantile(ratio, 0.25),
              Quantile(ratio, 0.75));
  if (differing == 0) {
    std::printf("  outputs: the same bits\n");
  } else {
    std::printf("  outputs: %zu of %zu differ between A and B\n", differing, y_a.size());
  }
  return o.expect_same_bits && differing != 0 ? 1 : 0;
}

}  // namespace
}  // namespace deepinfer

int main(int argc, char** argv) { return deepinfer::Main(argc, argv); }
