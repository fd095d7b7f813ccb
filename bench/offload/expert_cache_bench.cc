// Expert-cache hit rates on Qwen3-30B-A3B's shape (48 MoE layers, 128 experts, top-8): each policy on
// uniform routing (the worst case) and on locality routing calibrated to published traces, for a
// cache holding a share of all experts and passes of n positions (n = 1: plain decoding; n = k + 1:
// verification of k drafts). Counters: hit_rate, misses (expert fetches) per pass, and the mean union
// per layer per pass. Arguments: policy (0 lru, 1 lfu_aging), routing (0 uniform, 1 locality), cache
// share in percent, n.
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "moe/expert_cache_model.h"
#include "moe/locality_routing.h"

namespace specgen::bench {

using moe::CacheCounters;
using moe::CachePolicy;
using moe::CachePolicyName;
using moe::ExpertCacheModel;
using moe::LocalityRouting;
using moe::LocalityRoutingOptions;
using moe::PassUnion;
namespace {

constexpr int kLayers = 48, kExperts = 128, kTopK = 8;
constexpr int kPasses = 400;
// Accesses between halvings of the LFU counts: about 64 passes of every layer.
constexpr int64_t kAgingPeriod = 64 * kLayers;

void BM_ExpertCacheHitRate(benchmark::State& state) {
  const auto policy = static_cast<CachePolicy>(state.range(0));
  const bool locality = state.range(1) == 1;
  const double share = state.range(2) / 100.0;
  const int n = static_cast<int>(state.range(3));
  const int64_t slots = std::max<int64_t>(static_cast<int64_t>(share * kLayers * kExperts),
                                          std::min(kExperts, n * kTopK));
  // One trace for every iteration: per pass, per layer, the union of n tokens' choices.
  std::vector<std::vector<int>> unions;
  LocalityRoutingOptions o{.n_layers = kLayers, .n_experts = kExperts, .top_k = kTopK};
  absl::StatusOr<LocalityRouting> gen = LocalityRouting::Create(o);
  std::mt19937 rng(0);
  std::vector<int> all(kExperts), routing(static_cast<size_t>(n) * kTopK);
  std::iota(all.begin(), all.end(), 0);
  double union_sum = 0;
  for (int p = 0; p < kPasses; ++p) {
    for (int l = 0; l < kLayers; ++l) {
      if (locality) {
        if (!gen->Next(l, n, routing).ok()) state.SkipWithError("locality routing failed");
      } else {
        for (int t = 0; t < n; ++t) {
          std::shuffle(all.begin(), all.end(), rng);
          std::copy(all.begin(), all.begin() + kTopK, routing.begin() + t * kTopK);
        }
      }
      unions.push_back(*PassUnion(routing, kTopK, kExperts));
      union_sum += static_cast<double>(unions.back().size());
    }
  }
  CacheCounters counters;
  for (auto _ : state) {
    ExpertCacheModel cache(policy, kLayers, kExperts, slots, {}, kAgingPeriod);
    for (size_t i = 0; i < unions.size(); ++i) {
      if (!cache.Touch(static_cast<int>(i % kLayers), std::span<const int>(unions[i])).ok()) state.SkipWithError("access failed");
    }
    counters = cache.counters();
  }
  state.counters["hit_rate"] = counters.hit_rate();
  state.counters["misses_per_pass"] = static_cast<double>(counters.misses) / kPasses;
  state.counters["union_per_layer"] = union_sum / (kPasses * kLayers);
  state.counters["slots"] = static_cast<double>(slots);
  state.SetLabel(std::string(CachePolicyName(policy)) + (locality ? "/locality" : "/uniform"));
}
BENCHMARK(BM_ExpertCacheHitRate)
    ->ArgsProduct({{0, 1}, {0, 1}, {25, 40, 60}, {1, 5}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace specgen::bench

BENCHMARK_MAIN();
