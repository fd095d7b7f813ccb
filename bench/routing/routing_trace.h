// The routing regimes of the offload benchmarks (docs/design.md §12), never reachable from generate or
// chat: random-weight synth models route without the temporal locality of trained ones, so a benchmark
// runs the model's own router, uniform routing (the worst case for an expert cache) or the locality
// generator (moe/locality_routing.h). A trace is the expert choice of the last two, made on the host
// from a seed before a run: for each absolute position and MoE layer, k distinct expert ids, as the
// product's RoutingTable (engine/backend/routing_table.h) that Transformer::SetRoutingOverride takes.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/backend/routing_table.h"
#include "engine/model/model_spec.h"

namespace specgen::bench {

enum class RoutingRegime { kOwn, kUniform, kLocality };
// "own", "uniform" or "locality"; anything else is InvalidArgument naming the three.
absl::StatusOr<RoutingRegime> ParseRoutingRegime(std::string_view text);
std::string_view RoutingRegimeName(RoutingRegime regime);

// Each (position, layer) k distinct ids drawn uniformly without replacement.
absl::StatusOr<std::shared_ptr<const RoutingTable>> UniformTrace(const RoutingTableShape& shape, uint64_t seed);
// Each layer a sequence of moe::LocalityRouting (its calibrated defaults) in position order.
absl::StatusOr<std::shared_ptr<const RoutingTable>> LocalityTrace(const RoutingTableShape& shape, uint64_t seed);
// The trace of `regime` for a model (its MoE layers, experts and experts_used); null for kOwn.
absl::StatusOr<std::shared_ptr<const RoutingTable>> TraceForModel(RoutingRegime regime, const ModelSpec& spec,
                                                                 int64_t positions, uint64_t seed);

}  // namespace specgen::bench
