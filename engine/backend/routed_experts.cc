#include "engine/backend/routed_experts.h"

#include <vector>

#include "engine/core/status_macros.h"

namespace specgen {

absl::Status RunRoutedExperts(Backend& be, const Buffer& x, const Buffer& router_logits, int64_t k,
                              RouterNorm norm, const ExpertWeights& experts, const HostRoutingScratch& scratch,
                              Buffer* out) {
  return RunRoutedExperts(
      be, x, router_logits, k, norm, static_cast<int64_t>(experts.gate.size()),
      [&experts](int e) -> absl::StatusOr<ExpertRefs> {
        return ExpertRefs{experts.gate[e], experts.up[e], experts.down[e]};
      },
      scratch, out);
}

absl::Status RunRoutedExperts(Backend& be, const Buffer& x, const Buffer& router_logits, int64_t k,
                              RouterNorm norm, int64_t n_experts_in, const ExpertSource& experts,
                              const HostRoutingScratch& scratch, Buffer* out) {
  Routing routing;
  RETURN_IF_ERROR(be.Route(router_logits, k, norm, &routing));
  const size_t n_experts = static_cast<size_t>(n_experts_in);
  // The (token, weight) pairs grouped by expert, tokens ascending within an expert.
  std::vector<std::vector<int32_t>> rows(n_experts);
  std::vector<std::vector<float>> scales(n_experts);
  for (int64_t i = 0; i < routing.n_tokens; ++i) {
    for (int64_t j = 0; j < routing.k; ++j) {
      const int32_t e = routing.expert[i * routing.k + j];
      if (e < 0 || static_cast<size_t>(e) >= n_experts) {
        return absl::InternalError(Cat("routing chose expert ", e, " of ", n_experts));
      }
      rows[e].push_back(static_cast<int32_t>(i));
      scales[e].push_back(routing.weight[i * routing.k + j]);
    }
  }
  RETURN_IF_ERROR(be.Zero(out));
  for (size_t e = 0; e < n_experts; ++e) {
    if (rows[e].empty()) continue;
    const int64_t m = static_cast<int64_t>(rows[e].size());
    for (Buffer* b : {scratch.x_e, scratch.y_e, scratch.g_e, scratch.u_e}) RETURN_IF_ERROR(b->set_rows(m));
    ASSIGN_OR_RETURN(const ExpertRefs w, experts(static_cast<int>(e)));
    RETURN_IF_ERROR(be.GatherRows(x, rows[e], scratch.x_e));
    RETURN_IF_ERROR(be.MatMul(*scratch.x_e, *w.gate, scratch.g_e));
    RETURN_IF_ERROR(be.MatMul(*scratch.x_e, *w.up, scratch.u_e));
    RETURN_IF_ERROR(be.SwiGlu(*scratch.g_e, *scratch.u_e, scratch.g_e));
    RETURN_IF_ERROR(be.MatMul(*scratch.g_e, *w.down, scratch.y_e));
    RETURN_IF_ERROR(be.ScatterAddScaled(*scratch.y_e, rows[e], scales[e], out));
  }
  return absl::OkStatus();
}

}  // namespace specgen
