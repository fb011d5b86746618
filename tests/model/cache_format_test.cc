// The per-sequence state is held in the compact formats of spec section 4.1, in pages of the
// paged cache: FP8 window entries (head_dim + head_dim/32 bytes; 528 B at V4.1 size), FP4
// compressed entries (head_dim/2 + head_dim/16; 288 B) and FP4 index keys (index_dim/2 +
// index_dim/32; 68 B), only on KV-source layers, plus the compressor's fp32 partial group and
// the Engram look-back.
#include <gtest/gtest.h>

#include "model/cpu_forward.h"
#include "model/golden_support.h"

namespace deepinfer::testing {
namespace {

TEST(CacheFormat, PagesHoldExactlyTheCompactFormats) {
  const std::unique_ptr<Model> model = Model::Load(ModelDir("tiny-a"));
  const ModelConfig& c = model->config();
  ThreadPool pool(2);
  SequenceState state = model->NewSequence();
  const CacheLayout& layout = state.layout();
  const int64_t block = layout.block_tokens;
  ASSERT_EQ(block, 16);

  const uint64_t window_entry = c.head_dim + c.head_dim / 32;
  const uint64_t compressed_entry = c.head_dim / 2 + c.head_dim / 16 + c.index_head_dim / 2 + c.index_head_dim / 32;
  uint64_t compressed_page = 0, state_page = 0;
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const LayerRole& role = c.roles[layer];
    if (!role.kv_source) continue;
    compressed_page += block / role.compress_ratio * compressed_entry;
    if (role.compress_ratio > 1) state_page += (role.compress_ratio - 1) * c.head_dim * 2 * sizeof(float);
  }
  EXPECT_EQ(layout.window_entry_bytes, static_cast<int64_t>(window_entry));
  EXPECT_EQ(layout.window_page_bytes, static_cast<int64_t>(c.num_layers * block * window_entry));
  EXPECT_EQ(layout.compressed_page_bytes, static_cast<int64_t>(compressed_page));
  EXPECT_EQ(layout.state_page_bytes, static_cast<int64_t>(state_page));

  const int64_t tokens = 45;  // odd: the ratio-2 sources hold one pending token
  std::vector<int32_t> ids(tokens, 7);
  ForwardItem item{&state, ids};
  CpuForward(*model, {&item, 1}, pool);

  // Window pages only for the blocks the window still reaches; compressed pages for all.
  const int64_t blocks = (tokens + block - 1) / block;
  const int64_t first_window_block = std::max<int64_t>(0, tokens - c.window_size + 1) / block;
  const uint64_t expected = static_cast<uint64_t>(c.engram_max_ngram_size - 1) * sizeof(int32_t) +
                            (blocks - first_window_block) * layout.window_page_bytes +
                            blocks * layout.compressed_page_bytes + layout.state_page_bytes;
  EXPECT_EQ(state.CacheBytes(), expected);
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const LayerRole& role = c.roles[layer];
    if (!role.kv_source) continue;
    EXPECT_EQ(state.compressed_count(layer), tokens / role.compress_ratio) << "layer " << layer;
    EXPECT_EQ(state.pending_count(layer), tokens % role.compress_ratio) << "layer " << layer;
  }
}

}  // namespace
}  // namespace deepinfer::testing
