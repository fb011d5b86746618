#include "cache/sequence_state.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"

namespace deepinfer {

SequenceState::SequenceState(std::shared_ptr<const CacheLayout> layout, std::shared_ptr<PagePool> pool)
    : layout_(std::move(layout)), pool_(std::move(pool)) {
  compressed_count_.assign(layout_->num_layers, 0);
  pending_count_.assign(layout_->num_layers, 0);
  rollback_first_.assign(layout_->num_layers, 0);
  rollback_rows_.resize(layout_->num_layers);
}

const uint8_t* SequenceState::window_entry(int layer, int64_t position) const {
  const int64_t block = position / layout_->block_tokens;
  DI_CHECK(position >= 0 && position < length_ && block < static_cast<int64_t>(window_pages_.size()) &&
               window_pages_[block] != nullptr,
           "window entry of layer ", layer, " at position ", position, " is not cached (sequence length ", length_,
           ")");
  return window_pages_[block]->data + layout_->window_entry_offset(layer, position);
}

uint8_t* SequenceState::mutable_window_entry(int layer, int64_t position) {
  const int64_t block = position / layout_->block_tokens;
  DI_CHECK(block < static_cast<int64_t>(window_pages_.size()) && window_pages_[block] != nullptr &&
               window_pages_[block].use_count() == 1,
           "window page of position ", position, " was not prepared");
  return window_pages_[block]->data + layout_->window_entry_offset(layer, position);
}

const PageRef& SequenceState::compressed_page(int64_t block) const { return compressed_pages_[block]; }

const uint8_t* SequenceState::compressed_entry(int layer, int64_t group) const {
  DI_CHECK(layout_->compressed_offset[layer] >= 0 && group >= 0 && group < compressed_count_[layer],
           "compressed entry ", group, " of layer ", layer, " is not cached");
  const int64_t block = group * layout_->ratio[layer] / layout_->block_tokens;
  return compressed_pages_[block]->data + layout_->compressed_entry_offset(layer, group);
}

uint8_t* SequenceState::AppendCompressed(int layer) {
  const int64_t group = compressed_count_[layer];
  const int64_t block = group * layout_->ratio[layer] / layout_->block_tokens;
  DI_CHECK(layout_->compressed_offset[layer] >= 0 && block < static_cast<int64_t>(compressed_pages_.size()) &&
               compressed_pages_[block].use_count() == 1,
           "compressed page of layer ", layer, " group ", group, " was not prepared");
  ++compressed_count_[layer];
  return compressed_pages_[block]->data + layout_->compressed_entry_offset(layer, group);
}

const float* SequenceState::pending_kv(int layer) const {
  if (pending_count_[layer] == 0) return nullptr;
  return reinterpret_cast<const float*>(state_page_->data + layout_->pending_offset[layer]);
}

const float* SequenceState::pending_gate(int layer) const {
  if (pending_count_[layer] == 0) return nullptr;
  return reinterpret_cast<const float*>(state_page_->data + layout_->pending_offset[layer]) +
         (layout_->ratio[layer] - 1) * layout_->head_dim;
}

void SequenceState::SetPending(int layer, const float* kv, const float* gate, int count) {
  const int ratio = layout_->ratio[layer];
  DI_CHECK(count >= 0 && count < std::max(ratio, 1), "partial group of ", count, " positions at ratio ", ratio);
  pending_count_[layer] = count;
  if (count == 0) return;
  DI_CHECK(state_page_ != nullptr && state_page_.use_count() == 1, "state page was not prepared");
  float* base = reinterpret_cast<float*>(state_page_->data + layout_->pending_offset[layer]);
  // kv and gate may alias the page's own rows (a group still incomplete): memmove.
  std::memmove(base, kv, count * layout_->head_dim * sizeof(float));
  std::memmove(base + (ratio - 1) * layout_->head_dim, gate, count * layout_->head_dim * sizeof(float));
}

bool SequenceState::EnsureOwned(PageRef& page, int64_t bytes) {
  if (page && page.use_count() == 1) return true;
  PageRef fresh = page ? pool_->Clone(*page) : pool_->Allocate(static_cast<size_t>(bytes));
  if (!fresh) return false;
  page = std::move(fresh);
  return true;
}

bool SequenceState::PrepareAppend(int64_t tokens) {
  if (tokens <= 0) return true;
  const int64_t first = length_ / layout_->block_tokens;
  const int64_t last = (length_ + tokens - 1) / layout_->block_tokens;
  if (static_cast<int64_t>(window_pages_.size()) <= last) window_pages_.resize(last + 1);
  if (layout_->compressed_page_bytes > 0 && static_cast<int64_t>(compressed_pages_.size()) <= last) {
    compressed_pages_.resize(last + 1);
  }
  for (int64_t block = first; block <= last; ++block) {
    if (!EnsureOwned(window_pages_[block], layout_->window_page_bytes)) return false;
    if (layout_->compressed_page_bytes > 0 && !EnsureOwned(compressed_pages_[block], layout_->compressed_page_bytes)) {
      return false;
    }
  }
  if (layout_->state_page_bytes > 0 && !EnsureOwned(state_page_, layout_->state_page_bytes)) return false;
  return true;
}

uint64_t SequenceState::BytesToPrepare(int64_t tokens) const {
  if (tokens <= 0) return 0;
  auto needs = [](const std::vector<PageRef>& pages, int64_t block) {
    return block >= static_cast<int64_t>(pages.size()) || pages[block] == nullptr || pages[block].use_count() > 1;
  };
  uint64_t bytes = 0;
  const int64_t first = length_ / layout_->block_tokens;
  const int64_t last = (length_ + tokens - 1) / layout_->block_tokens;
  for (int64_t block = first; block <= last; ++block) {
    if (needs(window_pages_, block)) bytes += layout_->window_page_bytes;
    if (layout_->compressed_page_bytes > 0 && needs(compressed_pages_, block)) bytes += layout_->compressed_page_bytes;
  }
  if (layout_->state_page_bytes > 0 && (state_page_ == nullptr || state_page_.use_count() > 1)) {
    bytes += layout_->state_page_bytes;
  }
  return bytes;
}

void SequenceState::ReleaseStaleWindowPages() {
  // The next query (at `length_`) reads positions from length_ - window + 1 on.
  const int64_t oldest_needed = length_ - layout_->window + 1;
  const int64_t stale_blocks = std::max<int64_t>(0, oldest_needed) / layout_->block_tokens;
  for (int64_t block = 0; block < std::min<int64_t>(stale_blocks, window_pages_.size()); ++block) {
    window_pages_[block].reset();
  }
}

uint64_t SequenceState::CacheBytes() const {
  uint64_t total = engram_recent_.size() * sizeof(int32_t);
  for (const PageRef& page : window_pages_) total += page ? page->bytes : 0;
  for (const PageRef& page : compressed_pages_) total += page ? page->bytes : 0;
  if (state_page_) total += state_page_->bytes;
  return total;
}

void SequenceState::KeepRollbackRows(int layer, int64_t first_position, const float* kv, const float* gate,
                                     int64_t rows) {
  const int64_t dim = layout_->head_dim;
  std::vector<float>& kept = rollback_rows_[layer];
  kept.resize(static_cast<size_t>(2 * rows * dim));
  std::copy_n(kv, rows * dim, kept.begin());
  std::copy_n(gate, rows * dim, kept.begin() + rows * dim);
  rollback_first_[layer] = first_position;
}

void SequenceState::Truncate(int64_t length, std::span<const int32_t> engram_recent) {
  DI_CHECK(truncatable_from_ >= 0 && length >= truncatable_from_ && length <= length_, "truncation to ", length,
           " tokens outside the last forward's truncatable range [", truncatable_from_, ", ", length_, "]");
  const int64_t dim = layout_->head_dim;
  for (int layer = 0; layer < layout_->num_layers; ++layer) {
    const int ratio = layout_->ratio[layer];
    if (ratio <= 0) continue;
    compressed_count_[layer] = length / ratio;
    if (ratio == 1) continue;
    const int64_t group_start = length / ratio * ratio;
    const int count = static_cast<int>(length - group_start);
    const std::vector<float>& kept = rollback_rows_[layer];
    const int64_t rows = static_cast<int64_t>(kept.size()) / (2 * dim);
    const int64_t at = group_start - rollback_first_[layer];
    DI_CHECK(count == 0 || (at >= 0 && at + count <= rows), "layer ", layer, " kept no compressor rows for positions [",
             group_start, ", ", length, ")");
    if (count == 0) {
      SetPending(layer, nullptr, nullptr, 0);
    } else {
      SetPending(layer, kept.data() + at * dim, kept.data() + (rows + at) * dim, count);
    }
  }
  length_ = length;
  engram_recent_.assign(engram_recent.begin(), engram_recent.end());
  truncatable_from_ = -1;
  const size_t blocks = static_cast<size_t>((length + layout_->block_tokens - 1) / layout_->block_tokens);
  if (window_pages_.size() > blocks) window_pages_.resize(blocks);
  if (compressed_pages_.size() > blocks) compressed_pages_.resize(blocks);
}

std::vector<uint8_t> SequenceState::VisibleBytes() const {
  std::vector<uint8_t> bytes;
  auto append = [&](const void* data, size_t size) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    bytes.insert(bytes.end(), p, p + size);
  };
  append(&length_, sizeof(length_));
  append(engram_recent_.data(), engram_recent_.size() * sizeof(int32_t));
  for (int layer = 0; layer < layout_->num_layers; ++layer) {
    for (int64_t pos = std::max<int64_t>(0, length_ - layout_->window + 1); pos < length_; ++pos) {
      append(window_entry(layer, pos), static_cast<size_t>(layout_->window_entry_bytes));
    }
    if (layout_->compressed_offset[layer] >= 0) {
      append(&compressed_count_[layer], sizeof(int64_t));
      for (int64_t g = 0; g < compressed_count_[layer]; ++g) {
        append(compressed_entry(layer, g), static_cast<size_t>(layout_->compressed_entry_bytes));
      }
    }
    append(&pending_count_[layer], sizeof(int));
    if (pending_count_[layer] > 0) {
      append(pending_kv(layer), pending_count_[layer] * layout_->head_dim * sizeof(float));
      append(pending_gate(layer), pending_count_[layer] * layout_->head_dim * sizeof(float));
    }
  }
  return bytes;
}

void SequenceState::AdoptBlocks(int64_t blocks, std::span<const PageRef> window_pages,
                                std::span<const PageRef> compressed_pages) {
  DI_CHECK(length_ == 0 && window_pages_.empty(), "only a fresh sequence can adopt cached blocks");
  DI_CHECK(static_cast<int64_t>(window_pages.size()) == blocks &&
               (layout_->compressed_page_bytes == 0 || static_cast<int64_t>(compressed_pages.size()) == blocks),
           "adopting ", blocks, " blocks needs that many pages");
  window_pages_.assign(window_pages.begin(), window_pages.end());
  if (layout_->compressed_page_bytes > 0) compressed_pages_.assign(compressed_pages.begin(), compressed_pages.end());
  length_ = blocks * layout_->block_tokens;
  adopted_ = true;
  for (int layer = 0; layer < layout_->num_layers; ++layer) {
    if (layout_->ratio[layer] > 0) compressed_count_[layer] = length_ / layout_->ratio[layer];
  }
  // Blocks end on group boundaries: no partial group.
  std::fill(pending_count_.begin(), pending_count_.end(), 0);
}

}  // namespace deepinfer

namespace deepinfer {

void SequenceState::CommitAppend(int64_t tokens, std::span<const int32_t> engram_recent) {
  DI_CHECK(tokens > 0, "commit of ", tokens, " tokens");
  length_ += tokens;
  truncatable_from_ = -1;
  adopted_ = false;
  engram_recent_.assign(engram_recent.begin(), engram_recent.end());
}

void SequenceState::AdoptEngramHistory(std::span<const int32_t> history) {
  DI_CHECK(length_ == 0 || adopted_,
           "Engram history can only be adopted with cached blocks (or none), before the "
           "first forward");
  engram_recent_.assign(history.begin(), history.end());
}

}  // namespace deepinfer
