// The V4.1 forward, top to bottom: embed -> 4 hyper-connection copies -> per layer
// (Engram, attention site, FFN site) -> collapse -> norm -> fp32 head. Every computation is an
// op of ctx.backend; every buffer comes from its workspace.
#include <algorithm>

#include "core/error.h"
#include "model/model_internal.h"

namespace deepinfer {
namespace {

// One site's mHC coefficients (spec 3.4), all fp32.
struct HcMix {
  Tensor pre, post, comb;  // [rows, hc], [rows, hc], [rows, hc, hc]
};

HcMix TakeHcMix(Workspace& workspace, int64_t rows, int hc) {
  return {workspace.Take<float>({rows, hc}), workspace.Take<float>({rows, hc}), workspace.Take<float>({rows, hc, hc})};
}

int64_t LogitRowsOf(const ForwardItem& item) {
  switch (item.logits) {
    case LogitsMode::kLast:
      return 1;
    case LogitsMode::kAll:
      return static_cast<int64_t>(item.tokens.size());
    case LogitsMode::kNone:
      return 0;
  }
  return 0;
}

}  // namespace

std::vector<float> Model::Forward(std::span<const ForwardItem> items, const ComputeContext& ctx,
                                  ForwardStats* stats) const {
  std::vector<float> logits;
  ForwardInto(items, ctx, logits, stats);
  return logits;
}

void Model::ForwardInto(std::span<const ForwardItem> items, const ComputeContext& ctx, std::vector<float>& logits,
                        ForwardStats* stats, std::vector<float>* taps) const {
  int64_t rows = 0;
  for (const ForwardItem& item : items) rows += static_cast<int64_t>(item.tokens.size());
  // Outside the guard: a SIGBUS abandons the guarded frames without running their destructors.
  const StepScope step(ctx.backend, {StepKind::kForward, rows});
  try {
    GuardMappedReads([&] { ForwardUnguarded(items, ctx, logits, stats, taps); });
  } catch (const MappedFileFault& fault) {
    throw MappedFileError(fault, checkpoint_);
  }
}

void Model::ForwardUnguarded(std::span<const ForwardItem> items, const ComputeContext& ctx, std::vector<float>& logits,
                             ForwardStats* stats, std::vector<float>* taps) const {
  const ModelConfig& c = config_;
  Workspace& workspace = ctx.backend.workspace();
  workspace.Reset();

  const Batch batch = ValidateAndReserve(items, workspace);
  const int64_t rows = batch.size();
  std::span<std::span<int32_t>> recent = workspace.TakeArray<std::span<int32_t>>(batch.item_count());
  const Tensor hash_ids = HashEngramIds(batch, workspace, recent);
  const Tensor streams = Embed(batch, ctx);
  // The first site collapses copy 0 only.
  const Tensor pre_mix = workspace.TakeZeroed(ElementType::kF32, {rows, c.hc_mult});
  for (int64_t r = 0; r < rows; ++r) pre_mix.row<float>(r)[0] = 1.0f;

  SharedIndex shared = ReserveSharedIndex(batch, workspace);
  std::span<int64_t> tap_rows;
  Tensor tapped;
  if (taps != nullptr) {
    tap_rows = batch.TrailingRows([](const ForwardItem& item) { return item.tap_rows; }, workspace);
    const int64_t count = static_cast<int64_t>(tap_rows.size());
    taps->resize(count * draft_tap_width());
    tapped = Tensor::Contiguous(ElementType::kF32, Device::kHost, {count, draft_tap_width()}, taps->data());
  }
  const std::vector<int>& targets = c.dspark_target_layer_ids;
  uint64_t weight_bytes = rows * c.hidden_size * 2 + weights_.head.bytes();  // embedding rows, head
  for (int layer = 0; layer < c.num_layers; ++layer) {
    if (const auto& engram = weights_.layers[layer].engram) {
      ApplyEngram(layer, batch, hash_ids, streams, ctx);
      weight_bytes += rows * hasher_->columns() * (engram->embed.dim + engram->embed.dim / kQuantBlock);
    }
    // The draft reads the input of its target layers, after their Engram.
    for (size_t t = 0; t < targets.size() && taps != nullptr; ++t) {
      if (targets[t] == layer) Tap(static_cast<int>(t), tap_rows, streams, tapped, ctx);
    }
    RunBlock(layer, batch, streams, pre_mix, shared, ctx, &weight_bytes);
    weight_bytes += layer_fixed_bytes_[layer];
  }
  if (stats != nullptr) stats->weight_bytes = weight_bytes;

  Head(batch, streams, pre_mix, ctx, logits);
  Commit(batch, recent);
  // Ends the step here as well: a step that outgrew the arena folds it now, faulting the new
  // block's pages in outside the next step (Workspace::Reset), rather than inside it.
  workspace.Reset();
}

Model::Batch Model::ValidateAndReserve(std::span<const ForwardItem> items, Workspace& workspace) const {
  const ModelConfig& c = config_;
  // Validate everything before any state changes.
  int64_t rows = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const ForwardItem& item = items[i];
    DI_CHECK(item.state != nullptr && item.state->valid() && item.state->layout().Serves(c), "forward item ", i,
             " has no sequence state of this model");
    if (item.tokens.empty()) throw MakeError("sequence ", i, ": no tokens to process");
    if (item.tap_rows < 0 || item.tap_rows > static_cast<int64_t>(item.tokens.size())) {
      throw MakeError("sequence ", i, ": asks for the taps of ", item.tap_rows, " tokens of ", item.tokens.size());
    }
    if (item.tap_rows > 0 && !has_draft()) {
      throw MakeError("sequence ", i, ": asks for DSpark taps, but the model has no DSpark stages");
    }
    const int64_t end = item.state->length() + static_cast<int64_t>(item.tokens.size());
    if (end > max_context_) {
      throw MakeError("sequence ", i, ": ", end, " tokens exceed the configured maximum context of ", max_context_,
                      " tokens");
    }
    for (size_t t = 0; t < item.tokens.size(); ++t) {
      const int32_t token = item.tokens[t];
      if (token < 0 || token >= c.vocab_size) {
        throw MakeError("sequence ", i, ": token id ", token, " at position ", item.state->length() + t,
                        " is outside the model vocabulary [0, ", c.vocab_size, ")");
      }
    }
    rows += static_cast<int64_t>(item.tokens.size());
  }

  std::span<const ForwardItem*> item_ptrs = workspace.TakeArray<const ForwardItem*>(items.size());
  std::span<int64_t> first_row = workspace.TakeArray<int64_t>(items.size());
  std::span<int32_t> item_of = workspace.TakeArray<int32_t>(rows);
  std::span<int64_t> positions = workspace.TakeArray<int64_t>(rows);
  std::span<int32_t> tokens = workspace.TakeArray<int32_t>(rows);
  int64_t row = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    item_ptrs[i] = &items[i];
    first_row[i] = row;
    for (size_t t = 0; t < items[i].tokens.size(); ++t, ++row) {
      item_of[row] = static_cast<int32_t>(i);
      positions[row] = items[i].state->length() + static_cast<int64_t>(t);
      tokens[row] = items[i].tokens[t];
    }
  }
  // Pages for the new positions (copies of shared ones), still before any value changes.
  for (size_t i = 0; i < items.size(); ++i) {
    SequenceState& state = *items[i].state;
    if (!state.PrepareAppend(static_cast<int64_t>(items[i].tokens.size()))) {
      throw MakeError("sequence ", i, ": the KV cache budget of ", state.pool().budget_bytes(), " bytes (",
                      state.pool().held_bytes(), " held) cannot hold ", items[i].tokens.size(), " more tokens");
    }
  }
  return Batch{item_ptrs, first_row, item_of, positions, tokens};
}

Tensor Model::HashEngramIds(const Batch& batch, Workspace& workspace, std::span<std::span<int32_t>> recent) const {
  if (!hasher_) return Tensor{};
  const int lookback = hasher_->lookback();
  const int columns = hasher_->columns();
  const int layers = static_cast<int>(config_.engram_layer_ids.size());
  const int64_t rows = batch.size();
  const Tensor ids = workspace.Take<int64_t>({layers, rows, columns});
  std::span<int32_t> newest_first = workspace.TakeArray<int32_t>(lookback + 1);
  for (int i = 0; i < batch.item_count(); ++i) {
    // history: compressed ids of every position from (start - lookback) on; dead before 0.
    const int64_t count = batch.count(i);
    std::span<int32_t> history = workspace.TakeArray<int32_t>(lookback + count);
    std::fill_n(history.begin(), lookback, kEngramDeadToken);
    const std::vector<int32_t>& held = batch.items[i]->state->engram_recent();
    std::copy(held.begin(), held.end(), history.begin() + lookback - static_cast<int64_t>(held.size()));
    for (int64_t t = 0; t < count; ++t) history[lookback + t] = hasher_->Compress(batch.items[i]->tokens[t]);
    for (int64_t t = 0; t < count; ++t) {
      for (int s = 0; s <= lookback; ++s) newest_first[s] = history[lookback + t - s];
      const int64_t row = batch.first_row[i] + t;
      for (int l = 0; l < layers; ++l)
        hasher_->HashIds(l, newest_first, ids.host<int64_t>() + (l * rows + row) * columns);
    }
    recent[i] = history.subspan(count, lookback);
  }
  return ids;
}

Tensor Model::Embed(const Batch& batch, const ComputeContext& ctx) const {
  // Embedding, expanded to hc identical copies.
  const Tensor streams = ctx.backend.workspace().Take<float>({batch.size(), config_.hc_mult, config_.hidden_size});
  ctx.backend.Embed(weights_.embed, batch.tokens, config_.hc_mult, streams);
  return streams;
}

Model::SharedIndex Model::ReserveSharedIndex(const Batch& batch, Workspace& workspace) const {
  const ModelConfig& c = config_;
  const int64_t rows = batch.size();
  const int items = batch.item_count();
  SharedIndex shared;
  shared.items = items;
  shared.topk = workspace.Take<int32_t>({rows, c.index_topk});
  shared.topk_count = workspace.TakeArray<int32_t>(rows);
  std::fill(shared.topk_count.begin(), shared.topk_count.end(), 0);
  // A candidate mask covers the entries its row may see, at most those of the newest row under
  // the smallest compress ratio.
  int min_ratio = 0;
  for (const LayerRole& role : c.roles) {
    if (role.kv_source && role.compress_ratio > 0) {
      min_ratio = min_ratio == 0 ? role.compress_ratio : std::min(min_ratio, role.compress_ratio);
    }
  }
  const int64_t newest = rows > 0 ? *std::max_element(batch.positions.begin(), batch.positions.end()) : 0;
  shared.candidates = workspace.Take<uint8_t>({rows, min_ratio > 0 ? (newest + 1) / min_ratio : 0});
  shared.candidate_size = workspace.TakeArray<int64_t>(rows);
  std::fill(shared.candidate_size.begin(), shared.candidate_size.end(), 0);

  shared.index_keys = workspace.TakeArray<Tensor>(c.num_layers * items);
  std::fill(shared.index_keys.begin(), shared.index_keys.end(), Tensor{});
  shared.index_keys_ready = workspace.TakeArray<uint8_t>(c.num_layers);
  std::fill(shared.index_keys_ready.begin(), shared.index_keys_ready.end(), 0);
  shared.selected = workspace.TakeArray<SharedIndex::SelectedEntries>(c.num_layers * items);
  std::fill(shared.selected.begin(), shared.selected.end(), SharedIndex::SelectedEntries{});
  shared.selected_ready = workspace.TakeArray<uint8_t>(c.num_layers);
  std::fill(shared.selected_ready.begin(), shared.selected_ready.end(), 0);
  // Entries of a KV source after this step, per item.
  auto entries_after = [&](int kv_layer, int item) {
    return (batch.start(item) + batch.count(item)) / c.roles[kv_layer].compress_ratio;
  };
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const LayerRole& role = c.roles[layer];
    if (role.compress_ratio <= 0) continue;
    const int kv_layer = role.kv_source_layer;
    if (role.index_source && shared.index_keys_of(kv_layer, 0).data == nullptr) {
      for (int i = 0; i < items; ++i) {
        shared.index_keys_of(kv_layer, i) = workspace.Take<float>({entries_after(kv_layer, i), c.index_head_dim});
      }
    }
    const int source = role.index_source_layer;
    if (shared.selected_of(source, 0).slot.data() == nullptr) {
      const int source_kv = c.roles[source].kv_source_layer;
      for (int i = 0; i < items; ++i) {
        const int64_t entries = entries_after(source_kv, i);
        SharedIndex::SelectedEntries& view = shared.selected_of(source, i);
        view.slot = workspace.TakeArray<int32_t>(std::max<int64_t>(entries, 1));
        view.rows = workspace.Take<float>({std::min(entries, batch.count(i) * c.index_topk), c.head_dim});
      }
    }
  }
  return shared;
}

void Model::Head(const Batch& batch, const Tensor& streams, const Tensor& pre_mix, const ComputeContext& ctx,
                 std::vector<float>& logits) const {
  // Collapse with the last FFN site's pre, final norm, fp32 head on the requested rows.
  const ModelConfig& c = config_;
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const std::span<int64_t> logit_rows = batch.TrailingRows(LogitRowsOf, workspace);
  const int64_t out_rows = static_cast<int64_t>(logit_rows.size());
  const Tensor selected_streams = workspace.Take<float>({out_rows, c.hc_mult, c.hidden_size});
  const Tensor selected_pre = workspace.Take<float>({out_rows, c.hc_mult});
  const Tensor collapsed = workspace.Take<float>({out_rows, c.hidden_size});
  const Tensor normed = workspace.Take<float>({out_rows, c.hidden_size});
  backend.GatherRows(streams, logit_rows, selected_streams);
  backend.GatherRows(pre_mix, logit_rows, selected_pre);
  backend.HcCollapse(selected_streams, selected_pre, collapsed);
  backend.RmsNorm(collapsed, weights_.norm, static_cast<float>(c.norm_eps), normed);
  logits.resize(out_rows * c.vocab_size);
  backend.Linear(weights_.head, normed,
                 Tensor::Contiguous(ElementType::kF32, Device::kHost, {out_rows, c.vocab_size}, logits.data()),
                 LinearNumerics::kFp32);
}

void Model::Commit(const Batch& batch, std::span<const std::span<int32_t>> recent) const {
  for (int i = 0; i < batch.item_count(); ++i) {
    const ForwardItem& item = *batch.items[i];
    const int64_t start = batch.start(i);
    item.state->CommitAppend(batch.count(i),
                             hasher_ ? std::span<const int32_t>(recent[i]) : std::span<const int32_t>());
    if (item.rollback) item.state->MarkTruncatable(start);
    if (!item.keep_window_pages && !item.rollback) item.state->ReleaseStaleWindowPages();
  }
}

void Model::Tap(int target, std::span<const int64_t> rows, const Tensor& streams, const Tensor& taps,
                const ComputeContext& ctx) const {
  const ModelConfig& c = config_;
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const Workspace::Scope scratch(workspace);
  const int64_t count = taps.rows();
  // The copy mean is a collapse with weights 1/hc (exact: a power of two scales every sum).
  const Tensor selected = workspace.Take<float>({count, c.hc_mult, c.hidden_size});
  const Tensor mean_weights = workspace.Take<float>({count, c.hc_mult});
  const Tensor mean = workspace.Take<float>({count, c.hidden_size});
  std::fill_n(mean_weights.host<float>(), count * c.hc_mult, 1.0f / static_cast<float>(c.hc_mult));
  backend.GatherRows(streams, rows, selected);
  backend.HcCollapse(selected, mean_weights, mean);
  for (int64_t r = 0; r < count; ++r) {
    backend.Copy(mean.Rows(r, 1), taps.Rows(r, 1).Elements(target * c.hidden_size, c.hidden_size));
  }
}

void Model::RunBlock(int layer, const Batch& batch, const Tensor& streams, const Tensor& pre_mix, SharedIndex& shared,
                     const ComputeContext& ctx, uint64_t* routed_bytes) const {
  RunSites(
      weights_.layers[layer], config_.num_experts_per_tok, streams, pre_mix,
      [&](const Tensor& x, const Tensor& out) { Attention(layer, batch, x, out, shared, ctx); }, ctx, routed_bytes);
}

void Model::RunSites(const LayerWeights& w, int top_k, const Tensor& streams, const Tensor& pre_mix,
                     AttentionSite attention, const ComputeContext& ctx, uint64_t* routed_bytes) const {
  const ModelConfig& c = config_;
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const Workspace::Scope block_scratch(workspace);
  const int hc = c.hc_mult;
  const int64_t rows = streams.rows();
  const float eps = static_cast<float>(c.norm_eps);
  const HcParams hc_params{hc, eps, c.hc_sinkhorn_iters, static_cast<float>(c.hc_eps)};
  const Tensor collapsed = workspace.Take<float>({rows, c.hidden_size});
  const Tensor normed = workspace.Take<float>({rows, c.hidden_size});
  const Tensor sublayer_out = workspace.Take<float>({rows, c.hidden_size});

  // Attention site: collapse with the previous site's pre (one site late, spec 3.4).
  const HcMix attn_mix = TakeHcMix(workspace, rows, hc);
  backend.HcMixes(streams, w.hc_attn.fn, w.hc_attn.base, w.hc_attn.scale, hc_params, attn_mix.pre, attn_mix.post,
                  attn_mix.comb);
  backend.HcCollapse(streams, pre_mix, collapsed);
  backend.RmsNorm(collapsed, w.attn_norm, eps, normed);
  attention(normed, sublayer_out);
  backend.HcExpand(sublayer_out, attn_mix.post, attn_mix.comb, streams);

  // FFN site: collapse with the attention site's pre.
  const HcMix ffn_mix = TakeHcMix(workspace, rows, hc);
  backend.HcMixes(streams, w.hc_ffn.fn, w.hc_ffn.base, w.hc_ffn.scale, hc_params, ffn_mix.pre, ffn_mix.post,
                  ffn_mix.comb);
  backend.HcCollapse(streams, attn_mix.pre, collapsed);
  backend.RmsNorm(collapsed, w.ffn_norm, eps, normed);
  Moe(w.ffn, top_k, normed, sublayer_out, ctx, routed_bytes);
  backend.HcExpand(sublayer_out, ffn_mix.post, ffn_mix.comb, streams);
  backend.Copy(ffn_mix.pre, pre_mix);
}

void Model::ApplyEngram(int layer, const Batch& batch, const Tensor& hash_ids, const Tensor& streams,
                        const ComputeContext& ctx) const {
  const EngramWeights& e = *weights_.layers[layer].engram;
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const Workspace::Scope scratch(workspace);
  const int64_t rows = batch.size();
  const int64_t ids_per_row = hasher_->columns();
  const int64_t row_dim = e.embed.dim;
  const int layer_index = config_.roles[layer].engram_index;

  // Gather and dequantize the hashed rows, then project them to each copy's key and the value.
  const std::span<const int64_t> ids(hash_ids.row<int64_t>(layer_index), rows * ids_per_row);
  const Tensor gathered = workspace.Take<float>({rows, ids_per_row * row_dim});
  backend.EngramGather(e.embed.data, e.embed.scales, e.embed.rows, row_dim, ids,
                       gathered.Reshaped({rows * ids_per_row, row_dim}));
  const Tensor kv = workspace.Take<float>({rows, e.wkv.rows});
  backend.Linear(e.wkv, gathered, kv, LinearNumerics::kCheckpoint);
  backend.EngramGate(kv, e.gate_weight, static_cast<float>(config_.norm_eps), streams);
}

}  // namespace deepinfer
