// The V4.1 tensor inventory and its binding to a checkpoint.
//
// ForEachExpectedTensor walks every tensor the config implies, in one place, so loading,
// validation and `deepinfer inspect` all agree. BindWeights checks each one (present, dtype,
// shape, and for quantized weights the sibling `.scale`) and reports every problem in one
// Error; matrices stay in the mapping, small vectors are copied to fp32.
#pragma once

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

struct ExpectedTensor {
  std::string name;  // e.g. "layers.3.attn.wq_a.weight"; the scale is name minus ".weight" plus ".scale"
  TensorKind kind;
  std::vector<int64_t> shape;  // logical shape (FP4: unpacked columns)
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
};

struct ModelWeights {
  WeightMatrix embed;  // [V, D]
  std::vector<float> norm;
  WeightMatrix head;  // [V, D]
  std::vector<LayerWeights> layers;
};

// Validates the checkpoint against the config and binds every backbone tensor. Throws one
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
