#include "cache/cache_layout.h"

#include <numeric>

#include "core/error.h"

namespace deepinfer {
int CacheLayout::BlockTokensAtLeast(const ModelConfig& config, int at_least) {
  int multiple = 1;
  for (const LayerRole& role : config.roles) {
    if (role.kv_source && role.compress_ratio > 0) multiple = std::lcm(multiple, role.compress_ratio);
  }
  return (std::max(at_least, 1) + multiple - 1) / multiple * multiple;
}

namespace {

struct PageSizes {
  int64_t compressed = 0;  // compressed page
  int64_t pending = 0;     // state page
};

// Where each layer's compressed entries and partial group go, in layer order: the one walk For
// and Serves share. visit(layer, ratio, compressed_offset, pending_offset) for every layer;
// ratio 0 and offsets -1 where the layer is no KV source with a compress ratio. Returns the
// page sizes.
template <class Visit>
PageSizes ForEachLayerPlacement(const ModelConfig& config, int block_tokens, int64_t compressed_entry_bytes,
                                Visit visit) {
  int64_t compressed = 0;
  int64_t pending = 0;
  for (int layer = 0; layer < config.num_layers; ++layer) {
    const LayerRole& role = config.roles[layer];
    if (!role.kv_source || role.compress_ratio <= 0) {
      visit(layer, 0, int64_t{-1}, int64_t{-1});
      continue;
    }
    const int ratio = role.compress_ratio;
    const int64_t pending_offset = ratio > 1 ? pending : -1;
    visit(layer, ratio, compressed, pending_offset);
    compressed += (block_tokens / ratio) * compressed_entry_bytes;
    if (ratio > 1) pending += static_cast<int64_t>(ratio - 1) * config.head_dim * 2 * sizeof(float);
  }
  return {compressed, pending};
}

// The layout's fields that do not depend on the layers.
CacheLayout SizesFor(const ModelConfig& config, int block_tokens) {
  CacheLayout layout;
  layout.block_tokens = block_tokens;
  layout.window = config.window_size;
  layout.num_layers = config.num_layers;
  layout.head_dim = config.head_dim;
  layout.index_head_dim = config.index_head_dim;
  layout.window_entry_bytes = layout.window_codes_bytes() + layout.window_exponents_bytes();
  layout.window_page_bytes = static_cast<int64_t>(config.num_layers) * block_tokens * layout.window_entry_bytes;
  layout.compressed_entry_bytes = layout.compressed_codes_bytes() + layout.compressed_scales_bytes() +
                                  layout.index_codes_bytes() + layout.index_exponents_bytes();
  return layout;
}

}  // namespace

CacheLayout CacheLayout::For(const ModelConfig& config, int block_tokens) {
  if (block_tokens <= 0) throw MakeError("KV cache block size ", block_tokens, " must be positive");
  CacheLayout layout = SizesFor(config, block_tokens);
  for (int layer = 0; layer < config.num_layers; ++layer) {
    const LayerRole& role = config.roles[layer];
    if (role.kv_source && role.compress_ratio > 0 && block_tokens % role.compress_ratio != 0) {
      throw MakeError("KV cache block size ", block_tokens, " is not a multiple of layer ", layer, "'s compress ratio ",
                      role.compress_ratio, " (use a multiple of ", BlockTokensAtLeast(config, 1), ")");
    }
  }
  const PageSizes pages = ForEachLayerPlacement(config, block_tokens, layout.compressed_entry_bytes,
                                                [&](int, int ratio, int64_t compressed_offset, int64_t pending_offset) {
                                                  layout.ratio.push_back(ratio);
                                                  layout.compressed_offset.push_back(compressed_offset);
                                                  layout.pending_offset.push_back(pending_offset);
                                                });
  layout.compressed_page_bytes = pages.compressed;
  layout.state_page_bytes = pages.pending;
  return layout;
}

bool CacheLayout::Serves(const ModelConfig& config) const {
  // Compared field by field, without building a layout (no allocation): every forward checks
  // each of its states.
  if (block_tokens <= 0 || static_cast<int>(ratio.size()) != config.num_layers) return false;
  const CacheLayout sizes = SizesFor(config, block_tokens);
  if (sizes.window != window || sizes.num_layers != num_layers || sizes.head_dim != head_dim ||
      sizes.index_head_dim != index_head_dim || sizes.window_entry_bytes != window_entry_bytes ||
      sizes.window_page_bytes != window_page_bytes || sizes.compressed_entry_bytes != compressed_entry_bytes) {
    return false;
  }
  bool same = true;
  const PageSizes pages = ForEachLayerPlacement(
      config, block_tokens, compressed_entry_bytes, [&](int layer, int r, int64_t compressed, int64_t pending) {
        same = same && ratio[layer] == r && compressed_offset[layer] == compressed && pending_offset[layer] == pending;
      });
  return same && pages.compressed == compressed_page_bytes && pages.pending == state_page_bytes;
}

}  // namespace deepinfer
