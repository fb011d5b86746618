#include "model/model.h"

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/model_directory.h"
#include "model/model_internal.h"
#include "tokenizer/engram_token_map.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

// What this engine supports beyond a valid config: the quantizers work on whole blocks, and a
// few loops keep small fixed-size scratch arrays.
void CheckEngineConstraints(const ModelConfig& c) {
  std::vector<std::string> problems;
  auto require = [&](int64_t value, int64_t multiple, const char* what) {
    if (value % multiple != 0) {
      problems.push_back(std::string(what) + " = " + std::to_string(value) + " is not a multiple of " +
                         std::to_string(multiple));
    }
  };
  require(c.hidden_size, 32, "hidden_size");
  require(c.q_lora_rank, 32, "q_lora_rank");
  require(c.head_dim, 32, "head_dim (window KV FP8 blocks)");
  require(c.head_dim, 16, "head_dim (compressed KV FP4 blocks)");
  require(c.index_head_dim, 32, "index_head_dim (indexer FP4 blocks)");
  require(c.moe_intermediate_size, 32, "moe_intermediate_size");
  require(c.o_lora_rank, 32, "o_lora_rank");
  require(c.num_heads * c.head_dim / std::max(c.o_groups, 1), 32, "heads * head_dim / o_groups");
  if (!c.engram_layer_ids.empty()) require(c.engram_head_dim, 32, "engram_head_dim");
  if (c.num_experts_per_tok > kMaxExpertsPerToken) {
    problems.push_back("num_experts_per_tok = " + std::to_string(c.num_experts_per_tok) + " exceeds " +
                       std::to_string(kMaxExpertsPerToken));
  }
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const LayerRole& role = c.roles[layer];
    if (role.compress_ratio > kMaxCompressRatio) {
      problems.push_back("layer " + std::to_string(layer) + " compress ratio " + std::to_string(role.compress_ratio) +
                         " exceeds " + std::to_string(kMaxCompressRatio));
    }
    if (role.uses_candidates && c.roles[c.candidate_source_layer].kv_source_layer != role.kv_source_layer) {
      problems.push_back("layer " + std::to_string(layer) + " filters by the candidates of layer " +
                         std::to_string(c.candidate_source_layer) + " but reads a different KV source");
    }
  }
  if (c.dspark_block_size > 0) {
    for (int k = 0; k < c.num_mtp_layers; ++k) {
      const size_t index = static_cast<size_t>(c.num_layers + k);
      const int ratio = index < c.compress_ratios.size() ? c.compress_ratios[index] : 0;
      if (ratio != 0) {
        problems.push_back("DSpark stage " + std::to_string(k) + " (layer " + std::to_string(c.num_layers + k) +
                           ") has compress ratio " + std::to_string(ratio) +
                           ", but the draft attention is window-only (ratio 0)");
      }
    }
    if (c.dspark_n_activated_experts > kMaxExpertsPerToken) {
      problems.push_back("dspark_n_activated_experts = " + std::to_string(c.dspark_n_activated_experts) + " exceeds " +
                         std::to_string(kMaxExpertsPerToken));
    }
  }
  if (!problems.empty()) {
    std::string message = c.source + ": unsupported shapes:";
    for (const std::string& p : problems) message += " " + p + ";";
    throw Error(message);
  }
}

}  // namespace

Model::Model(ModelConfig config, Checkpoint checkpoint, ModelWeights weights, std::optional<EngramHasher> hasher,
             int64_t max_context)
    : config_(std::move(config)),
      checkpoint_(std::move(checkpoint)),
      weights_(std::move(weights)),
      hasher_(std::move(hasher)),
      main_rope_(config_.rope_head_dim, config_.rope_theta, 0, 1.0, config_.beta_fast, config_.beta_slow),
      compress_rope_(config_.rope_head_dim, config_.compress_rope_theta, config_.original_seq_len, config_.rope_factor,
                     config_.beta_fast, config_.beta_slow),
      max_context_(max_context),
      default_layout_(std::make_shared<const CacheLayout>(
          CacheLayout::For(config_, CacheLayout::BlockTokensAtLeast(config_, kDefaultBlockTokens)))) {
  for (const LayerWeights& layer : weights_.layers) layer_fixed_bytes_.push_back(layer.fixed_matrix_bytes);
}

Error MappedFileError(const MappedFileFault& fault, const Checkpoint& checkpoint) {
  const std::string* file = checkpoint.FileContaining(fault.address());
  if (file == nullptr) return Error(fault.what());
  return MakeError(*file,
                   ": the file was truncated or replaced while the model was using it (SIGBUS reading its "
                   "memory mapping); reload the model");
}

std::unique_ptr<Model> Model::Load(const std::string& model_dir, const ModelOptions& options) {
  const ModelDirectory dir(model_dir);
  ModelConfig config = LoadModelConfig(model_dir);
  CheckEngineConstraints(config);
  Checkpoint checkpoint = Checkpoint::Open(model_dir);
  ModelWeights weights;
  try {
    GuardMappedReads([&] { weights = BindWeights(config, checkpoint, model_dir); });
  } catch (const MappedFileFault& fault) {
    throw MappedFileError(fault, checkpoint);
  }
  std::optional<EngramHasher> hasher;
  if (!config.engram_layer_ids.empty()) {
    std::optional<FileHandle> tokenizer = dir.OpenIfPresent("tokenizer.json", "the tokenizer");
    if (!tokenizer) {
      throw MakeError(model_dir,
                      ": the config has Engram layers, whose hash needs the tokenizer's compressed "
                      "token map, but ",
                      dir.PathOf("tokenizer.json"), " does not exist");
    }
    EngramTokenMap map = BuildEngramTokenMap(Tokenizer::FromFile(*tokenizer));
    hasher.emplace(config, std::move(map.compressed_id), map.compressed_vocab_size);
  }
  int64_t max_context = config.max_position_embeddings;
  if (options.max_context > 0) {
    if (options.max_context > config.max_position_embeddings) {
      throw MakeError("maximum context ", options.max_context, " exceeds the model's max_position_embeddings ",
                      config.max_position_embeddings);
    }
    max_context = options.max_context;
  }
  return std::unique_ptr<Model>(
      new Model(std::move(config), std::move(checkpoint), std::move(weights), std::move(hasher), max_context));
}

Model::InterleaveReport Model::InterleaveMatrices(const std::function<bool(MatrixFormat)>& wanted) {
  if (!interleaved_.empty()) return interleave_report_;
  const auto start = std::chrono::steady_clock::now();
  InterleaveReport report;
  auto interleave = [&](WeightMatrix& w) {
    if (!InterleavedTiles::Takes(w.format, w.cols) || w.empty() || w.interleaved || !wanted(w.format)) return;
    const uint64_t bytes = InterleavedTiles::Bytes(w.format, w.rows, w.cols);
    interleaved_.push_back(std::make_unique_for_overwrite<uint8_t[]>(bytes));
    w.interleaved = Interleave(w, interleaved_.back().get());
    ++report.matrices;
    report.bytes += bytes;
  };
  // Exactly the matrices the forward and the draft pass to Linear with LinearNumerics::kCheckpoint,
  // the head (DenseLinear, whose GEMV reads a BF16 copy) and the dense FP8 wo_a (DenseLinear on
  // vdpbf16ps reads its FP8 copy; in place it took 7.5% of a batch-1 step for 5% of the bytes).
  try {
    GuardMappedReads([&] {
      if (weights_.head.format == MatrixFormat::kBF16) interleave(weights_.head);
      std::vector<LayerWeights*> blocks;
      for (LayerWeights& layer : weights_.layers) blocks.push_back(&layer);
      if (weights_.draft) {
        for (LayerWeights& stage : weights_.draft->stages) blocks.push_back(&stage);
        interleave(weights_.draft->main_proj);
      }
      for (LayerWeights* block : blocks) {
        LayerWeights& layer = *block;
        AttentionWeights& a = layer.attn;
        for (WeightMatrix* w :
             {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b, &a.indexer_wk, &a.indexer_wq_b, &a.indexer_weights_proj})
          interleave(*w);
        for (ExpertWeights& expert : layer.ffn.experts) {
          for (WeightMatrix* w : {&expert.w1, &expert.w2, &expert.w3}) interleave(*w);
        }
        for (WeightMatrix* w : {&layer.ffn.shared.w1, &layer.ffn.shared.w2, &layer.ffn.shared.w3}) interleave(*w);
        if (layer.engram) interleave(layer.engram->wkv);
      }
    });
  } catch (const MappedFileFault& fault) {
    throw MappedFileError(fault, checkpoint_);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  interleave_report_ = report;
  return report;
}

double ExpectedDistinctExperts(int experts, int top_k, int64_t tokens) {
  const double e = experts;
  return e * (1.0 - std::pow(1.0 - static_cast<double>(top_k) / e, static_cast<double>(tokens)));
}

Model::ReadBytes Model::read_bytes() const {
  const ModelConfig& c = config_;
  ReadBytes r;
  for (const uint64_t bytes : layer_fixed_bytes_) r.fixed += bytes;
  r.head = weights_.head.bytes();
  r.fixed += r.head;
  auto expert_bytes = [](const MoeWeights& ffn) {
    return ffn.experts.empty() ? uint64_t{0}
                               : ffn.experts[0].w1.bytes() + ffn.experts[0].w2.bytes() + ffn.experts[0].w3.bytes();
  };
  if (!weights_.layers.empty()) r.expert = expert_bytes(weights_.layers[0].ffn);
  r.experts = c.n_routed_experts;
  r.top_k = c.num_experts_per_tok;
  r.moe_layers = c.num_layers;
  if (weights_.draft) {
    const DraftWeights& d = *weights_.draft;
    // The Markov head runs once per block slot (each slot's bias follows the previous pick).
    r.draft = weights_.head.bytes() + d.main_proj.bytes() + c.dspark_block_size * d.markov_head.bytes() +
              d.confidence_proj.bytes();
    const double spread =
        ExpectedDistinctExperts(c.dspark_n_routed_experts, c.dspark_n_activated_experts, c.dspark_block_size);
    for (const LayerWeights& stage : d.stages) {
      r.draft += stage.fixed_matrix_bytes + static_cast<uint64_t>(spread * expert_bytes(stage.ffn));
    }
  }
  return r;
}

SequenceState Model::NewSequence() const { return SequenceState(default_layout_, PagePool::Create(0)); }

std::vector<int32_t> Model::EngramHistory(std::span<const int32_t> tokens) const {
  if (!hasher_) return {};
  const int lookback = hasher_->lookback();
  std::vector<int32_t> history(lookback, kEngramDeadToken);
  const size_t first = tokens.size() > static_cast<size_t>(lookback) ? tokens.size() - lookback : 0;
  for (size_t t = first; t < tokens.size(); ++t) history.push_back(hasher_->Compress(tokens[t]));
  return std::vector<int32_t>(history.end() - lookback, history.end());
}

}  // namespace deepinfer
