#include "cache/cache_layout.h"

#include <numeric>

#include "core/error.h"

namespace deepinfer {
namespace {

constexpr int64_t kQuantGroup = 32;

}  // namespace

int CacheLayout::BlockTokensAtLeast(const ModelConfig& config, int at_least) {
  int multiple = 1;
  for (const LayerRole& role : config.roles) {
    if (role.kv_source && role.compress_ratio > 0) multiple = std::lcm(multiple, role.compress_ratio);
  }
  return (std::max(at_least, 1) + multiple - 1) / multiple * multiple;
}

CacheLayout CacheLayout::For(const ModelConfig& config, int block_tokens) {
  if (block_tokens <= 0) throw MakeError("KV cache block size ", block_tokens, " must be positive");
  CacheLayout layout;
  layout.block_tokens = block_tokens;
  layout.window = config.window_size;
  layout.num_layers = config.num_layers;
  layout.head_dim = config.head_dim;
  layout.index_head_dim = config.index_head_dim;
  layout.window_entry_bytes = config.head_dim + config.head_dim / kQuantGroup;
  layout.window_page_bytes = static_cast<int64_t>(config.num_layers) * block_tokens * layout.window_entry_bytes;
  layout.compressed_entry_bytes =
      config.head_dim / 2 + config.head_dim / 16 + config.index_head_dim / 2 + config.index_head_dim / kQuantGroup;
  layout.ratio.assign(config.num_layers, 0);
  layout.compressed_offset.assign(config.num_layers, -1);
  layout.pending_offset.assign(config.num_layers, -1);
  for (int layer = 0; layer < config.num_layers; ++layer) {
    const LayerRole& role = config.roles[layer];
    if (!role.kv_source || role.compress_ratio <= 0) continue;
    const int ratio = role.compress_ratio;
    if (block_tokens % ratio != 0) {
      throw MakeError("KV cache block size ", block_tokens, " is not a multiple of layer ", layer, "'s compress ratio ",
                      ratio, " (use a multiple of ", BlockTokensAtLeast(config, 1), ")");
    }
    layout.ratio[layer] = ratio;
    layout.compressed_offset[layer] = layout.compressed_page_bytes;
    layout.compressed_page_bytes += (block_tokens / ratio) * layout.compressed_entry_bytes;
    if (ratio > 1) {
      layout.pending_offset[layer] = layout.state_page_bytes;
      layout.state_page_bytes += static_cast<int64_t>(ratio - 1) * config.head_dim * 2 * sizeof(float);
    }
  }
  return layout;
}

bool CacheLayout::Serves(const ModelConfig& config) const { return *this == For(config, block_tokens); }

}  // namespace deepinfer
