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
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/compute_context.h"
#include "backend/rope.h"
#include "cache/sequence_state.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/engram_hash.h"
#include "model/weights.h"

namespace deepinfer {

// Which rows of logits a forward item returns.
enum class LogitsMode {
  kLast,  // the last token's (a decode step, a prompt's last chunk)
  kAll,   // every token's (scoring, verifying drafted tokens)
  kNone,  // none (a prefill chunk that is not the prompt's last)
};

struct ForwardItem {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;  // appended at state->length
  LogitsMode logits = LogitsMode::kLast;
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

  // Copies the FP8/FP4 matrices that the forward multiplies with checkpoint numerics (the
  // quantized GEMMs: attention projections, experts, Engram) of the formats `wanted` accepts into
  // the row-interleaved layout (InterleavedTiles, io/weight_matrix.h) that the AVX-512
  // vdpbf16ps kernels read as one stream per 16 rows. The copy is anonymous memory as large as
  // those matrices, so the model no longer pages them from disk; the in-place views stay valid
  // for the other kernels. Call before the first Forward, not concurrently with one; a second
  // call does nothing. A checkpoint file truncated while mapped is an Error naming the file.
  struct InterleaveReport {
    int64_t matrices = 0;
    uint64_t bytes = 0;
    double seconds = 0;
  };
  InterleaveReport InterleaveQuantizedMatrices(const std::function<bool(MatrixFormat)>& wanted);
  // What InterleaveQuantizedMatrices did (all zero when it has not run or found no matrix).
  const InterleaveReport& interleave_report() const { return interleave_report_; }

  // A sequence with its own unbounded page pool (for one-off use; the engine brings its own
  // pool and layout).
  SequenceState NewSequence() const;
  const std::shared_ptr<const CacheLayout>& default_cache_layout() const { return default_layout_; }
  // The Engram look-back a sequence has after processing `tokens` (empty without Engram):
  // what a state adopted from the prefix cache needs.
  std::vector<int32_t> EngramHistory(std::span<const int32_t> tokens) const;

  // Returns fp32 logits, [rows, vocab]: per item in order, the rows its LogitsMode asks for.
  // Throws Error on bad input (token id out of range, context exceeded, a KV cache budget that
  // cannot hold the new tokens) before any state value changes. A checkpoint file truncated
  // while mapped is an Error naming the file, thrown mid-forward (the states are then unusable,
  // and so is the model). Every op runs on ctx.backend, one forward at a time per backend.
  std::vector<float> Forward(std::span<const ForwardItem> items, const ComputeContext& ctx,
                             ForwardStats* stats = nullptr) const;
  // The same into `logits` (resized; no heap allocation once its capacity and the backend's
  // workspace have seen a step of this shape).
  void ForwardInto(std::span<const ForwardItem> items, const ComputeContext& ctx, std::vector<float>& logits,
                   ForwardStats* stats = nullptr) const;

 private:
  Model(ModelConfig config, Checkpoint checkpoint, ModelWeights weights, std::optional<EngramHasher> hasher,
        int64_t max_context);

  struct Batch;
  struct SharedIndex;

  // Forward's phases, in order; Forward runs them inside GuardMappedReads.
  void ForwardUnguarded(std::span<const ForwardItem> items, const ComputeContext& ctx, std::vector<float>& logits,
                        ForwardStats* stats) const;
  Batch ValidateAndReserve(std::span<const ForwardItem> items, Workspace& workspace) const;
  // Engram hash ids [engram layers, rows, columns], and each item's look-back history after
  // this step (committed last).
  Tensor HashEngramIds(const Batch& batch, Workspace& workspace, std::span<std::span<int32_t>> recent) const;
  Tensor Embed(const Batch& batch, const ComputeContext& ctx) const;
  SharedIndex ReserveSharedIndex(const Batch& batch, Workspace& workspace) const;
  // Collapse, final norm and head on the rows the items ask for.
  void Head(const Batch& batch, const Tensor& streams, const Tensor& pre_mix, const ComputeContext& ctx,
            std::vector<float>& logits) const;
  void Commit(const Batch& batch, std::span<const std::span<int32_t>> recent) const;

  void ApplyEngram(int layer, const Batch& batch, const Tensor& hash_ids, const Tensor& streams,
                   const ComputeContext& ctx) const;
  void RunBlock(int layer, const Batch& batch, const Tensor& streams, const Tensor& pre_mix, SharedIndex& shared,
                const ComputeContext& ctx, uint64_t* routed_bytes) const;
  void Attention(int layer, const Batch& batch, const Tensor& x, const Tensor& out, SharedIndex& shared,
                 const ComputeContext& ctx) const;
  // Attention's phases (attention.cc), in order.
  struct AttentionRows;
  AttentionRows ProjectQueryAndKv(int layer, const Batch& batch, const Tensor& x, const ComputeContext& ctx) const;
  void CompressKv(int layer, const Batch& batch, const Tensor& x, const ComputeContext& ctx) const;
  void SelectCompressed(int layer, const Batch& batch, const Tensor& x, const Tensor& qr, SharedIndex& shared,
                        const ComputeContext& ctx) const;
  // Per row, the entries its query attends: window (oldest first), then the selected compressed.
  void GatherEntries(int layer, const Batch& batch, const Tensor& kv, SharedIndex& shared, const ComputeContext& ctx,
                     std::span<const float*>& entries, std::span<int64_t>& row_begin) const;
  void ProjectOutput(int layer, const Batch& batch, const Tensor& o, const Tensor& out,
                     const ComputeContext& ctx) const;
  void StoreWindow(int layer, const Batch& batch, const AttentionRows& rows, const ComputeContext& ctx) const;
  // Adds the bytes of the routed experts it ran to *routed_bytes.
  void Moe(int layer, const Tensor& x, const Tensor& out, const ComputeContext& ctx, uint64_t* routed_bytes) const;
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
  std::vector<std::unique_ptr<uint8_t[]>> interleaved_;  // the buffers InterleaveQuantizedMatrices made
  InterleaveReport interleave_report_;
};

}  // namespace deepinfer
