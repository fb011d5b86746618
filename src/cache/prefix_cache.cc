#include "cache/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace deepinfer {
namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  // splitmix64 finaliser over a running combination: cheap and well spread; hits are verified.
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

uint64_t BlockHash(uint64_t parent, std::span<const int32_t> block) {
  uint64_t h = Mix(parent, block.size());
  for (int32_t token : block) h = Mix(h, static_cast<uint32_t>(token));
  return h;
}

constexpr uint64_t kRootHash = 0x6a09e667f3bcc908ULL;

}  // namespace

std::vector<std::pair<uint64_t, PrefixCache::Node*>> PrefixCache::Chain(std::span<const int32_t> tokens,
                                                                        int64_t max_blocks) {
  const int64_t block = layout_->block_tokens;
  std::vector<std::pair<uint64_t, Node*>> chain;
  uint64_t parent = kRootHash;
  for (int64_t j = 0; j < max_blocks; ++j) {
    const std::span<const int32_t> ids = tokens.subspan(j * block, block);
    const uint64_t hash = BlockHash(parent, ids);
    auto it = nodes_.find(hash);
    if (it == nodes_.end()) break;
    Node& node = it->second;
    if (node.has_parent != (j > 0) || (j > 0 && node.parent_hash != parent) ||
        !std::equal(ids.begin(), ids.end(), node.tokens.begin(), node.tokens.end())) {
      break;  // a hash collision: never serve another prefix's state
    }
    chain.emplace_back(hash, &node);
    parent = hash;
  }
  return chain;
}

void PrefixCache::Insert(std::span<const int32_t> tokens, const SequenceState& state) {
  const int64_t block = layout_->block_tokens;
  const int64_t full = state.full_blocks();
  DI_CHECK(static_cast<int64_t>(tokens.size()) >= state.length(), "prefix cache insert: ", tokens.size(),
           " token ids for a sequence of ", state.length());
  std::vector<std::pair<uint64_t, Node*>> chain = Chain(tokens, full);
  for (size_t j = 0; j < chain.size(); ++j) {
    Node& node = *chain[j].second;
    if (node.window_page == nullptr && state.window_page(j) != nullptr) node.window_page = state.window_page(j);
  }
  uint64_t parent = chain.empty() ? kRootHash : chain.back().first;
  for (int64_t j = static_cast<int64_t>(chain.size()); j < full; ++j) {
    const std::span<const int32_t> ids = tokens.subspan(j * block, block);
    const uint64_t hash = BlockHash(parent, ids);
    if (nodes_.count(hash) != 0) return;  // collision with another prefix: leave it
    Node node;
    node.parent_hash = parent;
    node.has_parent = j > 0;
    node.tokens.assign(ids.begin(), ids.end());
    node.window_page = state.window_page(j);
    if (layout_->compressed_page_bytes > 0) node.compressed_page = state.compressed_page(j);
    node.last_used = ++clock_;
    if (j > 0) ++nodes_.at(parent).children;
    lru_.emplace(node.last_used, hash);
    nodes_.emplace(hash, std::move(node));
    parent = hash;
  }
}

int64_t PrefixCache::Attach(std::span<const int32_t> tokens, SequenceState& state) {
  const int64_t block = layout_->block_tokens;
  if (tokens.empty()) return 0;
  // At least the last token is computed: its logits are what the request samples from.
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / block;
  const std::vector<std::pair<uint64_t, Node*>> chain = Chain(tokens, max_blocks);
  // The longest prefix whose window is complete: a query at position k*block reads positions
  // from k*block - window + 1 on.
  auto first_window_block = [&](int64_t k) { return std::max<int64_t>(0, k * block - layout_->window + 1) / block; };
  int64_t usable = 0;
  for (int64_t k = static_cast<int64_t>(chain.size()); k > 0; --k) {
    const int64_t first_needed = first_window_block(k);
    bool complete = true;
    for (int64_t j = first_needed; j < k && complete; ++j) complete = chain[j].second->window_page != nullptr;
    if (complete) {
      usable = k;
      break;
    }
  }
  if (usable == 0) return 0;
  std::vector<PageRef> window_pages(usable), compressed_pages;
  const int64_t first_needed = first_window_block(usable);
  for (int64_t j = 0; j < usable; ++j) {
    Node& node = *chain[j].second;
    if (j >= first_needed) window_pages[j] = node.window_page;
    if (layout_->compressed_page_bytes > 0) compressed_pages.push_back(node.compressed_page);
  }
  // Parents end up more recent than their children, so leaves go first.
  for (int64_t j = usable - 1; j >= 0; --j) Touch(chain[j].first, *chain[j].second);
  state.AdoptBlocks(usable, window_pages, compressed_pages);
  return usable * block;
}

void PrefixCache::RecordLookup(int64_t queried_tokens, int64_t hit_tokens) {
  ++stats_.lookups;
  stats_.queried_tokens += queried_tokens;
  if (hit_tokens > 0) ++stats_.hits;
  stats_.hit_tokens += hit_tokens;
}

void PrefixCache::Touch(uint64_t hash, Node& node) {
  lru_.erase({node.last_used, hash});
  node.last_used = ++clock_;
  lru_.emplace(node.last_used, hash);
}

void PrefixCache::Remove(uint64_t hash) {
  auto it = nodes_.find(hash);
  lru_.erase({it->second.last_used, hash});
  if (it->second.has_parent) {
    auto parent = nodes_.find(it->second.parent_hash);
    if (parent != nodes_.end()) --parent->second.children;
  }
  nodes_.erase(it);
  ++stats_.evicted_blocks;
}

bool PrefixCache::EvictOne() {
  auto alone = [](const PageRef& page) { return page != nullptr && page.use_count() == 1; };
  // Least recently used first; entries whose pages running sequences share free nothing.
  for (const auto& [last_used, hash] : lru_) {
    const Node& node = nodes_.at(hash);
    if (node.children == 0 && (alone(node.window_page) || alone(node.compressed_page))) {
      Remove(hash);
      return true;
    }
  }
  for (const auto& [last_used, hash] : lru_) {
    Node& node = nodes_.at(hash);
    if (alone(node.window_page)) {
      node.window_page.reset();
      return true;
    }
  }
  return false;
}

void PrefixCache::Clear() {
  nodes_.clear();
  lru_.clear();
}

}  // namespace deepinfer
