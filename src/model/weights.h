// The V4.1 tensor inventory and its binding to a checkpoint.
//
// ForEachExpectedTensor is the one source of truth of the released checkpoint's tensor names,
// shapes and storage kinds: CheckTensors (and so `deepinfer inspect`) checks the checkpoint
// against it, BindWeights binds every backbone tensor by the slot it names, and the random
// checkpoint generator (model/random_checkpoint.h) writes it. Nothing else spells a tensor name.
// BindWeights checks each one (present, dtype, shape, and for quantized weights the sibling
// `.scale`) and reports every problem in one Error; matrices stay in the mapping, small vectors
// are copied to fp32.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "io/weight_matrix.h"

namespace deepinfer {

// How a tensor is stored on disk.
enum class TensorKind {
  kVector,       // 1-D, BF16 or F32 (norm weights, biases, sinks, hc base/scale)
  kDenseMatrix,  // 2-D, BF16 or F32
  kF32Matrix,    // 2-D, F32 only (hc_*_fn)
  kFP8Matrix,    // F8_E4M3 [rows, cols] + .scale F8_E8M0 [ceil(rows/32), ceil(cols/32)]
  kFP4Matrix,    // I8/U8 [rows, cols/2] + .scale F8_E8M0 [rows, cols/32]
  kEngramTable,  // F8_E4M3 [rows, dim] + .scale F8_E8M0 [rows, dim/32]
};

// What a tensor is in the model: where BindWeights puts it, and what the generator fills it with.
// Block slots occur in every backbone layer and DSpark stage; the DSpark ones only in stages.
enum class TensorSlot {
  kEmbed,
  kFinalNorm,
  kHead,
  // One block.
  kAttnNorm,
  kFfnNorm,
  kHcAttnFn,
  kHcAttnBase,
  kHcAttnScale,
  kHcFfnFn,
  kHcFfnBase,
  kHcFfnScale,
  kWqA,
  kQNorm,
  kWqB,
  kWkv,
  kKvNorm,
  kWoA,
  kWoB,
  kAttnSink,
  kCompressorWkv,    // KV sources
  kCompressorWgate,  // KV sources with compress_ratio > 1
  kCompressorNorm,
  kIndexerWk,
  kIndexerKNorm,
  kIndexerWqB,  // index sources
  kIndexerWeightsProj,
  kEngramTable,  // Engram layers
  kEngramWkv,
  kEngramQ,
  kEngramK,
  kGate,
  kGateBias,
  kExpertW1,  // routed expert `expert`
  kExpertW2,
  kExpertW3,
  kSharedW1,
  kSharedW2,
  kSharedW3,
  // DSpark stages only (the draft forward, model/draft.cc).
  kDSparkMainProj,
  kDSparkMainNorm,
  kDSparkNorm,
  kDSparkMarkovEmbed,
  kDSparkMarkovHead,
  kDSparkConfidenceProj,
};

struct ExpectedTensor {
  std::string name;  // e.g. "layers.3.attn.wq_a.weight"; the scale is name minus ".weight" plus ".scale"
  TensorKind kind;
  std::vector<int64_t> shape;  // logical shape (FP4: unpacked columns)
  TensorSlot slot;
  int block = -1;   // backbone layer (0..num_layers-1), num_layers + k for DSpark stage k, -1 outside blocks
  int expert = -1;  // routed expert index (kExpertW*), else -1
};

// Calls visit on each expected tensor in order until it returns false.
void ForEachExpectedTensor(const ModelConfig& config, const std::function<bool(const ExpectedTensor&)>& visit);

// The name of the scale tensor of a quantized weight.
std::string ScaleName(const std::string& weight_name);

struct ExpertWeights {
  WeightMatrix w1, w2, w3;
};

struct MoeWeights {
  WeightMatrix gate;             // [experts, D], used in fp32
  std::vector<float> gate_bias;  // [experts]
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
};

struct EngramTable {
  const uint8_t* data = nullptr;    // e4m3 [rows, dim]
  const uint8_t* scales = nullptr;  // ue8m0 [rows, dim / 32]
  int64_t rows = 0;
  int64_t dim = 0;
};

struct EngramWeights {
  EngramTable embed;
  WeightMatrix wkv;                // [D * (hc + 1), n_hash_cols * dim]
  std::vector<float> gate_weight;  // q_weight * k_weight, [hc, D]
};

struct AttentionWeights {
  WeightMatrix wq_a, wq_b, wkv, wo_a, wo_b;
  std::vector<float> q_norm, kv_norm, attn_sink;
  // KV sources.
  WeightMatrix compressor_wkv, compressor_wgate;
  std::vector<float> compressor_norm;
  WeightMatrix indexer_wk;
  std::vector<float> indexer_k_norm;
  // Index sources.
  WeightMatrix indexer_wq_b, indexer_weights_proj;
};

struct HyperConnectionWeights {
  WeightMatrix fn;  // F32 [(2 + hc) * hc, hc * D]
  std::vector<float> base;
  std::vector<float> scale;  // [3]
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  HyperConnectionWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights ffn;
  std::optional<EngramWeights> engram;
  uint64_t fixed_matrix_bytes = 0;  // every matrix but the routed experts: what each step reads in full
};

// The DSpark draft head (spec 3.8): window-only stages (no compressor, indexer or Engram), the
// projection of the target taps (stage 0) and the head extras (last stage).
struct DraftWeights {
  std::vector<LayerWeights> stages;
  WeightMatrix main_proj;  // [D, taps * D]
  std::vector<float> main_norm;
  std::vector<float> norm;       // before the backbone head
  WeightMatrix markov_embed;     // [V, markov_rank], a table
  WeightMatrix markov_head;      // [V, markov_rank], used in fp32
  WeightMatrix confidence_proj;  // [1, D + markov_rank], used in fp32
};

struct ModelWeights {
  WeightMatrix embed;  // [V, D]
  std::vector<float> norm;
  WeightMatrix head;  // [V, D]
  std::vector<LayerWeights> layers;
  std::optional<DraftWeights> draft;  // when the config has DSpark stages (dspark_block_size > 0)
};

// Validates the checkpoint against the config and binds every tensor (backbone and DSpark). Throws one
// Error listing the problems ("<dir>: 3 tensor problems: ...", the first few spelled out).
ModelWeights BindWeights(const ModelConfig& config, const Checkpoint& checkpoint, const std::string& origin);

// The problems of the checkpoint against the config, for `inspect`: the first `listed` spelled
// out, the rest counted. Counting stops at kMaxCountedTensorProblems (a config that implies
// millions of missing tensors must not take seconds to say so); `complete` tells whether it did.
struct TensorProblems {
  std::vector<std::string> listed;
  size_t count = 0;
  bool complete = true;

  bool empty() const { return count == 0; }
  // "; ... and N more" / "; ... and at least N more", or "" when every problem is listed.
  std::string MoreSuffix() const;
};
inline constexpr size_t kMaxCountedTensorProblems = 10'000;
TensorProblems CheckTensors(const ModelConfig& config, const Checkpoint& checkpoint, size_t listed = 8);

}  // namespace deepinfer
