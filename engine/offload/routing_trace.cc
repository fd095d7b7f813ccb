#include "engine/offload/routing_trace.h"

#include <algorithm>
#include <numeric>

#include "engine/core/status_macros.h"
#include "engine/offload/locality_routing.h"
#include "engine/offload/split_mix.h"

namespace specgen::offload {
namespace {

// A uniform draw from [0, bound) without modulo bias (Lemire's method, bound small next to 2^64).
uint64_t Below(uint64_t& state, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t x = SplitMix64(state);
    const unsigned __int128 m = static_cast<unsigned __int128>(x) * bound;
    if (static_cast<uint64_t>(m) >= threshold) return static_cast<uint64_t>(m >> 64);
  }
}

}  // namespace

absl::StatusOr<RoutingRegime> ParseRoutingRegime(std::string_view text) {
  if (text == "own") return RoutingRegime::kOwn;
  if (text == "uniform") return RoutingRegime::kUniform;
  if (text == "locality") return RoutingRegime::kLocality;
  return InvalidArgument("routing regime \"", text, "\": expected own, uniform or locality");
}

std::string_view RoutingRegimeName(RoutingRegime regime) {
  switch (regime) {
    case RoutingRegime::kOwn: return "own";
    case RoutingRegime::kUniform: return "uniform";
    case RoutingRegime::kLocality: return "locality";
  }
  return "?";
}

absl::Status RoutingTrace::CheckShape(const RoutingTraceShape& s) {
  if (s.positions < 1 || s.moe_layers < 1 || s.n_experts < 1 || s.top_k < 1 || s.top_k > s.n_experts ||
      s.positions > (int64_t{1} << 31) / (int64_t{s.moe_layers} * s.top_k)) {
    return InvalidArgument("routing trace: ", s.positions, " positions of ", s.moe_layers, " MoE layers, top-",
                           s.top_k, " of ", s.n_experts,
                           " experts: need each >= 1, k <= experts and fewer than 2^31 ids in all");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const RoutingTrace>> RoutingTrace::Uniform(const RoutingTraceShape& s,
                                                                          uint64_t seed) {
  RETURN_IF_ERROR(CheckShape(s));
  std::vector<int32_t> ids(static_cast<size_t>(s.positions) * s.moe_layers * s.top_k);
  std::vector<int32_t> deck(static_cast<size_t>(s.n_experts));
  uint64_t state = seed ^ 0x5851f42d4c957f2dull;
  for (size_t row = 0; row < ids.size() / s.top_k; ++row) {
    // A partial Fisher-Yates shuffle: the first k cards of a fresh deck, each a uniform k-subset in
    // uniformly random order.
    std::iota(deck.begin(), deck.end(), 0);
    for (int j = 0; j < s.top_k; ++j) {
      const size_t pick = j + Below(state, static_cast<uint64_t>(s.n_experts - j));
      std::swap(deck[j], deck[pick]);
      ids[row * s.top_k + j] = deck[j];
    }
  }
  return std::shared_ptr<const RoutingTrace>(new RoutingTrace(s, std::move(ids)));
}

absl::StatusOr<std::shared_ptr<const RoutingTrace>> RoutingTrace::Locality(const RoutingTraceShape& s,
                                                                           uint64_t seed) {
  RETURN_IF_ERROR(CheckShape(s));
  LocalityRoutingOptions o;
  o.n_layers = s.moe_layers;
  o.n_experts = s.n_experts;
  o.top_k = s.top_k;
  o.seed = seed;
  ASSIGN_OR_RETURN(LocalityRouting gen, LocalityRouting::Create(o));
  std::vector<int32_t> ids(static_cast<size_t>(s.positions) * s.moe_layers * s.top_k);
  std::vector<int> layer_ids(static_cast<size_t>(s.positions) * s.top_k);
  for (int l = 0; l < s.moe_layers; ++l) {
    RETURN_IF_ERROR(gen.Next(l, static_cast<int>(s.positions), layer_ids));
    for (int64_t p = 0; p < s.positions; ++p) {
      std::copy_n(layer_ids.begin() + p * s.top_k, s.top_k,
                  ids.begin() + (p * s.moe_layers + l) * s.top_k);
    }
  }
  return std::shared_ptr<const RoutingTrace>(new RoutingTrace(s, std::move(ids)));
}

absl::StatusOr<std::shared_ptr<const RoutingTrace>> RoutingTrace::ForModel(RoutingRegime regime,
                                                                           const ModelSpec& spec,
                                                                           int64_t positions, uint64_t seed) {
  if (regime == RoutingRegime::kOwn) return std::shared_ptr<const RoutingTrace>();
  RoutingTraceShape s;
  s.positions = positions;
  s.moe_layers = static_cast<int>(std::count(spec.layer_is_moe.begin(), spec.layer_is_moe.end(), true));
  s.n_experts = static_cast<int>(spec.n_experts);
  s.top_k = static_cast<int>(spec.n_experts_used);
  if (s.moe_layers == 0) {
    return InvalidArgument("routing regime ", RoutingRegimeName(regime), ": the model has no MoE layer");
  }
  return regime == RoutingRegime::kUniform ? Uniform(s, seed) : Locality(s, seed);
}

std::span<const int32_t> RoutingTrace::Row(int64_t position, int layer) const {
  const int64_t p = position % shape_.positions;
  return std::span<const int32_t>(ids_).subspan(
      static_cast<size_t>((p * shape_.moe_layers + layer) * shape_.top_k), static_cast<size_t>(shape_.top_k));
}

absl::Status RoutingTrace::Rewrite(int layer, std::span<const int32_t> positions, std::span<int32_t> ids) const {
  if (layer < 0 || layer >= shape_.moe_layers) {
    return InvalidArgument("routing trace: MoE layer ", layer, " outside [0, ", shape_.moe_layers, ")");
  }
  if (ids.size() != positions.size() * static_cast<size_t>(shape_.top_k)) {
    return InvalidArgument("routing trace: ", ids.size(), " routed ids for ", positions.size(),
                           " positions of top-", shape_.top_k);
  }
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 0) return InvalidArgument("routing trace: negative position ", positions[i], " at row ", i);
    const std::span<const int32_t> row = Row(positions[i], layer);
    std::copy(row.begin(), row.end(), ids.begin() + i * shape_.top_k);
  }
  return absl::OkStatus();
}

}  // namespace specgen::offload
