#include "cache/page_pool.h"

#include <algorithm>
#include <cstring>

namespace deepinfer {

std::shared_ptr<PagePool> PagePool::Create(uint64_t budget_bytes) {
  return std::shared_ptr<PagePool>(new PagePool(budget_bytes));
}

PagePool::~PagePool() = default;

void PagePool::DropFreePages(size_t keep_size) {
  for (auto& [size, buffers] : free_) {
    if (size == keep_size) continue;
    held_ -= size * buffers.size();
    buffers.clear();
  }
}

void PagePool::Trim() {
  DropFreePages(0);
  free_.clear();
}

PageRef PagePool::Allocate(size_t bytes) {
  auto take_free = [&]() -> std::unique_ptr<uint8_t[]> {
    auto it = free_.find(bytes);
    if (it == free_.end() || it->second.empty()) return nullptr;
    std::unique_ptr<uint8_t[]> buffer = std::move(it->second.back());
    it->second.pop_back();
    return buffer;
  };
  std::unique_ptr<uint8_t[]> buffer = take_free();
  while (!buffer && !Fits(bytes)) {
    DropFreePages(bytes);
    if (Fits(bytes)) break;
    if (!evictor_ || !evictor_()) return nullptr;
    buffer = take_free();  // eviction may have returned a page of this very size
  }
  if (!buffer) {
    buffer.reset(new uint8_t[std::max<size_t>(bytes, 1)]);
    held_ += bytes;
    peak_held_ = std::max(peak_held_, held_);
  }
  in_use_ += bytes;
  ++pages_in_use_;
  Page* page = new Page{buffer.release(), bytes};
  // The deleter keeps the pool alive for as long as any of its pages is.
  return PageRef(page, [pool = shared_from_this()](Page* p) { pool->Release(p); });
}

PageRef PagePool::Clone(const Page& page) {
  PageRef copy = Allocate(page.bytes);
  if (copy) std::memcpy(copy->data, page.data, page.bytes);
  return copy;
}

void PagePool::Release(Page* page) {
  in_use_ -= page->bytes;
  --pages_in_use_;
  free_[page->bytes].emplace_back(page->data);
  delete page;
}

}  // namespace deepinfer
