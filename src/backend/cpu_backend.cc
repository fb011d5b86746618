#include "backend/cpu_backend.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"

namespace deepinfer {
namespace {

void CheckShape(const Tensor& t, int64_t rows, int64_t row_elements, const char* what) {
  DI_CHECK(t.rows() == rows && t.row_elements() == row_elements, what, ": expected [", rows, ", ", row_elements,
           "], got [", t.rows(), ", ", t.row_elements(), "]");
}

// Indices of the `k` highest finite scores, ties to the lower index, written ascending to `out`;
// returns how many. `order` is scratch of scores.size().
int32_t TopKFinite(std::span<const float> scores, size_t k, std::span<int32_t> order, int32_t* out) {
  size_t finite = 0;
  for (size_t t = 0; t < scores.size(); ++t) {
    if (scores[t] != -INFINITY) order[finite++] = static_cast<int32_t>(t);
  }
  if (finite > k) {
    // The comparison is a strict total order, so the k best are one set, whichever algorithm
    // finds it: a selection, then the kept indices in ascending order.
    std::nth_element(order.begin(), order.begin() + k, order.begin() + finite,
                     [&](int32_t a, int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
    std::sort(order.begin(), order.begin() + k);
  }
  k = std::min(k, finite);  // all finite ones kept: `order` is ascending already
  std::copy_n(order.begin(), k, out);
  return static_cast<int32_t>(k);
}

// Level one of the two-level top-k: keep the best `topk_blocks` blocks of `block_size`
// entries (a block scores its best entry), always keeping the block of the newest visible
// entry. Entries past `visible` are -inf already. `scratch` holds 2 * blocks ints.
void SelectCandidateBlocks(std::span<const float> scores, int64_t visible, int topk_blocks, int block_size,
                           float* block_scores_buffer, int32_t* scratch, uint8_t* mask) {
  const int64_t width = static_cast<int64_t>(scores.size());
  const int64_t blocks = (width + block_size - 1) / block_size;
  const std::span<float> block_scores(block_scores_buffer, blocks);
  std::fill(block_scores.begin(), block_scores.end(), -INFINITY);
  for (int64_t t = 0; t < width; ++t) block_scores[t / block_size] = std::max(block_scores[t / block_size], scores[t]);
  if (visible > 0) block_scores[(visible - 1) / block_size] = INFINITY;
  std::span<int32_t> order(scratch, blocks);
  int32_t* kept = scratch + blocks;
  const int32_t count = TopKFinite(block_scores, static_cast<size_t>(topk_blocks), order, kept);
  std::fill_n(mask, width, uint8_t{0});
  for (int32_t k = 0; k < count; ++k) {
    const int64_t b = kept[k];
    for (int64_t t = b * block_size; t < std::min(width, (b + 1) * int64_t{block_size}); ++t) mask[t] = 1;
  }
}

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// StepParallelism's shape of a step: its kind and its rows, exact up to 32 (decode batches and
// verify steps, each its own cost), above that rounded up to a power of two (prefill chunks;
// their calls are long, so they run on all threads anyway), which keeps the shapes few.
uint64_t StepKey(StepShape shape) {
  constexpr int64_t kExactRows = 32;
  uint64_t rows = static_cast<uint64_t>(std::max<int64_t>(0, shape.rows));
  if (rows > kExactRows) rows = std::bit_ceil(rows);
  return static_cast<uint64_t>(shape.kind) << 56 | rows;
}

}  // namespace

void CpuBackend::BeginStep(StepShape shape) {
  recorded_step_start_.reset();
  if (linear_record_ != nullptr && shape.kind == StepKind::kForward && shape.rows == linear_record_->step_rows) {
    recorded_step_start_ = std::chrono::steady_clock::now();
  }
  steps_.Begin(StepKey(shape));
}

void CpuBackend::EndStep(bool completed) {
  steps_.End(completed);
  if (linear_record_ != nullptr && recorded_step_start_) {
    ++linear_record_->forwards;
    linear_record_->forward_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - *recorded_step_start_).count();
  }
  recorded_step_start_.reset();
}

void CpuBackend::Linear(const WeightMatrix& w, const Tensor& x, const Tensor& y, LinearNumerics numerics) {
  const int64_t m = x.rows();
  CheckShape(x, m, w.cols, "linear input");
  CheckShape(y, m, w.rows, "linear output");
  if (m == 0) return;
  const bool timed = TimesLinear(m);
  const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  switch (numerics) {
    case LinearNumerics::kCheckpoint:
      deepinfer::Linear(w, x.host<float>(), m, y.host<float>(), cpu_);
      break;
    case LinearNumerics::kFp32:
    case LinearNumerics::kBf16:
      DenseLinear(w, x.host<float>(), m, y.host<float>(), numerics == LinearNumerics::kBf16, cpu_);
      break;
  }
  if (timed) {
    RecordLinear(w, m, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    LinearRecord::Gemv& largest = linear_record_->largest_gemv[static_cast<int>(w.format)];
    if (m == 1 && (largest.w.empty() || w.bytes() > largest.w.bytes())) largest = {w, numerics};
  }
}

void CpuBackend::RecordLinear(const WeightMatrix& w, int64_t m, double seconds) {
  if (recorded_step_start_) {
    LinearRecord::FormatTime& t = linear_record_->by_format[static_cast<int>(w.format)];
    ++t.calls;
    t.bytes += w.bytes();
    t.seconds += seconds;
  }
  if (m > LinearRecord::kGemvMaxRows || w.bytes() < LinearRecord::kGemvMinBytes) return;
  const double rate = seconds > 0.0 ? static_cast<double>(w.bytes()) / seconds : 0.0;
  ++linear_record_->gemv_calls;
  if (rate > linear_record_->best_gemv_bytes_per_s) {
    linear_record_->best_gemv_bytes_per_s = rate;
    linear_record_->best_gemv_bytes = w.bytes();
  }
}

void CpuBackend::GroupedLinear(const WeightMatrix& w, int groups, const Tensor& x, const Tensor& y) {
  const int64_t rows = x.rows();
  const int64_t group_in = x.row_elements() / groups;
  const int64_t group_out = w.rows / groups;
  CheckShape(x, rows, group_in * groups, "grouped linear input");
  CheckShape(y, rows, w.rows, "grouped linear output");
  DI_CHECK(w.cols == group_in, "grouped linear: weight of ", w.cols, " columns for groups of ", group_in);
  Tensor input = workspace_.Take<float>({rows, group_in});
  Tensor output = workspace_.Take<float>({rows, group_out});
  const bool timed = TimesLinear(rows);
  const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  for (int g = 0; g < groups; ++g) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(x.row<float>(r) + g * group_in, group_in, input.row<float>(r));
    DenseLinear(w.RowSlice(g * group_out, group_out), input.host<float>(), rows, output.host<float>(),
                /*round_to_bf16=*/true, cpu_);
    for (int64_t r = 0; r < rows; ++r) std::copy_n(output.row<float>(r), group_out, y.row<float>(r) + g * group_out);
  }
  if (timed) RecordLinear(w, rows, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

template <class Body>
void CpuBackend::ForEachRow(int64_t rows, size_t bytes_per_row, const Body& body) {
  cpu_.pool.ForEachItem(static_cast<size_t>(rows), bytes_per_row,
                        [&](size_t r, int thread) { body(static_cast<int64_t>(r), thread); });
}

void CpuBackend::Copy(const Tensor& from, const Tensor& to) {
  DI_CHECK(from.dtype == to.dtype && from.elements() == to.elements(), "copy of ", from.elements(), " ",
           ElementTypeName(from.dtype), " to ", to.elements(), " ", ElementTypeName(to.dtype));
  DI_CHECK(from.contiguous() && to.contiguous(), "copy between strided tensors");
  std::memcpy(to.data, from.data, static_cast<size_t>(from.elements()) * ElementBytes(from.dtype));
}

void CpuBackend::Embed(const WeightMatrix& table, std::span<const int32_t> tokens, int copies, const Tensor& streams) {
  const int64_t dim = table.cols;
  const int64_t rows = static_cast<int64_t>(tokens.size());
  CheckShape(streams, rows, copies * dim, "embedding streams");
  ForEachRow(rows, static_cast<size_t>(copies * dim) * sizeof(float), [&](int64_t r, int) {
    float* first = streams.row<float>(r);
    table.DequantizedRow(tokens[r], first);
    for (int i = 1; i < copies; ++i) std::copy_n(first, dim, first + i * dim);
  });
}

void CpuBackend::RmsNorm(const Tensor& x, std::span<const float> weight, float eps, const Tensor& out) {
  const int64_t dim = static_cast<int64_t>(weight.size());
  CheckShape(x, x.rows(), dim, "rmsnorm input");
  CheckShape(out, x.rows(), dim, "rmsnorm output");
  ForEachRow(x.rows(), 2 * sizeof(float) * static_cast<size_t>(dim),
             [&](int64_t r, int) { deepinfer::RmsNorm(x.row<float>(r), dim, weight.data(), eps, out.row<float>(r)); });
}

void CpuBackend::Rope(const Tensor& x, int heads, const RopeTable& table, std::span<const int64_t> positions,
                      bool inverse) {
  DI_CHECK(static_cast<int64_t>(positions.size()) == x.rows(), "rope: ", positions.size(), " positions for ", x.rows(),
           " rows");
  const int64_t head_dim = x.row_elements() / heads;
  const int64_t pairs = table.pairs();
  scratch_.Reserve(0, 2 * sizeof(float) * static_cast<size_t>(pairs));
  ForEachRow(x.rows(), 2 * sizeof(float) * static_cast<size_t>(heads * 2 * pairs), [&](int64_t r, int thread) {
    float* cos_sin = scratch_.Get<float>(thread, 0, static_cast<size_t>(2 * pairs));
    const std::span<const float> cos(cos_sin, pairs), sin(cos_sin + pairs, pairs);
    table.CosSin(positions[r], cos_sin, cos_sin + pairs);
    float* row = x.row<float>(r);
    for (int h = 0; h < heads; ++h) ApplyRope(row + h * head_dim + head_dim - 2 * pairs, cos, sin, inverse);
  });
}

void CpuBackend::HcMixes(const Tensor& streams, const WeightMatrix& fn, std::span<const float> base,
                         std::span<const float> scale, const HcParams& params, const Tensor& pre_out,
                         const Tensor& post_out, const Tensor& comb_out) {
  const int hc = params.copies;
  const int64_t rows = streams.rows();
  const int64_t flat = streams.row_elements();
  const int64_t mix = fn.rows;
  const float hc_eps = params.hc_eps;
  CheckShape(pre_out, rows, hc, "mHC pre");
  CheckShape(post_out, rows, hc, "mHC post");
  CheckShape(comb_out, rows, hc * hc, "mHC comb");
  Tensor mixes = workspace_.Take<float>({rows, mix});
  Linear(fn, streams, mixes, LinearNumerics::kFp32);
  ForEachRow(rows, sizeof(float) * static_cast<size_t>(flat + mix), [&](int64_t r, int) {
    const float* x = streams.row<float>(r);
    float sum_squares = 0.0f;
    for (int64_t i = 0; i < flat; ++i) sum_squares += x[i] * x[i];
    const float inv_rms = 1.0f / std::sqrt(sum_squares / static_cast<float>(flat) + params.norm_eps);
    float* m = mixes.row<float>(r);
    for (int64_t k = 0; k < mix; ++k) m[k] *= inv_rms;
    float* pre = pre_out.row<float>(r);
    float* post = post_out.row<float>(r);
    float* comb = comb_out.row<float>(r);
    for (int i = 0; i < hc; ++i) {
      pre[i] = Sigmoid(m[i] * scale[0] + base[i]) + hc_eps;
      post[i] = 2.0f * Sigmoid(m[hc + i] * scale[1] + base[hc + i]);
    }
    // comb[i][j] = element 2hc + hc*i + j: row softmax, + eps, then Sinkhorn on columns/rows.
    for (int i = 0; i < hc; ++i) {
      float* row = comb + i * hc;
      float row_max = -INFINITY;
      for (int j = 0; j < hc; ++j) {
        row[j] = m[2 * hc + i * hc + j] * scale[2] + base[2 * hc + i * hc + j];
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
    for (int iter = 0; iter < params.sinkhorn_iters - 1; ++iter) {
      for (int i = 0; i < hc; ++i) {
        float row_sum = 0.0f;
        for (int j = 0; j < hc; ++j) row_sum += comb[i * hc + j];
        for (int j = 0; j < hc; ++j) comb[i * hc + j] = comb[i * hc + j] / (row_sum + hc_eps);
      }
      normalize_columns();
    }
  });
}

void CpuBackend::HcCollapse(const Tensor& streams, const Tensor& pre, const Tensor& out) {
  const int64_t rows = streams.rows();
  const int hc = static_cast<int>(pre.row_elements());
  const int64_t dim = out.row_elements();
  CheckShape(streams, rows, hc * dim, "mHC collapse streams");
  CheckShape(out, rows, dim, "mHC collapse output");
  ForEachRow(rows, sizeof(float) * static_cast<size_t>((hc + 1) * dim), [&](int64_t r, int) {
    const float* x = streams.row<float>(r);
    const float* p = pre.row<float>(r);
    float* o = out.row<float>(r);
    for (int64_t d = 0; d < dim; ++d) {
      float acc = p[0] * x[d];
      for (int i = 1; i < hc; ++i) acc += p[i] * x[i * dim + d];
      o[d] = RoundToBF16(acc);
    }
  });
}

void CpuBackend::HcExpand(const Tensor& y, const Tensor& post_in, const Tensor& comb_in, const Tensor& streams) {
  const int64_t rows = streams.rows();
  const int hc = static_cast<int>(post_in.row_elements());
  const int64_t dim = y.row_elements();
  CheckShape(streams, rows, hc * dim, "mHC expand streams");
  // A row reads its hc copies and writes them back.
  const size_t mixed_floats = static_cast<size_t>(hc * dim);
  scratch_.Reserve(0, sizeof(float) * mixed_floats);
  ForEachRow(rows, 2 * sizeof(float) * mixed_floats, [&](int64_t row, int thread) {
    HcExpandRow(cpu_.isa, streams.row<float>(row), y.row<float>(row), post_in.row<float>(row), comb_in.row<float>(row),
                hc, dim, scratch_.Get<float>(thread, 0, mixed_floats));
  });
}

void CpuBackend::EncodeWindowRows(const Tensor& x, const Tensor& codes, const Tensor& exponents,
                                  const Tensor& decoded) {
  const int64_t dim = x.row_elements();
  ForEachRow(x.rows(), 2 * sizeof(float) * static_cast<size_t>(dim), [&](int64_t r, int) {
    EncodeFP8PowerOfTwo(cpu_.isa, {x.row<float>(r), static_cast<size_t>(dim)}, kWindowEntryBlock, codes.row<uint8_t>(r),
                        exponents.row<uint8_t>(r));
    DecodeFP8PowerOfTwo(cpu_.isa, codes.row<uint8_t>(r), exponents.row<uint8_t>(r), dim, kWindowEntryBlock,
                        decoded.row<float>(r));
  });
}

void CpuBackend::StoreWindowEntries(const Tensor& codes, const Tensor& exponents,
                                    std::span<const WindowEntry<uint8_t>> entries) {
  const int64_t code_bytes = codes.row_elements();
  const int64_t exponent_bytes = exponents.row_elements();
  for (size_t k = 0; k < entries.size(); ++k) {
    std::copy_n(codes.row<uint8_t>(k), code_bytes, entries[k].codes);
    std::copy_n(exponents.row<uint8_t>(k), exponent_bytes, entries[k].exponents);
  }
}

void CpuBackend::DecodeWindowEntries(std::span<const WindowEntry<const uint8_t>> entries, const Tensor& out) {
  const int64_t dim = out.row_elements();
  ForEachRow(static_cast<int64_t>(entries.size()), sizeof(float) * static_cast<size_t>(dim), [&](int64_t k, int) {
    if (entries[k].codes == nullptr) return;
    DecodeFP8PowerOfTwo(cpu_.isa, entries[k].codes, entries[k].exponents, dim, kWindowEntryBlock, out.row<float>(k));
  });
}

void CpuBackend::EncodeCompressedEntries(const Tensor& latents, const Tensor& keys,
                                         std::span<const CompressedEntry<uint8_t>> entries) {
  const size_t head_dim = static_cast<size_t>(latents.row_elements());
  const size_t index_dim = static_cast<size_t>(keys.row_elements());
  ForEachRow(static_cast<int64_t>(entries.size()), sizeof(float) * (head_dim + index_dim), [&](int64_t k, int) {
    EncodeFP4PowerOfTwo(cpu_.isa, {keys.row<float>(k), index_dim}, kIndexKeyBlock, entries[k].index_codes,
                        entries[k].index_exponents);
    EncodeFP4E4M3Scale(cpu_.isa, {latents.row<float>(k), head_dim}, kCompressedEntryBlock, entries[k].codes,
                       entries[k].scales);
  });
}

void CpuBackend::DecodeCompressedEntries(std::span<const CompressedEntry<const uint8_t>> entries, const Tensor& out) {
  const int64_t dim = out.row_elements();
  ForEachRow(static_cast<int64_t>(entries.size()), sizeof(float) * static_cast<size_t>(dim), [&](int64_t k, int) {
    DecodeFP4E4M3Scale(cpu_.isa, entries[k].codes, entries[k].scales, dim, kCompressedEntryBlock, out.row<float>(k));
  });
}

void CpuBackend::DecodeIndexKeys(std::span<const CompressedEntry<const uint8_t>> entries, const Tensor& out) {
  const int64_t dim = out.row_elements();
  ForEachRow(static_cast<int64_t>(entries.size()), sizeof(float) * static_cast<size_t>(dim), [&](int64_t k, int) {
    DecodeFP4PowerOfTwo(cpu_.isa, entries[k].index_codes, entries[k].index_exponents, dim, kIndexKeyBlock,
                        out.row<float>(k));
  });
}

void CpuBackend::CompressorPool(const Tensor& kv_in, const Tensor& gate_in, int ratio, const Tensor& pooled) {
  DI_CHECK(ratio > 0 && ratio <= kMaxCompressRatio, "compress ratio ", ratio, " outside [1, ", kMaxCompressRatio, "]");
  const int64_t head_dim = pooled.row_elements();
  const float* kv = kv_in.host<float>();
  const float* gate = gate_in.host<float>();
  ForEachRow(pooled.rows(), sizeof(float) * static_cast<size_t>((2 * ratio + 1) * head_dim), [&](int64_t g, int) {
    float* out = pooled.row<float>(g);
    for (int64_t d = 0; d < head_dim; ++d) {
      float max_score = -INFINITY;
      for (int t = 0; t < ratio; ++t) max_score = std::max(max_score, gate[((g * ratio) + t) * head_dim + d]);
      float weights[kMaxCompressRatio];
      float sum = 0.0f;
      for (int t = 0; t < ratio; ++t) {
        weights[t] = std::exp(gate[((g * ratio) + t) * head_dim + d] - max_score);
        sum += weights[t];
      }
      float acc = 0.0f;
      for (int t = 0; t < ratio; ++t) acc += kv[((g * ratio) + t) * head_dim + d] * (weights[t] / sum);
      out[d] = RoundToBF16(acc);
    }
  });
}

void CpuBackend::IndexerSelect(const Tensor& q, const Tensor& head_weights, const RopeTable& rope,
                               const IndexerParams& p, std::span<const IndexerRow> rows) {
  const int heads = p.heads;
  const int64_t dim = p.dim;
  CheckShape(q, static_cast<int64_t>(rows.size()), heads * dim, "indexer queries");
  CheckShape(head_weights, static_cast<int64_t>(rows.size()), heads, "indexer head weights");
  const int64_t pairs = rope.pairs();
  const int64_t query = heads * dim;
  int64_t widest = 0;
  for (const IndexerRow& row : rows) widest = std::max(widest, row.visible);
  const int64_t blocks = p.candidate_block_size > 0 ? widest / p.candidate_block_size + 1 : 0;
  // One scratch buffer per thread, carved: scores and order (widest), cos and sin, the FP4
  // codes of the query, the candidate blocks' scores and order.
  auto floats = [](int64_t n) { return static_cast<size_t>(n + 15) / 16 * 16; };
  const size_t scratch_floats = 2 * floats(widest) + 2 * floats(pairs) + floats(query / 8 + query / kIndexKeyBlock) +
                                floats(blocks) + floats(2 * blocks);
  // A row reads its visible keys.
  const size_t min_rows = ThreadPool::MinItemsPerPart(static_cast<size_t>(std::max<int64_t>(1, widest * dim * 4)));
  scratch_.Reserve(0, sizeof(float) * scratch_floats);
  cpu_.pool.ParallelForThreads(rows.size(), min_rows, [&](size_t begin, size_t end, int thread) {
    float* buffer = scratch_.Get<float>(thread, 0, scratch_floats);
    float* scores_buffer = buffer;
    int32_t* order = reinterpret_cast<int32_t*>(scores_buffer + floats(widest));
    float* cos_buffer = reinterpret_cast<float*>(order) + floats(widest);
    float* sin_buffer = cos_buffer + floats(pairs);
    uint8_t* packed = reinterpret_cast<uint8_t*>(sin_buffer + floats(pairs));
    uint8_t* exponents = packed + query / 2;
    float* block_scores = reinterpret_cast<float*>(packed) + floats(query / 8 + query / kIndexKeyBlock);
    int32_t* block_order = reinterpret_cast<int32_t*>(block_scores + floats(blocks));
    const std::span<const float> cos(cos_buffer, pairs), sin(sin_buffer, pairs);
    for (size_t r = begin; r < end; ++r) {
      const IndexerRow& row = rows[r];
      float* qrow = q.row<float>(static_cast<int64_t>(r));
      rope.CosSin(row.position, cos_buffer, sin_buffer);
      for (int h = 0; h < heads; ++h) ApplyRope(qrow + h * dim + dim - 2 * pairs, cos, sin, /*inverse=*/false);
      // FP4 QDQ of the query (QdqFP4PowerOfTwo, into this thread's buffers).
      EncodeFP4PowerOfTwo(cpu_.isa, {qrow, static_cast<size_t>(query)}, kIndexKeyBlock, packed, exponents);
      DecodeFP4PowerOfTwo(cpu_.isa, packed, exponents, query, kIndexKeyBlock, qrow);
      const float* weights = head_weights.row<float>(static_cast<int64_t>(r));
      const std::span<float> scores(scores_buffer, row.visible);
      IndexScores(cpu_.isa, qrow, heads, dim, row.keys, row.visible, weights, p.weight_scale, scores.data());
      if (p.candidates == IndexerParams::Candidates::kSelect) {
        SelectCandidateBlocks(scores, row.visible, p.candidate_topk_blocks, p.candidate_block_size, block_scores,
                              block_order, row.mask_out);
      } else if (p.candidates == IndexerParams::Candidates::kFilter) {
        for (int64_t t = 0; t < row.visible; ++t) {
          if (t >= row.mask_size || !row.mask[t]) scores[t] = -INFINITY;
        }
      }
      *row.topk_count =
          TopKFinite(scores, static_cast<size_t>(p.topk), std::span<int32_t>(order, row.visible), row.topk);
    }
  });
}

void CpuBackend::SparseAttention(const Tensor& q, int heads, std::span<const float* const> entries,
                                 std::span<const int64_t> row_begin, std::span<const float> sink, float softmax_scale,
                                 const Tensor& out) {
  const int64_t rows = q.rows();
  const int64_t dim = q.row_elements() / heads;
  DI_CHECK(static_cast<int64_t>(row_begin.size()) == rows + 1, "attention: ", row_begin.size(), " row offsets for ",
           rows, " rows");
  // Split by (query, group of heads), so even a single decode token uses every thread; each
  // head's result does not depend on the split. A group shares every K=V row it reads.
  // A unit reads its row's entries (dim floats each).
  const int groups = (heads + kSparseAttentionHeadGroup - 1) / kSparseAttentionHeadGroup;
  const int64_t entries_per_row = rows > 0 ? static_cast<int64_t>(entries.size()) / rows : 0;
  const size_t min_units =
      ThreadPool::MinItemsPerPart(static_cast<size_t>(std::max<int64_t>(1, entries_per_row * dim * 4)));
  const size_t scratch_floats = static_cast<size_t>(SparseAttentionScratchFloats(dim));
  scratch_.Reserve(0, sizeof(float) * scratch_floats);
  cpu_.pool.ParallelForThreads(rows * groups, min_units, [&](size_t begin, size_t end, int thread) {
    float* scratch = scratch_.Get<float>(thread, 0, scratch_floats);
    for (size_t unit = begin; unit < end; ++unit) {
      const int64_t r = static_cast<int64_t>(unit / groups);
      const int h = static_cast<int>(unit % groups) * kSparseAttentionHeadGroup;
      const int64_t offset = h * dim;
      SparseAttentionWithSink(cpu_.isa, q.row<float>(r) + offset, std::min(kSparseAttentionHeadGroup, heads - h), dim,
                              entries.subspan(row_begin[r], row_begin[r + 1] - row_begin[r]), sink.data() + h,
                              softmax_scale, out.row<float>(r) + offset, scratch);
    }
  });
}

void CpuBackend::Route(const Tensor& scores_in, std::span<const float> bias, const RouterParams& p,
                       const Tensor& experts_out, const Tensor& weights_out) {
  const int64_t rows = scores_in.rows();
  const int experts = static_cast<int>(scores_in.row_elements());
  const int top_k = p.top_k;
  DI_CHECK(top_k > 0 && top_k <= kMaxExpertsPerToken && top_k <= experts, "router: top-k ", top_k, " of ", experts,
           " experts");
  std::span<int> order = workspace_.TakeArray<int>(experts);
  for (int64_t r = 0; r < rows; ++r) {
    float* s = scores_in.row<float>(r);
    for (int e = 0; e < experts; ++e) s[e] = std::sqrt(Softplus(s[e] / p.gate_temp));
    for (int e = 0; e < experts; ++e) order[e] = e;
    // The bias picks experts but does not weight them; ties go to the lower expert id.
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int a, int b) {
      const float sa = s[a] + bias[a];
      const float sb = s[b] + bias[b];
      return sa > sb || (sa == sb && a < b);
    });
    float* weights = weights_out.row<float>(r);
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      weights[j] = s[order[j]];
      sum += weights[j];
    }
    int32_t* chosen = experts_out.row<int32_t>(r);
    for (int j = 0; j < top_k; ++j) {
      if (p.norm_topk_prob && top_k > 1) weights[j] = weights[j] / (sum + 1e-20f);
      weights[j] = weights[j] * p.routed_scaling_factor;
      chosen[j] = order[j];
    }
  }
}

void CpuBackend::SwiGlu(const Tensor& gate_in, const Tensor& up_in, std::span<const float> route_weights, float limit,
                        const Tensor& out_t) {
  const int64_t rows = gate_in.rows();
  const int64_t inter = gate_in.row_elements();
  CheckShape(up_in, rows, inter, "SwiGLU up");
  CheckShape(out_t, rows, inter, "SwiGLU output");
  ForEachRow(rows, 3 * sizeof(float) * static_cast<size_t>(inter), [&](int64_t r, int) {
    const float* gate = gate_in.row<float>(r);
    const float* up = up_in.row<float>(r);
    float* out = out_t.row<float>(r);
    for (int64_t j = 0; j < inter; ++j) {
      float g = gate[j];
      float u = up[j];
      if (limit > 0.0f) {
        u = std::clamp(u, -limit, limit);
        g = std::min(g, limit);
      }
      float h = g / (1.0f + std::exp(-g)) * u;
      if (!route_weights.empty()) h = route_weights[r] * h;
      out[j] = RoundToBF16(h);
    }
  });
}

void CpuBackend::GatherRows(const Tensor& x, std::span<const int64_t> rows, const Tensor& out) {
  const int64_t width = x.row_elements();
  CheckShape(out, static_cast<int64_t>(rows.size()), width, "gathered rows");
  ForEachRow(static_cast<int64_t>(rows.size()), 2 * sizeof(float) * static_cast<size_t>(width),
             [&](int64_t k, int) { std::copy_n(x.row<float>(rows[k]), width, out.row<float>(k)); });
}

void CpuBackend::ScatterAddRows(const Tensor& src, std::span<const int64_t> rows, const Tensor& acc) {
  const int64_t width = acc.row_elements();
  CheckShape(src, static_cast<int64_t>(rows.size()), width, "scattered rows");
  for (size_t k = 0; k < rows.size(); ++k) {
    float* a = acc.row<float>(rows[k]);
    const float* s = src.row<float>(k);
    for (int64_t d = 0; d < width; ++d) a[d] += s[d];
  }
}

void CpuBackend::AddRounded(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = a.elements();
  DI_CHECK(b.elements() == n && out.elements() == n, "add: ", n, ", ", b.elements(), " and ", out.elements(),
           " elements");
  const float* x = a.host<float>();
  const float* y = b.host<float>();
  float* o = out.host<float>();
  for (int64_t i = 0; i < n; ++i) o[i] = RoundToBF16(x[i] + y[i]);
}

void CpuBackend::EngramGather(const uint8_t* codes, const uint8_t* scales, int64_t table_rows, int64_t dim,
                              std::span<const int64_t> ids, const Tensor& out) {
  CheckShape(out, static_cast<int64_t>(ids.size()), dim, "engram rows");
  const int64_t groups = dim / kQuantBlock;
  for (const int64_t id : ids)
    DI_CHECK(id >= 0 && id < table_rows, "engram row ", id, " outside the table of ", table_rows);
  ForEachRow(static_cast<int64_t>(ids.size()), 5 * static_cast<size_t>(dim), [&](int64_t k, int) {
    const int64_t id = ids[k];
    const uint8_t* row_codes = codes + id * dim;
    const uint8_t* row_scales = scales + id * groups;
    float* o = out.row<float>(k);
    for (int64_t j = 0; j < dim; ++j)
      o[j] = RoundToBF16(E4M3ToFloat(row_codes[j]) * UE8M0ToFloat(row_scales[j / kQuantBlock]));
  });
}

void CpuBackend::EngramGate(const Tensor& kv, std::span<const float> gate_weight, float eps, const Tensor& streams) {
  const int64_t rows = streams.rows();
  // kv rows hold one key per copy and the value: one D wider than the streams' rows.
  const int64_t dim = kv.row_elements() - streams.row_elements();
  DI_CHECK(dim > 0 && streams.row_elements() % dim == 0, "engram: keys and value of ", kv.row_elements(),
           " for streams of ", streams.row_elements());
  const int hc = static_cast<int>(streams.row_elements() / dim);
  CheckShape(kv, rows, (hc + 1) * dim, "engram keys and value");
  DI_CHECK(static_cast<int64_t>(gate_weight.size()) == hc * dim, "engram gate weight of ", gate_weight.size());
  const float inv_sqrt_dim = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  ForEachRow(rows, sizeof(float) * static_cast<size_t>((3 * hc + 1) * dim), [&](int64_t r, int) {
    const float* key_row = kv.row<float>(r);
    const float* value = key_row + hc * dim;
    for (int copy = 0; copy < hc; ++copy) {
      float* h = streams.row<float>(r) + copy * dim;
      const float* key = key_row + copy * dim;
      const float* weight = gate_weight.data() + copy * dim;
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
  });
}

}  // namespace deepinfer
