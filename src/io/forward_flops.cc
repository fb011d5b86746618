#include "io/forward_flops.h"

#include <algorithm>

namespace deepinfer {
namespace {

// Compressed entries an index source after the candidate source may score: those inside
// the kept blocks (the newest block, possibly partial, is always kept; the others are full).
int64_t CandidateEntries(int64_t visible, int64_t topk_blocks, int64_t block_size) {
  if (visible <= 0 || topk_blocks <= 0 || block_size <= 0) return 0;
  const int64_t blocks = (visible + block_size - 1) / block_size;
  if (blocks <= topk_blocks) return visible;
  const int64_t newest = visible - (blocks - 1) * block_size;
  return newest + (topk_blocks - 1) * block_size;
}

}  // namespace

FlopCount CountForwardFlops(const ModelConfig& c, int64_t start, int64_t tokens) {
  FlopCount f;
  if (tokens <= 0) return f;
  using u64 = uint64_t;
  const u64 d = c.hidden_size, hc = c.hc_mult, heads = c.num_heads, dh = c.head_dim, ql = c.q_lora_rank;
  const u64 og = std::max(1, c.o_groups), ol = c.o_lora_rank;
  const u64 ih = c.index_n_heads, di = c.index_head_dim;
  const u64 engram_wkv_cols =
      c.engram_max_ngram_size > 0 ? u64(c.engram_max_ngram_size - 1) * c.engram_n_heads * c.engram_head_dim : 0;
  const u64 mix = (2 + hc) * hc;
  // Linears every token runs in every layer.
  const u64 common = 2 * 2 * mix * (hc * d)                                   // hc_attn_fn, hc_ffn_fn
                     + 2 * d * ql + 2 * ql * heads * dh + 2 * d * dh          // wq_a, wq_b, wkv
                     + 2 * (og * ol) * (heads * dh / og) + 2 * (og * ol) * d  // wo_a (grouped), wo_b
                     + 2 * d * static_cast<u64>(c.n_routed_experts)           // router
                     + static_cast<u64>(c.num_experts_per_tok + c.n_shared_experts) * 3 * 2 * d *
                           static_cast<u64>(c.moe_intermediate_size);  // experts
  for (int64_t p = start; p < start + tokens; ++p) {
    int64_t topk = 0;        // entries the latest index source picked for this token
    int64_t candidates = 0;  // entries inside the candidate blocks
    for (const LayerRole& layer : c.roles) {
      u64 linear = common;
      if (layer.engram_index >= 0) linear += 2 * (d * (hc + 1)) * engram_wkv_cols;
      const int64_t ratio = layer.compress_ratio;
      if (ratio > 0) {
        if (layer.kv_source) {
          linear += 2 * d * dh * (ratio > 1 ? 2 : 1);       // compressor wkv (+ wgate)
          if ((p + 1) % ratio == 0) linear += 2 * dh * di;  // indexer wk, per group
        }
        if (layer.index_source) {
          linear += 2 * ql * (ih * di) + 2 * d * ih;  // indexer wq_b, weights_proj
          const int64_t visible = (p + 1) / ratio;
          f.indexer += 2 * ih * di * static_cast<u64>(visible);
          int64_t finite = visible;
          if (layer.candidate_source) {
            candidates = CandidateEntries(visible, c.candidate_topk_blocks, c.candidate_block_size);
          } else if (layer.uses_candidates) {
            finite = std::min(visible, candidates);
          }
          topk = std::min<int64_t>(c.index_topk, finite);
        }
      }
      const int64_t entries = std::min<int64_t>(p + 1, c.window_size) + (ratio > 0 ? topk : 0);
      f.attention += 2 * 2 * heads * dh * static_cast<u64>(entries);
      f.linear += linear;
    }
  }
  f.linear += 2 * d * static_cast<u64>(c.vocab_size);  // head, last token
  return f;
}

}  // namespace deepinfer
