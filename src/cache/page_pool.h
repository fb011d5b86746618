// The memory of the paged KV cache: fixed-size pages handed out under one byte budget
// (`--kv-cache-memory`), reference counted so sequences and the prefix cache can share them.
//
// The budget bounds every byte the pool holds: pages in use and the free pages it keeps for
// reuse. When a page does not fit, the pool first drops free pages of other sizes, then asks
// its evictor (the prefix cache) to give pages back, and only then reports failure, which the
// scheduler answers by queueing or preempting: nothing ever allocates past the budget.
//
// Not thread-safe: one engine thread allocates and releases. Kernels running on pool threads
// only read and write page contents.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace deepinfer {

struct Page {
  uint8_t* data = nullptr;
  size_t bytes = 0;
};
using PageRef = std::shared_ptr<Page>;

class PagePool : public std::enable_shared_from_this<PagePool> {
 public:
  // budget_bytes 0: no limit.
  static std::shared_ptr<PagePool> Create(uint64_t budget_bytes);
  ~PagePool();

  // A page of `bytes` (contents unspecified), or null when the budget cannot hold it even after
  // eviction. Pages return to the pool when the last reference goes.
  PageRef Allocate(size_t bytes);
  // A new page holding a copy of `page`, or null as above.
  PageRef Clone(const Page& page);

  // Called while a page does not fit; frees something and returns true, or returns false when
  // it has nothing left to give. Cleared with an empty function.
  void SetEvictor(std::function<bool()> evict_one) { evictor_ = std::move(evict_one); }

  uint64_t budget_bytes() const { return budget_; }
  uint64_t held_bytes() const { return held_; }      // in use + kept free
  uint64_t in_use_bytes() const { return in_use_; }  // referenced by someone
  uint64_t peak_held_bytes() const { return peak_held_; }
  uint64_t pages_in_use() const { return pages_in_use_; }

  // Gives every kept free page back to the system.
  void Trim();

 private:
  explicit PagePool(uint64_t budget_bytes) : budget_(budget_bytes) {}
  bool Fits(size_t bytes) const { return budget_ == 0 || held_ + bytes <= budget_; }
  void DropFreePages(size_t keep_size);
  void Release(Page* page);

  uint64_t budget_;
  uint64_t held_ = 0;
  uint64_t in_use_ = 0;
  uint64_t peak_held_ = 0;
  uint64_t pages_in_use_ = 0;
  std::map<size_t, std::vector<std::unique_ptr<uint8_t[]>>> free_;
  std::function<bool()> evictor_;
};

}  // namespace deepinfer
