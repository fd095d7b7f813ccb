// An MoE layer's experts applied with the routing read by the host: Route, then per expert in ascending
// id GatherRows, MatMul gate/up, SwiGlu, MatMul down, ScatterAddScaled into a zeroed output. Works on
// every backend and batch size; Backend::RouteAndRunExperts is the same sum without the host.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

namespace specgen {

// Buffers of at least n rows: x_e, y_e [n, hidden] (one expert's tokens in and out), g_e, u_e [n, ffn].
struct HostRoutingScratch {
  Buffer* x_e = nullptr;
  Buffer* y_e = nullptr;
  Buffer* g_e = nullptr;
  Buffer* u_e = nullptr;
};

// out [n, hidden] = per token of x [n, hidden], the sum over its top-k experts (router_logits [n, E],
// routed with `norm`) of weight · down(silu(gate x) · up x). Experts run in ascending id and each
// token's outputs are summed into a zeroed buffer in that order (as transformers does), so a token's
// result depends only on its own routing, never on the other tokens of the batch.
absl::Status RunRoutedExperts(Backend& be, const Buffer& x, const Buffer& router_logits, int64_t k,
                              RouterNorm norm, const ExpertWeights& experts, const HostRoutingScratch& scratch,
                              Buffer* out);

// The general form (ExpertFfnOptions: engine/backend/backend.h): routed by `router` (Backend::RouteWith), each expert's products plus its biases
// where it has them, then `ffn.act`.
absl::Status RunRoutedExperts(Backend& be, const Buffer& x, const Buffer& router_logits, int64_t k,
                              const RouterParams& router, const ExpertFfnOptions& ffn,
                              const ExpertWeights& experts, const HostRoutingScratch& scratch, Buffer* out);

// A routing's (token, weight) pairs grouped by expert: rows[e] the tokens that chose expert e in
// ascending order, scales[e] their weights (the order RunRoutedExperts adds them in). An id outside
// [0, n_experts) is an Internal error naming it.
struct ExpertPairs {
  std::vector<std::vector<int32_t>> rows;
  std::vector<std::vector<float>> scales;
};
absl::StatusOr<ExpertPairs> GroupByExpert(const Routing& routing, int64_t n_experts);

// The same with each routed expert's weights asked for just before its ops are queued (a streamed
// layer stages them into VRAM: StreamedExperts::Stage), once per expert, in ascending id.
using ExpertSource = std::function<absl::StatusOr<ExpertRefs>(int expert)>;
absl::Status RunRoutedExperts(Backend& be, const Buffer& x, const Buffer& router_logits, int64_t k,
                              RouterNorm norm, int64_t n_experts, const ExpertSource& experts,
                              const HostRoutingScratch& scratch, Buffer* out);
absl::Status RunRoutedExperts(Backend& be, const Buffer& x, const Buffer& router_logits, int64_t k,
                              const RouterParams& router, const ExpertFfnOptions& ffn, int64_t n_experts,
                              const ExpertSource& experts, const HostRoutingScratch& scratch, Buffer* out);

}  // namespace specgen
