#include "bench/routing/routing_trace.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "engine/core/status_macros.h"
#include "moe/locality_routing.h"
#include "moe/split_mix.h"

namespace specgen::bench {
namespace {

// A uniform draw from [0, bound) without modulo bias (Lemire's method, bound small next to 2^64).
uint64_t Below(uint64_t& state, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t x = moe::SplitMix64(state);
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

absl::StatusOr<std::shared_ptr<const RoutingTable>> UniformTrace(const RoutingTableShape& s, uint64_t seed) {
  RETURN_IF_ERROR(RoutingTable::CheckShape(s));
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
  return RoutingTable::Create(s, std::move(ids));
}

absl::StatusOr<std::shared_ptr<const RoutingTable>> LocalityTrace(const RoutingTableShape& s, uint64_t seed) {
  RETURN_IF_ERROR(RoutingTable::CheckShape(s));
  moe::LocalityRoutingOptions o;
  o.n_layers = s.moe_layers;
  o.n_experts = s.n_experts;
  o.top_k = s.top_k;
  o.seed = seed;
  ASSIGN_OR_RETURN(moe::LocalityRouting gen, moe::LocalityRouting::Create(o));
  std::vector<int32_t> ids(static_cast<size_t>(s.positions) * s.moe_layers * s.top_k);
  std::vector<int> layer_ids(static_cast<size_t>(s.positions) * s.top_k);
  for (int l = 0; l < s.moe_layers; ++l) {
    RETURN_IF_ERROR(gen.Next(l, static_cast<int>(s.positions), layer_ids));
    for (int64_t p = 0; p < s.positions; ++p) {
      std::copy_n(layer_ids.begin() + p * s.top_k, s.top_k,
                  ids.begin() + (p * s.moe_layers + l) * s.top_k);
    }
  }
  return RoutingTable::Create(s, std::move(ids));
}

absl::StatusOr<std::shared_ptr<const RoutingTable>> TraceForModel(RoutingRegime regime, const ModelSpec& spec,
                                                                 int64_t positions, uint64_t seed) {
  if (regime == RoutingRegime::kOwn) return std::shared_ptr<const RoutingTable>();
  RoutingTableShape s;
  s.positions = positions;
  s.moe_layers = static_cast<int>(std::count(spec.layer_is_moe.begin(), spec.layer_is_moe.end(), true));
  s.n_experts = static_cast<int>(spec.n_experts);
  s.top_k = static_cast<int>(spec.n_experts_used);
  if (s.moe_layers == 0) {
    return InvalidArgument("routing regime ", RoutingRegimeName(regime), ": the model has no MoE layer");
  }
  return regime == RoutingRegime::kUniform ? UniformTrace(s, seed) : LocalityTrace(s, seed);
}

}  // namespace specgen::bench
