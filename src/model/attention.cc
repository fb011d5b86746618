// V4.1 attention (spec 3.5): low-rank Q, the shared K=V latent over a sliding window, plus
// (compress ratio > 0) the group's compressed KV at the positions the indexer selected.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/model_internal.h"

namespace deepinfer {

void Model::Attention(int layer, const Batch& batch, const Tensor& x, const Tensor& out, SharedIndex& shared,
                      const ComputeContext& ctx) const {
  const ModelConfig& c = config_;
  const LayerRole& role = c.roles[layer];
  const Workspace::Scope scratch(ctx.backend.workspace());
  const AttentionWeights& w = weights_.layers[layer].attn;
  const RopeTable& rope = RopeFor(role.compress_ratio);
  const AttentionRows a = ProjectQueryAndKv(w, rope, batch.positions, x, ctx);
  if (role.compress_ratio > 0 && role.kv_source) CompressKv(layer, batch, x, ctx);
  if (role.compress_ratio > 0 && role.index_source) SelectCompressed(layer, batch, x, a.qr_normed, shared, ctx);
  std::span<const float*> entries;
  std::span<int64_t> row_begin;
  GatherEntries(layer, batch, a.kv, shared, ctx, entries, row_begin);
  const float softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  ctx.backend.SparseAttention(a.q, c.num_heads, entries, row_begin, w.attn_sink, softmax_scale, a.o);
  ProjectOutput(w, rope, batch.positions, a.o, out, ctx);
  StoreWindow(layer, batch, a, ctx);
}

// Q: wq_a -> q_norm -> wq_b, RoPE on each head's trailing rope dims. K = V: wkv -> kv_norm ->
// RoPE -> FP8 with ue8m0 scales per 32 over the whole vector (the window-cache format), and
// its decoded (QDQ'd) values.
Model::AttentionRows Model::ProjectQueryAndKv(const AttentionWeights& w, const RopeTable& rope,
                                              std::span<const int64_t> positions, const Tensor& x,
                                              const ComputeContext& ctx) const {
  const ModelConfig& c = config_;
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const int64_t rows = x.rows();
  const int64_t head_dim = c.head_dim;
  const float eps = static_cast<float>(c.norm_eps);
  AttentionRows a;
  a.qr_normed = workspace.Take<float>({rows, c.q_lora_rank});
  a.q = workspace.Take<float>({rows, c.num_heads, head_dim});
  a.kv_codes = workspace.Take<uint8_t>({rows, head_dim});
  a.kv_exponents = workspace.Take<uint8_t>({rows, head_dim / kWindowEntryBlock});
  a.kv = workspace.Take<float>({rows, head_dim});
  a.o = workspace.Take<float>({rows, c.num_heads, head_dim});
  const Workspace::Scope scratch(workspace);
  const Tensor qr = workspace.Take<float>({rows, c.q_lora_rank});
  backend.Linear(w.wq_a, x, qr, LinearNumerics::kCheckpoint);
  backend.RmsNorm(qr, w.q_norm, eps, a.qr_normed);
  backend.Linear(w.wq_b, a.qr_normed, a.q, LinearNumerics::kCheckpoint);
  backend.Rope(a.q, c.num_heads, rope, positions, /*inverse=*/false);
  ProjectKv(w, rope, positions, x, a.kv_codes, a.kv_exponents, a.kv, ctx);
  return a;
}

void Model::ProjectKv(const AttentionWeights& w, const RopeTable& rope, std::span<const int64_t> positions,
                      const Tensor& x, const Tensor& codes, const Tensor& exponents, const Tensor& decoded,
                      const ComputeContext& ctx) const {
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const Workspace::Scope scratch(workspace);
  const Tensor kv_raw = workspace.Take<float>({x.rows(), config_.head_dim});
  const Tensor kv_rotated = workspace.Take<float>({x.rows(), config_.head_dim});
  backend.Linear(w.wkv, x, kv_raw, LinearNumerics::kCheckpoint);
  backend.RmsNorm(kv_raw, w.kv_norm, static_cast<float>(config_.norm_eps), kv_rotated);
  backend.Rope(kv_rotated, 1, rope, positions, /*inverse=*/false);
  backend.EncodeWindowRows(kv_rotated, codes, exponents, decoded);
}

void Model::GatherEntries(int layer, const Batch& batch, const Tensor& kv, SharedIndex& shared,
                          const ComputeContext& ctx, std::span<const float*>& entries,
                          std::span<int64_t>& row_begin) const {
  const ModelConfig& c = config_;
  const LayerRole& role = c.roles[layer];
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();  // the entries live until the attention's scope ends
  const int64_t rows = batch.size();
  const int64_t head_dim = c.head_dim;
  const int window = c.window_size;
  // The window slots each sequence cached before this call, decoded once (slot pos % window).
  const int items = batch.item_count();
  std::span<Tensor> cached_window = workspace.TakeArray<Tensor>(items);
  std::span<WindowEntry<const uint8_t>> window_entries = workspace.TakeArray<WindowEntry<const uint8_t>>(window);
  for (int i = 0; i < items; ++i) {
    const SequenceState& state = *batch.items[i]->state;
    const int64_t start = batch.start(i);
    cached_window[i] = workspace.Take<float>({window, head_dim});
    std::fill(window_entries.begin(), window_entries.end(), WindowEntry<const uint8_t>{nullptr, nullptr});
    for (int64_t pos = std::max<int64_t>(0, start - window + 1); pos < start; ++pos) {
      window_entries[pos % window] = state.window_parts(layer, pos);
    }
    backend.DecodeWindowEntries(window_entries, cached_window[i]);
  }
  // The compressed entries its queries selected, decoded once per index source (shared with
  // reuse layers).
  if (role.compress_ratio > 0 && !shared.selected_ready[role.index_source_layer]) {
    shared.selected_ready[role.index_source_layer] = 1;
    for (int i = 0; i < items; ++i) {
      const SequenceState& source = *batch.items[i]->state;
      SharedIndex::SelectedEntries& view = shared.selected_of(role.index_source_layer, i);
      const int64_t entries = source.compressed_count(role.kv_source_layer);
      std::fill_n(view.slot.begin(), entries, -1);
      view.used = 0;
      for (int64_t r = batch.first_row[i]; r < batch.first_row[i] + batch.count(i); ++r) {
        const int32_t* topk = shared.topk.row<int32_t>(r);
        for (int32_t k = 0; k < shared.topk_count[r]; ++k) {
          if (view.slot[topk[k]] < 0) view.slot[topk[k]] = view.used++;
        }
      }
      std::span<CompressedEntry<const uint8_t>> parts = workspace.TakeArray<CompressedEntry<const uint8_t>>(view.used);
      for (int64_t index = 0; index < entries; ++index) {
        if (view.slot[index] >= 0) parts[view.slot[index]] = source.compressed_parts(role.kv_source_layer, index);
      }
      backend.DecodeCompressedEntries(parts, view.rows.Rows(0, view.used));
    }
  }

  // Each query attends over its window (oldest first, the reference's decode layout) and
  // the compressed entries its index source picked.
  row_begin = workspace.TakeArray<int64_t>(rows + 1);
  row_begin[0] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    row_begin[r + 1] = row_begin[r] + window + (role.compress_ratio > 0 ? shared.topk_count[r] : 0);
  }
  entries = workspace.TakeArray<const float*>(row_begin[rows]);
  for (int64_t r = 0; r < rows; ++r) {
    const int item = batch.item_of[r];
    const int64_t position = batch.positions[r];
    const int64_t start = batch.start(item);
    const float** entry = entries.data() + row_begin[r];
    for (int64_t pos = position - window + 1; pos <= position; ++pos) {
      if (pos < 0) {
        *entry++ = nullptr;
      } else if (pos >= start) {
        *entry++ = kv.row<float>(batch.first_row[item] + pos - start);
      } else {
        *entry++ = cached_window[item].row<float>(pos % window);
      }
    }
    if (role.compress_ratio > 0) {
      const SharedIndex::SelectedEntries& view = shared.selected_of(role.index_source_layer, item);
      const int32_t* topk = shared.topk.row<int32_t>(r);
      for (int32_t k = 0; k < shared.topk_count[r]; ++k) *entry++ = view.rows.row<float>(view.slot[topk[k]]);
    }
  }
}

// Inverse RoPE on each head, then the grouped wo_a (block-diagonal over o_groups; its FP8 blocks
// decoded to their exact bf16 values, bf16 activations, no act quant: the reference converts
// wo_a to bf16), then wo_b.
void Model::ProjectOutput(const AttentionWeights& w, const RopeTable& rope, std::span<const int64_t> positions,
                          const Tensor& o, const Tensor& out, const ComputeContext& ctx) const {
  const ModelConfig& c = config_;
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const Workspace::Scope scratch(workspace);
  const int64_t rows = o.rows();
  backend.Rope(o, c.num_heads, rope, positions, /*inverse=*/true);
  const Tensor grouped = workspace.Take<float>({rows, c.o_groups * c.o_lora_rank});
  backend.GroupedLinear(w.wo_a, c.o_groups, o, grouped);
  backend.Linear(w.wo_b, grouped, out, LinearNumerics::kCheckpoint);
}

void Model::StoreWindow(int layer, const Batch& batch, const AttentionRows& a, const ComputeContext& ctx) const {
  Workspace& workspace = ctx.backend.workspace();
  const Workspace::Scope scratch(workspace);
  const int64_t rows = batch.size();
  // Every position's window entry goes to its block's page (the prefix cache may keep blocks
  // that have already slid out of this sequence's window).
  std::span<WindowEntry<uint8_t>> stored = workspace.TakeArray<WindowEntry<uint8_t>>(rows);
  for (int64_t r = 0; r < rows; ++r) {
    stored[r] = batch.items[batch.item_of[r]]->state->mutable_window_parts(layer, batch.positions[r]);
  }
  ctx.backend.StoreWindowEntries(a.kv_codes, a.kv_exponents, stored);
}

// The KV source's compressor: the groups of `ratio` positions completing in this call become
// compressed entries (FP4, after RoPE) with their FP4 index keys (from the pre-RoPE latent).
void Model::CompressKv(int layer, const Batch& batch, const Tensor& x, const ComputeContext& ctx) const {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[layer].attn;
  const LayerRole& role = c.roles[layer];
  const int ratio = role.compress_ratio;
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const Workspace::Scope scratch(workspace);
  const int64_t rows = batch.size();
  const int items = batch.item_count();
  const int64_t head_dim = c.head_dim;
  const int64_t index_dim = c.index_head_dim;
  const float eps = static_cast<float>(c.norm_eps);
  // Pre-RoPE latents of the groups completing in this call, per item in group order.
  int64_t count = 0;
  std::span<int64_t> first_group = workspace.TakeArray<int64_t>(items);
  std::span<int64_t> groups_of = workspace.TakeArray<int64_t>(items);
  for (int i = 0; i < items; ++i) {
    const int held = ratio == 1 ? 0 : batch.items[i]->state->pending_count(layer);
    groups_of[i] = (held + batch.count(i)) / ratio;
    first_group[i] = (batch.start(i) - held) / ratio;
    count += groups_of[i];
  }
  const Tensor latents = workspace.Take<float>({count, head_dim});
  if (ratio == 1) {
    const Tensor projected = workspace.Take<float>({rows, head_dim});
    backend.Linear(w.compressor_wkv, x, projected, LinearNumerics::kCheckpoint);  // bf16 weights, bf16 GEMM
    backend.RmsNorm(projected, w.compressor_norm, eps, latents);
  } else {
    // fp32 projections and a per-channel softmax gate over each group of `ratio` tokens.
    const Tensor kv = workspace.Take<float>({rows, head_dim});
    const Tensor gate = workspace.Take<float>({rows, head_dim});
    backend.Linear(w.compressor_wkv, x, kv, LinearNumerics::kFp32);
    backend.Linear(w.compressor_wgate, x, gate, LinearNumerics::kFp32);
    int64_t group_row = 0;
    for (int i = 0; i < items; ++i) {
      SequenceState& state = *batch.items[i]->state;
      // The partial group left by earlier calls, then this call's positions.
      const int held = state.pending_count(layer);
      const int64_t pending = held + batch.count(i);
      const Tensor pending_kv = workspace.Take<float>({pending, head_dim});
      const Tensor pending_gate = workspace.Take<float>({pending, head_dim});
      const int64_t first = batch.first_row[i];
      if (held > 0) {
        backend.Copy(Tensor::Contiguous(ElementType::kF32, Device::kHost, {held, head_dim},
                                        const_cast<float*>(state.pending_kv(layer))),
                     pending_kv.Rows(0, held));
        backend.Copy(Tensor::Contiguous(ElementType::kF32, Device::kHost, {held, head_dim},
                                        const_cast<float*>(state.pending_gate(layer))),
                     pending_gate.Rows(0, held));
      }
      backend.Copy(kv.Rows(first, batch.count(i)), pending_kv.Rows(held, batch.count(i)));
      backend.Copy(gate.Rows(first, batch.count(i)), pending_gate.Rows(held, batch.count(i)));
      const int64_t complete = groups_of[i];
      const Tensor pooled = workspace.Take<float>({complete, head_dim});
      backend.CompressorPool(pending_kv.Rows(0, complete * ratio), pending_gate.Rows(0, complete * ratio), ratio,
                             pooled);
      backend.RmsNorm(pooled, w.compressor_norm, eps, latents.Rows(group_row, complete));
      group_row += complete;
      if (batch.items[i]->rollback) {
        state.KeepRollbackRows(layer, batch.start(i) - held, pending_kv.row<float>(0), pending_gate.row<float>(0),
                               pending);
      }
      const int64_t consumed = complete * ratio;
      state.SetPending(layer, pending_kv.row<float>(0) + consumed * head_dim,
                       pending_gate.row<float>(0) + consumed * head_dim, static_cast<int>(pending - consumed));
    }
  }
  // Index keys come from the pre-RoPE latent; the cached entry is RoPE'd then FP4-QDQ'd.
  if (count > 0) {
    const Tensor keys = workspace.Take<float>({count, index_dim});
    const Tensor keys_normed = workspace.Take<float>({count, index_dim});
    backend.Linear(w.indexer_wk, latents, keys, LinearNumerics::kCheckpoint);
    backend.RmsNorm(keys, w.indexer_k_norm, eps, keys_normed);
    std::span<int64_t> group_positions = workspace.TakeArray<int64_t>(count);
    std::span<CompressedEntry<uint8_t>> entries = workspace.TakeArray<CompressedEntry<uint8_t>>(count);
    int64_t g = 0;
    for (int i = 0; i < items; ++i) {
      SequenceState& state = *batch.items[i]->state;
      for (int64_t k = 0; k < groups_of[i]; ++k, ++g) {
        const int64_t group = first_group[i] + k;
        DI_CHECK(state.compressed_count(layer) == group, "compressed KV of layer ", layer, " out of step at group ",
                 group);
        group_positions[g] = group * ratio;
        entries[g] = state.AppendCompressedParts(layer);
      }
    }
    backend.Rope(keys_normed, 1, compress_rope_, group_positions, /*inverse=*/false);
    backend.Rope(latents, 1, compress_rope_, group_positions, /*inverse=*/false);
    backend.EncodeCompressedEntries(latents, keys_normed, entries);
  }
}

// The index source's indexer: fp32 scores of FP4 queries against the KV source's FP4 keys (the
// HF-port semantics), visibility, the candidate filter, then each row's top-k.
void Model::SelectCompressed(int layer, const Batch& batch, const Tensor& x, const Tensor& qr, SharedIndex& shared,
                             const ComputeContext& ctx) const {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[layer].attn;
  const LayerRole& role = c.roles[layer];
  const int ratio = role.compress_ratio;
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const Workspace::Scope scratch(workspace);
  const int64_t rows = batch.size();
  const int items = batch.item_count();
  const int64_t index_dim = c.index_head_dim;
  const int index_heads = c.index_n_heads;
  const Tensor q = workspace.Take<float>({rows, index_heads * index_dim});
  const Tensor head_weights = workspace.Take<float>({rows, index_heads});
  backend.Linear(w.indexer_wq_b, qr, q, LinearNumerics::kCheckpoint);
  backend.Linear(w.indexer_weights_proj, x, head_weights, LinearNumerics::kCheckpoint);
  // Each sequence's index keys of the KV source, decoded once per forward for every query and
  // every index layer reading that source.
  if (!shared.index_keys_ready[role.kv_source_layer]) {
    shared.index_keys_ready[role.kv_source_layer] = 1;
    for (int i = 0; i < items; ++i) {
      const SequenceState& source = *batch.items[i]->state;
      const int64_t entries = source.compressed_count(role.kv_source_layer);
      Tensor& keys = shared.index_keys_of(role.kv_source_layer, i);
      DI_CHECK(entries == keys.rows(), "layer ", role.kv_source_layer, " holds ", entries,
               " compressed entries, expected ", keys.rows(), " after this step");
      std::span<CompressedEntry<const uint8_t>> parts = workspace.TakeArray<CompressedEntry<const uint8_t>>(entries);
      for (int64_t e = 0; e < entries; ++e) parts[e] = source.compressed_parts(role.kv_source_layer, e);
      backend.DecodeIndexKeys(parts, keys);
    }
  }
  IndexerParams params;
  params.heads = index_heads;
  params.dim = index_dim;
  params.weight_scale = static_cast<float>(std::pow(static_cast<double>(index_dim), -0.5) *
                                           std::pow(static_cast<double>(index_heads), -0.5));
  params.topk = c.index_topk;
  params.candidates = role.candidate_source  ? IndexerParams::Candidates::kSelect
                      : role.uses_candidates ? IndexerParams::Candidates::kFilter
                                             : IndexerParams::Candidates::kNone;
  params.candidate_topk_blocks = c.candidate_topk_blocks;
  params.candidate_block_size = c.candidate_block_size;
  std::span<IndexerRow> queries = workspace.TakeArray<IndexerRow>(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int item = batch.item_of[r];
    const Tensor& keys = shared.index_keys_of(role.kv_source_layer, item);
    DI_CHECK(keys.rows() >= (batch.start(item) + batch.count(item)) / ratio, "index keys of layer ",
             role.kv_source_layer, " hold ", keys.rows(), " entries, fewer than the sequence has completed");
    IndexerRow& query = queries[r];
    query = IndexerRow{};
    query.position = batch.positions[r];
    query.keys = keys.host<float>();
    query.visible = (query.position + 1) / ratio;
    if (params.candidates == IndexerParams::Candidates::kSelect) {
      DI_CHECK(query.visible <= shared.candidates.row_elements(), "candidate mask of ", query.visible,
               " entries above its reserve of ", shared.candidates.row_elements());
      query.mask_out = shared.candidates.row<uint8_t>(r);
      shared.candidate_size[r] = query.visible;
    } else if (params.candidates == IndexerParams::Candidates::kFilter) {
      query.mask = shared.candidates.row<uint8_t>(r);
      query.mask_size = shared.candidate_size[r];
    }
    query.topk = shared.topk.row<int32_t>(r);
    query.topk_count = &shared.topk_count[r];
  }
  backend.IndexerSelect(q, head_weights, compress_rope_, params, queries);
}

}  // namespace deepinfer
