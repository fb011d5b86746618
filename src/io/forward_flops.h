// The analytic FLOP count of a V4.1 forward, straight from the config: what `deepinfer bench`
// divides by the measured time and compares with the machine's peak (core/machine_limits.h).
#pragma once

#include <cstdint>

#include "io/model_config.h"

namespace deepinfer {

struct FlopCount {
  uint64_t linear = 0;     // every matrix-vector product, 2 * rows * cols per token
  uint64_t attention = 0;  // scores and values: 2 * 2 * heads * head_dim per attended entry
  uint64_t indexer = 0;    // index scoring: 2 * index_heads * index_dim per visible entry
  uint64_t total() const { return linear + attention + indexer; }
};

// FLOPs of one forward of `config`'s backbone for one sequence appending `tokens` tokens at
// position `start` (the head for its last token only; DSpark stages are not counted). Names:
// D hidden_size, hc hc_mult, H num_heads, Dh head_dim, IH index_n_heads, Di index_dim
// (index_head_dim), E n_routed_experts, I moe_intermediate_size, V vocab_size,
// engram_wkv_cols (engram_max_ngram_size - 1) * engram_n_heads * engram_head_dim; the layer
// flags are each layer's LayerRole. The formula, per token at position p and per layer:
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
FlopCount CountForwardFlops(const ModelConfig& config, int64_t start, int64_t tokens);

}  // namespace deepinfer
