// One sequence's state between forwards (spec section 4.1), held in pages of a PagePool in the
// formats of CacheLayout. Copying a SequenceState shares its pages; a page is copied the first
// time a sequence writes to a page someone else also holds (copy-on-write), so copies and
// prefix-cache entries never see each other's writes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cache/cache_layout.h"
#include "cache/page_pool.h"

namespace deepinfer {

class SequenceState {
 public:
  SequenceState() = default;  // holds nothing; Model::Forward rejects it
  SequenceState(std::shared_ptr<const CacheLayout> layout, std::shared_ptr<PagePool> pool);

  int64_t length = 0;                  // tokens already processed; the next token sits here
  std::vector<int32_t> engram_recent;  // compressed ids of the last lookback tokens, oldest first

  bool valid() const { return layout_ != nullptr; }
  const CacheLayout& layout() const { return *layout_; }
  PagePool& pool() const { return *pool_; }

  // Reading. A window entry is head_dim e4m3 codes followed by head_dim/32 ue8m0 exponents;
  // a compressed entry is laid out as CacheLayout describes.
  const uint8_t* window_entry(int layer, int64_t position) const;
  const uint8_t* compressed_entry(int layer, int64_t group) const;
  int64_t compressed_count(int layer) const { return compressed_count_[layer]; }
  int pending_count(int layer) const { return pending_count_[layer]; }
  // [pending_count, head_dim] each.
  const float* pending_kv(int layer) const;
  const float* pending_gate(int layer) const;

  // Writing, only inside pages PrepareAppend made ready.
  uint8_t* mutable_window_entry(int layer, int64_t position);
  uint8_t* AppendCompressed(int layer);  // the next group's entry
  // Replaces the partial group: `count` < ratio positions of kv and of gate.
  void SetPending(int layer, const float* kv, const float* gate, int count);

  // Makes every page that appending `tokens` positions writes exist and be this sequence's
  // alone. Returns false when the pool's budget cannot hold them; pages already made ready stay
  // (the state's values are unchanged either way).
  bool PrepareAppend(int64_t tokens);
  // The bytes PrepareAppend(tokens) would take from the pool.
  uint64_t BytesToPrepare(int64_t tokens) const;
  // Drops window pages that no later query can read (all their positions are older than the
  // window of the next token). The prefix cache may still hold them.
  void ReleaseStaleWindowPages();

  // Bytes of the pages this sequence references, plus its Engram history.
  uint64_t CacheBytes() const;

  // Prefix sharing. A full block (every position < length) never changes again.
  int64_t full_blocks() const { return length / layout_->block_tokens; }
  const PageRef& window_page(int64_t block) const { return window_pages_[block]; }
  const PageRef& compressed_page(int64_t block) const;
  // Turns a fresh state into one that has processed `blocks` full blocks whose pages are given
  // (window pages may be null where the window no longer reaches). Engram history is the
  // caller's (Model::EngramHistory).
  void AdoptBlocks(int64_t blocks, std::span<const PageRef> window_pages, std::span<const PageRef> compressed_pages);

 private:
  bool EnsureOwned(PageRef& page, int64_t bytes);

  std::shared_ptr<const CacheLayout> layout_;
  std::shared_ptr<PagePool> pool_;
  std::vector<PageRef> window_pages_;      // per block; null once out of the window
  std::vector<PageRef> compressed_pages_;  // per block; empty without KV sources
  PageRef state_page_;                     // partial groups; null without ratio > 1 sources
  std::vector<int64_t> compressed_count_;  // per layer
  std::vector<int> pending_count_;         // per layer
};

}  // namespace deepinfer
