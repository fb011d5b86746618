// The DSpark draft head (spec 3.8). The target taps of accepted positions seed every stage's
// window ring (main_kv); a draft runs the block [next token, noise x (block - 1)] at positions
// p + 1 .. p + block through the window-only stages, each block query attending the ring and,
// bidirectionally, the whole block; then the backbone head with the Markov bias added slot by
// slot (each slot's bias follows the token picked for the slot before), and the confidence head.
// Every computation is an op of ctx.backend.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/model_internal.h"

namespace deepinfer {

DraftState::DraftState(int stages, int window, int64_t head_dim)
    : stages_(stages),
      window_(window),
      head_dim_(head_dim),
      codes_(static_cast<size_t>(stages) * window * head_dim),
      exponents_(static_cast<size_t>(stages) * window * (head_dim / kWindowEntryBlock)) {}

WindowEntry<uint8_t> DraftState::slot(int stage, int64_t position) {
  const int64_t s = static_cast<int64_t>(stage) * window_ + position % window_;
  return {codes_.data() + s * head_dim_, exponents_.data() + s * (head_dim_ / kWindowEntryBlock)};
}

WindowEntry<const uint8_t> DraftState::slot(int stage, int64_t position) const {
  const int64_t s = static_cast<int64_t>(stage) * window_ + position % window_;
  return {codes_.data() + s * head_dim_, exponents_.data() + s * (head_dim_ / kWindowEntryBlock)};
}

void DraftState::SkipTo(int64_t position) {
  DI_CHECK(position >= length_, "draft state at ", length_, " cannot skip back to ", position);
  if (position > length_) first_seeded_ = position;
  length_ = position;
}

std::vector<uint8_t> DraftState::VisibleBytes() const {
  std::vector<uint8_t> bytes;
  for (int stage = 0; stage < stages_; ++stage) {
    for (int64_t pos = std::max<int64_t>(first_seeded_, length_ - window_); pos < length_; ++pos) {
      const WindowEntry<const uint8_t> entry = slot(stage, pos);
      bytes.insert(bytes.end(), entry.codes, entry.codes + head_dim_);
      bytes.insert(bytes.end(), entry.exponents, entry.exponents + head_dim_ / kWindowEntryBlock);
    }
  }
  return bytes;
}

DraftState Model::NewDraftState() const {
  if (!has_draft()) throw MakeError(config_.source, ": the model has no DSpark stages");
  return DraftState(config_.num_mtp_layers, config_.window_size, config_.head_dim);
}

// One draft call, flattened.
struct Model::DraftBatch {
  std::span<const DraftItem> items;
  // The tap rows that reach a ring (at most each item's last `window`), with their positions
  // and states.
  Tensor seed_taps;  // [seed rows, tap width]
  std::span<const int64_t> seed_positions;
  std::span<DraftState* const> seed_states;
  // The drafting items, and their block rows (item-major, slot order).
  std::span<const int> drafting;             // index into items
  std::span<const int64_t> block_positions;  // p + 1 + slot
  std::span<const int32_t> block_tokens;     // next token, then noise
  int block = 0;

  int64_t rows() const { return static_cast<int64_t>(block_positions.size()); }
  const DraftState& state_of(int j) const { return *items[drafting[j]].state; }
};

void Model::Draft(std::span<const DraftItem> items, const ComputeContext& ctx, DraftChooser choose,
                  DraftResult& out) const {
  const ModelConfig& c = config_;
  if (!has_draft()) throw MakeError(c.source, ": the model has no DSpark stages to draft with");
  const int64_t width = draft_tap_width();
  const int block = c.dspark_block_size;
  for (size_t i = 0; i < items.size(); ++i) {
    const DraftItem& item = items[i];
    DI_CHECK(item.state != nullptr && item.state->valid() && item.state->stages_ == c.num_mtp_layers &&
                 item.state->window_ == c.window_size && item.state->head_dim_ == c.head_dim,
             "draft item ", i, " has no draft state of this model");
    for (size_t k = 0; k < i; ++k) {
      if (items[k].state == item.state) throw MakeError("draft items ", k, " and ", i, " share one draft state");
    }
    if (item.taps.size() % static_cast<size_t>(width) != 0) {
      throw MakeError("draft item ", i, ": ", item.taps.size(), " tap values are not whole rows of ", width);
    }
    const int64_t n = static_cast<int64_t>(item.taps.size()) / width;
    if (item.draft && item.state->length() + n == 0) {
      throw MakeError("draft item ", i, ": nothing seeded to draft from (no taps yet)");
    }
    if (item.draft && (item.next_token < 0 || item.next_token >= c.vocab_size)) {
      throw MakeError("draft item ", i, ": token id ", item.next_token, " is outside the model vocabulary [0, ",
                      c.vocab_size, ")");
    }
  }

  Workspace& workspace = ctx.backend.workspace();
  workspace.Reset();
  int64_t seed_rows = 0;
  int drafting = 0;
  for (const DraftItem& item : items) {
    seed_rows += std::min<int64_t>(static_cast<int64_t>(item.taps.size()) / width, c.window_size);
    drafting += item.draft ? 1 : 0;
  }
  DraftBatch batch;
  batch.items = items;
  batch.block = block;
  batch.seed_taps = workspace.Take<float>({seed_rows, width});
  std::span<int64_t> seed_positions = workspace.TakeArray<int64_t>(seed_rows);
  std::span<DraftState*> seed_states = workspace.TakeArray<DraftState*>(seed_rows);
  std::span<int> drafting_items = workspace.TakeArray<int>(drafting);
  std::span<int64_t> block_positions = workspace.TakeArray<int64_t>(static_cast<int64_t>(drafting) * block);
  std::span<int32_t> block_tokens = workspace.TakeArray<int32_t>(static_cast<int64_t>(drafting) * block);
  int64_t row = 0;
  int j = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const DraftItem& item = items[i];
    const int64_t n = static_cast<int64_t>(item.taps.size()) / width;
    const int64_t kept = std::min<int64_t>(n, c.window_size);  // older rows' slots are overwritten anyway
    const int64_t first = item.state->length() + n - kept;
    ctx.backend.Copy(Tensor::Contiguous(ElementType::kF32, Device::kHost, {kept, width},
                                        const_cast<float*>(item.taps.data()) + (n - kept) * width),
                     batch.seed_taps.Rows(row, kept));
    for (int64_t k = 0; k < kept; ++k, ++row) {
      seed_positions[row] = first + k;
      seed_states[row] = item.state;
    }
    if (!item.draft) continue;
    const int64_t last = item.state->length() + n - 1;  // p: the newest seeded position
    drafting_items[j] = static_cast<int>(i);
    for (int s = 0; s < block; ++s) {
      block_positions[j * block + s] = last + 1 + s;
      block_tokens[j * block + s] = s == 0 ? item.next_token : c.dspark_noise_token_id;
    }
    ++j;
  }
  batch.seed_positions = seed_positions;
  batch.seed_states = seed_states;
  batch.drafting = drafting_items;
  batch.block_positions = block_positions;
  batch.block_tokens = block_tokens;

  // Outside the guard: a SIGBUS abandons the guarded frames without running their destructors.
  const StepScope step(ctx.backend, {StepKind::kDraft, batch.rows()});
  try {
    GuardMappedReads([&] {
      SeedDraft(batch, ctx);
      for (size_t i = 0; i < items.size(); ++i) {
        items[i].state->length_ += static_cast<int64_t>(items[i].taps.size()) / width;
      }
      out.logits.clear();
      out.tokens.clear();
      out.confidence.clear();
      out.weight_bytes = SeedBytes(seed_rows);
      if (batch.rows() == 0) return;
      const Tensor streams = workspace.Take<float>({batch.rows(), c.hc_mult, c.hidden_size});
      ctx.backend.Embed(weights_.embed, batch.block_tokens, c.hc_mult, streams);
      const Tensor pre_mix = workspace.TakeZeroed(ElementType::kF32, {batch.rows(), c.hc_mult});
      for (int64_t r = 0; r < batch.rows(); ++r) pre_mix.row<float>(r)[0] = 1.0f;
      uint64_t routed_bytes = 0;
      for (int stage = 0; stage < c.num_mtp_layers; ++stage) {
        RunSites(
            weights_.draft->stages[stage], c.dspark_n_activated_experts, streams, pre_mix,
            [&](const Tensor& x, const Tensor& sublayer_out) { DraftAttention(stage, batch, x, sublayer_out, ctx); },
            ctx, &routed_bytes);
      }
      DraftHead(batch, streams, pre_mix, ctx, choose, out);
      out.weight_bytes += BlockBytes(batch.rows(), drafting) + routed_bytes;
    });
  } catch (const MappedFileFault& fault) {
    throw MappedFileError(fault, checkpoint_);
  }
  workspace.Reset();
}

// The weight bytes SeedDraft reads for `rows` tap rows, and what a block of `rows` rows of
// `drafting` items reads besides the routed experts (Draft counts those as the stages pick them).
uint64_t Model::SeedBytes(int64_t rows) const {
  if (rows == 0) return 0;
  const DraftWeights& d = *weights_.draft;
  uint64_t bytes = d.main_proj.bytes();
  for (const LayerWeights& stage : d.stages) bytes += stage.attn.wkv.bytes();
  return bytes;
}

uint64_t Model::BlockBytes(int64_t rows, int drafting) const {
  const ModelConfig& c = config_;
  const DraftWeights& d = *weights_.draft;
  uint64_t bytes = static_cast<uint64_t>(rows) * c.hidden_size * 2;  // embedding rows (bf16)
  for (const LayerWeights& stage : d.stages) bytes += stage.fixed_matrix_bytes;
  bytes += weights_.head.bytes() + d.confidence_proj.bytes();
  // Each slot reads the whole Markov head and one embedding row per drafting item.
  const uint64_t markov_row = d.markov_embed.bytes() / static_cast<uint64_t>(d.markov_embed.rows);
  bytes += static_cast<uint64_t>(c.dspark_block_size) * (d.markov_head.bytes() + drafting * markov_row);
  return bytes;
}

// main_x = main_norm(main_proj(taps)), shared by every stage; each stage's main_kv of it goes to
// the ring slot of its position.
void Model::SeedDraft(const DraftBatch& batch, const ComputeContext& ctx) const {
  const ModelConfig& c = config_;
  const DraftWeights& d = *weights_.draft;
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const Workspace::Scope scratch(workspace);
  const int64_t rows = batch.seed_taps.rows();
  if (rows == 0) return;
  const Tensor projected = workspace.Take<float>({rows, c.hidden_size});
  const Tensor main_x = workspace.Take<float>({rows, c.hidden_size});
  backend.Linear(d.main_proj, batch.seed_taps, projected, LinearNumerics::kCheckpoint);
  backend.RmsNorm(projected, d.main_norm, static_cast<float>(c.norm_eps), main_x);
  const Tensor codes = workspace.Take<uint8_t>({rows, c.head_dim});
  const Tensor exponents = workspace.Take<uint8_t>({rows, c.head_dim / kWindowEntryBlock});
  const Tensor decoded = workspace.Take<float>({rows, c.head_dim});
  std::span<WindowEntry<uint8_t>> slots = workspace.TakeArray<WindowEntry<uint8_t>>(rows);
  for (int stage = 0; stage < c.num_mtp_layers; ++stage) {
    ProjectKv(d.stages[stage].attn, main_rope_, batch.seed_positions, main_x, codes, exponents, decoded, ctx);
    for (int64_t r = 0; r < rows; ++r) slots[r] = batch.seed_states[r]->slot(stage, batch.seed_positions[r]);
    backend.StoreWindowEntries(codes, exponents, slots);
  }
}

// The block's queries over [ring slots 0 .. min(window, p + 1) - 1, the whole block]: the ring
// in slot order, as the reference indexes it (a slot never seeded, after SkipTo, is left out);
// the block's own KV is not stored.
void Model::DraftAttention(int stage, const DraftBatch& batch, const Tensor& x, const Tensor& out,
                           const ComputeContext& ctx) const {
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.draft->stages[stage].attn;
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const Workspace::Scope scratch(workspace);
  const AttentionRows a = ProjectQueryAndKv(w, main_rope_, batch.block_positions, x, ctx);
  const int window = c.window_size;
  const int drafting = static_cast<int>(batch.drafting.size());
  std::span<Tensor> rings = workspace.TakeArray<Tensor>(drafting);
  std::span<int64_t> visible = workspace.TakeArray<int64_t>(drafting);
  std::span<int64_t> ring_slots = workspace.TakeArray<int64_t>(static_cast<int64_t>(drafting) * window);
  std::span<WindowEntry<const uint8_t>> slots = workspace.TakeArray<WindowEntry<const uint8_t>>(window);
  for (int j = 0; j < drafting; ++j) {
    const DraftState& state = batch.state_of(j);
    const int64_t newest = state.length() - 1;  // p
    rings[j] = workspace.Take<float>({window, c.head_dim});
    std::fill(slots.begin(), slots.end(), WindowEntry<const uint8_t>{nullptr, nullptr});
    visible[j] = 0;
    for (int64_t s = 0; s < std::min<int64_t>(window, newest + 1); ++s) {
      const int64_t position = newest - (newest - s) % window;  // the newest position in slot s
      if (position < state.first_seeded_) continue;
      slots[s] = state.slot(stage, position);
      ring_slots[static_cast<int64_t>(j) * window + visible[j]++] = s;
    }
    backend.DecodeWindowEntries(slots, rings[j]);
  }
  const int64_t rows = batch.rows();
  const int block = batch.block;
  std::span<int64_t> row_begin = workspace.TakeArray<int64_t>(rows + 1);
  row_begin[0] = 0;
  for (int64_t r = 0; r < rows; ++r) row_begin[r + 1] = row_begin[r] + visible[r / block] + block;
  std::span<const float*> entries = workspace.TakeArray<const float*>(row_begin[rows]);
  for (int64_t r = 0; r < rows; ++r) {
    const int j = static_cast<int>(r / block);
    const float** entry = entries.data() + row_begin[r];
    for (int64_t s = 0; s < visible[j]; ++s) *entry++ = rings[j].row<float>(ring_slots[j * window + s]);
    for (int s = 0; s < block; ++s) *entry++ = a.kv.row<float>(static_cast<int64_t>(j) * block + s);
  }
  const float softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  backend.SparseAttention(a.q, c.num_heads, entries, row_begin, w.attn_sink, softmax_scale, a.o);
  ProjectOutput(w, main_rope_, batch.block_positions, a.o, out, ctx);
}

// logits = head(norm(collapse)), then slot by slot: the Markov bias of the previous token (the
// next token for slot 0), and the pick; confidence = proj([collapse, markov embeddings]).
void Model::DraftHead(const DraftBatch& batch, const Tensor& streams, const Tensor& pre_mix, const ComputeContext& ctx,
                      DraftChooser choose, DraftResult& out) const {
  const ModelConfig& c = config_;
  const DraftWeights& d = *weights_.draft;
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const Workspace::Scope scratch(workspace);
  const int64_t rows = batch.rows();
  const int block = batch.block;
  const int drafting = static_cast<int>(batch.drafting.size());
  const int64_t dim = c.hidden_size;
  const int64_t rank = c.dspark_markov_rank;
  const Tensor collapsed = workspace.Take<float>({rows, dim});
  const Tensor normed = workspace.Take<float>({rows, dim});
  backend.HcCollapse(streams, pre_mix, collapsed);
  backend.RmsNorm(collapsed, d.norm, static_cast<float>(c.norm_eps), normed);
  out.logits.resize(rows * c.vocab_size);
  const Tensor logits = Tensor::Contiguous(ElementType::kF32, Device::kHost, {rows, c.vocab_size}, out.logits.data());
  backend.Linear(weights_.head, normed, logits, LinearNumerics::kFp32);

  out.tokens.resize(rows);
  const Tensor confidence_in = workspace.Take<float>({rows, dim + rank});
  for (int64_t r = 0; r < rows; ++r) backend.Copy(collapsed.Rows(r, 1), confidence_in.Rows(r, 1).Elements(0, dim));
  std::span<int32_t> previous = workspace.TakeArray<int32_t>(drafting);
  std::span<int64_t> slot_rows = workspace.TakeArray<int64_t>(drafting);
  const Tensor markov = workspace.Take<float>({drafting, rank});
  const Tensor bias = workspace.Take<float>({drafting, c.vocab_size});
  for (int j = 0; j < drafting; ++j) previous[j] = batch.items[batch.drafting[j]].next_token;
  for (int s = 0; s < block; ++s) {
    backend.Embed(d.markov_embed, previous, 1, markov);
    backend.Linear(d.markov_head, markov, bias, LinearNumerics::kFp32);
    for (int j = 0; j < drafting; ++j) slot_rows[j] = static_cast<int64_t>(j) * block + s;
    backend.ScatterAddRows(bias, slot_rows, logits);
    for (int j = 0; j < drafting; ++j) {
      const int64_t r = slot_rows[j];
      backend.Copy(markov.Rows(j, 1), confidence_in.Rows(r, 1).Elements(dim, rank));
      const int32_t token = choose(j, s, std::span<const float>(logits.row<float>(r), c.vocab_size));
      DI_CHECK(token >= 0 && token < c.vocab_size, "draft chooser picked token ", token, " outside [0, ", c.vocab_size,
               ")");
      out.tokens[r] = token;
      previous[j] = token;
    }
  }
  out.confidence.resize(rows);
  backend.Linear(d.confidence_proj, confidence_in,
                 Tensor::Contiguous(ElementType::kF32, Device::kHost, {rows, 1}, out.confidence.data()),
                 LinearNumerics::kFp32);
}

}  // namespace deepinfer
