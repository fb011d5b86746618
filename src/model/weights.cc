#include "model/weights.h"

#include <cstring>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/numeric.h"

namespace deepinfer {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

const char* KindName(TensorKind kind) {
  switch (kind) {
    case TensorKind::kVector:
      return "BF16/F32 vector";
    case TensorKind::kDenseMatrix:
      return "BF16/F32 matrix";
    case TensorKind::kF32Matrix:
      return "F32 matrix";
    case TensorKind::kFP8Matrix:
      return "F8_E4M3 matrix with F8_E8M0 32x32 block scales";
    case TensorKind::kFP4Matrix:
      return "packed FP4 (I8) matrix with F8_E8M0 per-32 scales";
    case TensorKind::kEngramTable:
      return "F8_E4M3 table with F8_E8M0 per-row-per-32 scales";
  }
  return "?";
}

bool DTypeAllowed(TensorKind kind, DType dtype) {
  switch (kind) {
    case TensorKind::kVector:
    case TensorKind::kDenseMatrix:
      return dtype == DType::kBF16 || dtype == DType::kF32;
    case TensorKind::kF32Matrix:
      return dtype == DType::kF32;
    case TensorKind::kFP8Matrix:
    case TensorKind::kEngramTable:
      return dtype == DType::kF8E4M3;
    case TensorKind::kFP4Matrix:
      return dtype == DType::kI8 || dtype == DType::kU8;
  }
  return false;
}

std::vector<int64_t> StoredShape(const ExpectedTensor& t) {
  if (t.kind == TensorKind::kFP4Matrix) return {t.shape[0], t.shape[1] / 2};
  return t.shape;
}

std::optional<std::vector<int64_t>> ScaleShape(const ExpectedTensor& t) {
  switch (t.kind) {
    case TensorKind::kFP8Matrix:
      return std::vector<int64_t>{CeilDiv(t.shape[0], 32), CeilDiv(t.shape[1], 32)};
    case TensorKind::kFP4Matrix:
    case TensorKind::kEngramTable:
      return std::vector<int64_t>{t.shape[0], t.shape[1] / 32};
    default:
      return std::nullopt;
  }
}

// Walks the tensors of one block (backbone layer or DSpark stage) under `prefix`; false once
// `visit` asked to stop. The shape arithmetic cannot overflow: every factor is within the
// config's plausibility bounds (io/model_config.cc), the largest product ~2^26.
bool VisitBlock(const ModelConfig& c, const std::string& prefix, int layer_id, bool backbone,
                const std::function<bool(const ExpectedTensor&)>& visit) {
  bool go = true;
  const int64_t d = c.hidden_size;
  const int64_t mix = (2 + c.hc_mult) * c.hc_mult;
  const TensorKind linear =
      c.linear_format() == WeightFormat::kFP8Block ? TensorKind::kFP8Matrix : TensorKind::kDenseMatrix;
  auto add = [&](const std::string& name, TensorKind kind, std::vector<int64_t> shape) {
    if (go) go = visit(ExpectedTensor{prefix + name, kind, std::move(shape)});
  };
  add("attn_norm.weight", TensorKind::kVector, {d});
  add("ffn_norm.weight", TensorKind::kVector, {d});
  for (const char* site : {"attn", "ffn"}) {
    add(std::string("hc_") + site + "_fn", TensorKind::kF32Matrix, {mix, c.hc_mult * d});
    add(std::string("hc_") + site + "_base", TensorKind::kVector, {mix});
    add(std::string("hc_") + site + "_scale", TensorKind::kVector, {3});
  }
  const int64_t q_dim = c.num_heads * c.head_dim;
  add("attn.wq_a.weight", linear, {c.q_lora_rank, d});
  add("attn.q_norm.weight", TensorKind::kVector, {c.q_lora_rank});
  add("attn.wq_b.weight", linear, {q_dim, c.q_lora_rank});
  add("attn.wkv.weight", linear, {c.head_dim, d});
  add("attn.kv_norm.weight", TensorKind::kVector, {c.head_dim});
  add("attn.wo_a.weight", linear, {c.o_groups * c.o_lora_rank, q_dim / c.o_groups});
  add("attn.wo_b.weight", linear, {d, c.o_groups * c.o_lora_rank});
  add("attn.attn_sink", TensorKind::kVector, {c.num_heads});
  if (backbone) {
    const LayerRole& role = c.roles[layer_id];
    if (role.kv_source) {
      add("attn.compressor.wkv.weight", TensorKind::kDenseMatrix, {c.head_dim, d});
      if (role.compress_ratio > 1) add("attn.compressor.wgate.weight", TensorKind::kDenseMatrix, {c.head_dim, d});
      add("attn.compressor.norm.weight", TensorKind::kVector, {c.head_dim});
      add("attn.indexer.wk.weight", TensorKind::kDenseMatrix, {c.index_head_dim, c.head_dim});
      add("attn.indexer.k_norm.weight", TensorKind::kVector, {c.index_head_dim});
    }
    if (role.index_source) {
      add("attn.indexer.wq_b.weight", linear, {c.index_n_heads * c.index_head_dim, c.q_lora_rank});
      add("attn.indexer.weights_proj.weight", TensorKind::kDenseMatrix, {c.index_n_heads, d});
    }
    if (role.engram_index >= 0) {
      const int64_t cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
      add("engram.embed.weight", TensorKind::kEngramTable,
          {c.engram_num_embeddings[role.engram_index], c.engram_head_dim});
      add("engram.wkv.weight", linear, {d * (c.hc_mult + 1), cols * c.engram_head_dim});
      add("engram.q_weight", TensorKind::kDenseMatrix, {c.hc_mult, d});
      add("engram.k_weight", TensorKind::kDenseMatrix, {c.hc_mult, d});
    }
  }
  const int experts = backbone ? c.n_routed_experts : c.dspark_n_routed_experts;
  const TensorKind expert = c.expert_format() == WeightFormat::kFP4Row ? TensorKind::kFP4Matrix : linear;
  const int64_t inter = c.moe_intermediate_size;
  add("ffn.gate.weight", TensorKind::kDenseMatrix, {experts, d});
  add("ffn.gate.bias", TensorKind::kVector, {experts});
  for (int e = 0; e < experts && go; ++e) {
    const std::string p = "ffn.experts." + std::to_string(e) + ".";
    add(p + "w1.weight", expert, {inter, d});
    add(p + "w2.weight", expert, {d, inter});
    add(p + "w3.weight", expert, {inter, d});
  }
  add("ffn.shared_experts.w1.weight", linear, {inter, d});
  add("ffn.shared_experts.w2.weight", linear, {d, inter});
  add("ffn.shared_experts.w3.weight", linear, {inter, d});
  return go;
}

std::vector<float> LoadVector(const TensorInfo& info) {
  std::vector<float> out(info.numel());
  if (info.dtype == DType::kF32) {
    std::memcpy(out.data(), info.data, out.size() * sizeof(float));
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      bf16_t bits;
      std::memcpy(&bits, info.data + 2 * i, 2);  // not necessarily aligned
      out[i] = BF16ToFloat(bits);
    }
  }
  return out;
}

class Binder {
 public:
  explicit Binder(const Checkpoint& checkpoint) : checkpoint_(checkpoint) {}

  const TensorInfo& Get(const std::string& name) const {
    const TensorInfo* info = checkpoint_.Find(name);
    DI_CHECK(info != nullptr, "tensor ", name, " vanished after validation");
    return *info;
  }
  std::vector<float> Vector(const std::string& name) const { return LoadVector(Get(name)); }
  WeightMatrix Matrix(const std::string& name) const {
    const TensorInfo& info = Get(name);
    WeightMatrix m;
    m.rows = info.shape[0];
    m.cols = info.shape[1];
    m.data = info.data;
    switch (info.dtype) {
      case DType::kBF16:
        m.format = MatrixFormat::kBF16;
        break;
      case DType::kF32:
        m.format = MatrixFormat::kF32;
        break;
      case DType::kF8E4M3:
        m.format = MatrixFormat::kFP8Block32;
        break;
      case DType::kI8:
      case DType::kU8:
        m.format = MatrixFormat::kFP4Row32;
        m.cols *= 2;
        break;
      default:
        DI_CHECK(false, "unexpected dtype for matrix ", name);
    }
    if (m.quantized()) m.scales = Get(ScaleName(name)).data;
    return m;
  }

 private:
  const Checkpoint& checkpoint_;
};

}  // namespace

std::string ScaleName(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() && weight_name.ends_with(suffix)) {
    return weight_name.substr(0, weight_name.size() - suffix.size()) + ".scale";
  }
  return weight_name + ".scale";
}

void ForEachExpectedTensor(const ModelConfig& c, const std::function<bool(const ExpectedTensor&)>& visit) {
  bool go = visit({"embed.weight", TensorKind::kDenseMatrix, {c.vocab_size, c.hidden_size}});
  for (int i = 0; i < c.num_layers && go; ++i) go = VisitBlock(c, "layers." + std::to_string(i) + ".", i, true, visit);
  auto add = [&](ExpectedTensor t) {
    if (go) go = visit(t);
  };
  add({"norm.weight", TensorKind::kVector, {c.hidden_size}});
  add({"head.weight", TensorKind::kDenseMatrix, {c.vocab_size, c.hidden_size}});
  if (c.dspark_block_size > 0) {
    const TensorKind linear =
        c.linear_format() == WeightFormat::kFP8Block ? TensorKind::kFP8Matrix : TensorKind::kDenseMatrix;
    for (int k = 0; k < c.num_mtp_layers && go; ++k) {
      const std::string prefix = "mtp." + std::to_string(k) + ".";
      go = VisitBlock(c, prefix, c.num_layers + k, false, visit);
      if (k == 0) {
        const int64_t in = c.hidden_size * static_cast<int64_t>(c.dspark_target_layer_ids.size());
        add({prefix + "main_proj.weight", linear, {c.hidden_size, in}});
        add({prefix + "main_norm.weight", TensorKind::kVector, {c.hidden_size}});
      }
      if (k == c.num_mtp_layers - 1) {
        add({prefix + "norm.weight", TensorKind::kVector, {c.hidden_size}});
        add({prefix + "markov_head.embed.weight", TensorKind::kDenseMatrix, {c.vocab_size, c.dspark_markov_rank}});
        add({prefix + "markov_head.head.weight", TensorKind::kDenseMatrix, {c.vocab_size, c.dspark_markov_rank}});
        add({prefix + "confidence_head.proj.weight",
             TensorKind::kDenseMatrix,
             {1, c.hidden_size + c.dspark_markov_rank}});
      }
    }
  }
}

std::string TensorProblems::MoreSuffix() const {
  if (listed.size() == count && complete) return "";
  return detail::Concat("; ... and ", complete ? "" : "at least ", count - listed.size(), " more");
}

TensorProblems CheckTensors(const ModelConfig& config, const Checkpoint& checkpoint, size_t listed) {
  TensorProblems problems;
  auto add = [&](const std::string& problem) {
    if (problems.listed.size() < listed) problems.listed.push_back(problem);
    ++problems.count;
  };
  ForEachExpectedTensor(config, [&](const ExpectedTensor& t) {
    if (problems.count >= kMaxCountedTensorProblems) {
      problems.complete = false;
      return false;
    }
    const TensorInfo* info = checkpoint.Find(t.name);
    const std::vector<int64_t> stored = StoredShape(t);
    if (info == nullptr) {
      add("missing tensor '" + t.name + "' (expected " + KindName(t.kind) + " " + ShapeString(stored) + ")");
      return true;
    }
    if (!DTypeAllowed(t.kind, info->dtype)) {
      add("tensor '" + t.name + "' has dtype " + std::string(DTypeName(info->dtype)) + ", expected " +
          KindName(t.kind));
      return true;
    }
    if (info->shape != stored) {
      add("tensor '" + t.name + "' has shape " + info->ShapeString() + ", expected " + ShapeString(stored));
      return true;
    }
    if (const auto scale_shape = ScaleShape(t)) {
      const std::string scale_name = ScaleName(t.name);
      const TensorInfo* scale = checkpoint.Find(scale_name);
      if (scale == nullptr) {
        add("missing scale '" + scale_name + "' of quantized tensor '" + t.name + "' (expected F8_E8M0 " +
            ShapeString(*scale_shape) + ")");
      } else if (scale->dtype != DType::kF8E8M0) {
        add("scale '" + scale_name + "' has dtype " + std::string(DTypeName(scale->dtype)) + ", expected F8_E8M0");
      } else if (scale->shape != *scale_shape) {
        add("scale '" + scale_name + "' has shape " + scale->ShapeString() + ", expected " + ShapeString(*scale_shape));
      }
    }
    return true;
  });
  return problems;
}

ModelWeights BindWeights(const ModelConfig& config, const Checkpoint& checkpoint, const std::string& origin) {
  const TensorProblems problems = CheckTensors(config, checkpoint);
  if (!problems.empty()) {
    std::ostringstream message;
    message << origin << ": " << (problems.complete ? "" : "at least ") << problems.count << " tensor problem"
            << (problems.count == 1 ? "" : "s") << ": ";
    for (size_t i = 0; i < problems.listed.size(); ++i) message << (i ? "; " : "") << problems.listed[i];
    message << problems.MoreSuffix();
    throw Error(message.str());
  }
  const Binder b(checkpoint);
  ModelWeights w;
  w.embed = b.Matrix("embed.weight");
  w.norm = b.Vector("norm.weight");
  w.head = b.Matrix("head.weight");
  for (int i = 0; i < config.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const LayerRole& role = config.roles[i];
    LayerWeights layer;
    layer.attn_norm = b.Vector(p + "attn_norm.weight");
    layer.ffn_norm = b.Vector(p + "ffn_norm.weight");
    layer.hc_attn = {b.Matrix(p + "hc_attn_fn"), b.Vector(p + "hc_attn_base"), b.Vector(p + "hc_attn_scale")};
    layer.hc_ffn = {b.Matrix(p + "hc_ffn_fn"), b.Vector(p + "hc_ffn_base"), b.Vector(p + "hc_ffn_scale")};
    AttentionWeights& a = layer.attn;
    a.wq_a = b.Matrix(p + "attn.wq_a.weight");
    a.q_norm = b.Vector(p + "attn.q_norm.weight");
    a.wq_b = b.Matrix(p + "attn.wq_b.weight");
    a.wkv = b.Matrix(p + "attn.wkv.weight");
    a.kv_norm = b.Vector(p + "attn.kv_norm.weight");
    a.wo_a = b.Matrix(p + "attn.wo_a.weight");
    a.wo_b = b.Matrix(p + "attn.wo_b.weight");
    a.attn_sink = b.Vector(p + "attn.attn_sink");
    if (role.kv_source) {
      a.compressor_wkv = b.Matrix(p + "attn.compressor.wkv.weight");
      if (role.compress_ratio > 1) a.compressor_wgate = b.Matrix(p + "attn.compressor.wgate.weight");
      a.compressor_norm = b.Vector(p + "attn.compressor.norm.weight");
      a.indexer_wk = b.Matrix(p + "attn.indexer.wk.weight");
      a.indexer_k_norm = b.Vector(p + "attn.indexer.k_norm.weight");
    }
    if (role.index_source) {
      a.indexer_wq_b = b.Matrix(p + "attn.indexer.wq_b.weight");
      a.indexer_weights_proj = b.Matrix(p + "attn.indexer.weights_proj.weight");
    }
    if (role.engram_index >= 0) {
      EngramWeights e;
      const TensorInfo& table = b.Get(p + "engram.embed.weight");
      e.embed = {table.data, b.Get(p + "engram.embed.scale").data, table.shape[0], table.shape[1]};
      e.wkv = b.Matrix(p + "engram.wkv.weight");
      const std::vector<float> q = b.Vector(p + "engram.q_weight");
      const std::vector<float> k = b.Vector(p + "engram.k_weight");
      e.gate_weight.resize(q.size());
      for (size_t j = 0; j < q.size(); ++j) e.gate_weight[j] = q[j] * k[j];
      layer.engram = std::move(e);
    }
    MoeWeights& f = layer.ffn;
    f.gate = b.Matrix(p + "ffn.gate.weight");
    f.gate_bias = b.Vector(p + "ffn.gate.bias");
    for (int e = 0; e < config.n_routed_experts; ++e) {
      const std::string ep = p + "ffn.experts." + std::to_string(e) + ".";
      f.experts.push_back({b.Matrix(ep + "w1.weight"), b.Matrix(ep + "w2.weight"), b.Matrix(ep + "w3.weight")});
    }
    f.shared = {b.Matrix(p + "ffn.shared_experts.w1.weight"), b.Matrix(p + "ffn.shared_experts.w2.weight"),
                b.Matrix(p + "ffn.shared_experts.w3.weight")};
    w.layers.push_back(std::move(layer));
  }
  return w;
}

}  // namespace deepinfer
