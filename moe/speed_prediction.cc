#include "moe/speed_prediction.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "engine/core/status_macros.h"
#include "moe/expert_cache_model.h"
#include "moe/locality_routing.h"

namespace specgen::moe {
namespace {

// Tokens of locality routing run through the cache before hits are counted (it starts empty; a few
// hundred tokens fill an 8 GiB cache of Qwen3-30B-A3B), then the tokens counted.
constexpr int kWarmTokens = 256;
constexpr int kMeasuredTokens = 256;

struct LocalityRun {
  double hit_rate = 1;
  double distinct = 0;  // per MoE layer and pass
};

// Hit rate and mean union of passes of n positions under locality routing, through an LRU cache of
// `slots` shared by the MoE layers.
absl::StatusOr<LocalityRun> SimulateLocality(int64_t slots, int n_moe, int n_experts, int top_k, int n) {
  LocalityRoutingOptions o;
  o.n_layers = n_moe;
  o.n_experts = n_experts;
  o.top_k = top_k;
  o.seed = 0;
  ASSIGN_OR_RETURN(LocalityRouting routing, LocalityRouting::Create(o));
  ExpertCacheModel cache(CachePolicy::kLru, n_moe, n_experts, slots);
  std::vector<int> ids(static_cast<size_t>(n) * top_k);
  CacheCounters before;
  double distinct = 0;
  int64_t accesses = 0;
  for (int token = 0; token < kWarmTokens + kMeasuredTokens; token += n) {
    const bool counted = token >= kWarmTokens;
    if (counted && accesses == 0) before = cache.counters();
    for (int layer = 0; layer < n_moe; ++layer) {
      RETURN_IF_ERROR(routing.Next(layer, n, ids));
      ASSIGN_OR_RETURN(std::vector<int> u, PassUnion(ids, top_k, n_experts));
      RETURN_IF_ERROR(cache.Touch(layer, std::span<const int>(u)).status());
      if (counted) {
        distinct += static_cast<double>(u.size());
        ++accesses;
      }
    }
  }
  const CacheCounters& after = cache.counters();
  const double hits = static_cast<double>(after.hits - before.hits);
  const double misses = static_cast<double>(after.misses - before.misses);
  LocalityRun r;
  r.hit_rate = hits + misses > 0 ? hits / (hits + misses) : 1.0;
  r.distinct = accesses > 0 ? distinct / static_cast<double>(accesses) : 0.0;
  return r;
}

}  // namespace

namespace {

// One row: a pass of k + 1 positions under `plan` plus k draft tokens.
absl::StatusOr<SpeedRow> PredictRow(const Plan& plan, const ModelBytes& target, int k, double draft_token_seconds,
                                    const AcceptanceProfile& acceptance, const SpeedRates& rates) {
  size_t expert_bytes = 0;  // one expert of every MoE layer
  int n_moe = 0;
  for (const LayerBytes& l : target.layers) {
    if (!l.moe) continue;
    expert_bytes += l.expert;
    ++n_moe;
  }
  const bool streams_experts = plan.expert_cache_slots >= 0 && n_moe > 0;
  const int n = k + 1;
  const PassPrediction& uniform = plan.passes[static_cast<size_t>(n - 1)];
  const double compute =
      plan.passes[0].hbm_bytes / rates.pass_bytes_per_second * (1.0 + rates.extra_position_share * (n - 1));
  const double drafting = k * draft_token_seconds;
  SpeedRow row;
  row.k = k;
  row.tokens_per_pass = TokensPerPass(acceptance, k);
  double locality_streamed = static_cast<double>(plan.streamed_dense);
  if (streams_experts) {
    row.hit_rate_uniform = 1.0 - uniform.missed_experts / uniform.distinct_experts;
    row.distinct_uniform = uniform.distinct_experts;
    ASSIGN_OR_RETURN(const LocalityRun loc,
                     SimulateLocality(plan.expert_cache_slots, n_moe, static_cast<int>(target.spec.n_experts),
                                      static_cast<int>(target.spec.n_experts_used), n));
    row.hit_rate_locality = loc.hit_rate;
    row.distinct_locality = loc.distinct;
    locality_streamed += loc.distinct * (1.0 - loc.hit_rate) * static_cast<double>(expert_bytes);
  }
  row.seconds_uniform = drafting + compute + uniform.streamed_bytes / rates.link_bytes_per_second;
  row.seconds_locality = drafting + compute + locality_streamed / rates.link_bytes_per_second;
  return row;
}

}  // namespace

absl::StatusOr<SpeedPrediction> PredictSpeed(const Plan& plan, const ModelBytes& target, const ModelBytes* draft,
                                             int draft_max, const AcceptanceProfile& acceptance,
                                             const SpeedRates& rates, const Plan* alone_plan) {
  const int k_max = draft == nullptr ? 0 : draft_max;
  if (k_max < 0 || k_max + 1 > static_cast<int>(plan.passes.size())) {
    return InvalidArgument("draft length ", draft_max, ": must be in [0, ", plan.passes.size() - 1, "]");
  }
  SpeedPrediction out;
  out.rates = rates;
  out.acceptance = acceptance;
  if (draft != nullptr) {
    // A draft token is its chain of kernels (a fixed time a layer) or its bytes, whichever is more; the
    // embedding is only gathered (one row), so its bytes are left out unless it is also the head.
    const double layer_bound = static_cast<double>(draft->spec.n_layers) * rates.draft_layer_seconds;
    const double byte_bound =
        static_cast<double>(draft->device_total() - (draft->spec.tied_embeddings ? 0 : draft->embedding)) /
        rates.draft_bytes_per_second;
    out.draft_token_seconds = std::max(layer_bound, byte_bound);
  }
  for (const LayerBytes& l : target.layers) {
    if (l.moe) out.expert_bytes += static_cast<double>(l.expert);
  }
  for (int k = 0; k <= k_max; ++k) {
    // The target alone runs without the draft in VRAM: under its own plan when given.
    const Plan& p = k == 0 && alone_plan != nullptr ? *alone_plan : plan;
    ASSIGN_OR_RETURN(SpeedRow row, PredictRow(p, target, k, out.draft_token_seconds, acceptance, rates));
    out.rows.push_back(row);
  }
  // The best draft length with a draft (k >= 1); 0 without one.
  for (const SpeedRow& r : out.rows) {
    if (r.k == 0) continue;
    if (out.best_k_uniform == 0 ||
        r.tokens_per_second_uniform() > out.rows[out.best_k_uniform].tokens_per_second_uniform()) {
      out.best_k_uniform = r.k;
    }
    if (out.best_k_locality == 0 ||
        r.tokens_per_second_locality() > out.rows[out.best_k_locality].tokens_per_second_locality()) {
      out.best_k_locality = r.k;
    }
  }
  return out;
}

}  // namespace specgen::moe
