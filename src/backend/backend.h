// The op seam under the model: every computation of a V4.1 forward is one of these calls.
//
// The model (src/model) decides *what* runs: the order of the spec's named ops, which rows,
// which cache entries. A Backend decides *how*: on which device, with which kernels, split over
// which threads. The CPU backend (cpu_backend.h) is the kernels of src/kernels/cpu plus the small
// scalar loops of the model; a CUDA backend or a sharded rank implements the same table.
//
// Ops are coarse, one decision per high-level call (gemma.cpp's dispatch): a call covers every
// row of the step, so a backend can launch one kernel or one parallel loop per call. Each op
// states its numerics; every implementation must give the scalar oracle's bits (the golden tests
// run each backend and ISA level against the same rows).
//
// Tensors come from the backend's workspace (Workspace, tensor.h), reset at the start of each
// forward. Weights are WeightMatrix views of the checkpoint mapping. Cache entries are the typed
// views of cache/cache_layout.h.
//
// Thread contract: one forward at a time per Backend (the workspace is per step). Ops may use
// the backend's own threads internally; they return when their outputs are written.
#pragma once

#include <cstdint>
#include <exception>
#include <span>
#include <string_view>

#include "backend/rope.h"
#include "backend/tensor.h"
#include "cache/cache_layout.h"
#include "io/weight_matrix.h"

namespace deepinfer {

// Sizes of fixed scratch arrays in the compressor and router ops (the model checks them at load).
inline constexpr int kMaxCompressRatio = 16;
inline constexpr int kMaxExpertsPerToken = 64;

// How a linear rounds (the reference's three linear contracts).
enum class LinearNumerics {
  kCheckpoint,  // as the weight's format says: FP8/FP4 act-quantized GEMM, bf16 GEMM otherwise
  kFp32,        // fp32 dot products over the dequantized weights, fp32 output (F.linear in fp32)
  kBf16,        // the same, output rounded to bf16 (a bf16 GEMM of bf16-exact values)
};

// mHC coefficient parameters (spec 3.4).
struct HcParams {
  int copies = 0;  // hc_mult
  float norm_eps = 0.0f;
  int sinkhorn_iters = 0;
  float hc_eps = 0.0f;
};

// Router parameters (spec 3.6): sqrtsoftplus scores, top-k picked with the bias, weights
// normalized (when asked and k > 1) and scaled.
struct RouterParams {
  int top_k = 0;
  float gate_temp = 1.0f;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

// The indexer of one index-source layer (spec 3.5.3).
struct IndexerParams {
  enum class Candidates { kNone, kSelect, kFilter };
  int heads = 0;
  int64_t dim = 0;
  float weight_scale = 0.0f;  // dim^-1/2 * heads^-1/2
  int topk = 0;
  Candidates candidates = Candidates::kNone;
  int candidate_topk_blocks = 0;  // kSelect
  int candidate_block_size = 0;   // kSelect
};

// One query row of an indexer call: its keys, what it may see, and where its results go.
struct IndexerRow {
  int64_t position = 0;
  const float* keys = nullptr;  // [>= visible, dim], decoded index keys of the KV source
  int64_t visible = 0;          // entries it may attend: (position + 1) / ratio
  // kFilter: the candidate mask of the candidate source (entries past `mask_size` are out).
  const uint8_t* mask = nullptr;
  int64_t mask_size = 0;
  uint8_t* mask_out = nullptr;  // kSelect: `visible` bytes
  int32_t* topk = nullptr;      // topk slots; ascending entry indices
  int32_t* topk_count = nullptr;
};

// What a backend learns of a step before it runs (Backend::BeginStep): steps of the same shape
// are expected to cost about the same.
enum class StepKind { kForward, kDraft };  // Model::ForwardInto, Model::Draft
struct StepShape {
  StepKind kind = StepKind::kForward;
  int64_t rows = 0;  // token rows the step runs
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual Workspace& workspace() = 0;
  // Memory the backend keeps between forwards (its workspace and its kernels' scratch): bounded
  // by the largest step it has run.
  virtual uint64_t held_bytes() const = 0;

  // ---- steps --------------------------------------------------------------------------------
  // The model brackets each forward with these (StepScope below). A backend may choose how to
  // run a step from how earlier steps of its shape ran: the CPU backend runs it on all its
  // threads or on one, whichever is faster now (core/step_parallelism.h). Results must not
  // depend on the choice. `completed`: false when the step threw.
  virtual void BeginStep(StepShape shape) { (void)shape; }
  virtual void EndStep(bool completed) { (void)completed; }
  // Steps run on one of the backend's threads where it has several (the CPU backend's choice
  // above), since it started; 0 for a backend that does not choose.
  virtual uint64_t one_thread_steps() const { return 0; }

  // ---- linear -------------------------------------------------------------------------------
  // y [m, w.rows] = x [m, w.cols] W^T under `numerics`.
  virtual void Linear(const WeightMatrix& w, const Tensor& x, const Tensor& y, LinearNumerics numerics) = 0;
  // Block-diagonal: input group g (cols / groups wide) times rows [g * rows / groups, ...) of w,
  // kBf16 numerics (wo_a, which the reference converts to bf16).
  virtual void GroupedLinear(const WeightMatrix& w, int groups, const Tensor& x, const Tensor& y) = 0;

  // ---- data movement ------------------------------------------------------------------------
  // to = from, element for element (same dtype and element count).
  virtual void Copy(const Tensor& from, const Tensor& to) = 0;

  // ---- embedding ----------------------------------------------------------------------------
  // streams [rows, copies, D]: each token's dequantized row, in every copy.
  virtual void Embed(const WeightMatrix& table, std::span<const int32_t> tokens, int copies, const Tensor& streams) = 0;

  // ---- norms and RoPE -----------------------------------------------------------------------
  // Row-wise RMSNorm (kernels/cpu/ops.h RmsNorm).
  virtual void RmsNorm(const Tensor& x, std::span<const float> weight, float eps, const Tensor& out) = 0;
  // x [rows, heads * head_dim]: rotates the trailing 2 * table.pairs() dims of each head by the
  // row's position (the conjugate when `inverse`), bf16 results.
  virtual void Rope(const Tensor& x, int heads, const RopeTable& table, std::span<const int64_t> positions,
                    bool inverse) = 0;

  // ---- mHC ----------------------------------------------------------------------------------
  // A site's coefficients from its streams [rows, copies * D]: pre, post [rows, copies], comb
  // [rows, copies, copies] after the Sinkhorn iterations; fp32 throughout.
  virtual void HcMixes(const Tensor& streams, const WeightMatrix& fn, std::span<const float> base,
                       std::span<const float> scale, const HcParams& params, const Tensor& pre, const Tensor& post,
                       const Tensor& comb) = 0;
  // out [rows, D] = bf16(sum_i pre[i] * X[i]).
  virtual void HcCollapse(const Tensor& streams, const Tensor& pre, const Tensor& out) = 0;
  // X'[j] = bf16(post[j] * y + sum_i comb[i][j] * X[i]), in place on streams.
  virtual void HcExpand(const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& streams) = 0;

  // ---- KV codecs ----------------------------------------------------------------------------
  // Each row of x [rows, head_dim] to its FP8 window entry (codes, exponents) and back (decoded).
  virtual void EncodeWindowRows(const Tensor& x, const Tensor& codes, const Tensor& exponents,
                                const Tensor& decoded) = 0;
  virtual void StoreWindowEntries(const Tensor& codes, const Tensor& exponents,
                                  std::span<const WindowEntry<uint8_t>> entries) = 0;
  // out row k = entry k decoded; a null entry leaves its row alone.
  virtual void DecodeWindowEntries(std::span<const WindowEntry<const uint8_t>> entries, const Tensor& out) = 0;
  // Entry k gets latents row k (FP4, e4m3 scales) and keys row k (FP4 index key).
  virtual void EncodeCompressedEntries(const Tensor& latents, const Tensor& keys,
                                       std::span<const CompressedEntry<uint8_t>> entries) = 0;
  virtual void DecodeCompressedEntries(std::span<const CompressedEntry<const uint8_t>> entries, const Tensor& out) = 0;
  virtual void DecodeIndexKeys(std::span<const CompressedEntry<const uint8_t>> entries, const Tensor& out) = 0;

  // ---- compressor ---------------------------------------------------------------------------
  // Softmax-gated pooling of each group of `ratio` consecutive rows of kv / gate [groups * ratio,
  // head_dim], per channel: pooled [groups, head_dim], bf16.
  virtual void CompressorPool(const Tensor& kv, const Tensor& gate, int ratio, const Tensor& pooled) = 0;

  // ---- indexer ------------------------------------------------------------------------------
  // Per row: RoPE and FP4 QDQ of its index queries q [rows, heads * dim] (in place), fp32
  // scores sum_h relu(q_h . k) * head_weights[h] * weight_scale over its visible keys, the
  // candidate selection or filter, then its top-k (ties to the lower index).
  virtual void IndexerSelect(const Tensor& q, const Tensor& head_weights, const RopeTable& rope,
                             const IndexerParams& params, std::span<const IndexerRow> rows) = 0;

  // ---- sparse attention ---------------------------------------------------------------------
  // Row r's query heads q [rows, heads, dim] attend over entries [row_begin[r], row_begin[r+1])
  // with a per-head sink (kernels/cpu/ops.h SparseAttentionWithSink; null entries are empty
  // slots). out [rows, heads, dim].
  virtual void SparseAttention(const Tensor& q, int heads, std::span<const float* const> entries,
                               std::span<const int64_t> row_begin, std::span<const float> sink, float softmax_scale,
                               const Tensor& out) = 0;

  // ---- MoE ----------------------------------------------------------------------------------
  // scores [rows, experts] (the gate's fp32 logits) to each row's top_k experts [rows, top_k]
  // (i32, in selection order) and their weights [rows, top_k].
  virtual void Route(const Tensor& scores, std::span<const float> bias, const RouterParams& params,
                     const Tensor& experts, const Tensor& weights) = 0;
  // out = bf16(route_weight[r] * silu(min(g, limit)) * clamp(u, -limit, limit)); no clamps when
  // limit <= 0, no route weight when route_weights is empty. out may alias gate.
  virtual void SwiGlu(const Tensor& gate, const Tensor& up, std::span<const float> route_weights, float limit,
                      const Tensor& out) = 0;
  // out row k = x row rows[k].
  virtual void GatherRows(const Tensor& x, std::span<const int64_t> rows, const Tensor& out) = 0;
  // acc row rows[k] += src row k (fp32).
  virtual void ScatterAddRows(const Tensor& src, std::span<const int64_t> rows, const Tensor& acc) = 0;
  // out = bf16(a + b).
  virtual void AddRounded(const Tensor& a, const Tensor& b, const Tensor& out) = 0;

  // ---- Engram -------------------------------------------------------------------------------
  // out [ids, dim] = the FP8 table rows ids[k], dequantized (exact in bf16).
  virtual void EngramGather(const uint8_t* codes, const uint8_t* scales, int64_t table_rows, int64_t dim,
                            std::span<const int64_t> ids, const Tensor& out) = 0;
  // streams [rows, copies, D] += gate * value per copy, where kv [rows, (copies + 1) * D] holds
  // each copy's key then the shared value, and the gate is the sign-sqrt sigmoid of the
  // normalized h . (w * key) (spec 3.3).
  virtual void EngramGate(const Tensor& kv, std::span<const float> gate_weight, float eps, const Tensor& streams) = 0;
};

// Brackets one forward with Backend::BeginStep and EndStep (EndStep(false) when it unwinds).
class StepScope {
 public:
  StepScope(Backend& backend, StepShape shape) : backend_(backend), exceptions_(std::uncaught_exceptions()) {
    backend_.BeginStep(shape);
  }
  ~StepScope() { backend_.EndStep(std::uncaught_exceptions() == exceptions_); }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  Backend& backend_;
  int exceptions_;
};

}  // namespace deepinfer
