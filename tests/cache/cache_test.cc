// The paged cache on its own: the pool's budget, copy-on-write of shared pages, and the prefix
// cache's matching and eviction, on a small synthetic layout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "cache/prefix_cache.h"
#include "core/error.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;

// Two layers: a window-only one and a ratio-2 KV source; window 8, blocks of 4 positions.
std::shared_ptr<const CacheLayout> SmallLayout(int block_tokens = 4) {
  ModelConfig config;
  config.num_layers = 2;
  config.head_dim = 64;
  config.index_head_dim = 32;
  config.window_size = 8;
  config.roles.resize(2);
  config.roles[1].compress_ratio = 2;
  config.roles[1].kv_source = true;
  return std::make_shared<const CacheLayout>(CacheLayout::For(config, block_tokens));
}

// Appends `tokens` positions the way a forward would: window entries and completed groups
// filled with a byte derived from the position.
void Append(SequenceState& state, int64_t tokens) {
  ASSERT_TRUE(state.PrepareAppend(tokens));
  const CacheLayout& layout = state.layout();
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t position = state.length();
    for (int layer = 0; layer < layout.num_layers; ++layer) {
      std::memset(state.mutable_window_entry(layer, position), static_cast<int>(position + 1),
                  layout.window_entry_bytes);
    }
    if ((position + 1) % 2 == 0) {
      std::memset(state.AppendCompressed(1), static_cast<int>(100 + position), layout.compressed_entry_bytes);
    }
    state.CommitAppend(1, {});
  }
}

TEST(CacheLayoutTest, BlockSizeMustBeAMultipleOfEveryRatio) {
  EXPECT_THAT(
      [] {
        try {
          SmallLayout(5);
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      HasSubstr("KV cache block size 5 is not a multiple of layer 1's compress ratio 2"));
  const std::shared_ptr<const CacheLayout> layout = SmallLayout();
  EXPECT_EQ(layout->window_entry_bytes, 64 + 2);
  EXPECT_EQ(layout->window_page_bytes, 2 * 4 * 66);
  EXPECT_EQ(layout->compressed_entry_bytes, 32 + 4 + 16 + 1);
  EXPECT_EQ(layout->compressed_page_bytes, 2 * 53);
  EXPECT_EQ(layout->state_page_bytes, 1 * 64 * 2 * 4);
}

TEST(PagePoolTest, NeverHoldsMoreThanItsBudget) {
  const std::shared_ptr<PagePool> pool = PagePool::Create(1000);
  PageRef a = pool->Allocate(400);
  PageRef b = pool->Allocate(400);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(pool->Allocate(400), nullptr);
  EXPECT_EQ(pool->held_bytes(), 800u);
  a.reset();  // kept free for reuse, still held
  EXPECT_EQ(pool->held_bytes(), 800u);
  EXPECT_EQ(pool->in_use_bytes(), 400u);
  PageRef c = pool->Allocate(400);  // the free page comes back
  ASSERT_TRUE(c);
  EXPECT_EQ(pool->held_bytes(), 800u);
  c.reset();
  PageRef d = pool->Allocate(500);  // a different size: the free 400 B page is dropped first
  ASSERT_TRUE(d);
  EXPECT_EQ(pool->held_bytes(), 900u);
  EXPECT_LE(pool->peak_held_bytes(), 1000u);
}

TEST(PagePoolTest, AsksTheEvictorBeforeFailing) {
  const std::shared_ptr<PagePool> pool = PagePool::Create(1000);
  std::vector<PageRef> cached = {pool->Allocate(500), pool->Allocate(500)};
  int evictions = 0;
  pool->SetEvictor([&] {
    if (cached.empty()) return false;
    cached.pop_back();
    ++evictions;
    return true;
  });
  PageRef fresh = pool->Allocate(500);
  EXPECT_TRUE(fresh);
  EXPECT_EQ(evictions, 1);
  PageRef held = pool->Allocate(600);
  EXPECT_EQ(held, nullptr) << "600 B cannot fit next to the 500 B page nobody can evict";
  EXPECT_EQ(evictions, 2);
  EXPECT_LE(pool->peak_held_bytes(), 1000u);
  pool->SetEvictor({});
}

TEST(SequenceStateTest, CopiesShareUntilOneWrites) {
  const std::shared_ptr<PagePool> pool = PagePool::Create(0);
  SequenceState a(SmallLayout(), pool);
  Append(a, 6);  // block 1 half full
  SequenceState b = a;
  const uint64_t shared_in_use = pool->in_use_bytes();
  Append(b, 3);  // writes into block 1: copied, block 0 stays shared
  EXPECT_GT(pool->in_use_bytes(), shared_in_use);
  EXPECT_EQ(a.length(), 6);
  EXPECT_EQ(a.window_entry(0, 5)[0], 6);
  EXPECT_EQ(b.window_entry(0, 5)[0], 6);
  EXPECT_EQ(b.window_entry(0, 7)[0], 8);
  EXPECT_EQ(a.window_page(0).get(), b.window_page(0).get());
  EXPECT_NE(a.window_page(1).get(), b.window_page(1).get());
  EXPECT_EQ(a.compressed_count(1), 3);
  EXPECT_EQ(b.compressed_count(1), 4);
  EXPECT_EQ(a.compressed_entry(1, 2)[0], 105);
}

TEST(SequenceStateTest, WindowPagesGoOnceTheWindowHasPassed) {
  const std::shared_ptr<PagePool> pool = PagePool::Create(0);
  SequenceState s(SmallLayout(), pool);
  Append(s, 17);
  s.ReleaseStaleWindowPages();
  // The next query (position 17) reads from position 10: blocks 0 and 1 are gone.
  EXPECT_EQ(s.window_page(0), nullptr);
  EXPECT_EQ(s.window_page(1), nullptr);
  EXPECT_NE(s.window_page(2), nullptr);
  EXPECT_EQ(s.window_entry(1, 10)[0], 11);
  EXPECT_NE(s.compressed_page(0), nullptr) << "compressed entries stay for the sequence's life";
}

TEST(SequenceStateTest, PrepareFailsCleanlyOnTheBudget) {
  const std::shared_ptr<const CacheLayout> layout = SmallLayout();
  const uint64_t one_block = layout->window_page_bytes + layout->compressed_page_bytes + layout->state_page_bytes;
  const std::shared_ptr<PagePool> pool = PagePool::Create(one_block);
  SequenceState s(layout, pool);
  EXPECT_EQ(s.BytesToPrepare(4), one_block);
  EXPECT_TRUE(s.PrepareAppend(4));
  EXPECT_FALSE(s.PrepareAppend(5));
  EXPECT_EQ(s.length(), 0);
  EXPECT_LE(pool->peak_held_bytes(), one_block);
}

TEST(PrefixCacheTest, ServesOnlyTheExactSamePrefix) {
  const std::shared_ptr<const CacheLayout> layout = SmallLayout();
  const std::shared_ptr<PagePool> pool = PagePool::Create(0);
  PrefixCache cache(layout);
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  {
    SequenceState s(layout, pool);
    Append(s, 11);
    cache.Insert(tokens, s);
  }
  EXPECT_EQ(cache.cached_blocks(), 2u);
  SequenceState same(layout, pool);
  EXPECT_EQ(cache.Attach(tokens, same), 8);
  EXPECT_EQ(same.length(), 8);
  EXPECT_EQ(same.compressed_count(1), 4);
  EXPECT_EQ(same.window_entry(0, 7)[0], 8);

  std::vector<int32_t> second_block_differs = tokens;
  second_block_differs[6] = 99;
  SequenceState partial(layout, pool);
  EXPECT_EQ(cache.Attach(second_block_differs, partial), 4);

  std::vector<int32_t> first_differs = tokens;
  first_differs[0] = 99;
  SequenceState miss(layout, pool);
  EXPECT_EQ(cache.Attach(first_differs, miss), 0);
  EXPECT_EQ(miss.length(), 0);

  // The last token is always computed: a prompt of exactly 8 tokens adopts one block.
  SequenceState exact(layout, pool);
  EXPECT_EQ(cache.Attach(std::span<const int32_t>(tokens).first(8), exact), 4);
}

TEST(PrefixCacheTest, EvictsLeastRecentlyUsedLeavesFirstAndNeverWhatASequenceHolds) {
  const std::shared_ptr<const CacheLayout> layout = SmallLayout();
  const std::shared_ptr<PagePool> pool = PagePool::Create(0);
  PrefixCache cache(layout);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<int32_t> b = {1, 2, 3, 4, 50, 60, 70, 80, 90};
  SequenceState held(layout, pool);
  Append(held, 9);
  cache.Insert(a, held);
  {
    SequenceState other(layout, pool);
    Append(other, 9);
    cache.Insert(b, other);  // shares block 0's entry with `a`
  }
  EXPECT_EQ(cache.cached_blocks(), 3u);
  // `held` still holds a's pages, so only b's second block can go.
  EXPECT_TRUE(cache.EvictOne());
  EXPECT_EQ(cache.cached_blocks(), 2u);
  SequenceState probe(layout, pool);
  EXPECT_EQ(cache.Attach(b, probe), 4);
  EXPECT_FALSE(cache.EvictOne()) << "every remaining page is shared with a live sequence";
  held = SequenceState();
  probe = SequenceState();
  EXPECT_TRUE(cache.EvictOne());
  EXPECT_TRUE(cache.EvictOne());
  EXPECT_EQ(cache.cached_blocks(), 0u);
  EXPECT_EQ(pool->in_use_bytes(), 0u);
}

}  // namespace
}  // namespace deepinfer
