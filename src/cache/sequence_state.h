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

  int64_t length() const { return length_; }  // tokens already processed; the next token sits here
  // Compressed ids of the last Engram look-back tokens, oldest first (empty without Engram).
  const std::vector<int32_t>& engram_recent() const { return engram_recent_; }

  // The end of a forward that wrote `tokens` positions from length() on (in pages PrepareAppend
  // made ready): the model's commit, the one place the length moves forward.
  void CommitAppend(int64_t tokens, std::span<const int32_t> engram_recent);

  bool valid() const { return layout_ != nullptr; }
  const CacheLayout& layout() const { return *layout_; }
  PagePool& pool() const { return *pool_; }

  // Reading: the raw entry bytes, or their parts as CacheLayout lays them out.
  const uint8_t* window_entry(int layer, int64_t position) const;
  const uint8_t* compressed_entry(int layer, int64_t group) const;
  WindowEntry<const uint8_t> window_parts(int layer, int64_t position) const {
    return layout_->WindowParts(window_entry(layer, position));
  }
  CompressedEntry<const uint8_t> compressed_parts(int layer, int64_t group) const {
    return layout_->CompressedParts(compressed_entry(layer, group));
  }
  int64_t compressed_count(int layer) const { return compressed_count_[layer]; }
  int pending_count(int layer) const { return pending_count_[layer]; }
  // [pending_count, head_dim] each.
  const float* pending_kv(int layer) const;
  const float* pending_gate(int layer) const;

  // Writing, only inside pages PrepareAppend made ready.
  uint8_t* mutable_window_entry(int layer, int64_t position);
  uint8_t* AppendCompressed(int layer);  // the next group's entry
  WindowEntry<uint8_t> mutable_window_parts(int layer, int64_t position) {
    return layout_->WindowParts(mutable_window_entry(layer, position));
  }
  CompressedEntry<uint8_t> AppendCompressedParts(int layer) {
    return layout_->CompressedParts(AppendCompressed(layer));
  }
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

  // Rollback of the last forward (a speculative verify, ForwardItem::rollback). During it the
  // model keeps each ratio > 1 source's raw compressor rows from the partial group before the
  // step on (KeepRollbackRows); its commit marks the step truncatable (MarkTruncatable). Then
  // Truncate(length) for any length from the step's start to its end leaves every value a later
  // forward reads (window entries, compressed entries and index keys, partial groups, Engram
  // history) equal to those of a state that never ran the dropped tokens. Pages past the new
  // length go back to the pool. Any other forward ends the truncatable window.
  void KeepRollbackRows(int layer, int64_t first_position, const float* kv, const float* gate, int64_t rows);
  void MarkTruncatable(int64_t step_start) { truncatable_from_ = step_start; }
  int64_t truncatable_from() const { return truncatable_from_; }  // -1: none
  void Truncate(int64_t length, std::span<const int32_t> engram_recent);
  // Every byte a later forward can read, in a fixed order (tests compare states with it).
  std::vector<uint8_t> VisibleBytes() const;

  // Prefix sharing. A full block (every position < length) never changes again.
  int64_t full_blocks() const { return length_ / layout_->block_tokens; }
  const PageRef& window_page(int64_t block) const { return window_pages_[block]; }
  const PageRef& compressed_page(int64_t block) const;
  // Turns a fresh state into one that has processed `blocks` full blocks whose pages are given
  // (window pages may be null where the window no longer reaches). Engram history is the
  // caller's (AdoptEngramHistory).
  void AdoptBlocks(int64_t blocks, std::span<const PageRef> window_pages, std::span<const PageRef> compressed_pages);
  // The Engram look-back of the adopted tokens (Model::EngramHistory), right after AdoptBlocks
  // (or on a fresh state, where a miss adopted nothing).
  void AdoptEngramHistory(std::span<const int32_t> history);

 private:
  bool EnsureOwned(PageRef& page, int64_t bytes);

  int64_t length_ = 0;
  std::vector<int32_t> engram_recent_;
  bool adopted_ = false;  // AdoptBlocks ran and no forward since
  std::shared_ptr<const CacheLayout> layout_;
  std::shared_ptr<PagePool> pool_;
  std::vector<PageRef> window_pages_;      // per block; null once out of the window
  std::vector<PageRef> compressed_pages_;  // per block; empty without KV sources
  PageRef state_page_;                     // partial groups; null without ratio > 1 sources
  std::vector<int64_t> compressed_count_;  // per layer
  std::vector<int> pending_count_;         // per layer
  // Truncation of the last forward: its start, and per ratio > 1 layer the raw rows of
  // positions [rollback_first_, rollback_first_ + rows) as kv rows then gate rows.
  int64_t truncatable_from_ = -1;
  std::vector<int64_t> rollback_first_;
  std::vector<std::vector<float>> rollback_rows_;
};

}  // namespace deepinfer
