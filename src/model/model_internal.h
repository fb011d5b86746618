// Per-forward data shared by the model's translation units (not part of the public API). All of
// it lives in the backend's workspace for the length of one forward.
#pragma once

#include <cstdint>
#include <span>

#include "core/mapped_file.h"
#include "model/model.h"

namespace deepinfer {

// The error for a SIGBUS on a mapped checkpoint file: names the file.
Error MappedFileError(const MappedFileFault& fault, const Checkpoint& checkpoint);

// The tokens of one forward, flattened: row r is token `tokens[r]` at `positions[r]` of item
// `item_of[r]`.
struct Model::Batch {
  std::span<const ForwardItem* const> items;
  std::span<const int64_t> first_row;  // per item: index of its first row
  std::span<const int32_t> item_of;    // per row
  std::span<const int64_t> positions;  // per row
  std::span<const int32_t> tokens;     // per row

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  int item_count() const { return static_cast<int>(items.size()); }
  int64_t start(int item) const { return items[item]->state->length(); }
  int64_t count(int item) const { return static_cast<int64_t>(items[item]->tokens.size()); }
  std::span<const int64_t> positions_of(int item) const { return positions.subspan(first_row[item], count(item)); }
  // Per item in order, the rows of its last rows_of(item) tokens (logit rows, tap rows).
  std::span<int64_t> TrailingRows(int64_t (*rows_of)(const ForwardItem&), Workspace& workspace) const {
    int64_t total = 0;
    for (const ForwardItem* item : items) total += rows_of(*item);
    std::span<int64_t> rows = workspace.TakeArray<int64_t>(total);
    int64_t k = 0;
    for (int i = 0; i < item_count(); ++i) {
      for (int64_t t = count(i) - rows_of(*items[i]); t < count(i); ++t) rows[k++] = first_row[i] + t;
    }
    return rows;
  }
};

// What index sources hand down the stack within one forward ("shared_attn" of the
// reference): per row, the compressed entries the latest index source selected, and the
// candidate mask of the candidate source. Sized before the first layer for the whole forward.
struct Model::SharedIndex {
  Tensor topk;                        // [rows, index_topk] i32: ascending entry indices ...
  std::span<int32_t> topk_count;      // ... of which the first topk_count[r] are valid
  Tensor candidates;                  // [rows, width] u8
  std::span<int64_t> candidate_size;  // per row; 0 until a candidate source ran

  // Decoded once per forward and shared by every layer reading the same source (the cached
  // values are final once written, and each source appends before its first reader):
  // per (KV-source layer, item), its index keys [entries, index_head_dim] ...
  std::span<Tensor> index_keys;
  std::span<uint8_t> index_keys_ready;  // per layer
  // ... and per (index-source layer, item) the compressed entries its top-k selected.
  struct SelectedEntries {
    std::span<int32_t> slot;  // entry -> row of `rows`, or -1
    Tensor rows;              // [capacity, head_dim]; the first `used` rows hold entries
    int32_t used = 0;
  };
  std::span<SelectedEntries> selected;
  std::span<uint8_t> selected_ready;  // per layer
  int items = 0;

  Tensor& index_keys_of(int layer, int item) { return index_keys[layer * items + item]; }
  SelectedEntries& selected_of(int layer, int item) { return selected[layer * items + item]; }
};

// The tensors of one attention call.
struct Model::AttentionRows {
  Tensor qr_normed;     // [rows, q_lora_rank]
  Tensor q;             // [rows, heads, head_dim], RoPE'd
  Tensor kv_codes;      // [rows, head_dim] e4m3: the window entries of this call ...
  Tensor kv_exponents;  // [rows, head_dim / 32] ue8m0
  Tensor kv;            // ... and their decoded values, what the queries attend
  Tensor o;             // [rows, heads, head_dim]
};

}  // namespace deepinfer
