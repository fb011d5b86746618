#include "core/thread_scratch.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "core/error.h"

namespace deepinfer {
namespace {

TEST(ThreadScratch, BuffersAreAlignedAndKeepTheirMemory) {
  ThreadScratch scratch(2);
  void* first = scratch.Buffer(1, 2, 1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
  EXPECT_EQ(scratch.Buffer(1, 2, 10), first);  // smaller: the same memory
  EXPECT_EQ(scratch.held_bytes(), 1000u);
  scratch.Buffer(1, 2, 1500);  // larger: grows to at least twice the old size
  EXPECT_EQ(scratch.held_bytes(), 2000u);
}

// Which pool thread runs which part of a call depends on timing: a part that runs on a thread
// for the first time must find its buffer already sized, or a warmed-up forward would allocate.
TEST(ThreadScratch, ReserveSizesTheSlotOfEveryThread) {
  ThreadScratch scratch(3);
  scratch.Reserve(1, 4096);
  EXPECT_EQ(scratch.held_bytes(), 3u * 4096u);
  void* buffers[3];
  for (int thread = 0; thread < 3; ++thread) buffers[thread] = scratch.Buffer(thread, 1, 4096);
  EXPECT_EQ(scratch.held_bytes(), 3u * 4096u);  // no thread grew
  scratch.Reserve(1, 100);                      // smaller than held: nothing changes
  for (int thread = 0; thread < 3; ++thread) EXPECT_EQ(scratch.Buffer(thread, 1, 4096), buffers[thread]);
  EXPECT_EQ(scratch.held_bytes(), 3u * 4096u);
}

TEST(ThreadScratch, OutOfRangeThreadsAndSlotsAreErrors) {
  ThreadScratch scratch(2);
  EXPECT_THROW(scratch.Buffer(2, 0, 8), Error);
  EXPECT_THROW(scratch.Buffer(0, ThreadScratch::kSlots, 8), Error);
  EXPECT_THROW(scratch.Reserve(-1, 8), Error);
}

}  // namespace
}  // namespace deepinfer
