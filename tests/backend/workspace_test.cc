#include <gtest/gtest.h>

#include <cstdint>

#include "backend/tensor.h"

namespace deepinfer {
namespace {

TEST(WorkspaceTest, TensorsAreAlignedContiguousAndDisjoint) {
  Workspace workspace;
  const Tensor a = workspace.Take<float>({3, 5});
  const Tensor b = workspace.Take<uint8_t>({7});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 64, 0u);
  EXPECT_TRUE(a.contiguous());
  EXPECT_EQ(a.rows(), 3);
  EXPECT_EQ(a.row_elements(), 5);
  EXPECT_EQ(a.strides[0], 5);
  EXPECT_GE(static_cast<uint8_t*>(b.data), reinterpret_cast<uint8_t*>(a.host<float>() + 15));
  EXPECT_EQ(a.Rows(1, 2).host<float>(), a.host<float>() + 5);
  EXPECT_EQ(a.Reshaped({15}).rows(), 15);
  EXPECT_THROW(a.host<int32_t>(), Error);
  EXPECT_THROW(a.Rows(2, 2), Error);
}

TEST(WorkspaceTest, ZeroRowTensorsKeepTheirRowWidth) {
  Workspace workspace;
  const Tensor t = workspace.Take<float>({0, 64});
  EXPECT_EQ(t.rows(), 0);
  EXPECT_EQ(t.row_elements(), 64);
  EXPECT_EQ(t.elements(), 0);
}

TEST(WorkspaceTest, ResetFoldsTheBlocksIntoOneOfTheHighWaterSize) {
  Workspace workspace;
  for (int i = 0; i < 4; ++i) workspace.Take<float>({1 << 20});  // 4 MiB each: several blocks
  const uint64_t high_water = workspace.high_water_bytes();
  workspace.Reset();
  EXPECT_EQ(workspace.used_bytes(), 0u);
  EXPECT_EQ(workspace.held_bytes(), high_water);
  // The same step again fits: the arena does not grow.
  for (int i = 0; i < 4; ++i) workspace.Take<float>({1 << 20});
  EXPECT_EQ(workspace.held_bytes(), high_water);
}

TEST(WorkspaceTest, AScopeGivesBackWhatWasTakenInside) {
  Workspace workspace;
  const Tensor kept = workspace.Take<float>({16});
  const uint64_t before = workspace.used_bytes();
  void* inner = nullptr;
  {
    const Workspace::Scope scope(workspace);
    inner = workspace.Take<float>({1 << 21}).data;  // past the first block
    EXPECT_GT(workspace.used_bytes(), before);
  }
  EXPECT_EQ(workspace.used_bytes(), before);
  // The next scope reuses the same memory.
  const Workspace::Scope scope(workspace);
  EXPECT_EQ(workspace.Take<float>({1 << 21}).data, inner);
  EXPECT_NE(kept.data, inner);
}

}  // namespace
}  // namespace deepinfer
