#include "engine/backend/routed_experts.h"

#include <vector>

#include "engine/core/status_macros.h"

namespace specgen {

absl::StatusOr<ExpertPairs> GroupByExpert(const Routing& routing, int64_t n_experts) {
  ExpertPairs p;
  p.rows.resize(static_cast<size_t>(n_experts));
  p.scales.resize(static_cast<size_t>(n_experts));
  for (int64_t i = 0; i < routing.n_tokens; ++i) {
    for (int64_t j = 0; j < routing.k; ++j) {
      const int32_t e = routing.expert[i * routing.k + j];
      if (e < 0 || e >= n_experts) return absl::InternalError(Cat("routing chose expert ", e, " of ", n_experts));
      p.rows[e].push_back(static_cast<int32_t>(i));
      p.scales[e].push_back(routing.weight[i * routing.k + j]);
    }
  }
  return p;
}

absl::Status RunRoutedExperts(Backend& be, const Buffer& x, const Buffer& router_logits, int64_t k,
                              RouterNorm norm, const ExpertWeights& experts, const HostRoutingScratch& scratch,
                              Buffer* out) {
  return RunRoutedExperts(be, x, router_logits, k, RouterParams{norm}, ExpertFfnOptions{}, experts, scratch, out);
}

absl::Status RunRoutedExperts(Backend& be, const Buffer& x, const Buffer& router_logits, int64_t k,
                              const RouterParams& router, const ExpertFfnOptions& ffn,
                              const ExpertWeights& experts, const HostRoutingScratch& scratch, Buffer* out) {
  const size_t n = experts.gate.size();
  for (const auto* biases : {&experts.gate_bias, &experts.up_bias, &experts.down_bias}) {
    if (!biases->empty() && biases->size() != n) {
      return absl::InvalidArgumentError(Cat("expert biases for ", biases->size(), " of ", n, " experts"));
    }
  }
  auto bias = [](const std::vector<const Weight*>& v, int e) { return v.empty() ? nullptr : v[e]; };
  return RunRoutedExperts(
      be, x, router_logits, k, router, ffn, static_cast<int64_t>(n),
      [&](int e) -> absl::StatusOr<ExpertRefs> {
        return ExpertRefs{experts.gate[e], experts.up[e], experts.down[e], bias(experts.gate_bias, e),
                          bias(experts.up_bias, e), bias(experts.down_bias, e)};
      },
      scratch, out);
}

absl::Status RunRoutedExperts(Backend& be, const Buffer& x, const Buffer& router_logits, int64_t k,
                              RouterNorm norm, int64_t n_experts_in, const ExpertSource& experts,
                              const HostRoutingScratch& scratch, Buffer* out) {
  return RunRoutedExperts(be, x, router_logits, k, RouterParams{norm}, ExpertFfnOptions{}, n_experts_in, experts,
                          scratch, out);
}

absl::Status RunRoutedExperts(Backend& be, const Buffer& x, const Buffer& router_logits, int64_t k,
                              const RouterParams& router, const ExpertFfnOptions& ffn, int64_t n_experts_in,
                              const ExpertSource& experts, const HostRoutingScratch& scratch, Buffer* out) {
  Routing routing;
  RETURN_IF_ERROR(be.RouteWith(router_logits, k, router, &routing));
  const size_t n_experts = static_cast<size_t>(n_experts_in);
  ASSIGN_OR_RETURN(const ExpertPairs pairs, GroupByExpert(routing, n_experts_in));
  const auto& rows = pairs.rows;
  const auto& scales = pairs.scales;
  RETURN_IF_ERROR(be.Zero(out));
  for (size_t e = 0; e < n_experts; ++e) {
    if (rows[e].empty()) continue;
    const int64_t m = static_cast<int64_t>(rows[e].size());
    for (Buffer* b : {scratch.x_e, scratch.y_e, scratch.g_e, scratch.u_e}) RETURN_IF_ERROR(b->set_rows(m));
    ASSIGN_OR_RETURN(const ExpertRefs w, experts(static_cast<int>(e)));
    RETURN_IF_ERROR(be.GatherRows(x, rows[e], scratch.x_e));
    RETURN_IF_ERROR(be.MatMul(*scratch.x_e, *w.gate, scratch.g_e));
    RETURN_IF_ERROR(be.MatMul(*scratch.x_e, *w.up, scratch.u_e));
    if (w.gate_bias != nullptr) RETURN_IF_ERROR(be.AddBias(*w.gate_bias, scratch.g_e));
    if (w.up_bias != nullptr) RETURN_IF_ERROR(be.AddBias(*w.up_bias, scratch.u_e));
    if (ffn.act == FfnActivation::kSwiGluClamped) {
      RETURN_IF_ERROR(be.SwiGluClamped(*scratch.g_e, *scratch.u_e, ffn.alpha, ffn.limit, scratch.g_e));
    } else {
      RETURN_IF_ERROR(be.SwiGlu(*scratch.g_e, *scratch.u_e, scratch.g_e));
    }
    RETURN_IF_ERROR(be.MatMul(*scratch.g_e, *w.down, scratch.y_e));
    if (w.down_bias != nullptr) RETURN_IF_ERROR(be.AddBias(*w.down_bias, scratch.y_e));
    RETURN_IF_ERROR(be.ScatterAddScaled(*scratch.y_e, rows[e], scales[e], out));
  }
  return absl::OkStatus();
}

}  // namespace specgen
