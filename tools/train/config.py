"""The trained default model's shape (flat reference `inference/config.json` keys).

Every layer role of the golden models: SWA (0, 1), a ratio-2 KV + index source (2) and its reuse
layer (3), a ratio-1 KV source that is also the candidate source (4), its reuse layer (5), and a
reindex layer that picks inside the candidates (6); Engram on an SWA layer and on a KV source (1, 4)
as in the release (1, 14); mHC with 4 copies; 8 FP4 routed experts (top 2) plus a shared FP8
expert; a 3-stage DSpark head reading the last three layers. Sized so the checkpoint is ~10 MB.
"""

MODEL = dict(
    vocab_size=4096, dim=192, moe_inter_dim=128, n_layers=7, n_heads=4, head_dim=64, rope_head_dim=16,
    q_lora_rank=128, o_groups=2, o_lora_rank=64, window_size=128,
    n_routed_experts=8, n_activated_experts=2, n_shared_experts=1,
    score_func="sqrtsoftplus", route_scale=1.5, swiglu_limit=10.0, norm_eps=1e-20,
    compress_ratios=[0, 0, 2, 2, 1, 1, 1, 0, 0, 0], kv_source_layers=[2, 4], index_source_layers=[2, 4, 6],
    candidate_source_layer=4, candidate_topk_blocks=12, candidate_block_size=8,
    index_n_heads=16, index_head_dim=32, index_topk=64,
    rope_theta=10000.0, compress_rope_theta=160000.0, original_seq_len=512, rope_factor=8.0, beta_fast=32, beta_slow=1,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
    engram_layer_ids=[1, 4], engram_max_ngram_size=3, engram_n_heads=4, engram_head_dim=32, engram_vocab_size=1500,
    engram_pad_id=2,
    dtype="fp8", expert_dtype="fp4",
    n_mtp_layers=3, dspark_block_size=5, dspark_target_layer_ids=[4, 5, 6], dspark_markov_rank=32,
    dspark_n_routed_experts=4, dspark_n_activated_experts=1,
)
