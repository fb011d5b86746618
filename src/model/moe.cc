// V4.1 MoE FFN (spec 3.6): sqrtsoftplus router with a selection-only bias, normalized and
// scaled top-k weights applied before w2, SwiGLU with clamps, plus one shared expert.
#include <algorithm>

#include "core/error.h"
#include "model/model_internal.h"

namespace deepinfer {
namespace {

// One SwiGLU expert over the rows of x; `route_weights` (empty for the shared expert)
// multiplies the activation before w2. Output rows are bf16 values.
void RunExpert(const ExpertWeights& e, const Tensor& x, std::span<const float> route_weights, float swiglu_limit,
               const Tensor& out, Backend& backend) {
  Workspace& workspace = backend.workspace();
  const Workspace::Scope scratch(workspace);
  const Tensor gate = workspace.Take<float>({x.rows(), e.w1.rows});
  const Tensor up = workspace.Take<float>({x.rows(), e.w3.rows});
  backend.Linear(e.w1, x, gate, LinearNumerics::kCheckpoint);
  backend.Linear(e.w3, x, up, LinearNumerics::kCheckpoint);
  backend.SwiGlu(gate, up, route_weights, swiglu_limit, gate);
  backend.Linear(e.w2, gate, out, LinearNumerics::kCheckpoint);
}

}  // namespace

void Model::Moe(const MoeWeights& w, int top_k, const Tensor& x, const Tensor& out, const ComputeContext& ctx,
                uint64_t* routed_bytes) const {
  const ModelConfig& c = config_;
  Backend& backend = ctx.backend;
  Workspace& workspace = backend.workspace();
  const Workspace::Scope scratch(workspace);
  const int experts = static_cast<int>(w.experts.size());
  const int64_t rows = x.rows();
  const int64_t dim = c.hidden_size;
  const float swiglu_limit = static_cast<float>(c.swiglu_limit);

  const Tensor scores = workspace.Take<float>({rows, experts});
  const Tensor chosen = workspace.Take<int32_t>({rows, top_k});
  const Tensor chosen_weights = workspace.Take<float>({rows, top_k});
  backend.Linear(w.gate, x, scores, LinearNumerics::kFp32);
  const RouterParams router{top_k, static_cast<float>(c.gate_temp), c.norm_topk_prob,
                            static_cast<float>(c.routed_scaling_factor)};
  backend.Route(scores, w.gate_bias, router, chosen, chosen_weights);

  // Per expert: the rows routed to it (ascending) and their routing weights, grouped by expert.
  std::span<int64_t> begin = workspace.TakeArray<int64_t>(experts + 1);
  std::fill(begin.begin(), begin.end(), 0);
  const int32_t* picks = chosen.host<int32_t>();
  for (int64_t k = 0; k < rows * top_k; ++k) ++begin[picks[k] + 1];
  for (int e = 0; e < experts; ++e) begin[e + 1] += begin[e];
  std::span<int64_t> member_rows = workspace.TakeArray<int64_t>(rows * top_k);
  std::span<float> member_weights = workspace.TakeArray<float>(rows * top_k);
  std::span<int64_t> filled = workspace.TakeArray<int64_t>(experts);
  std::copy_n(begin.begin(), experts, filled.begin());
  for (int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < top_k; ++j) {
      const int e = picks[r * top_k + j];
      member_rows[filled[e]] = r;
      member_weights[filled[e]] = chosen_weights.row<float>(r)[j];
      ++filled[e];
    }
  }

  // Accumulate in fp32 expert by expert in id order, then the shared expert.
  const Tensor y = workspace.TakeZeroed(ElementType::kF32, {rows, dim});
  for (int e = 0; e < experts; ++e) {
    const int64_t count = begin[e + 1] - begin[e];
    if (count == 0) continue;
    const Workspace::Scope expert_scratch(workspace);
    *routed_bytes += w.experts[e].w1.bytes() + w.experts[e].w2.bytes() + w.experts[e].w3.bytes();
    const std::span<const int64_t> members = member_rows.subspan(begin[e], count);
    const Tensor gathered = workspace.Take<float>({count, dim});
    const Tensor expert_out = workspace.Take<float>({count, dim});
    backend.GatherRows(x, members, gathered);
    RunExpert(w.experts[e], gathered, member_weights.subspan(begin[e], count), swiglu_limit, expert_out, backend);
    backend.ScatterAddRows(expert_out, members, y);
  }
  const Tensor shared_out = workspace.Take<float>({rows, dim});
  RunExpert(w.shared, x, {}, swiglu_limit, shared_out, backend);
  backend.AddRounded(y, shared_out, out);
}

}  // namespace deepinfer
