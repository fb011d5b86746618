// Per-forward data shared by the model's translation units (not part of the public API).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/mapped_file.h"
#include "model/model.h"

namespace deepinfer {

// The error for a SIGBUS on a mapped checkpoint file: names the file.
Error MappedFileError(const MappedFileFault& fault, const Checkpoint& checkpoint);

// Sizes of fixed scratch arrays in the compressor and router loops (checked at load).
inline constexpr int kMaxCompressRatio = 16;
inline constexpr int kMaxExpertsPerToken = 64;

// The tokens of one forward, flattened: row r is token `rows[r]` of item `rows[r].item`.
struct Model::Batch {
  struct Row {
    int item;
    int64_t position;
    int32_t token;
  };
  std::vector<Row> rows;
  std::vector<const ForwardItem*> items;
  std::vector<int64_t> first_row;  // per item: index of its first row

  int64_t size() const { return static_cast<int64_t>(rows.size()); }
  int64_t start(int item) const { return items[item]->state->length; }
  int64_t count(int item) const { return static_cast<int64_t>(items[item]->tokens.size()); }
};

// What index sources hand down the stack within one forward ("shared_attn" of the
// reference): per row, the compressed entries the latest index source selected, and the
// candidate mask of the candidate source.
struct Model::SharedIndex {
  std::vector<std::vector<int32_t>> topk;
  std::vector<std::vector<uint8_t>> candidates;

  // Decoded once per forward and shared by every layer reading the same source (the cached
  // values are final once written, and each source appends before its first reader):
  // per item, a KV source's index keys, keyed by the KV-source layer ...
  std::map<int, std::vector<std::vector<float>>> index_keys;
  // ... and the compressed entries an index source's top-k selected, keyed by that layer.
  struct SelectedEntries {
    std::vector<int32_t> slot;  // entry -> row in `rows`, or -1
    std::vector<float> rows;    // [selected, head_dim]
  };
  std::map<int, std::vector<SelectedEntries>> selected;
};

}  // namespace deepinfer
