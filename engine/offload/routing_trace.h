// The routing regimes of the offload benchmarks (docs/design.md §12), never reachable from generate or
// chat: random-weight synth models route without the temporal locality of trained ones, so a benchmark
// runs the model's own router, uniform routing (the worst case for an expert cache) or the locality
// generator (locality_routing.h). A RoutingTrace is the expert choice of the last two, made on the host
// from a seed before a run: for each absolute position and MoE layer, k distinct expert ids. The router
// still runs; the backend keeps its top-k weights in rank order and takes the trace's ids instead
// (Backend::OverrideNextRouting), the row at position p reading the trace at p mod its length, so a
// pass redone at the same positions routes the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/model_spec.h"

namespace specgen::offload {

enum class RoutingRegime { kOwn, kUniform, kLocality };
// "own", "uniform" or "locality"; anything else is InvalidArgument naming the three.
absl::StatusOr<RoutingRegime> ParseRoutingRegime(std::string_view text);
std::string_view RoutingRegimeName(RoutingRegime regime);

struct RoutingTraceShape {
  int64_t positions = 4096;  // the trace's length; later positions wrap around
  int moe_layers = 0;
  int n_experts = 0;
  int top_k = 0;
};

class RoutingTrace {
 public:
  // Each (position, layer) k distinct ids drawn uniformly without replacement.
  static absl::StatusOr<std::shared_ptr<const RoutingTrace>> Uniform(const RoutingTraceShape& shape,
                                                                     uint64_t seed);
  // Each layer a sequence of LocalityRouting (its calibrated defaults) in position order.
  static absl::StatusOr<std::shared_ptr<const RoutingTrace>> Locality(const RoutingTraceShape& shape,
                                                                      uint64_t seed);
  // The trace of `regime` for a model (its MoE layers, experts and experts_used); null for kOwn.
  static absl::StatusOr<std::shared_ptr<const RoutingTrace>> ForModel(RoutingRegime regime, const ModelSpec& spec,
                                                                      int64_t positions, uint64_t seed);

  int64_t positions() const { return shape_.positions; }
  int moe_layers() const { return shape_.moe_layers; }
  int n_experts() const { return shape_.n_experts; }
  int top_k() const { return shape_.top_k; }
  // Every id, [positions, moe_layers, top_k] row-major.
  std::span<const int32_t> ids() const { return ids_; }
  // The k ids of MoE layer `layer` at absolute position `position` (>= 0), read at position mod
  // positions().
  std::span<const int32_t> Row(int64_t position, int layer) const;
  // ids [positions.size(), top_k] (a pass's router output, row i at positions[i]) replaced by the
  // trace's rows of MoE layer `layer`. InvalidArgument when the layer, a position or the sizes do not fit.
  absl::Status Rewrite(int layer, std::span<const int32_t> positions, std::span<int32_t> ids) const;

 private:
  RoutingTrace(const RoutingTraceShape& shape, std::vector<int32_t> ids) : shape_(shape), ids_(std::move(ids)) {}
  static absl::Status CheckShape(const RoutingTraceShape& shape);

  RoutingTraceShape shape_;
  std::vector<int32_t> ids_;
};

}  // namespace specgen::offload
