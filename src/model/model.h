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
#include "core/function_ref.h"
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
  // The DSpark target taps of this many trailing tokens (at most tokens.size()): what the draft
  // reads (DraftItem::taps).
  int64_t tap_rows = 0;
  // A speculative verify: keep what SequenceState::Truncate needs to drop any suffix of these
  // tokens afterwards (implies keep_window_pages: a shorter sequence reaches further back).
  bool rollback = false;
};

// A sequence's DSpark draft state (spec 3.8, 4.1): each stage's window ring of target KV
// (`main_kv`), FP8 entries as in the window cache, at slot position % window. It only ever
// receives accepted positions (the engine seeds it from taps of tokens it kept), so a rejected
// draft leaves nothing to roll back. Copyable; one forward at a time uses it.
class DraftState {
 public:
  DraftState() = default;
  int64_t length() const { return length_; }  // positions seeded; the next one to seed
  bool valid() const { return window_ > 0; }
  // Continues at `position` (>= length()) with nothing seeded before it: the positions a prefix
  // cache supplied without taps, or taps older than the window. Drafts then attend only the
  // seeded positions (exactness is the verify's; only the proposals can change).
  void SkipTo(int64_t position);
  // Every byte of the rings of the slots a draft may read (tests compare states with it).
  std::vector<uint8_t> VisibleBytes() const;

 private:
  friend class Model;
  DraftState(int stages, int window, int64_t head_dim);
  WindowEntry<uint8_t> slot(int stage, int64_t position);
  WindowEntry<const uint8_t> slot(int stage, int64_t position) const;

  int stages_ = 0;
  int window_ = 0;
  int64_t head_dim_ = 0;
  int64_t length_ = 0;
  int64_t first_seeded_ = 0;
  std::vector<uint8_t> codes_;      // [stages, window, head_dim] e4m3
  std::vector<uint8_t> exponents_;  // [stages, window, head_dim / 32] ue8m0
};

struct DraftItem {
  DraftState* state = nullptr;
  // [n, Model::draft_tap_width()]: the target taps (ForwardItem::tap_rows) of positions
  // state->length() .. + n - 1, in order; seeded into every stage's ring.
  std::span<const float> taps;
  // Draft the block after the last tap position p: `next_token` is the target's token at p + 1,
  // and the block proposes the tokens at p + 2 .. p + 1 + block. Without it the item only seeds
  // (a prompt chunk).
  bool draft = true;
  int32_t next_token = 0;
};

// Per drafting item, in item order.
struct DraftResult {
  std::vector<float> logits;      // [drafting items * block, vocab] fp32, Markov bias included
  std::vector<int32_t> tokens;    // [drafting items * block]: the proposals, slot by slot
  std::vector<float> confidence;  // [drafting items * block]: the confidence head's raw logits
  // Every weight byte the call touched, as ForwardStats counts a forward: the seeding's main_proj
  // and stage wkv, then for the block the embedding rows, each stage's matrices and the routed
  // experts its tokens picked, the head, the Markov head once per slot, the confidence head.
  uint64_t weight_bytes = 0;
};

// Picks the token of block slot `slot` of drafting item `item` from its logits (greedy: the
// argmax, ties to the lowest id). The next slot's Markov bias depends on the pick.
using DraftChooser = FunctionRef<int32_t(int item, int slot, std::span<const float> logits)>;

// What a forward read: the basis of bandwidth accounting in `deepinfer bench`.
struct ForwardStats {
  uint64_t weight_bytes = 0;  // every weight byte the forward touched, each tensor counted once
};

// Positions per KV cache block unless the engine asks otherwise (rounded up to a multiple of
// every compress ratio).
inline constexpr int kDefaultBlockTokens = 16;

// The distinct routed experts `tokens` tokens pick from `experts` at top_k each, in expectation,
// when routing spreads uniformly: E (1 - (1 - top_k / E)^tokens). What a multi-token step reads.
double ExpectedDistinctExperts(int experts, int top_k, int64_t tokens);

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
  // quantized GEMMs: attention projections, experts, Engram) and a BF16 output head, of the
  // formats `wanted` accepts, into the row-interleaved layout (InterleavedTiles,
  // io/weight_matrix.h) that the AVX-512 GEMV tiles read as one stream per 16 rows. The copy is
  // anonymous memory as large as those matrices, so the model no longer pages them from disk; the
  // in-place views stay valid for the other kernels. Call before the first Forward, not
  // concurrently with one; a second call does nothing. A checkpoint file truncated while mapped
  // is an Error naming the file.
  struct InterleaveReport {
    int64_t matrices = 0;
    uint64_t bytes = 0;
    double seconds = 0;
  };
  InterleaveReport InterleaveMatrices(const std::function<bool(MatrixFormat)>& wanted);
  // What InterleaveMatrices did (all zero when it has not run or found no matrix).
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
  // workspace have seen a step of this shape). With `taps`, it is resized to the items' tap rows
  // [rows, draft_tap_width()] in item order: per DSpark target layer in the config's order, the
  // mean of the hc copies entering that layer (after its Engram), bf16 values.
  void ForwardInto(std::span<const ForwardItem> items, const ComputeContext& ctx, std::vector<float>& logits,
                   ForwardStats* stats = nullptr, std::vector<float>* taps = nullptr) const;

  // ---- DSpark draft (spec 3.8) ---------------------------------------------------------------
  bool has_draft() const { return weights_.draft.has_value(); }
  int draft_block() const { return config_.dspark_block_size; }
  int64_t draft_tap_width() const {
    return config_.hidden_size * static_cast<int64_t>(config_.dspark_target_layer_ids.size());
  }
  DraftState NewDraftState() const;
  // What one step reads, for a speculation policy: every weight but the routed experts (plus
  // the head), one routed expert of a layer, and the same for one draft call of one sequence.
  struct ReadBytes {
    uint64_t head = 0;   // the output head, read by every step and every draft
    uint64_t fixed = 0;  // head included
    uint64_t expert = 0;
    int experts = 0;
    int top_k = 0;
    int moe_layers = 0;
    uint64_t draft = 0;  // a draft of one block: stages (experts as the block's tokens spread), head
  };
  ReadBytes read_bytes() const;
  // Seeds each item's rings with its taps, then drafts a block for the items that ask. Throws
  // Error on bad input (no DSpark stages, a state of another model, a tap count that does not
  // match, an out-of-vocabulary token, positions past the context) before any state changes.
  // Every op runs on ctx.backend; like Forward, one call at a time per backend.
  void Draft(std::span<const DraftItem> items, const ComputeContext& ctx, DraftChooser choose, DraftResult& out) const;

 private:
  Model(ModelConfig config, Checkpoint checkpoint, ModelWeights weights, std::optional<EngramHasher> hasher,
        int64_t max_context);

  struct Batch;
  struct SharedIndex;

  // Forward's phases, in order; Forward runs them inside GuardMappedReads.
  void ForwardUnguarded(std::span<const ForwardItem> items, const ComputeContext& ctx, std::vector<float>& logits,
                        ForwardStats* stats, std::vector<float>* taps) const;
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
  // Target layer `target`'s copy mean of the batch rows `rows`, into taps (column block `target`
  // of each row).
  void Tap(int target, std::span<const int64_t> rows, const Tensor& streams, const Tensor& taps,
           const ComputeContext& ctx) const;
  void RunBlock(int layer, const Batch& batch, const Tensor& streams, const Tensor& pre_mix, SharedIndex& shared,
                const ComputeContext& ctx, uint64_t* routed_bytes) const;
  // One block's two mHC sites (spec 3.4) around `attention` (normed input -> sublayer output)
  // and the MoE; pre_mix carries the lagged collapse from site to site.
  using AttentionSite = FunctionRef<void(const Tensor& x, const Tensor& out)>;
  void RunSites(const LayerWeights& w, int top_k, const Tensor& streams, const Tensor& pre_mix, AttentionSite attention,
                const ComputeContext& ctx, uint64_t* routed_bytes) const;
  void Attention(int layer, const Batch& batch, const Tensor& x, const Tensor& out, SharedIndex& shared,
                 const ComputeContext& ctx) const;
  // Attention's phases (attention.cc), in order.
  struct AttentionRows;
  AttentionRows ProjectQueryAndKv(const AttentionWeights& w, const RopeTable& rope, std::span<const int64_t> positions,
                                  const Tensor& x, const ComputeContext& ctx) const;
  // wkv -> kv_norm -> RoPE at `positions` -> FP8 window entries (and their decoded values).
  void ProjectKv(const AttentionWeights& w, const RopeTable& rope, std::span<const int64_t> positions, const Tensor& x,
                 const Tensor& codes, const Tensor& exponents, const Tensor& decoded, const ComputeContext& ctx) const;
  void CompressKv(int layer, const Batch& batch, const Tensor& x, const ComputeContext& ctx) const;
  void SelectCompressed(int layer, const Batch& batch, const Tensor& x, const Tensor& qr, SharedIndex& shared,
                        const ComputeContext& ctx) const;
  // Per row, the entries its query attends: window (oldest first), then the selected compressed.
  void GatherEntries(int layer, const Batch& batch, const Tensor& kv, SharedIndex& shared, const ComputeContext& ctx,
                     std::span<const float*>& entries, std::span<int64_t>& row_begin) const;
  void ProjectOutput(const AttentionWeights& w, const RopeTable& rope, std::span<const int64_t> positions,
                     const Tensor& o, const Tensor& out, const ComputeContext& ctx) const;
  void StoreWindow(int layer, const Batch& batch, const AttentionRows& rows, const ComputeContext& ctx) const;
  // Adds the bytes of the routed experts it ran to *routed_bytes.
  void Moe(const MoeWeights& w, int top_k, const Tensor& x, const Tensor& out, const ComputeContext& ctx,
           uint64_t* routed_bytes) const;
  // The draft's phases (draft.cc).
  struct DraftBatch;
  void SeedDraft(const DraftBatch& batch, const ComputeContext& ctx) const;
  uint64_t SeedBytes(int64_t rows) const;
  uint64_t BlockBytes(int64_t rows, int drafting) const;
  void DraftAttention(int stage, const DraftBatch& batch, const Tensor& x, const Tensor& out,
                      const ComputeContext& ctx) const;
  void DraftHead(const DraftBatch& batch, const Tensor& streams, const Tensor& pre_mix, const ComputeContext& ctx,
                 DraftChooser choose, DraftResult& out) const;
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
  std::vector<std::unique_ptr<uint8_t[]>> interleaved_;  // the buffers InterleaveMatrices made
  InterleaveReport interleave_report_;
};

}  // namespace deepinfer
