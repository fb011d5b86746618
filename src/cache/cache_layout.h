// Where each piece of a sequence's state (spec section 4.1) lives in the pages of the paged KV
// cache, in the compact formats that reproduce the reference's QDQ'd values exactly.
//
// A block covers `block_tokens` consecutive positions. For each block a sequence holds
//  - a window page: every layer's FP8 window entry of each position in the block,
//    [layer][position in block] x (head_dim e4m3 codes, head_dim/32 ue8m0 exponents), 528 B per
//    entry at V4.1 size. It is dropped once the block has slid out of the window;
//  - a compressed page (only when the model has KV sources): for each KV-source layer the
//    block_tokens / ratio groups that complete in the block, each an FP4 compressed entry
//    (head_dim/2 packed e2m1, head_dim/16 e4m3 scales; 288 B) followed by its FP4 index key
//    (index_head_dim/2 packed e2m1, index_head_dim/32 ue8m0 exponents; 68 B). Kept for the
//    sequence's life.
// and one state page: the compressor's fp32 partial group of each ratio > 1 source (at most
// ratio - 1 positions of projected kv and gate).
//
// block_tokens is a multiple of every compress ratio, so a block boundary never cuts a group:
// a full block's pages are final, and the state at a boundary is the pages alone (the partial
// group is empty there). That is what lets sequences share blocks (prefix caching).
#pragma once

#include <cstdint>
#include <vector>

#include "io/model_config.h"

namespace deepinfer {

// The block sizes of the entry formats: an FP8 window entry has one ue8m0 exponent per 32
// values; an FP4 compressed entry one e4m3 scale per 16; an FP4 index key one ue8m0 exponent
// per 32 (the reference's act_quant / fp4 QAT block sizes on these paths).
inline constexpr int64_t kWindowEntryBlock = 32;
inline constexpr int64_t kCompressedEntryBlock = 16;
inline constexpr int64_t kIndexKeyBlock = 32;

// One window entry's parts inside its page (Byte is uint8_t or const uint8_t).
template <class Byte>
struct WindowEntry {
  Byte* codes;      // head_dim e4m3
  Byte* exponents;  // head_dim / kWindowEntryBlock ue8m0
};
// One compressed entry's parts: the FP4 KV entry, then its FP4 index key.
template <class Byte>
struct CompressedEntry {
  Byte* codes;            // head_dim / 2 packed e2m1 (even element in the low nibble)
  Byte* scales;           // head_dim / kCompressedEntryBlock e4m3
  Byte* index_codes;      // index_head_dim / 2 packed e2m1
  Byte* index_exponents;  // index_head_dim / kIndexKeyBlock ue8m0
};

struct CacheLayout {
  int block_tokens = 0;
  int window = 0;
  int num_layers = 0;
  int64_t head_dim = 0;
  int64_t index_head_dim = 0;

  int64_t window_entry_bytes = 0;      // head_dim + head_dim / 32
  int64_t window_page_bytes = 0;       // num_layers * block_tokens * window_entry_bytes
  int64_t compressed_entry_bytes = 0;  // compressed entry + index key
  int64_t compressed_page_bytes = 0;   // 0 without KV sources
  int64_t state_page_bytes = 0;        // 0 without ratio > 1 sources

  std::vector<int> ratio;                  // per layer: the compress ratio of a KV source, else 0
  std::vector<int64_t> compressed_offset;  // per layer: offset in the compressed page, or -1
  std::vector<int64_t> pending_offset;     // per layer: offset in the state page, or -1

  // Throws Error when block_tokens is not a positive multiple of every compress ratio.
  static CacheLayout For(const ModelConfig& config, int block_tokens);
  // The smallest multiple of every compress ratio that is at least `at_least`.
  static int BlockTokensAtLeast(const ModelConfig& config, int at_least);
  // Whether a state of this layout can serve `config` (same shapes and schedule).
  bool Serves(const ModelConfig& config) const;
  bool operator==(const CacheLayout&) const = default;

  int64_t window_entry_offset(int layer, int64_t position) const {
    return (static_cast<int64_t>(layer) * block_tokens + position % block_tokens) * window_entry_bytes;
  }
  int64_t groups_per_block(int layer) const { return block_tokens / ratio[layer]; }
  int64_t compressed_entry_offset(int layer, int64_t group) const {
    return compressed_offset[layer] + (group % groups_per_block(layer)) * compressed_entry_bytes;
  }
  // Bytes of each part of an entry, in order: the one place the entry layouts are spelled out.
  int64_t window_codes_bytes() const { return head_dim; }
  int64_t window_exponents_bytes() const { return head_dim / kWindowEntryBlock; }
  int64_t compressed_codes_bytes() const { return head_dim / 2; }
  int64_t compressed_scales_bytes() const { return head_dim / kCompressedEntryBlock; }
  int64_t index_codes_bytes() const { return index_head_dim / 2; }
  int64_t index_exponents_bytes() const { return index_head_dim / kIndexKeyBlock; }

  template <class Byte>
  WindowEntry<Byte> WindowParts(Byte* entry) const {
    return {entry, entry + window_codes_bytes()};
  }
  template <class Byte>
  CompressedEntry<Byte> CompressedParts(Byte* entry) const {
    Byte* scales = entry + compressed_codes_bytes();
    Byte* index_codes = scales + compressed_scales_bytes();
    return {entry, scales, index_codes, index_codes + index_codes_bytes()};
  }
};

}  // namespace deepinfer
