// V4.1 attention (spec 3.5): low-rank Q, the shared K=V latent over a sliding window, plus
// (compress ratio > 0) the group's compressed KV at the positions the indexer selected.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "model/model_internal.h"

namespace deepinfer {
namespace {

// RoPE on the trailing `rope_dim` of each of `heads` vectors of `head_dim` in `row`.
void RopeHeads(float* row, int heads, int64_t head_dim, const RopeTable& table, int64_t position, bool inverse) {
  const int64_t pairs = table.pairs();
  std::vector<float> cos(pairs), sin(pairs);
  table.CosSin(position, cos.data(), sin.data());
  for (int h = 0; h < heads; ++h) ApplyRope(row + h * head_dim + head_dim - 2 * pairs, cos, sin, inverse);
}

// Indices of the `k` highest finite scores, ties to the lower index, returned ascending.
std::vector<int32_t> TopKFinite(const std::vector<float>& scores, size_t k) {
  std::vector<int32_t> order;
  for (size_t t = 0; t < scores.size(); ++t) {
    if (scores[t] != -INFINITY) order.push_back(static_cast<int32_t>(t));
  }
  k = std::min(k, order.size());
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

// Level one of the two-level top-k: keep the best `topk_blocks` blocks of `block_size`
// entries (a block scores its best entry), always keeping the block of the newest visible
// entry. Entries past `visible` are -inf already.
std::vector<uint8_t> SelectCandidateBlocks(const std::vector<float>& scores, int64_t visible, int topk_blocks,
                                           int block_size) {
  const int64_t width = static_cast<int64_t>(scores.size());
  const int64_t blocks = (width + block_size - 1) / block_size;
  std::vector<float> block_scores(blocks, -INFINITY);
  for (int64_t t = 0; t < width; ++t) block_scores[t / block_size] = std::max(block_scores[t / block_size], scores[t]);
  if (visible > 0) block_scores[(visible - 1) / block_size] = INFINITY;
  const std::vector<int32_t> kept = TopKFinite(block_scores, static_cast<size_t>(topk_blocks));
  std::vector<uint8_t> mask(width, 0);
  for (int32_t b : kept) {
    for (int64_t t = b * static_cast<int64_t>(block_size); t < std::min(width, (b + 1) * int64_t{block_size}); ++t) {
      mask[t] = 1;
    }
  }
  return mask;
}

}  // namespace

void Model::Attention(int layer, const Batch& batch, const std::vector<float>& x, std::vector<float>& out,
                      SharedIndex& shared, const ComputeContext& ctx) const {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[layer].attn;
  const LayerRole& role = c.roles[layer];
  const RopeTable& rope = RopeFor(role.compress_ratio);
  const int64_t rows = batch.size();
  const int heads = c.num_heads;
  const int64_t head_dim = c.head_dim;
  const float eps = static_cast<float>(c.norm_eps);
  const int window = c.window_size;

  // Q: wq_a -> q_norm -> wq_b, RoPE on each head's trailing rope dims.
  std::vector<float> qr(rows * c.q_lora_rank), qr_normed(rows * c.q_lora_rank);
  Linear(w.wq_a, x.data(), rows, qr.data(), ctx);
  for (int64_t r = 0; r < rows; ++r) {
    RmsNorm(qr.data() + r * c.q_lora_rank, c.q_lora_rank, w.q_norm.data(), eps, qr_normed.data() + r * c.q_lora_rank);
  }
  std::vector<float> q(rows * heads * head_dim);
  Linear(w.wq_b, qr_normed.data(), rows, q.data(), ctx);
  for (int64_t r = 0; r < rows; ++r)
    RopeHeads(q.data() + r * heads * head_dim, heads, head_dim, rope, batch.rows[r].position, false);

  // K = V: wkv -> kv_norm -> RoPE -> FP8 with ue8m0 scales per 32 over the whole vector: the
  // window-cache format. `kv` holds the decoded (QDQ'd) values the attention uses.
  const int64_t kv_groups = head_dim / kQuantBlock;
  std::vector<float> kv_raw(rows * head_dim), kv(rows * head_dim), rotated(head_dim);
  std::vector<uint8_t> kv_codes(rows * head_dim), kv_exponents(rows * kv_groups);
  Linear(w.wkv, x.data(), rows, kv_raw.data(), ctx);
  for (int64_t r = 0; r < rows; ++r) {
    RmsNorm(kv_raw.data() + r * head_dim, head_dim, w.kv_norm.data(), eps, rotated.data());
    RopeHeads(rotated.data(), 1, head_dim, rope, batch.rows[r].position, false);
    EncodeFP8PowerOfTwo(rotated, kQuantBlock, kv_codes.data() + r * head_dim, kv_exponents.data() + r * kv_groups);
    DecodeFP8PowerOfTwo(kv_codes.data() + r * head_dim, kv_exponents.data() + r * kv_groups, head_dim, kQuantBlock,
                        kv.data() + r * head_dim);
  }

  if (role.compress_ratio > 0) CompressAndIndex(layer, batch, x, qr_normed, shared, ctx);

  // The window slots each sequence cached before this call, decoded once; and the compressed
  // entries its queries selected, decoded once per index source (shared with reuse layers).
  std::vector<std::vector<float>> cached_window(batch.items.size());
  for (int i = 0; i < static_cast<int>(batch.items.size()); ++i) {
    const SequenceState& state = *batch.items[i]->state;
    const int64_t start = batch.start(i);
    cached_window[i].resize(window * head_dim);
    for (int64_t pos = std::max<int64_t>(0, start - window + 1); pos < start; ++pos) {
      const uint8_t* entry = state.window_entry(layer, pos);
      DecodeFP8PowerOfTwo(entry, entry + head_dim, head_dim, kQuantBlock,
                          cached_window[i].data() + (pos % window) * head_dim);
    }
  }
  const std::vector<SharedIndex::SelectedEntries>* selected = nullptr;
  if (role.compress_ratio > 0) {
    auto [it, inserted] = shared.selected.try_emplace(role.index_source_layer);
    if (inserted) {
      it->second.resize(batch.items.size());
      for (int i = 0; i < static_cast<int>(batch.items.size()); ++i) {
        const SequenceState& source = *batch.items[i]->state;
        SharedIndex::SelectedEntries& view = it->second[i];
        view.slot.assign(source.compressed_count(role.kv_source_layer), -1);
        int32_t used = 0;
        for (int64_t r = batch.first_row[i]; r < batch.first_row[i] + batch.count(i); ++r) {
          for (int32_t index : shared.topk[r]) {
            if (view.slot[index] < 0) view.slot[index] = used++;
          }
        }
        view.rows.resize(used * head_dim);
        for (size_t index = 0; index < view.slot.size(); ++index) {
          if (view.slot[index] < 0) continue;
          const uint8_t* entry = source.compressed_entry(role.kv_source_layer, static_cast<int64_t>(index));
          DecodeFP4E4M3Scale(entry, entry + head_dim / 2, head_dim, 16, view.rows.data() + view.slot[index] * head_dim);
        }
      }
    }
    selected = &it->second;
  }

  // Each query attends over its window (oldest first, the reference's decode layout) and
  // the compressed entries its index source picked. Work is split by (query, head), so even a
  // single decode token uses every thread; each head's result does not depend on the split.
  std::vector<float> o(rows * heads * head_dim);
  const float softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  ctx.pool.ParallelFor(rows * heads, [&](size_t begin, size_t end) {
    std::vector<const float*> entries;
    for (size_t unit = begin; unit < end; ++unit) {
      const size_t r = unit / heads;
      const int h = static_cast<int>(unit % heads);
      const Batch::Row& row = batch.rows[r];
      const int64_t start = batch.start(row.item);
      entries.clear();
      for (int64_t pos = row.position - window + 1; pos <= row.position; ++pos) {
        if (pos < 0) {
          entries.push_back(nullptr);
        } else if (pos >= start) {
          entries.push_back(kv.data() + (batch.first_row[row.item] + pos - start) * head_dim);
        } else {
          entries.push_back(cached_window[row.item].data() + (pos % window) * head_dim);
        }
      }
      if (role.compress_ratio > 0) {
        const SharedIndex::SelectedEntries& view = (*selected)[row.item];
        for (int32_t index : shared.topk[r]) entries.push_back(view.rows.data() + view.slot[index] * head_dim);
      }
      const int64_t offset = (r * heads + h) * head_dim;
      SparseAttentionWithSink(ctx.isa, q.data() + offset, 1, head_dim, entries, w.attn_sink.data() + h, softmax_scale,
                              o.data() + offset);
    }
  });
  for (int64_t r = 0; r < rows; ++r) {
    RopeHeads(o.data() + r * heads * head_dim, heads, head_dim, rope, batch.rows[r].position, /*inverse=*/true);
  }

  // Grouped wo_a (block-diagonal over o_groups; its FP8 blocks decoded to their exact bf16 values,
  // bf16 activations, no act quant: the reference converts wo_a to bf16), then wo_b.
  const int64_t group_in = heads * head_dim / c.o_groups;
  std::vector<float> grouped(rows * c.o_groups * c.o_lora_rank);
  std::vector<float> group_input(rows * group_in), group_output(rows * c.o_lora_rank);
  for (int g = 0; g < c.o_groups; ++g) {
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(o.begin() + r * heads * head_dim + g * group_in, group_in, group_input.begin() + r * group_in);
    }
    DenseLinear(w.wo_a.RowSlice(g * c.o_lora_rank, c.o_lora_rank), group_input.data(), rows, group_output.data(),
                /*round_to_bf16=*/true, ctx);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(group_output.begin() + r * c.o_lora_rank, c.o_lora_rank,
                  grouped.begin() + r * c.o_groups * c.o_lora_rank + g * c.o_lora_rank);
    }
  }
  out.resize(rows * c.hidden_size);
  Linear(w.wo_b, grouped.data(), rows, out.data(), ctx);

  // Every position's window entry goes to its block's page (the prefix cache may keep blocks
  // that have already slid out of this sequence's window).
  for (int i = 0; i < static_cast<int>(batch.items.size()); ++i) {
    SequenceState& state = *batch.items[i]->state;
    const int64_t start = batch.start(i);
    for (int64_t t = 0; t < batch.count(i); ++t) {
      const int64_t row = batch.first_row[i] + t;
      uint8_t* entry = state.mutable_window_entry(layer, start + t);
      std::copy_n(kv_codes.begin() + row * head_dim, head_dim, entry);
      std::copy_n(kv_exponents.begin() + row * kv_groups, kv_groups, entry + head_dim);
    }
  }
}

void Model::CompressAndIndex(int layer, const Batch& batch, const std::vector<float>& x, const std::vector<float>& qr,
                             SharedIndex& shared, const ComputeContext& ctx) const {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[layer].attn;
  const LayerRole& role = c.roles[layer];
  const int ratio = role.compress_ratio;
  const int64_t rows = batch.size();
  const int64_t head_dim = c.head_dim;
  const int64_t index_dim = c.index_head_dim;
  const float eps = static_cast<float>(c.norm_eps);

  if (role.kv_source) {
    // Pre-RoPE latents of the groups completing in this call, per item in group order.
    struct NewGroup {
      int item;
      int64_t group;
      std::vector<float> latent;
    };
    std::vector<NewGroup> groups;
    if (ratio == 1) {
      std::vector<float> projected(rows * head_dim);
      Linear(w.compressor_wkv, x.data(), rows, projected.data(), ctx);  // bf16 weights, bf16 GEMM
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> latent(head_dim);
        RmsNorm(projected.data() + r * head_dim, head_dim, w.compressor_norm.data(), eps, latent.data());
        groups.push_back({batch.rows[r].item, batch.rows[r].position, std::move(latent)});
      }
    } else {
      // fp32 projections and a per-channel softmax gate over each group of `ratio` tokens.
      std::vector<float> kv(rows * head_dim), gate(rows * head_dim);
      DenseLinear(w.compressor_wkv, x.data(), rows, kv.data(), /*round_to_bf16=*/false, ctx);
      DenseLinear(w.compressor_wgate, x.data(), rows, gate.data(), /*round_to_bf16=*/false, ctx);
      for (int i = 0; i < static_cast<int>(batch.items.size()); ++i) {
        SequenceState& state = *batch.items[i]->state;
        // The partial group left by earlier calls, then this call's positions.
        const int held = state.pending_count(layer);
        const int64_t pending = held + batch.count(i);
        std::vector<float> pending_kv(pending * head_dim), pending_gate(pending * head_dim);
        if (held > 0) {
          std::copy_n(state.pending_kv(layer), held * head_dim, pending_kv.begin());
          std::copy_n(state.pending_gate(layer), held * head_dim, pending_gate.begin());
        }
        const int64_t first = batch.first_row[i];
        std::copy_n(kv.begin() + first * head_dim, batch.count(i) * head_dim, pending_kv.begin() + held * head_dim);
        std::copy_n(gate.begin() + first * head_dim, batch.count(i) * head_dim, pending_gate.begin() + held * head_dim);
        const int64_t complete = pending / ratio;
        const int64_t first_group = (batch.start(i) - held) / ratio;
        for (int64_t g = 0; g < complete; ++g) {
          std::vector<float> pooled(head_dim), latent(head_dim);
          for (int64_t d = 0; d < head_dim; ++d) {
            float max_score = -INFINITY;
            for (int t = 0; t < ratio; ++t)
              max_score = std::max(max_score, pending_gate[((g * ratio) + t) * head_dim + d]);
            float weights[kMaxCompressRatio];
            float sum = 0.0f;
            for (int t = 0; t < ratio; ++t) {
              weights[t] = std::exp(pending_gate[((g * ratio) + t) * head_dim + d] - max_score);
              sum += weights[t];
            }
            float acc = 0.0f;
            for (int t = 0; t < ratio; ++t) acc += pending_kv[((g * ratio) + t) * head_dim + d] * (weights[t] / sum);
            pooled[d] = RoundToBF16(acc);
          }
          RmsNorm(pooled.data(), head_dim, w.compressor_norm.data(), eps, latent.data());
          groups.push_back({i, first_group + g, std::move(latent)});
        }
        const int64_t consumed = complete * ratio * head_dim;
        state.SetPending(layer, pending_kv.data() + consumed, pending_gate.data() + consumed,
                         static_cast<int>(pending - complete * ratio));
      }
    }
    // Index keys come from the pre-RoPE latent; the cached entry is RoPE'd then FP4-QDQ'd.
    const int64_t count = static_cast<int64_t>(groups.size());
    if (count > 0) {
      std::vector<float> latents(count * head_dim), keys(count * index_dim);
      for (int64_t g = 0; g < count; ++g)
        std::copy(groups[g].latent.begin(), groups[g].latent.end(), latents.begin() + g * head_dim);
      Linear(w.indexer_wk, latents.data(), count, keys.data(), ctx);
      for (int64_t g = 0; g < count; ++g) {
        SequenceState& state = *batch.items[groups[g].item]->state;
        DI_CHECK(state.compressed_count(layer) == groups[g].group, "compressed KV of layer ", layer,
                 " out of step at group ", groups[g].group);
        const int64_t group_position = groups[g].group * ratio;
        uint8_t* entry = state.AppendCompressed(layer);
        uint8_t* index_entry = entry + head_dim / 2 + head_dim / 16;
        std::vector<float> key(index_dim);
        RmsNorm(keys.data() + g * index_dim, index_dim, w.indexer_k_norm.data(), eps, key.data());
        RopeHeads(key.data(), 1, index_dim, compress_rope_, group_position, false);
        EncodeFP4PowerOfTwo(key, kQuantBlock, index_entry, index_entry + index_dim / 2);
        std::vector<float>& latent = groups[g].latent;
        RopeHeads(latent.data(), 1, head_dim, compress_rope_, group_position, false);
        EncodeFP4E4M3Scale(latent, 16, entry, entry + head_dim / 2);
      }
    }
  }

  if (!role.index_source) return;
  // Indexer: fp32 scores of FP4 queries against the KV source's FP4 keys (the HF-port
  // semantics), visibility, the candidate filter, then top-k per query.
  const int index_heads = c.index_n_heads;
  std::vector<float> q(rows * index_heads * index_dim);
  Linear(w.indexer_wq_b, qr.data(), rows, q.data(), ctx);
  std::vector<float> head_weights(rows * index_heads);
  Linear(w.indexer_weights_proj, x.data(), rows, head_weights.data(), ctx);
  const float weight_scale = static_cast<float>(std::pow(static_cast<double>(index_dim), -0.5) *
                                                std::pow(static_cast<double>(index_heads), -0.5));
  // Each sequence's index keys of the KV source, decoded once per forward for every query and
  // every index layer reading that source.
  auto [keys_it, keys_new] = shared.index_keys.try_emplace(role.kv_source_layer);
  std::vector<std::vector<float>>& keys_of_item = keys_it->second;
  if (keys_new) {
    keys_of_item.resize(batch.items.size());
    for (int i = 0; i < static_cast<int>(batch.items.size()); ++i) {
      const SequenceState& source = *batch.items[i]->state;
      const int64_t entries = source.compressed_count(role.kv_source_layer);
      keys_of_item[i].resize(entries * index_dim);
      for (int64_t e = 0; e < entries; ++e) {
        const uint8_t* key = source.compressed_entry(role.kv_source_layer, e) + head_dim / 2 + head_dim / 16;
        DecodeFP4PowerOfTwo(key, key + index_dim / 2, index_dim, kQuantBlock, keys_of_item[i].data() + e * index_dim);
      }
    }
  }
  for (int i = 0; i < static_cast<int>(batch.items.size()); ++i) {
    const int64_t entries = static_cast<int64_t>(keys_of_item[i].size()) / index_dim;
    DI_CHECK(entries >= (batch.start(i) + batch.count(i)) / ratio, "index keys of layer ", role.kv_source_layer,
             " hold ", entries, " entries, fewer than the sequence has completed");
  }
  ctx.pool.ParallelFor(rows, [&](size_t begin, size_t end) {
    std::vector<float> scores;
    for (size_t r = begin; r < end; ++r) {
      const Batch::Row& row = batch.rows[r];
      float* qrow = q.data() + r * index_heads * index_dim;
      RopeHeads(qrow, index_heads, index_dim, compress_rope_, row.position, false);
      QdqFP4PowerOfTwo({qrow, static_cast<size_t>(index_heads * index_dim)}, kQuantBlock);
      const std::vector<float>& keys = keys_of_item[row.item];
      const int64_t visible = (row.position + 1) / ratio;
      scores.assign(visible, 0.0f);
      for (int64_t t = 0; t < visible; ++t) {
        const float* key = keys.data() + t * index_dim;
        float total = 0.0f;
        for (int h = 0; h < index_heads; ++h) {
          const float dot = DotProduct(ctx.isa, qrow + h * index_dim, key, index_dim);
          total += std::max(dot, 0.0f) * (head_weights[r * index_heads + h] * weight_scale);
        }
        scores[t] = total;
      }
      if (role.candidate_source) {
        shared.candidates[r] = SelectCandidateBlocks(scores, visible, c.candidate_topk_blocks, c.candidate_block_size);
      } else if (role.uses_candidates) {
        const std::vector<uint8_t>& mask = shared.candidates[r];
        for (int64_t t = 0; t < visible; ++t) {
          if (t >= static_cast<int64_t>(mask.size()) || !mask[t]) scores[t] = -INFINITY;
        }
      }
      shared.topk[r] = TopKFinite(scores, static_cast<size_t>(c.index_topk));
    }
  });
}

}  // namespace deepinfer
