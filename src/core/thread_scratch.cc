#include "core/thread_scratch.h"

#include "core/error.h"

namespace deepinfer {

void ThreadScratch::Slot::Grow(size_t at_least) {
  if (bytes >= at_least) return;
  bytes = std::max(at_least, 2 * bytes);
  memory = std::make_unique_for_overwrite<std::byte[]>(bytes + 64);
}

void* ThreadScratch::Buffer(int thread, int slot, size_t bytes) {
  DI_CHECK(thread >= 0 && thread < threads() && slot >= 0 && slot < kSlots, "scratch (", thread, ", ", slot,
           ") outside ", threads(), " threads x ", kSlots, " slots");
  Slot& s = slots_[thread].slot[slot];
  s.Grow(bytes);
  const uintptr_t base = reinterpret_cast<uintptr_t>(s.memory.get());
  return reinterpret_cast<void*>((base + 63) / 64 * 64);
}

void ThreadScratch::Reserve(int slot, size_t bytes) {
  DI_CHECK(slot >= 0 && slot < kSlots, "scratch slot ", slot, " outside ", kSlots, " slots");
  for (ThreadSlots& thread : slots_) thread.slot[slot].Grow(bytes);
}

uint64_t ThreadScratch::held_bytes() const {
  uint64_t total = 0;
  for (const ThreadSlots& thread : slots_) {
    for (const Slot& slot : thread.slot) total += slot.bytes;
  }
  return total;
}

}  // namespace deepinfer
