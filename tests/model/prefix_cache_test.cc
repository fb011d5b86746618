// Prefix caching is exact: a sequence that adopts cached blocks and computes the rest produces
// logits bit-identical to a cold run, for shared prefixes shorter and longer than the window,
// of 1,000 tokens, and ending inside a compression group.
#include "cache/prefix_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/cpu_backend.h"
#include "model/golden_support.h"

namespace deepinfer::testing {
namespace {

std::vector<int32_t> RandomTokens(std::mt19937& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int32_t> id(3, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = id(rng);
  return tokens;
}

class PrefixCacheTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    model_ = Model::Load(ModelDir("tiny-a"));
    layout_ = model_->default_cache_layout();
    pool_ = PagePool::Create(0);
  }

  // Prefill `tokens` in chunks of `chunk`, offering full blocks to the cache as the engine does.
  std::vector<float> Run(SequenceState& state, const std::vector<int32_t>& tokens, int64_t chunk, PrefixCache* cache,
                         const ComputeContext& ctx) {
    std::vector<float> logits;
    while (state.length() < static_cast<int64_t>(tokens.size())) {
      const int64_t n = std::min<int64_t>(chunk, tokens.size() - state.length());
      ForwardItem item{&state, std::span<const int32_t>(tokens).subspan(state.length(), n), LogitsMode::kAll};
      item.keep_window_pages = cache != nullptr;
      const std::vector<float> out = model_->Forward({&item, 1}, ctx);
      logits.insert(logits.end(), out.begin(), out.end());
      if (cache != nullptr) cache->Insert(tokens, state);
      state.ReleaseStaleWindowPages();
    }
    return logits;
  }

  std::unique_ptr<Model> model_;
  std::shared_ptr<const CacheLayout> layout_;
  std::shared_ptr<PagePool> pool_;
};

TEST_P(PrefixCacheTest, AdoptedPrefixGivesBitIdenticalLogits) {
  const int prefix_len = GetParam();
  const int64_t vocab = model_->config().vocab_size;
  const int64_t block = layout_->block_tokens;
  ThreadPool threads(2);
  CpuBackend backend(threads, DetectIsa());
  const ComputeContext ctx{backend};
  std::mt19937 rng(prefix_len);
  const std::vector<int32_t> prefix = RandomTokens(rng, prefix_len, vocab);
  std::vector<int32_t> a = prefix, b = prefix;
  const std::vector<int32_t> tail_a = RandomTokens(rng, 21, vocab);
  std::vector<int32_t> tail_b = RandomTokens(rng, 30, vocab);
  if (tail_b[0] == tail_a[0]) tail_b[0] = tail_a[0] == 3 ? 4 : 3;
  a.insert(a.end(), tail_a.begin(), tail_a.end());
  b.insert(b.end(), tail_b.begin(), tail_b.end());

  PrefixCache cache(layout_);
  SequenceState first(layout_, pool_);
  Run(first, a, 37, &cache, ctx);

  SequenceState cold(layout_, pool_);
  const std::vector<float> cold_logits = Run(cold, b, 64, nullptr, ctx);

  SequenceState warm(layout_, pool_);
  const int64_t hit = cache.Attach(b, warm);
  EXPECT_EQ(hit, prefix_len / block * block) << "the cache serves every full block of the shared prefix";
  ASSERT_EQ(warm.length(), hit);
  warm.AdoptEngramHistory(model_->EngramHistory(std::span<const int32_t>(b).first(hit)));
  const std::vector<float> warm_logits = Run(warm, b, 64, &cache, ctx);
  ASSERT_EQ(warm_logits.size(), (b.size() - hit) * vocab);
  EXPECT_EQ(0, std::memcmp(warm_logits.data(), cold_logits.data() + hit * vocab, warm_logits.size() * sizeof(float)))
      << "logits after a prefix-cache hit differ from a cold run";
}

// 8: shorter than a block (no hit); 17: just past the 16-token window; 100: a shared system
// prompt; 101: ends inside a ratio-2 compression group; 1000: long.
INSTANTIATE_TEST_SUITE_P(SharedPrefix, PrefixCacheTest, ::testing::Values(8, 17, 100, 101, 1000));

TEST_F(PrefixCacheTest, SamePromptAgainRecomputesOnlyTheLastBlock) {
  const int64_t vocab = model_->config().vocab_size;
  ThreadPool threads(2);
  CpuBackend backend(threads, DetectIsa());
  const ComputeContext ctx{backend};
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = RandomTokens(rng, 64, vocab);
  PrefixCache cache(layout_);
  SequenceState first(layout_, pool_);
  const std::vector<float> cold = Run(first, prompt, 64, &cache, ctx);
  SequenceState again(layout_, pool_);
  // At least the last token is computed (its logits are needed): 3 of 4 blocks come back.
  EXPECT_EQ(cache.Attach(prompt, again), 48);
  again.AdoptEngramHistory(model_->EngramHistory(std::span<const int32_t>(prompt).first(48)));
  const std::vector<float> warm = Run(again, prompt, 64, &cache, ctx);
  EXPECT_EQ(0, std::memcmp(warm.data(), cold.data() + 48 * vocab, warm.size() * sizeof(float)));
}

TEST_F(PrefixCacheTest, EvictedWindowPagesShortenTheHitButKeepItExact) {
  const int64_t vocab = model_->config().vocab_size;
  ThreadPool threads(2);
  CpuBackend backend(threads, DetectIsa());
  const ComputeContext ctx{backend};
  std::mt19937 rng(9);
  std::vector<int32_t> prompt = RandomTokens(rng, 80, vocab);
  PrefixCache cache(layout_);
  {
    SequenceState first(layout_, pool_);
    Run(first, prompt, 80, &cache, ctx);
  }
  // Nothing else holds the pages now: each eviction drops a least recently used leaf block.
  ASSERT_EQ(cache.cached_blocks(), 5u);
  EXPECT_TRUE(cache.EvictOne());
  EXPECT_EQ(cache.cached_blocks(), 4u);
  std::vector<int32_t> longer = prompt;
  longer.push_back(7);
  SequenceState cold(layout_, pool_);
  const std::vector<float> cold_logits = Run(cold, longer, 81, nullptr, ctx);
  SequenceState warm(layout_, pool_);
  const int64_t hit = cache.Attach(longer, warm);
  EXPECT_EQ(hit, 64);
  warm.AdoptEngramHistory(model_->EngramHistory(std::span<const int32_t>(longer).first(hit)));
  const std::vector<float> warm_logits = Run(warm, longer, 81, nullptr, ctx);
  EXPECT_EQ(0, std::memcmp(warm_logits.data(), cold_logits.data() + hit * vocab, warm_logits.size() * sizeof(float)));
  // With every entry gone the pool holds no page in use.
  warm = SequenceState();
  cold = SequenceState();
  cache.Clear();
  EXPECT_EQ(pool_->in_use_bytes(), 0u);
}

}  // namespace
}  // namespace deepinfer::testing
