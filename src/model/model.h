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

#include "cache/sequence_state.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "kernels/cpu/compute_context.h"
#include "model/engram_hash.h"
#include "model/rope.h"
#include "model/weights.h"

namespace deepinfer {

struct ForwardItem {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;  // appended at state->length
  bool all_logits = false;          // logits for every token, or only the last
  bool no_logits = false;           // none at all (a prefill chunk that is not the prompt's last)
  // Keep window pages that slid out of the window attached after the forward (the engine
  // offers them to the prefix cache first, then calls ReleaseStaleWindowPages itself).
  bool keep_window_pages = false;
};

// What a forward read: the basis of bandwidth accounting in `deepinfer bench`.
struct ForwardStats {
  uint64_t weight_bytes = 0;  // every weight byte the forward touched, each tensor counted once
};

// Positions per KV cache block unless the engine asks otherwise (rounded up to a multiple of
// every compress ratio).
inline constexpr int kDefaultBlockTokens = 16;

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

  // A sequence with its own unbounded page pool (for one-off use; the engine brings its own
  // pool and layout).
  SequenceState NewSequence() const;
  const std::shared_ptr<const CacheLayout>& default_cache_layout() const { return default_layout_; }
  // The Engram look-back a sequence has after processing `tokens` (empty without Engram):
  // what a state adopted from the prefix cache needs.
  std::vector<int32_t> EngramHistory(std::span<const int32_t> tokens) const;

  // Returns fp32 logits, [rows, vocab]: per item in order, every token's row when
  // all_logits, none when no_logits, else the last token's. Throws Error on bad input (token
  // id out of range, context exceeded, a KV cache budget that cannot hold the new tokens)
  // before any state value changes. A checkpoint file truncated while mapped is an Error
  // naming the file, thrown mid-forward (the states are then unusable, and so is the model).
  std::vector<float> Forward(std::span<const ForwardItem> items, const ComputeContext& ctx,
                             ForwardStats* stats = nullptr) const;
  // The same on the best SIMD level this CPU supports.
  std::vector<float> Forward(std::span<const ForwardItem> items, ThreadPool& pool) const;

 private:
  Model(ModelConfig config, Checkpoint checkpoint, ModelWeights weights, std::optional<EngramHasher> hasher,
        int64_t max_context);

  struct Batch;
  struct SharedIndex;

  // Forward's work; Forward runs it inside GuardMappedReads.
  std::vector<float> ForwardUnguarded(std::span<const ForwardItem> items, const ComputeContext& ctx,
                                      ForwardStats* stats) const;

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
  std::shared_ptr<const CacheLayout> default_layout_;
};

}  // namespace deepinfer
