#include "core/thread_scratch.h"

#include "core/error.h"

namespace deepinfer {

void* ThreadScratch::Buffer(int thread, int slot, size_t bytes) {
  DI_CHECK(thread >= 0 && thread < threads() && slot >= 0 && slot < kSlots, "scratch (", thread, ", ", slot,
           ") outside ", threads(), " threads x ", kSlots, " slots");
  Slot& s = slots_[thread].slot[slot];
  if (s.bytes < bytes) {
    s.bytes = std::max(bytes, 2 * s.bytes);
    s.memory = std::make_unique_for_overwrite<std::byte[]>(s.bytes + 64);
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(s.memory.get());
  return reinterpret_cast<void*>((base + 63) / 64 * 64);
}

uint64_t ThreadScratch::held_bytes() const {
  uint64_t total = 0;
  for (const ThreadSlots& thread : slots_) {
    for (const Slot& slot : thread.slot) total += slot.bytes;
  }
  return total;
}

}  // namespace deepinfer
