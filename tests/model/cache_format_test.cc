// The per-sequence state is held in the compact formats of spec section 4.1: FP8 window
// slots (head_dim + head_dim/32 bytes; 528 B at V4.1 size), FP4 compressed entries
// (head_dim/2 + head_dim/16; 288 B) and FP4 index keys (index_dim/2 + index_dim/32; 68 B), only
// on KV-source layers, plus the compressor's fp32 partial group and the Engram look-back.
#include <gtest/gtest.h>

#include "model/golden_support.h"

namespace deepinfer::testing {
namespace {

TEST(CacheFormat, StateBytesAreExactlyTheCompactFormats) {
  const std::unique_ptr<Model> model = Model::Load(ModelDir("tiny-a"));
  const ModelConfig& c = model->config();
  ThreadPool pool(2);
  SequenceState state = model->NewSequence();
  const int64_t tokens = 45;  // odd: the ratio-2 sources hold one pending token
  std::vector<int32_t> ids(tokens, 7);
  ForwardItem item{&state, ids, false};
  model->Forward({&item, 1}, pool);

  const uint64_t window_slot = c.head_dim + c.head_dim / 32;
  const uint64_t compressed_entry = c.head_dim / 2 + c.head_dim / 16;
  const uint64_t index_entry = c.index_head_dim / 2 + c.index_head_dim / 32;
  uint64_t expected = static_cast<uint64_t>(c.engram_max_ngram_size - 1) * sizeof(int32_t);
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const LayerRole& role = c.roles[layer];
    expected += c.window_size * window_slot;
    if (!role.kv_source) continue;
    const int64_t entries = tokens / role.compress_ratio;
    expected += entries * (compressed_entry + index_entry);
    expected += (tokens % role.compress_ratio) * c.head_dim * 2 * sizeof(float);
  }
  EXPECT_EQ(state.CacheBytes(), expected);
}

}  // namespace
}  // namespace deepinfer::testing
