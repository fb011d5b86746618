// The V4.1 forward, top to bottom: embed -> 4 hyper-connection copies -> per layer
// (Engram, attention site, FFN site) -> collapse -> norm -> fp32 head.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "model/model_internal.h"

namespace deepinfer {
namespace {

// One site's mHC coefficients from its stream (spec 3.4), all fp32.
struct HcMix {
  std::vector<float> pre, post, comb;  // [rows, hc], [rows, hc], [rows, hc, hc]
};

HcMix ComputeHcMix(const std::vector<float>& streams, int64_t rows, int hc, int64_t dim,
                   const HyperConnectionWeights& w, float norm_eps, int sinkhorn_iters, float hc_eps,
                   const ComputeContext& ctx) {
  const int64_t flat = hc * dim;
  const int64_t mix = w.fn.rows;
  std::vector<float> mixes(rows * mix);
  DenseLinear(w.fn, streams.data(), rows, mixes.data(), /*round_to_bf16=*/false, ctx);
  HcMix out{std::vector<float>(rows * hc), std::vector<float>(rows * hc), std::vector<float>(rows * hc * hc)};
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = streams.data() + r * flat;
    float sum_squares = 0.0f;
    for (int64_t i = 0; i < flat; ++i) sum_squares += x[i] * x[i];
    const float inv_rms = 1.0f / std::sqrt(sum_squares / static_cast<float>(flat) + norm_eps);
    float* m = mixes.data() + r * mix;
    for (int64_t k = 0; k < mix; ++k) m[k] *= inv_rms;
    float* pre = out.pre.data() + r * hc;
    float* post = out.post.data() + r * hc;
    float* comb = out.comb.data() + r * hc * hc;
    for (int i = 0; i < hc; ++i) {
      pre[i] = Sigmoid(m[i] * w.scale[0] + w.base[i]) + hc_eps;
      post[i] = 2.0f * Sigmoid(m[hc + i] * w.scale[1] + w.base[hc + i]);
    }
    // comb[i][j] = element 2hc + hc*i + j: row softmax, + eps, then Sinkhorn on columns/rows.
    for (int i = 0; i < hc; ++i) {
      float* row = comb + i * hc;
      float row_max = -INFINITY;
      for (int j = 0; j < hc; ++j) {
        row[j] = m[2 * hc + i * hc + j] * w.scale[2] + w.base[2 * hc + i * hc + j];
        row_max = std::max(row_max, row[j]);
      }
      float row_sum = 0.0f;
      for (int j = 0; j < hc; ++j) {
        row[j] = std::exp(row[j] - row_max);
        row_sum += row[j];
      }
      for (int j = 0; j < hc; ++j) row[j] = row[j] / row_sum + hc_eps;
    }
    auto normalize_columns = [&] {
      for (int j = 0; j < hc; ++j) {
        float col_sum = 0.0f;
        for (int i = 0; i < hc; ++i) col_sum += comb[i * hc + j];
        for (int i = 0; i < hc; ++i) comb[i * hc + j] = comb[i * hc + j] / (col_sum + hc_eps);
      }
    };
    normalize_columns();
    for (int iter = 0; iter < sinkhorn_iters - 1; ++iter) {
      for (int i = 0; i < hc; ++i) {
        float row_sum = 0.0f;
        for (int j = 0; j < hc; ++j) row_sum += comb[i * hc + j];
        for (int j = 0; j < hc; ++j) comb[i * hc + j] = comb[i * hc + j] / (row_sum + hc_eps);
      }
      normalize_columns();
    }
  }
  return out;
}

// hc_pre: sum_i pre[i] * X[i], fp32, stored bf16.
void HcCollapse(const std::vector<float>& streams, const std::vector<float>& pre, int64_t rows, int hc, int64_t dim,
                std::vector<float>& out) {
  out.assign(rows * dim, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = streams.data() + r * hc * dim;
    const float* p = pre.data() + r * hc;
    float* o = out.data() + r * dim;
    for (int64_t d = 0; d < dim; ++d) {
      float acc = p[0] * x[d];
      for (int i = 1; i < hc; ++i) acc += p[i] * x[i * dim + d];
      o[d] = RoundToBF16(acc);
    }
  }
}

// hc_post: X'[j] = post[j] * y + sum_i comb[i][j] * X[i], fp32, stored bf16.
void HcExpand(const std::vector<float>& y, const HcMix& mix, int64_t rows, int hc, int64_t dim,
              std::vector<float>& streams) {
  std::vector<float> mixed(hc * dim);
  for (int64_t r = 0; r < rows; ++r) {
    float* x = streams.data() + r * hc * dim;
    const float* post = mix.post.data() + r * hc;
    const float* comb = mix.comb.data() + r * hc * hc;
    const float* yr = y.data() + r * dim;
    for (int j = 0; j < hc; ++j) {
      for (int64_t d = 0; d < dim; ++d) {
        float acc = comb[j] * x[d];
        for (int i = 1; i < hc; ++i) acc += comb[i * hc + j] * x[i * dim + d];
        mixed[j * dim + d] = post[j] * yr[d] + acc;
      }
    }
    for (int64_t i = 0; i < hc * dim; ++i) x[i] = RoundToBF16(mixed[i]);
  }
}

void NormRows(const std::vector<float>& x, int64_t rows, int64_t dim, const std::vector<float>& weight, float eps,
              std::vector<float>& out) {
  out.resize(rows * dim);
  for (int64_t r = 0; r < rows; ++r) RmsNorm(x.data() + r * dim, dim, weight.data(), eps, out.data() + r * dim);
}

}  // namespace

std::vector<float> Model::Forward(std::span<const ForwardItem> items, ThreadPool& pool) const {
  return Forward(items, ComputeContext{pool, DetectIsa()});
}

std::vector<float> Model::Forward(std::span<const ForwardItem> items, const ComputeContext& ctx,
                                  ForwardStats* stats) const {
  std::vector<float> logits;
  try {
    GuardMappedReads([&] { logits = ForwardUnguarded(items, ctx, stats); });
  } catch (const MappedFileFault& fault) {
    throw MappedFileError(fault, checkpoint_);
  }
  return logits;
}

std::vector<float> Model::ForwardUnguarded(std::span<const ForwardItem> items, const ComputeContext& ctx,
                                           ForwardStats* stats) const {
  const ModelConfig& c = config_;
  const int hc = c.hc_mult;
  const int64_t dim = c.hidden_size;
  const float eps = static_cast<float>(c.norm_eps);

  // Validate everything before any state changes.
  Batch batch;
  for (size_t i = 0; i < items.size(); ++i) {
    const ForwardItem& item = items[i];
    DI_CHECK(item.state != nullptr && item.state->valid() && item.state->layout().Serves(c), "forward item ", i,
             " has no sequence state of this model");
    if (item.tokens.empty()) throw MakeError("sequence ", i, ": no tokens to process");
    const int64_t end = item.state->length + static_cast<int64_t>(item.tokens.size());
    if (end > max_context_) {
      throw MakeError("sequence ", i, ": ", end, " tokens exceed the configured maximum context of ", max_context_,
                      " tokens");
    }
    batch.items.push_back(&item);
    batch.first_row.push_back(batch.size());
    for (size_t t = 0; t < item.tokens.size(); ++t) {
      const int32_t token = item.tokens[t];
      if (token < 0 || token >= c.vocab_size) {
        throw MakeError("sequence ", i, ": token id ", token, " at position ", item.state->length + t,
                        " is outside the model vocabulary [0, ", c.vocab_size, ")");
      }
      batch.rows.push_back({static_cast<int>(i), item.state->length + static_cast<int64_t>(t), token});
    }
  }
  const int64_t rows = batch.size();
  // Pages for the new positions (copies of shared ones), still before any value changes.
  for (size_t i = 0; i < items.size(); ++i) {
    SequenceState& state = *items[i].state;
    if (!state.PrepareAppend(static_cast<int64_t>(items[i].tokens.size()))) {
      throw MakeError("sequence ", i, ": the KV cache budget of ", state.pool().budget_bytes(), " bytes (",
                      state.pool().held_bytes(), " held) cannot hold ", items[i].tokens.size(), " more tokens");
    }
  }

  // Engram hash ids, [rows, engram layers, columns], from each sequence's recent tokens.
  std::vector<int64_t> hash_ids;
  std::vector<std::vector<int32_t>> new_recent(items.size());
  if (hasher_) {
    const int lookback = hasher_->lookback();
    const int columns = hasher_->columns();
    const int layers = static_cast<int>(c.engram_layer_ids.size());
    hash_ids.resize(rows * layers * columns);
    for (int i = 0; i < static_cast<int>(items.size()); ++i) {
      // history: compressed ids of every position from (start - lookback) on; dead before 0.
      std::vector<int32_t> history(lookback, kEngramDeadToken);
      const std::vector<int32_t>& recent = items[i].state->engram_recent;
      std::copy(recent.begin(), recent.end(), history.end() - static_cast<int64_t>(recent.size()));
      for (int32_t token : items[i].tokens) history.push_back(hasher_->Compress(token));
      std::vector<int32_t> newest_first(lookback + 1);
      for (int64_t t = 0; t < batch.count(i); ++t) {
        for (int s = 0; s <= lookback; ++s) newest_first[s] = history[lookback + t - s];
        const int64_t row = batch.first_row[i] + t;
        for (int l = 0; l < layers; ++l) {
          hasher_->HashIds(l, newest_first, hash_ids.data() + (row * layers + l) * columns);
        }
      }
      new_recent[i].assign(history.end() - lookback, history.end());
    }
  }

  // Embedding, expanded to hc identical copies.
  std::vector<float> streams(rows * hc * dim);
  {
    std::vector<float> embedding(dim);
    for (int64_t r = 0; r < rows; ++r) {
      weights_.embed.DequantizedRow(batch.rows[r].token, embedding.data());
      for (int i = 0; i < hc; ++i) std::copy(embedding.begin(), embedding.end(), streams.begin() + (r * hc + i) * dim);
    }
  }
  // The first site collapses copy 0 only.
  std::vector<float> pre_mix(rows * hc, 0.0f);
  for (int64_t r = 0; r < rows; ++r) pre_mix[r * hc] = 1.0f;

  SharedIndex shared;
  shared.topk.resize(rows);
  shared.candidates.resize(rows);
  uint64_t weight_bytes = rows * dim * 2 + weights_.head.bytes();  // embedding rows, head
  for (int layer = 0; layer < c.num_layers; ++layer) {
    if (const auto& engram = weights_.layers[layer].engram) {
      ApplyEngram(layer, batch, hash_ids, streams, ctx);
      weight_bytes += rows * hasher_->columns() * (engram->embed.dim + engram->embed.dim / kQuantBlock);
    }
    RunBlock(layer, batch, streams, pre_mix, shared, ctx, &weight_bytes);
    weight_bytes += layer_fixed_bytes_[layer];
  }
  if (stats != nullptr) stats->weight_bytes = weight_bytes;

  // Collapse with the last FFN site's pre, final norm, fp32 head on the requested rows.
  std::vector<int64_t> logit_rows;
  for (int i = 0; i < static_cast<int>(items.size()); ++i) {
    const int64_t first = batch.first_row[i];
    const int64_t count = batch.count(i);
    if (items[i].no_logits) continue;
    for (int64_t t = items[i].all_logits ? 0 : count - 1; t < count; ++t) logit_rows.push_back(first + t);
  }
  std::vector<float> selected_streams(logit_rows.size() * hc * dim);
  std::vector<float> selected_pre(logit_rows.size() * hc);
  for (size_t k = 0; k < logit_rows.size(); ++k) {
    std::copy_n(streams.begin() + logit_rows[k] * hc * dim, hc * dim, selected_streams.begin() + k * hc * dim);
    std::copy_n(pre_mix.begin() + logit_rows[k] * hc, hc, selected_pre.begin() + k * hc);
  }
  const int64_t out_rows = static_cast<int64_t>(logit_rows.size());
  std::vector<float> collapsed, normed;
  HcCollapse(selected_streams, selected_pre, out_rows, hc, dim, collapsed);
  NormRows(collapsed, out_rows, dim, weights_.norm, eps, normed);
  std::vector<float> logits(out_rows * c.vocab_size);
  if (out_rows > 0) DenseLinear(weights_.head, normed.data(), out_rows, logits.data(), /*round_to_bf16=*/false, ctx);

  for (size_t i = 0; i < items.size(); ++i) {
    items[i].state->length += static_cast<int64_t>(items[i].tokens.size());
    if (hasher_) items[i].state->engram_recent = std::move(new_recent[i]);
    if (!items[i].keep_window_pages) items[i].state->ReleaseStaleWindowPages();
  }
  return logits;
}

void Model::RunBlock(int layer, const Batch& batch, std::vector<float>& streams, std::vector<float>& pre_mix,
                     SharedIndex& shared, const ComputeContext& ctx, uint64_t* routed_bytes) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  const int hc = c.hc_mult;
  const int64_t dim = c.hidden_size;
  const int64_t rows = batch.size();
  const float eps = static_cast<float>(c.norm_eps);
  const float hc_eps = static_cast<float>(c.hc_eps);

  // Attention site: collapse with the previous site's pre (one site late, spec 3.4).
  const HcMix attn_mix = ComputeHcMix(streams, rows, hc, dim, w.hc_attn, eps, c.hc_sinkhorn_iters, hc_eps, ctx);
  std::vector<float> collapsed, normed, sublayer_out;
  HcCollapse(streams, pre_mix, rows, hc, dim, collapsed);
  NormRows(collapsed, rows, dim, w.attn_norm, eps, normed);
  Attention(layer, batch, normed, sublayer_out, shared, ctx);
  HcExpand(sublayer_out, attn_mix, rows, hc, dim, streams);

  // FFN site: collapse with the attention site's pre.
  const HcMix ffn_mix = ComputeHcMix(streams, rows, hc, dim, w.hc_ffn, eps, c.hc_sinkhorn_iters, hc_eps, ctx);
  HcCollapse(streams, attn_mix.pre, rows, hc, dim, collapsed);
  NormRows(collapsed, rows, dim, w.ffn_norm, eps, normed);
  Moe(layer, normed, rows, sublayer_out, ctx, routed_bytes);
  HcExpand(sublayer_out, ffn_mix, rows, hc, dim, streams);
  pre_mix = ffn_mix.pre;
}

void Model::ApplyEngram(int layer, const Batch& batch, const std::vector<int64_t>& hash_ids,
                        std::vector<float>& streams, const ComputeContext& ctx) const {
  const ModelConfig& c = config_;
  const EngramWeights& e = *weights_.layers[layer].engram;
  const int layer_index = c.roles[layer].engram_index;
  const int hc = c.hc_mult;
  const int64_t dim = c.hidden_size;
  const int64_t rows = batch.size();
  const int columns = hasher_->columns();
  const int engram_layers = static_cast<int>(c.engram_layer_ids.size());
  const int64_t row_dim = e.embed.dim;
  const int64_t groups = row_dim / kQuantBlock;

  // Gather and dequantize the hashed rows: fp8 * 2^(scale - 127), exact in bf16.
  std::vector<float> gathered(rows * columns * row_dim);
  for (int64_t r = 0; r < rows; ++r) {
    for (int col = 0; col < columns; ++col) {
      const int64_t id = hash_ids[(r * engram_layers + layer_index) * columns + col];
      DI_CHECK(id >= 0 && id < e.embed.rows, "engram row ", id, " outside the table of ", e.embed.rows);
      const uint8_t* codes = e.embed.data + id * row_dim;
      const uint8_t* scales = e.embed.scales + id * groups;
      float* out = gathered.data() + (r * columns + col) * row_dim;
      for (int64_t k = 0; k < row_dim; ++k) {
        out[k] = RoundToBF16(E4M3ToFloat(codes[k]) * UE8M0ToFloat(scales[k / kQuantBlock]));
      }
    }
  }
  std::vector<float> kv(rows * e.wkv.rows);
  Linear(e.wkv, gathered.data(), rows, kv.data(), ctx);

  const float eps = static_cast<float>(c.norm_eps);
  const float inv_sqrt_dim = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  for (int64_t r = 0; r < rows; ++r) {
    const float* key_row = kv.data() + r * e.wkv.rows;
    const float* value = key_row + hc * dim;
    for (int copy = 0; copy < hc; ++copy) {
      float* h = streams.data() + (r * hc + copy) * dim;
      const float* key = key_row + copy * dim;
      const float* weight = e.gate_weight.data() + copy * dim;
      float h_sq = 0.0f, k_sq = 0.0f, dot = 0.0f;
      for (int64_t d = 0; d < dim; ++d) {
        h_sq += h[d] * h[d];
        k_sq += key[d] * key[d];
      }
      for (int64_t d = 0; d < dim; ++d) dot += h[d] * weight[d] * key[d];
      const float rstd = (1.0f / std::sqrt(h_sq / static_cast<float>(dim) + eps)) *
                         (1.0f / std::sqrt(k_sq / static_cast<float>(dim) + eps));
      dot = dot * rstd * inv_sqrt_dim;
      const float gate = Sigmoid(std::copysign(std::sqrt(std::max(std::fabs(dot), 1e-6f)), dot));
      for (int64_t d = 0; d < dim; ++d) h[d] = RoundToBF16(h[d] + gate * value[d]);
    }
  }
}

}  // namespace deepinfer
