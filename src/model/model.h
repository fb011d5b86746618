// The DeepSeek-V4.1 backbone on the CPU: load a released checkpoint directory and run
// batched forwards of independent sequences.
//
// A forward takes any number of sequences, each appending any number of tokens at its own
// position (whole-prompt prefill, chunked prefill, single-token decode and multi-token
// steps are all the same call). Every per-token computation has a fixed operation order
// that does not depend on which other tokens share the call, so a sequence's logits are
// bit-identical whether it runs alone or batched, and whatever the chunking.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "kernels/cpu/compute_context.h"
#include "model/engram_hash.h"
#include "model/rope.h"
#include "model/weights.h"

namespace deepinfer {

// Everything a sequence carries between forwards (spec section 4.1), in the compact formats
// that reproduce the reference's QDQ'd values exactly (decoding gives the same bits):
struct LayerCache {
  // Window ring, position p in slot p % window_size: e4m3 codes [window, head_dim] and ue8m0
  // exponents [window, head_dim / 32] (528 B per slot at V4.1 size).
  std::vector<uint8_t> window_codes;
  std::vector<uint8_t> window_exponents;
  // KV sources: compressed entries, RoPE'd, as packed e2m1 [entries, head_dim / 2] with e4m3
  // scales [entries, head_dim / 16] (288 B per entry).
  std::vector<uint8_t> compressed_codes;
  std::vector<uint8_t> compressed_scales;
  // KV sources: indexer keys, RoPE'd, as packed e2m1 [entries, index_head_dim / 2] with ue8m0
  // exponents [entries, index_head_dim / 32] (68 B per entry).
  std::vector<uint8_t> index_codes;
  std::vector<uint8_t> index_exponents;
  // Ratio > 1 sources: fp32 projections of the incomplete group (raw, not quantized).
  std::vector<float> pending_kv;
  std::vector<float> pending_gate;

  uint64_t bytes() const;
};

struct SequenceState {
  int64_t length = 0;  // tokens already processed; the next token sits at this position
  std::vector<LayerCache> layers;
  std::vector<int32_t> engram_recent;  // compressed ids of the last lookback tokens, oldest first

  uint64_t CacheBytes() const;  // everything above, as stored
};

struct ForwardItem {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;  // appended at state->length
  bool all_logits = false;          // logits for every token, or only the last
};

// What a forward read: the basis of bandwidth accounting in `deepinfer bench`.
struct ForwardStats {
  uint64_t weight_bytes = 0;  // every weight byte the forward touched, each tensor counted once
};

struct ModelOptions {
  int64_t max_context = 0;  // 0: the config's max_position_embeddings
};

class Model {
 public:
  // Loads `<dir>/config.json` (or inference/config.json), the safetensors and, when the
  // config has Engram layers, `<dir>/tokenizer.json` for the compressed token map.
  static std::unique_ptr<Model> Load(const std::string& model_dir, const ModelOptions& options = {});

  const ModelConfig& config() const { return config_; }
  int64_t max_context() const { return max_context_; }
  const Checkpoint& checkpoint() const { return checkpoint_; }

  SequenceState NewSequence() const;

  // Returns fp32 logits, [rows, vocab]: per item in order, every token's row when
  // all_logits, else the last token's. Throws Error on bad input (token id out of range,
  // context exceeded) before any state changes.
  std::vector<float> Forward(std::span<const ForwardItem> items, const ComputeContext& ctx,
                             ForwardStats* stats = nullptr) const;
  // The same on the best SIMD level this CPU supports.
  std::vector<float> Forward(std::span<const ForwardItem> items, ThreadPool& pool) const;

 private:
  Model(ModelConfig config, Checkpoint checkpoint, ModelWeights weights, std::optional<EngramHasher> hasher,
        int64_t max_context);

  struct Batch;
  struct SharedIndex;

  void ApplyEngram(int layer, const Batch& batch, const std::vector<int64_t>& hash_ids, std::vector<float>& streams,
                   const ComputeContext& ctx) const;
  void RunBlock(int layer, const Batch& batch, std::vector<float>& streams, std::vector<float>& pre_mix,
                SharedIndex& shared, const ComputeContext& ctx, uint64_t* routed_bytes) const;
  void Attention(int layer, const Batch& batch, const std::vector<float>& x, std::vector<float>& out,
                 SharedIndex& shared, const ComputeContext& ctx) const;
  void CompressAndIndex(int layer, const Batch& batch, const std::vector<float>& x, const std::vector<float>& qr,
                        SharedIndex& shared, const ComputeContext& ctx) const;
  // Adds the bytes of the routed experts it ran to *routed_bytes.
  void Moe(int layer, const std::vector<float>& x, int64_t rows, std::vector<float>& out, const ComputeContext& ctx,
           uint64_t* routed_bytes) const;
  const RopeTable& RopeFor(int compress_ratio) const { return compress_ratio > 0 ? compress_rope_ : main_rope_; }

  ModelConfig config_;
  Checkpoint checkpoint_;
  ModelWeights weights_;
  std::optional<EngramHasher> hasher_;
  RopeTable main_rope_;
  RopeTable compress_rope_;
  int64_t max_context_;
  std::vector<uint64_t> layer_fixed_bytes_;  // per layer: every weight but the routed experts
};

}  // namespace deepinfer
