// src/io/forward_flops: the analytic FLOP count of a forward matches a hand count.
#include "io/forward_flops.h"

#include <gtest/gtest.h>

namespace deepinfer {
namespace {

// Two tiny layers: a sliding-window layer and a ratio-2 layer that is a KV source, an index
// source and an Engram layer.
ModelConfig TinyConfig() {
  ModelConfig s;
  s.vocab_size = 10;
  s.hidden_size = 4;            // D
  s.moe_intermediate_size = 2;  // I
  s.num_heads = 2;              // H
  s.head_dim = 4;               // Dh
  s.q_lora_rank = 3;
  s.o_groups = 2;
  s.o_lora_rank = 2;
  s.window_size = 2;
  s.hc_mult = 1;
  s.n_routed_experts = 3;
  s.num_experts_per_tok = 1;
  s.n_shared_experts = 1;
  s.index_n_heads = 1;   // IH
  s.index_head_dim = 2;  // Di
  s.index_topk = 1;
  s.engram_max_ngram_size = 2;  // engram_wkv_cols (2 - 1) * 1 * 2 = 2
  s.engram_n_heads = 1;
  s.engram_head_dim = 2;
  LayerRole window_only;
  LayerRole compressed;
  compressed.compress_ratio = 2;
  compressed.kv_source = true;
  compressed.index_source = true;
  compressed.engram_index = 0;
  s.num_layers = 2;
  s.roles = {window_only, compressed};
  return s;
}

// Per token, per layer, every layer:
//   hc fn x2         2*2*mix*(hc*D), mix = (2+1)*1 = 3      = 48
//   wq_a, wq_b, wkv  2*4*3 + 2*3*(2*4) + 2*4*4 = 24+48+32   = 104
//   wo_a grouped     2*(2*2)*(2*4/2) = 32; wo_b 2*(2*2)*4=32 = 64
//   router           2*4*3                                  = 24
//   experts          (1 routed + 1 shared) * 3 * 2*4*2      = 96
//                                                     total   336
// Layer 1 only, per token: Engram wkv 2*(4*2)*2 = 32, compressor wkv+wgate 2*2*4*4 = 64,
//   indexer wq_b 2*3*(1*2) = 12 + weights_proj 2*4*1 = 8; indexer wk 2*4*2 = 16 when
//   (p + 1) % 2 == 0.
// Head: 2*4*10 = 80. Attention: 2*2*H*Dh = 32 per entry. Indexer: 2*IH*Di = 4 per visible key.
TEST(ForwardFlops, OfAShortPrefillByHand) {
  const FlopCount f = CountForwardFlops(TinyConfig(), 0, 3);
  // Positions 0, 1, 2: 2 layers x 336, layer 1 extras 3 x (32+64+12+8), wk once (p = 1), head.
  EXPECT_EQ(f.linear, 3u * 2 * 336 + 3 * 116 + 16 + 80);
  // Window entries min(p+1, 2) = 1, 2, 2 in both layers; layer 1 also sees
  // min(topk 1, visible (p+1)/2 = 0, 1, 1) = 0, 1, 1 compressed entries: 5 + 5 + 2 = 12.
  EXPECT_EQ(f.attention, 32u * 12);
  // Layer 1 scores visible keys 0 + 1 + 1.
  EXPECT_EQ(f.indexer, 4u * 2);
  EXPECT_EQ(f.total(), 2460u + 384 + 8);
}

TEST(ForwardFlops, OfOneDecodeTokenByHand) {
  // Position 5: visible (5+1)/2 = 3 keys, top-1 picked, a group completes (wk runs).
  const FlopCount f = CountForwardFlops(TinyConfig(), 5, 1);
  EXPECT_EQ(f.linear, 2u * 336 + 116 + 16 + 80);
  EXPECT_EQ(f.attention, 32u * (2 + 2 + 1));
  EXPECT_EQ(f.indexer, 4u * 3);
  EXPECT_EQ(CountForwardFlops(TinyConfig(), 5, 0).total(), 0u);
}

TEST(ForwardFlops, RestrictsIndexSourcesAfterTheCandidateSource) {
  ModelConfig s;
  s.num_heads = 1;
  s.head_dim = 1;  // 4 attention FLOPs per entry
  s.window_size = 1;
  s.index_topk = 100;
  s.candidate_topk_blocks = 2;
  s.candidate_block_size = 4;
  LayerRole candidate_source;
  candidate_source.compress_ratio = 1;
  candidate_source.index_source = true;
  candidate_source.candidate_source = true;
  LayerRole constrained = candidate_source;
  constrained.candidate_source = false;
  constrained.uses_candidates = true;
  LayerRole reuse;
  reuse.compress_ratio = 1;
  s.num_layers = 3;
  s.roles = {candidate_source, constrained, reuse};
  // Position 10: 11 visible keys in blocks of 4 (4, 4, 3); the newest (3 entries) and one
  // more full block are kept: 7 candidates. The candidate source attends 1 + 11 entries,
  // the constrained source 1 + 7, the reusing layer its 7 as well.
  const FlopCount f = CountForwardFlops(s, 10, 1);
  EXPECT_EQ(f.attention, 4u * (12 + 8 + 8));
}

}  // namespace
}  // namespace deepinfer
