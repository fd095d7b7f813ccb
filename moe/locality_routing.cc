#include "moe/locality_routing.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "engine/core/status_macros.h"
#include "moe/split_mix.h"

namespace specgen::moe {

absl::StatusOr<LocalityRouting> LocalityRouting::Create(const LocalityRoutingOptions& o) {
  if (o.n_layers <= 0 || o.n_experts <= 0 || o.top_k <= 0 || o.top_k > o.n_experts) {
    return InvalidArgument("locality routing: ", o.n_layers, " layers of ", o.n_experts, " experts, top-",
                           o.top_k, ": need layers >= 1 and 1 <= k <= experts");
  }
  if (o.p_previous < 0 || o.p_window < 0 || o.p_previous + o.p_window > 1) {
    return InvalidArgument("locality routing: p_previous ", o.p_previous, " and p_window ", o.p_window,
                           " must be >= 0 and sum to at most 1");
  }
  if (o.window_tokens < 1 || o.zipf_exponent < 0) {
    return InvalidArgument("locality routing: window ", o.window_tokens, " must be >= 1 and the exponent ",
                           o.zipf_exponent, " >= 0");
  }
  return LocalityRouting(o);
}

LocalityRouting::LocalityRouting(const LocalityRoutingOptions& o) : options_(o) {
  double sum = 0;
  for (int r = 0; r < o.n_experts; ++r) {
    sum += std::pow(r + 1.0, -o.zipf_exponent);
    cumulative_.push_back(sum);
  }
  for (double& c : cumulative_) c /= sum;
  layers_.resize(static_cast<size_t>(o.n_layers));
  for (int l = 0; l < o.n_layers; ++l) {
    Layer& layer = layers_[l];
    layer.state = o.seed * 0x100000001b3ull + static_cast<uint64_t>(l) * 0x9e3779b97f4a7c15ull + 1;
    layer.rank_to_expert.resize(static_cast<size_t>(o.n_experts));
    for (int e = 0; e < o.n_experts; ++e) layer.rank_to_expert[e] = e;
    for (int i = o.n_experts - 1; i > 0; --i) {  // Fisher-Yates: which experts a layer favours
      const int j = static_cast<int>(SplitMix64(layer.state) % static_cast<uint64_t>(i + 1));
      std::swap(layer.rank_to_expert[i], layer.rank_to_expert[j]);
    }
  }
}

double LocalityRouting::Uniform(Layer& l) { return (SplitMix64(l.state) >> 11) * 0x1.0p-53; }

int LocalityRouting::PopularityDraw(Layer& l) {
  const double u = Uniform(l);
  const size_t r = std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin();
  return l.rank_to_expert[std::min(r, cumulative_.size() - 1)];
}

absl::Status LocalityRouting::Next(int layer, int n, std::span<int> out) {
  const int k = options_.top_k;
  if (layer < 0 || layer >= options_.n_layers) {
    return InvalidArgument("locality routing: layer ", layer, " outside [0, ", options_.n_layers, ")");
  }
  if (n < 0 || out.size() != static_cast<size_t>(n) * static_cast<size_t>(k)) {
    return InvalidArgument("locality routing: ", n, " tokens of top-", k, " need ", int64_t{n} * k,
                           " ids, the output holds ", out.size());
  }
  Layer& l = layers_[layer];
  std::vector<char> chosen(static_cast<size_t>(options_.n_experts));
  for (int t = 0; t < n; ++t) {
    std::fill(chosen.begin(), chosen.end(), 0);
    std::vector<int> row;
    // Candidates a recency pick may take: not yet in this row.
    auto pick_from = [&](const std::vector<int>& set) -> int {
      int free = 0;
      for (int e : set) free += !chosen[e];
      if (free == 0) return -1;
      int skip = static_cast<int>(SplitMix64(l.state) % static_cast<uint64_t>(free));
      for (int e : set) {
        if (chosen[e]) continue;
        if (skip-- == 0) return e;
      }
      return -1;
    };
    while (static_cast<int>(row.size()) < k) {
      const double u = Uniform(l);
      int e = -1;
      if (u < options_.p_previous && !l.recent.empty()) {
        e = pick_from(l.recent[0]);
      } else if (u < options_.p_previous + options_.p_window && l.recent.size() > 1) {
        const size_t back = 1 + SplitMix64(l.state) % (l.recent.size() - 1);
        e = pick_from(l.recent[back]);
      }
      if (e < 0) {
        do e = PopularityDraw(l);
        while (chosen[e]);
      }
      chosen[e] = 1;
      row.push_back(e);
    }
    std::copy(row.begin(), row.end(), out.begin() + static_cast<size_t>(t) * k);
    l.recent.push_front(std::move(row));
    if (static_cast<int>(l.recent.size()) > options_.window_tokens) l.recent.pop_back();
  }
  return absl::OkStatus();
}

LocalityStats MeasureLocality(std::span<const int> trace, int k, int window) {
  LocalityStats s;
  if (k <= 0) return s;
  const size_t tokens = trace.size() / static_cast<size_t>(k);
  std::unordered_map<int, size_t> last_seen;  // expert → last token that chose it
  int64_t repeat = 0, repeat_of = 0, within = 0, within_of = 0;
  std::vector<size_t> distances;
  for (size_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < k; ++j) {
      const int e = trace[t * k + j];
      auto it = last_seen.find(e);
      const bool seen = it != last_seen.end();
      const size_t d = seen ? t - it->second : 0;
      if (t >= 1) {
        ++repeat_of;
        repeat += seen && d == 1;
      }
      if (t >= static_cast<size_t>(window)) {
        ++within_of;
        within += seen && d <= static_cast<size_t>(window);
      }
      if (seen) distances.push_back(d);
    }
    for (int j = 0; j < k; ++j) last_seen[trace[t * k + j]] = t;
  }
  s.repeat_next = repeat_of ? double(repeat) / double(repeat_of) : 0.0;
  s.within_window = within_of ? double(within) / double(within_of) : 0.0;
  if (!distances.empty()) {
    std::nth_element(distances.begin(), distances.begin() + distances.size() / 2, distances.end());
    s.median_reuse = static_cast<double>(distances[distances.size() / 2]);
  }
  return s;
}

}  // namespace specgen::moe
