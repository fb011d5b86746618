// Prefix caching over the hybrid cache: full blocks of every sequence, keyed by the token ids
// of the whole prefix that produced them (a hash chain, verified token by token on a hit).
//
// A new request adopts the longest cached prefix whose last `window` positions still have their
// window pages, and computes only the rest. Because a block boundary never cuts a compression
// group and the forward is chunking-invariant, the adopted state is bit for bit the state a cold
// prefill reaches at that position: results are identical to a cold run.
//
// Entries are evicted least recently used first, leaves before their parents, and only when
// that gives memory back; failing that, an entry's window page alone is dropped (the prefixes
// ending within the window of it stop hitting, longer ones still can).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/sequence_state.h"

namespace deepinfer {

class PrefixCache {
 public:
  explicit PrefixCache(std::shared_ptr<const CacheLayout> layout) : layout_(std::move(layout)) {}

  // Records the full blocks of `state` not cached yet. `tokens` are the ids it has processed
  // (at least state.length() of them, in order).
  void Insert(std::span<const int32_t> tokens, const SequenceState& state);
  // Adopts into the fresh `state` the longest usable cached prefix of `tokens` that leaves at
  // least one token to compute; returns its length in tokens (0 on a miss).
  int64_t Attach(std::span<const int32_t> tokens, SequenceState& state);

  // Counts a lookup in stats(): the engine calls it once per admission that went ahead (an
  // admission rolled back for lack of memory looks up again later).
  void RecordLookup(int64_t queried_tokens, int64_t hit_tokens);

  // Gives memory back to the pool; false when nothing the cache holds alone is left.
  bool EvictOne();
  void Clear();

  struct Stats {
    uint64_t lookups = 0;
    uint64_t hits = 0;            // lookups that adopted at least one block
    uint64_t queried_tokens = 0;  // prompt tokens looked up
    uint64_t hit_tokens = 0;      // of those, adopted from the cache
    uint64_t evicted_blocks = 0;
  };
  const Stats& stats() const { return stats_; }
  size_t cached_blocks() const { return nodes_.size(); }

 private:
  struct Node {
    uint64_t parent_hash = 0;
    bool has_parent = false;
    std::vector<int32_t> tokens;  // the block's own ids
    PageRef window_page;          // null once dropped
    PageRef compressed_page;      // null without KV sources
    int children = 0;
    uint64_t last_used = 0;
  };
  // Walks the chain of `tokens`' full blocks from the start; stops at the first block not cached.
  std::vector<std::pair<uint64_t, Node*>> Chain(std::span<const int32_t> tokens, int64_t max_blocks);
  void Remove(uint64_t hash);
  void Touch(uint64_t hash, Node& node);

  std::shared_ptr<const CacheLayout> layout_;
  std::unordered_map<uint64_t, Node> nodes_;
  std::set<std::pair<uint64_t, uint64_t>> lru_;  // (last_used, hash), least recent first
  uint64_t clock_ = 0;
  Stats stats_;
};

}  // namespace deepinfer
