// The DeepSeek-V4.1 model configuration, read once, validated once, then used as plain
// fields (no string look-ups downstream).
//
// Two on-disk forms are accepted:
//   * the released HF `config.json`: model fields nested under "text_config" (HF key names,
//     e.g. hidden_size, num_hidden_layers, kv_source_layer_ids), quantization under the
//     top-level "quantization_config";
//   * the flat reference `inference/config.json`: the reference `ModelArgs` field names
//     (dim, n_layers, kv_source_layers, dtype, expert_dtype, scale_fmt, ...).
// Missing optional fields take the reference defaults (gate_temp 1, norm_topk_prob true, ...).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

// What a layer does, derived from the schedule lists (spec section 1.2).
struct LayerRole {
  int compress_ratio = 0;         // 0 = sliding window only
  bool kv_source = false;         // owns a compressor, the compressed KV and the index keys
  bool index_source = false;      // runs an indexer and publishes top-k
  bool candidate_source = false;  // publishes the two-level top-k candidate blocks
  bool uses_candidates = false;   // an index source after the candidate source
  int kv_source_layer = -1;       // whose compressed KV / index keys it reads (ratio > 0)
  int index_source_layer = -1;    // whose top-k it reads (ratio > 0)
  int engram_index = -1;          // position in engram_layer_ids, or -1
};

enum class WeightFormat { kBF16, kFP8Block, kFP4Row };

struct ModelConfig {
  // Shapes.
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;            // dim
  int64_t moe_intermediate_size = 0;  // moe_inter_dim
  int num_layers = 0;                 // backbone blocks
  int num_mtp_layers = 0;             // DSpark draft stages after the backbone
  int num_heads = 0;
  int64_t head_dim = 0;
  int64_t rope_head_dim = 0;
  int64_t q_lora_rank = 0;
  int o_groups = 0;
  int64_t o_lora_rank = 0;
  double norm_eps = 1e-20;
  int window_size = 0;
  int64_t max_position_embeddings = 0;

  // RoPE.
  double rope_theta = 10000.0;
  double compress_rope_theta = 0.0;
  double rope_factor = 1.0;
  int64_t original_seq_len = 0;  // 0 disables YaRN
  double beta_fast = 32.0;
  double beta_slow = 1.0;

  // MoE.
  int n_routed_experts = 0;
  int n_shared_experts = 1;
  int num_experts_per_tok = 0;
  std::string scoring_func = "sqrtsoftplus";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  double gate_temp = 1.0;
  double swiglu_limit = 0.0;

  // Compressed / sparse attention schedule.
  std::vector<int> compress_ratios;  // at least num_layers entries (+ num_mtp_layers)
  std::vector<int> kv_source_layers;
  std::vector<int> index_source_layers;
  int index_n_heads = 0;
  int64_t index_head_dim = 0;
  int index_topk = 0;
  int candidate_source_layer = -1;  // -1: no candidate filter
  int candidate_topk_blocks = 0;
  int candidate_block_size = 0;

  // Hyper-connections.
  int hc_mult = 4;
  int hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;

  // Engram.
  std::vector<int> engram_layer_ids;
  std::vector<int64_t> engram_num_embeddings;
  int engram_max_ngram_size = 0;
  int64_t engram_vocab_size = 0;
  int engram_n_heads = 0;
  int64_t engram_head_dim = 0;
  int engram_pad_id = 2;
  int64_t engram_compressed_vocab_size = 0;

  // DSpark (loaded and validated; the draft loop lives elsewhere).
  int dspark_block_size = 0;
  int dspark_noise_token_id = 0;
  std::vector<int> dspark_target_layer_ids;
  int64_t dspark_markov_rank = 0;
  int dspark_n_routed_experts = 0;
  int dspark_n_activated_experts = 0;

  // Quantization: "fp8" linears with weight_block_size x weight_block_size ue8m0 scales;
  // experts "fp4" (e2m1, per-row per-32 ue8m0) or "fp8".
  std::string weight_dtype = "fp8";
  std::string expert_dtype = "fp4";
  int weight_block_size = 32;
  std::string scale_fmt = "ue8m0";

  // Tokens.
  int bos_token_id = 0;
  int eos_token_id = 1;

  // Derived at validation: one entry per backbone layer.
  std::vector<LayerRole> roles;

  std::string source;  // the file it came from, for messages

  WeightFormat linear_format() const { return weight_dtype == "fp8" ? WeightFormat::kFP8Block : WeightFormat::kBF16; }
  WeightFormat expert_format() const;
  int64_t index_rope_dim() const { return rope_head_dim; }
};

// Parses either form; `origin` names the source in errors. Fills `roles` and validates
// the whole config, reporting every problem found in one Error.
ModelConfig ParseModelConfig(std::string_view json_text, const std::string& origin);

// Reads `<dir>/config.json`, or `<dir>/inference/config.json` when nothing is at the former
// (confined to the directory, regular files only, at most 1 MiB).
ModelConfig LoadModelConfig(const std::string& model_dir);

}  // namespace deepinfer
