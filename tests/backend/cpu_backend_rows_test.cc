// The CPU backend's row-wise ops split their rows over the pool when the rows are large (a
// prefill's): every row is written, and the bits do not depend on the thread count.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/rope.h"
#include "kernels/cpu/ops.h"

namespace deepinfer {
namespace {

// Rows of 16384 floats (64 KB): every op below gives each row a part of its own.
constexpr int64_t kRows = 7;
constexpr int64_t kDim = 16384;
constexpr uint32_t kUnwritten = 0x7fc0dead;  // a NaN no op computes

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<float> Unwritten(size_t n) { return std::vector<float>(n, std::bit_cast<float>(kUnwritten)); }

Tensor Rows(std::vector<float>& v, int64_t rows) {
  return Tensor::Contiguous(ElementType::kF32, Device::kHost, {rows, static_cast<int64_t>(v.size()) / rows}, v.data());
}

// Runs `op` on a backend over a pool of `threads` and returns the outputs it filled.
using Op = std::function<std::vector<float>(CpuBackend&)>;
std::vector<float> RunOn(int threads, const Op& op) {
  ThreadPool pool(threads);
  CpuBackend backend(pool, DetectIsa());
  return op(backend);
}

void ExpectSameBitsOnEveryThreadCount(const char* name, const Op& op) {
  SCOPED_TRACE(name);
  const std::vector<float> one = RunOn(1, op);
  for (size_t i = 0; i < one.size(); ++i) ASSERT_NE(std::bit_cast<uint32_t>(one[i]), kUnwritten) << "element " << i;
  for (const int threads : {2, 3}) {
    const std::vector<float> many = RunOn(threads, op);
    ASSERT_EQ(many.size(), one.size());
    EXPECT_EQ(0, std::memcmp(many.data(), one.data(), one.size() * sizeof(float))) << threads << " threads";
  }
}

TEST(CpuBackendRows, RowWiseOpsGiveTheSameBitsOnEveryThreadCount) {
  std::vector<float> x = Random(kRows * kDim, 1), y = Random(kRows * kDim, 2);
  const std::vector<float> weight = Random(kDim, 3);

  ExpectSameBitsOnEveryThreadCount("RmsNorm", [&](CpuBackend& backend) {
    std::vector<float> out = Unwritten(x.size());
    backend.RmsNorm(Rows(x, kRows), weight, 1e-6f, Rows(out, kRows));
    for (int64_t r = 0; r < kRows; ++r) {
      std::vector<float> want(kDim);
      RmsNorm(x.data() + r * kDim, kDim, weight.data(), 1e-6f, want.data());
      EXPECT_EQ(0, std::memcmp(want.data(), out.data() + r * kDim, kDim * sizeof(float))) << "row " << r;
    }
    return out;
  });
  ExpectSameBitsOnEveryThreadCount("SwiGlu", [&](CpuBackend& backend) {
    std::vector<float> out = Unwritten(x.size());
    const std::vector<float> route = Random(kRows, 4);
    backend.SwiGlu(Rows(x, kRows), Rows(y, kRows), route, 7.0f, Rows(out, kRows));
    return out;
  });
  ExpectSameBitsOnEveryThreadCount("Rope", [&](CpuBackend& backend) {
    std::vector<float> rotated = x;
    const RopeTable table(64, 10000.0, 0, 1.0, 32.0, 1.0);
    const std::vector<int64_t> positions = {0, 5, 17, 4096, 3, 9, 100000};
    backend.Rope(Rows(rotated, kRows), 32, table, positions, /*inverse=*/false);
    return rotated;
  });
  ExpectSameBitsOnEveryThreadCount("HcCollapse", [&](CpuBackend& backend) {
    std::vector<float> out = Unwritten(x.size() / 4);
    std::vector<float> pre = Random(kRows * 4, 5);
    backend.HcCollapse(Rows(x, kRows), Rows(pre, kRows), Rows(out, kRows));
    return out;
  });
  ExpectSameBitsOnEveryThreadCount("EncodeWindowRows", [&](CpuBackend& backend) {
    std::vector<float> decoded = Unwritten(x.size());
    std::vector<uint8_t> codes(x.size()), exponents(x.size() / kWindowEntryBlock);
    backend.EncodeWindowRows(
        Rows(x, kRows), Tensor::Contiguous(ElementType::kU8, Device::kHost, {kRows, kDim}, codes.data()),
        Tensor::Contiguous(ElementType::kU8, Device::kHost, {kRows, kDim / kWindowEntryBlock}, exponents.data()),
        Rows(decoded, kRows));
    for (size_t i = 0; i < exponents.size(); ++i) decoded.push_back(exponents[i]);
    return decoded;
  });
  ExpectSameBitsOnEveryThreadCount("CompressorPool", [&](CpuBackend& backend) {
    std::vector<float> pooled = Unwritten(x.size() / 2);
    backend.CompressorPool(Rows(x, kRows * 2), Rows(y, kRows * 2), 2, Rows(pooled, kRows));
    return pooled;
  });
  ExpectSameBitsOnEveryThreadCount("EngramGate", [&](CpuBackend& backend) {
    // streams [rows, 2 x 4096]; kv [rows, 3 x 4096]: a key per copy and the value.
    std::vector<float> streams(x.begin(), x.begin() + kRows * 8192);
    std::vector<float> kv(y.begin(), y.begin() + kRows * 12288);
    const std::vector<float> gate = Random(8192, 6);
    backend.EngramGate(Rows(kv, kRows), gate, 1e-6f, Rows(streams, kRows));
    return streams;
  });
}

}  // namespace
}  // namespace deepinfer
