// Scratch buffers per pool thread that keep their memory from call to call: where kernels take
// their temporaries, so that a forward allocates nothing once it has run at its shape.
//
// Buffer (thread, slot) is pool thread `thread`'s (the index ParallelForThreads passes; the
// caller is 0, inside a call and outside), for the parts it runs one after another. A kernel uses
// a few fixed slots of it, which stay valid until that (thread, slot) is asked for again, so a
// slot the caller fills before a call (the activations) is only read inside it, and the parts
// take their temporaries from other slots. Thread contract: each thread touches only its own
// buffers, except Reserve, which the thread that drives the pool calls between its parallel calls
// (no part running), so that a part never grows its buffer: which thread runs which part depends
// on timing, and a forward allocates nothing once it has run at its shape whichever threads ran
// its parts before. A ThreadScratch serves one forward at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace deepinfer {

class ThreadScratch {
 public:
  static constexpr int kSlots = 4;

  explicit ThreadScratch(int threads) : slots_(static_cast<size_t>(threads)) {}

  int threads() const { return static_cast<int>(slots_.size()); }
  uint64_t held_bytes() const;
  // At least `bytes`, 64-byte aligned, contents undefined.
  void* Buffer(int thread, int slot, size_t bytes);
  // Grows `slot` of every thread to at least `bytes` (see the thread contract above).
  void Reserve(int slot, size_t bytes);
  template <class T>
  T* Get(int thread, int slot, size_t count) {
    return static_cast<T*>(Buffer(thread, slot, count * sizeof(T)));
  }

 private:
  struct Slot {
    std::unique_ptr<std::byte[]> memory;
    size_t bytes = 0;
    void Grow(size_t at_least);
  };
  // Per thread, padded to its own cache lines.
  struct alignas(64) ThreadSlots {
    std::array<Slot, kSlots> slot;
  };
  std::vector<ThreadSlots> slots_;
};

}  // namespace deepinfer
