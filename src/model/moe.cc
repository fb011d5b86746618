// V4.1 MoE FFN (spec 3.6): sqrtsoftplus router with a selection-only bias, normalized and
// scaled top-k weights applied before w2, SwiGLU with clamps, plus one shared expert.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/cpu/linear.h"
#include "model/model_internal.h"

namespace deepinfer {
namespace {

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// One SwiGLU expert over `rows` inputs; `route_weights` (nullptr for the shared expert)
// multiplies the activation before w2. Output rows are bf16 values.
void RunExpert(const ExpertWeights& e, const float* x, int64_t rows, const float* route_weights, float swiglu_limit,
               std::vector<float>& out, const ComputeContext& ctx) {
  const int64_t inter = e.w1.rows;
  std::vector<float> gate(rows * inter), up(rows * inter);
  Linear(e.w1, x, rows, gate.data(), ctx);
  Linear(e.w3, x, rows, up.data(), ctx);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < inter; ++j) {
      float g = gate[r * inter + j];
      float u = up[r * inter + j];
      if (swiglu_limit > 0.0f) {
        u = std::clamp(u, -swiglu_limit, swiglu_limit);
        g = std::min(g, swiglu_limit);
      }
      float h = g / (1.0f + std::exp(-g)) * u;
      if (route_weights != nullptr) h = route_weights[r] * h;
      gate[r * inter + j] = RoundToBF16(h);
    }
  }
  out.resize(rows * e.w2.rows);
  Linear(e.w2, gate.data(), rows, out.data(), ctx);
}

}  // namespace

void Model::Moe(int layer, const std::vector<float>& x, int64_t rows, std::vector<float>& out,
                const ComputeContext& ctx, uint64_t* routed_bytes) const {
  const ModelConfig& c = config_;
  const MoeWeights& w = weights_.layers[layer].ffn;
  const int experts = c.n_routed_experts;
  const int top_k = c.num_experts_per_tok;
  const int64_t dim = c.hidden_size;
  const float swiglu_limit = static_cast<float>(c.swiglu_limit);

  std::vector<float> scores(rows * experts);
  DenseLinear(w.gate, x.data(), rows, scores.data(), /*round_to_bf16=*/false, ctx);
  // Per expert: the rows routed to it and their routing weights.
  std::vector<std::vector<int64_t>> routed_rows(experts);
  std::vector<std::vector<float>> routed_weights(experts);
  std::vector<int> order(experts);
  for (int64_t r = 0; r < rows; ++r) {
    float* s = scores.data() + r * experts;
    for (int e = 0; e < experts; ++e) s[e] = std::sqrt(Softplus(s[e] / static_cast<float>(c.gate_temp)));
    for (int e = 0; e < experts; ++e) order[e] = e;
    // The bias picks experts but does not weight them; ties go to the lower expert id.
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int a, int b) {
      const float sa = s[a] + w.gate_bias[a];
      const float sb = s[b] + w.gate_bias[b];
      return sa > sb || (sa == sb && a < b);
    });
    float weights[kMaxExpertsPerToken];
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      weights[j] = s[order[j]];
      sum += weights[j];
    }
    for (int j = 0; j < top_k; ++j) {
      if (c.norm_topk_prob && top_k > 1) weights[j] = weights[j] / (sum + 1e-20f);
      weights[j] = weights[j] * static_cast<float>(c.routed_scaling_factor);
      routed_rows[order[j]].push_back(r);
      routed_weights[order[j]].push_back(weights[j]);
    }
  }

  // Accumulate in fp32 expert by expert in id order, then the shared expert.
  std::vector<float> y(rows * dim, 0.0f);
  std::vector<float> gathered, expert_out;
  for (int e = 0; e < experts; ++e) {
    const std::vector<int64_t>& members = routed_rows[e];
    if (members.empty()) continue;
    const int64_t count = static_cast<int64_t>(members.size());
    *routed_bytes += w.experts[e].w1.bytes() + w.experts[e].w2.bytes() + w.experts[e].w3.bytes();
    gathered.resize(count * dim);
    for (int64_t k = 0; k < count; ++k) std::copy_n(x.begin() + members[k] * dim, dim, gathered.begin() + k * dim);
    RunExpert(w.experts[e], gathered.data(), count, routed_weights[e].data(), swiglu_limit, expert_out, ctx);
    for (int64_t k = 0; k < count; ++k) {
      float* yr = y.data() + members[k] * dim;
      for (int64_t d = 0; d < dim; ++d) yr[d] += expert_out[k * dim + d];
    }
  }
  RunExpert(w.shared, x.data(), rows, nullptr, swiglu_limit, expert_out, ctx);
  out.resize(rows * dim);
  for (int64_t i = 0; i < rows * dim; ++i) out[i] = RoundToBF16(y[i] + expert_out[i]);
}

}  // namespace deepinfer
