// What this machine can do at most, measured in the same run as the thing compared with it
// (`deepinfer bench`), and the analytic FLOP count of a V4.1 forward that goes with it.
//
// The measurements follow /work/shared/docs/machine-notes.md: DRAM read bandwidth is a
// vectorised sum over a large array with 8 independent accumulators per thread, each thread
// reading its own contiguous slice (first touched by that same thread); the FLOP peak runs
// 12 independent dependency chains of one instruction class per thread on every thread of
// the pool. Both report the best of several passes. Nothing here asserts a threshold: shared
// machines are noisy, callers only report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"

namespace deepinfer {

// ---- DRAM read bandwidth --------------------------------------------------------------------

// Bytes per second read by `pool` summing `bytes` of memory (rounded up to whole 4 KiB pages;
// at least 1 GiB is what makes it a DRAM number), best of `passes` timed passes after one
// untimed pass. Uses the widest vector loads this CPU and OS support. Throws Error when the
// buffer cannot be allocated or the arguments are not positive.
double MeasureReadBandwidth(ThreadPool& pool, size_t bytes, int passes);

// ---- Arithmetic peak ------------------------------------------------------------------------

enum class PeakKind {
  kScalarFp32,     // scalar fp32 multiply + add (what scalar kernels compile to): 2 FLOP per pair
  kAvx2Fma,        // vfmadd on ymm: 8 lanes x 2 = 16 FLOP per instruction
  kAvx512Fma,      // vfmadd on zmm: 16 lanes x 2 = 32 FLOP per instruction
  kAvx512Bf16Dot,  // vdpbf16ps on zmm: 16 lanes x 2 bf16 products x 2 = 64 FLOP per instruction
};

std::string_view PeakKindName(PeakKind kind);
// Whether this CPU and OS can run `kind` (the CPU flag and the saved register state).
bool PeakKindSupported(PeakKind kind);

// FLOP/s of `kind` on every thread of `pool`: 12 independent chains per thread, the loop
// length calibrated so a pass lasts about `seconds` / 4, best of 3 passes. Throws Error when
// the kind is not supported here or `seconds` is not positive.
double MeasurePeakFlops(ThreadPool& pool, PeakKind kind, double seconds);

// ---- Analytic FLOPs of a forward --------------------------------------------------------------

// One backbone layer as the FLOP count sees it (mirrors io/model_config.h LayerRole without
// depending on it; `deepinfer bench` fills it from the config).
struct FlopLayer {
  int compress_ratio = 0;         // 0: sliding window only
  bool kv_source = false;         // compressor (+ wgate when ratio > 1) and indexer wk
  bool index_source = false;      // indexer wq_b, weights_proj and scoring; sets the top-k
  bool candidate_source = false;  // its index scores also pick the candidate blocks
  bool uses_candidates = false;   // its scores are restricted to the candidate blocks
  bool engram = false;            // Engram wkv projection before the block
};

// The shapes the count needs (names as in io/model_config.h ModelConfig).
struct FlopShape {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  int64_t q_lora_rank = 0;
  int64_t o_groups = 1;
  int64_t o_lora_rank = 0;
  int64_t window_size = 0;
  int64_t hc_mult = 0;
  int64_t n_routed_experts = 0;     // router rows
  int64_t num_experts_per_tok = 0;  // routed experts each token runs
  int64_t n_shared_experts = 1;     // shared experts each token runs
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  int64_t candidate_topk_blocks = 0;
  int64_t candidate_block_size = 1;
  int64_t engram_wkv_cols = 0;  // (engram_max_ngram_size - 1) * engram_n_heads * engram_head_dim
  std::vector<FlopLayer> layers;
};

struct FlopCount {
  uint64_t linear = 0;     // every matrix-vector product, 2 * rows * cols per token
  uint64_t attention = 0;  // scores and values: 2 * 2 * heads * head_dim per attended entry
  uint64_t indexer = 0;    // index scoring: 2 * index_heads * index_dim per visible entry
  uint64_t total() const { return linear + attention + indexer; }
};

// FLOPs of one forward of one sequence appending `tokens` tokens at position `start` (the
// head for its last token only). The formula, per token at position p and per layer:
//   linear    2*2*mix*(hc*D)                          the two hyper-connection fn linears,
//                                                     mix = (2 + hc) * hc
//           + 2*D*q_lora + 2*q_lora*H*Dh + 2*D*Dh     wq_a, wq_b, wkv
//           + 2*(o_groups*o_lora)*(H*Dh/o_groups)     grouped wo_a (block-diagonal)
//           + 2*(o_groups*o_lora)*D                   wo_b
//           + [kv source] 2*D*Dh (x2 when ratio > 1: wkv and wgate of the compressor)
//                         + 2*Dh*index_dim per compressed group that completes at p
//                           (every token when ratio == 1, when (p + 1) % ratio == 0 else)
//           + [index source] 2*q_lora*(IH*Di) + 2*D*IH        indexer wq_b, weights_proj
//           + [engram] 2*(D*(hc + 1))*engram_wkv_cols         Engram wkv
//           + 2*D*E + (top_k + shared) * 3 * 2*D*I            router, w1/w3/w2 of each expert
//   attention 2*2*H*Dh*(min(p + 1, window) + k_p)     QK^T and PV over the window and the
//                                                     k_p compressed entries picked for p
//   indexer   [index source] 2*IH*Di*(p + 1)/ratio    scores against every visible key
// where k_p (ratio > 0 layers) is min(index_topk, finite scores) of the latest index source
// at or above the layer: every visible entry, or for an index source after the candidate
// source only those inside its kept blocks (candidate_topk_blocks blocks of
// candidate_block_size, the newest, possibly partial, block always among them).
// Plus 2*D*V once for the head. Elementwise work (norms, RoPE, softmax, SwiGLU, mixing)
// is not counted.
FlopCount CountForwardFlops(const FlopShape& shape, int64_t start, int64_t tokens);

}  // namespace deepinfer
