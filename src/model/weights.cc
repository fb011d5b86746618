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
    case TensorKind::kFP8Matrix: {
      constexpr ScaleBlock block = ScaleBlockOf(MatrixFormat::kFP8Block32);
      return std::vector<int64_t>{CeilDiv(t.shape[0], block.rows), CeilDiv(t.shape[1], block.cols)};
    }
    case TensorKind::kFP4Matrix: {
      constexpr ScaleBlock block = ScaleBlockOf(MatrixFormat::kFP4Row32);
      return std::vector<int64_t>{CeilDiv(t.shape[0], block.rows), t.shape[1] / block.cols};
    }
    case TensorKind::kEngramTable:
      return std::vector<int64_t>{t.shape[0], t.shape[1] / kQuantBlock};
    default:
      return std::nullopt;
  }
}

// Walks the tensors of one block (backbone layer or DSpark stage) under `prefix`; false once
// `visit` asked to stop. The shape arithmetic cannot overflow: every factor is within the
// config's plausibility bounds (io/model_config.cc), the largest product ~2^26.
bool VisitBlock(const ModelConfig& c, const std::string& prefix, int block, bool backbone,
                const std::function<bool(const ExpectedTensor&)>& visit) {
  using S = TensorSlot;
  bool go = true;
  const int64_t d = c.hidden_size;
  const int64_t mix = (2 + c.hc_mult) * c.hc_mult;
  const TensorKind linear =
      c.linear_format() == WeightFormat::kFP8Block ? TensorKind::kFP8Matrix : TensorKind::kDenseMatrix;
  auto add = [&](const std::string& name, TensorKind kind, std::vector<int64_t> shape, TensorSlot slot,
                 int expert = -1) {
    if (go) go = visit(ExpectedTensor{prefix + name, kind, std::move(shape), slot, block, expert});
  };
  add("attn_norm.weight", TensorKind::kVector, {d}, S::kAttnNorm);
  add("ffn_norm.weight", TensorKind::kVector, {d}, S::kFfnNorm);
  add("hc_attn_fn", TensorKind::kF32Matrix, {mix, c.hc_mult * d}, S::kHcAttnFn);
  add("hc_attn_base", TensorKind::kVector, {mix}, S::kHcAttnBase);
  add("hc_attn_scale", TensorKind::kVector, {3}, S::kHcAttnScale);
  add("hc_ffn_fn", TensorKind::kF32Matrix, {mix, c.hc_mult * d}, S::kHcFfnFn);
  add("hc_ffn_base", TensorKind::kVector, {mix}, S::kHcFfnBase);
  add("hc_ffn_scale", TensorKind::kVector, {3}, S::kHcFfnScale);
  const int64_t q_dim = c.num_heads * c.head_dim;
  add("attn.wq_a.weight", linear, {c.q_lora_rank, d}, S::kWqA);
  add("attn.q_norm.weight", TensorKind::kVector, {c.q_lora_rank}, S::kQNorm);
  add("attn.wq_b.weight", linear, {q_dim, c.q_lora_rank}, S::kWqB);
  add("attn.wkv.weight", linear, {c.head_dim, d}, S::kWkv);
  add("attn.kv_norm.weight", TensorKind::kVector, {c.head_dim}, S::kKvNorm);
  add("attn.wo_a.weight", linear, {c.o_groups * c.o_lora_rank, q_dim / c.o_groups}, S::kWoA);
  add("attn.wo_b.weight", linear, {d, c.o_groups * c.o_lora_rank}, S::kWoB);
  add("attn.attn_sink", TensorKind::kVector, {c.num_heads}, S::kAttnSink);
  if (backbone) {
    const LayerRole& role = c.roles[block];
    if (role.kv_source) {
      add("attn.compressor.wkv.weight", TensorKind::kDenseMatrix, {c.head_dim, d}, S::kCompressorWkv);
      if (role.compress_ratio > 1) {
        add("attn.compressor.wgate.weight", TensorKind::kDenseMatrix, {c.head_dim, d}, S::kCompressorWgate);
      }
      add("attn.compressor.norm.weight", TensorKind::kVector, {c.head_dim}, S::kCompressorNorm);
      add("attn.indexer.wk.weight", TensorKind::kDenseMatrix, {c.index_head_dim, c.head_dim}, S::kIndexerWk);
      add("attn.indexer.k_norm.weight", TensorKind::kVector, {c.index_head_dim}, S::kIndexerKNorm);
    }
    if (role.index_source) {
      add("attn.indexer.wq_b.weight", linear, {c.index_n_heads * c.index_head_dim, c.q_lora_rank}, S::kIndexerWqB);
      add("attn.indexer.weights_proj.weight", TensorKind::kDenseMatrix, {c.index_n_heads, d}, S::kIndexerWeightsProj);
    }
    if (role.engram_index >= 0) {
      const int64_t cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
      add("engram.embed.weight", TensorKind::kEngramTable,
          {c.engram_num_embeddings[role.engram_index], c.engram_head_dim}, S::kEngramTable);
      add("engram.wkv.weight", linear, {d * (c.hc_mult + 1), cols * c.engram_head_dim}, S::kEngramWkv);
      add("engram.q_weight", TensorKind::kDenseMatrix, {c.hc_mult, d}, S::kEngramQ);
      add("engram.k_weight", TensorKind::kDenseMatrix, {c.hc_mult, d}, S::kEngramK);
    }
  }
  const int experts = backbone ? c.n_routed_experts : c.dspark_n_routed_experts;
  const TensorKind expert = c.expert_format() == WeightFormat::kFP4Row ? TensorKind::kFP4Matrix : linear;
  const int64_t inter = c.moe_intermediate_size;
  add("ffn.gate.weight", TensorKind::kDenseMatrix, {experts, d}, S::kGate);
  add("ffn.gate.bias", TensorKind::kVector, {experts}, S::kGateBias);
  for (int e = 0; e < experts && go; ++e) {
    const std::string p = "ffn.experts." + std::to_string(e) + ".";
    add(p + "w1.weight", expert, {inter, d}, S::kExpertW1, e);
    add(p + "w2.weight", expert, {d, inter}, S::kExpertW2, e);
    add(p + "w3.weight", expert, {inter, d}, S::kExpertW3, e);
  }
  add("ffn.shared_experts.w1.weight", linear, {inter, d}, S::kSharedW1);
  add("ffn.shared_experts.w2.weight", linear, {d, inter}, S::kSharedW2);
  add("ffn.shared_experts.w3.weight", linear, {inter, d}, S::kSharedW3);
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
  // A matrix the forward multiplies by (not a table it gathers rows from): a BF16 one also gets
  // its exponent range, which lets the AVX-512 kernels run it on vdpbf16ps, and an FP8 one whether
  // it holds NaN codes, which the AVX2 tiles otherwise look for in every group.
  WeightMatrix LinearMatrix(const std::string& name) const {
    WeightMatrix m = Matrix(name);
    if (m.format == MatrixFormat::kBF16) m.bf16_exponents = ScanBf16Exponents(m);
    if (m.format == MatrixFormat::kFP8Block32) m.fp8_nan_free = ScanFp8NanFree(m);
    return m;
  }

 private:
  const Checkpoint& checkpoint_;
};

void BindGlobal(const Binder& b, const ExpectedTensor& t, ModelWeights& w) {
  switch (t.slot) {
    case TensorSlot::kEmbed:
      w.embed = b.Matrix(t.name);
      return;
    case TensorSlot::kFinalNorm:
      w.norm = b.Vector(t.name);
      return;
    case TensorSlot::kHead:
      w.head = b.LinearMatrix(t.name);
      return;
    default:
      DI_CHECK(false, "tensor ", t.name, " is outside every block but has a block slot");
  }
}

// Puts one tensor of a backbone layer where the forward reads it. The inventory lists the Engram
// table before the other Engram tensors, and q_weight before k_weight.
void BindBlock(const Binder& b, const ExpectedTensor& t, LayerWeights& layer) {
  AttentionWeights& a = layer.attn;
  MoeWeights& f = layer.ffn;
  auto matrix = [&](WeightMatrix& slot) {
    slot = b.LinearMatrix(t.name);
    if (t.slot != TensorSlot::kExpertW1 && t.slot != TensorSlot::kExpertW2 && t.slot != TensorSlot::kExpertW3) {
      layer.fixed_matrix_bytes += slot.bytes();
    }
  };
  auto engram = [&]() -> EngramWeights& {
    DI_CHECK(layer.engram.has_value(), "tensor ", t.name, " comes before its layer's Engram table");
    return *layer.engram;
  };
  switch (t.slot) {
    case TensorSlot::kAttnNorm:
      layer.attn_norm = b.Vector(t.name);
      return;
    case TensorSlot::kFfnNorm:
      layer.ffn_norm = b.Vector(t.name);
      return;
    case TensorSlot::kHcAttnFn:
      return matrix(layer.hc_attn.fn);
    case TensorSlot::kHcAttnBase:
      layer.hc_attn.base = b.Vector(t.name);
      return;
    case TensorSlot::kHcAttnScale:
      layer.hc_attn.scale = b.Vector(t.name);
      return;
    case TensorSlot::kHcFfnFn:
      return matrix(layer.hc_ffn.fn);
    case TensorSlot::kHcFfnBase:
      layer.hc_ffn.base = b.Vector(t.name);
      return;
    case TensorSlot::kHcFfnScale:
      layer.hc_ffn.scale = b.Vector(t.name);
      return;
    case TensorSlot::kWqA:
      return matrix(a.wq_a);
    case TensorSlot::kQNorm:
      a.q_norm = b.Vector(t.name);
      return;
    case TensorSlot::kWqB:
      return matrix(a.wq_b);
    case TensorSlot::kWkv:
      return matrix(a.wkv);
    case TensorSlot::kKvNorm:
      a.kv_norm = b.Vector(t.name);
      return;
    case TensorSlot::kWoA:
      return matrix(a.wo_a);
    case TensorSlot::kWoB:
      return matrix(a.wo_b);
    case TensorSlot::kAttnSink:
      a.attn_sink = b.Vector(t.name);
      return;
    case TensorSlot::kCompressorWkv:
      return matrix(a.compressor_wkv);
    case TensorSlot::kCompressorWgate:
      return matrix(a.compressor_wgate);
    case TensorSlot::kCompressorNorm:
      a.compressor_norm = b.Vector(t.name);
      return;
    case TensorSlot::kIndexerWk:
      return matrix(a.indexer_wk);
    case TensorSlot::kIndexerKNorm:
      a.indexer_k_norm = b.Vector(t.name);
      return;
    case TensorSlot::kIndexerWqB:
      return matrix(a.indexer_wq_b);
    case TensorSlot::kIndexerWeightsProj:
      return matrix(a.indexer_weights_proj);
    case TensorSlot::kEngramTable: {
      const TensorInfo& table = b.Get(t.name);
      layer.engram.emplace();
      layer.engram->embed = {table.data, b.Get(ScaleName(t.name)).data, table.shape[0], table.shape[1]};
      return;
    }
    case TensorSlot::kEngramWkv:
      return matrix(engram().wkv);
    case TensorSlot::kEngramQ:
      engram().gate_weight = b.Vector(t.name);
      return;
    case TensorSlot::kEngramK: {
      // The gate uses q_weight * k_weight only.
      std::vector<float>& gate = engram().gate_weight;
      const std::vector<float> k = b.Vector(t.name);
      DI_CHECK(gate.size() == k.size(), "tensor ", t.name, " comes before its q_weight");
      for (size_t j = 0; j < k.size(); ++j) gate[j] *= k[j];
      return;
    }
    case TensorSlot::kGate:
      return matrix(f.gate);
    case TensorSlot::kGateBias:
      f.gate_bias = b.Vector(t.name);
      return;
    case TensorSlot::kExpertW1:
      return matrix(f.experts.at(static_cast<size_t>(t.expert)).w1);
    case TensorSlot::kExpertW2:
      return matrix(f.experts.at(static_cast<size_t>(t.expert)).w2);
    case TensorSlot::kExpertW3:
      return matrix(f.experts.at(static_cast<size_t>(t.expert)).w3);
    case TensorSlot::kSharedW1:
      return matrix(f.shared.w1);
    case TensorSlot::kSharedW2:
      return matrix(f.shared.w2);
    case TensorSlot::kSharedW3:
      return matrix(f.shared.w3);
    default:
      DI_CHECK(false, "tensor ", t.name, " of a block has a slot outside blocks");
  }
}

// Binds the tensors only DSpark stages have; false for the block tensors every stage has.
bool BindDraftExtra(const Binder& b, const ExpectedTensor& t, DraftWeights& d) {
  switch (t.slot) {
    case TensorSlot::kDSparkMainProj:
      d.main_proj = b.LinearMatrix(t.name);
      return true;
    case TensorSlot::kDSparkMainNorm:
      d.main_norm = b.Vector(t.name);
      return true;
    case TensorSlot::kDSparkNorm:
      d.norm = b.Vector(t.name);
      return true;
    case TensorSlot::kDSparkMarkovEmbed:
      d.markov_embed = b.Matrix(t.name);
      return true;
    case TensorSlot::kDSparkMarkovHead:
      d.markov_head = b.LinearMatrix(t.name);
      return true;
    case TensorSlot::kDSparkConfidenceProj:
      d.confidence_proj = b.LinearMatrix(t.name);
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string ScaleName(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() && weight_name.ends_with(suffix)) {
    return weight_name.substr(0, weight_name.size() - suffix.size()) + ".scale";
  }
  return weight_name + ".scale";
}

void ForEachExpectedTensor(const ModelConfig& c, const std::function<bool(const ExpectedTensor&)>& visit) {
  using S = TensorSlot;
  bool go = visit({"embed.weight", TensorKind::kDenseMatrix, {c.vocab_size, c.hidden_size}, S::kEmbed});
  for (int i = 0; i < c.num_layers && go; ++i) go = VisitBlock(c, "layers." + std::to_string(i) + ".", i, true, visit);
  auto add = [&](ExpectedTensor t) {
    if (go) go = visit(t);
  };
  add({"norm.weight", TensorKind::kVector, {c.hidden_size}, S::kFinalNorm});
  add({"head.weight", TensorKind::kDenseMatrix, {c.vocab_size, c.hidden_size}, S::kHead});
  if (c.dspark_block_size > 0) {
    const TensorKind linear =
        c.linear_format() == WeightFormat::kFP8Block ? TensorKind::kFP8Matrix : TensorKind::kDenseMatrix;
    for (int k = 0; k < c.num_mtp_layers && go; ++k) {
      const std::string prefix = "mtp." + std::to_string(k) + ".";
      const int block = c.num_layers + k;
      go = VisitBlock(c, prefix, block, false, visit);
      if (k == 0) {
        const int64_t in = c.hidden_size * static_cast<int64_t>(c.dspark_target_layer_ids.size());
        add({prefix + "main_proj.weight", linear, {c.hidden_size, in}, S::kDSparkMainProj, block});
        add({prefix + "main_norm.weight", TensorKind::kVector, {c.hidden_size}, S::kDSparkMainNorm, block});
      }
      if (k == c.num_mtp_layers - 1) {
        add({prefix + "norm.weight", TensorKind::kVector, {c.hidden_size}, S::kDSparkNorm, block});
        add({prefix + "markov_head.embed.weight",
             TensorKind::kDenseMatrix,
             {c.vocab_size, c.dspark_markov_rank},
             S::kDSparkMarkovEmbed,
             block});
        add({prefix + "markov_head.head.weight",
             TensorKind::kDenseMatrix,
             {c.vocab_size, c.dspark_markov_rank},
             S::kDSparkMarkovHead,
             block});
        add({prefix + "confidence_head.proj.weight",
             TensorKind::kDenseMatrix,
             {1, c.hidden_size + c.dspark_markov_rank},
             S::kDSparkConfidenceProj,
             block});
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
  w.layers.resize(static_cast<size_t>(config.num_layers));
  for (LayerWeights& layer : w.layers) layer.ffn.experts.resize(static_cast<size_t>(config.n_routed_experts));
  if (config.dspark_block_size > 0) {
    w.draft.emplace();
    w.draft->stages.resize(static_cast<size_t>(config.num_mtp_layers));
    for (LayerWeights& stage : w.draft->stages) {
      stage.ffn.experts.resize(static_cast<size_t>(config.dspark_n_routed_experts));
    }
  }
  ForEachExpectedTensor(config, [&](const ExpectedTensor& t) {
    if (t.block < 0) {
      BindGlobal(b, t, w);
    } else if (t.block < config.num_layers) {
      BindBlock(b, t, w.layers[static_cast<size_t>(t.block)]);
    } else if (!BindDraftExtra(b, t, *w.draft)) {
      BindBlock(b, t, w.draft->stages[static_cast<size_t>(t.block - config.num_layers)]);
    }
    return true;
  });
  return w;
}

}  // namespace deepinfer
