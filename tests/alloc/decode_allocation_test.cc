// No heap allocation inside a decode step once it has run at that shape: every activation comes
// from the backend's workspace, every kernel's scratch from the backend's per-thread scratch.
// This binary replaces the global operator new to count the allocations of every thread. The
// SIMD levels are checked; the scalar oracles (the test reference, never the serving path)
// allocate their temporaries per call, as written for clarity.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "backend/cpu_backend.h"
#include "model/model.h"

namespace {

std::atomic<bool> counting{false};
std::atomic<int64_t> allocations{0};

void* Allocate(size_t size, size_t alignment) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = alignment <= alignof(std::max_align_t)
                ? std::malloc(size == 0 ? 1 : size)
                : std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(size_t size) { return Allocate(size, 0); }
void* operator new[](size_t size) { return Allocate(size, 0); }
void* operator new(size_t size, std::align_val_t alignment) { return Allocate(size, static_cast<size_t>(alignment)); }
void* operator new[](size_t size, std::align_val_t alignment) { return Allocate(size, static_cast<size_t>(alignment)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace deepinfer {
namespace {

// Allocations of one greedy decode step of each tiny model at every SIMD level, after warm-up
// steps (the workspace, the scratch, the logits buffer and the block's pages reach their size).
TEST(DecodeAllocationTest, ADecodeStepAfterWarmUpAllocatesNothing) {
  std::vector<IsaLevel> simd_levels;
  for (IsaLevel isa : SupportedIsaLevels()) {
    if (isa != IsaLevel::kScalar) simd_levels.push_back(isa);
  }
  if (simd_levels.empty()) GTEST_SKIP() << "this CPU has no SIMD level";
  for (const char* name : {"tiny-a", "tiny-b", "tiny-c", "kjv-tiny"}) {
    const std::unique_ptr<Model> model = Model::Load(std::string(DEEPINFER_TEST_DATA_DIR) + "/models/" + name);
    const int64_t vocab = model->config().vocab_size;
    ThreadPool pool(2);
    for (IsaLevel isa : simd_levels) {
      CpuBackend backend(pool, isa);
      const ComputeContext ctx{backend};
      SequenceState state = model->NewSequence();
      std::vector<int32_t> prompt;
      for (int i = 0; i < 20; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 5) % vocab));
      std::vector<float> logits;
      const ForwardItem prefill{&state, prompt};
      model->ForwardInto({&prefill, 1}, ctx, logits);
      int32_t next = 0;
      auto step = [&] {
        next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        const ForwardItem decode{&state, std::span<const int32_t>(&next, 1)};
        model->ForwardInto({&decode, 1}, ctx, logits);
      };
      // Warm-up past the next block boundary, so the step measured below needs no new page.
      while (state.length() % state.layout().block_tokens != 1) step();
      step();
      allocations = 0;
      counting = true;
      step();
      counting = false;
      EXPECT_EQ(allocations.load(), 0) << name << " at " << IsaName(isa);
    }
  }
}

}  // namespace
}  // namespace deepinfer
