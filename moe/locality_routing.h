// Expert routing with the temporal locality of a trained MoE: the model of expert reuse that `specgen
// plan`'s speed prediction runs through the expert cache (speed_prediction.h), and the offload
// benchmarks' locality regime (bench/routing/routing_trace.h). It never routes a run (generate, chat):
// random-weight synth models route without it, and uniform routing is the worst case. Each token
// of a layer picks k distinct experts; each pick repeats one of the previous token's experts, or one of
// an earlier token's within a short window, or else is drawn from a skewed per-layer popularity. The
// defaults are calibrated to published Qwen3-30B-A3B traces (median reuse distance 2 tokens, 45% of a
// token's experts repeated at the next token, 80% within 8; an LRU cache holding 40% of the experts
// hits 90-95%); locality_routing_test checks those figures on generated traces.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specgen::moe {

struct LocalityRoutingOptions {
  int n_layers = 48;
  int n_experts = 128;
  int top_k = 8;
  double p_previous = 0.30;  // a pick repeats one of the previous token's experts
  double p_window = 0.50;    // … or one of a token 2..window_tokens back (the distance uniform)
  int window_tokens = 20;
  double zipf_exponent = 0.8;  // else: drawn by popularity, rank r with weight (r + 1)^-exponent
  uint64_t seed = 0;
};

class LocalityRouting {
 public:
  // InvalidArgument for sizes that cannot work (k > E, probabilities outside [0, 1], ...).
  static absl::StatusOr<LocalityRouting> Create(const LocalityRoutingOptions& options);

  // The expert ids of the next n tokens of `layer`: out[i·k + j] is token i's j-th choice, each row k
  // distinct ids in [0, E). Layers advance independently; a sequence is a function of the seed and of
  // how many tokens each layer has been asked for.
  absl::Status Next(int layer, int n, std::span<int> out);

  const LocalityRoutingOptions& options() const { return options_; }

 private:
  explicit LocalityRouting(const LocalityRoutingOptions& options);
  struct Layer {
    uint64_t state = 0;                  // splitmix64 stream
    std::vector<int> rank_to_expert;     // popularity order, a per-layer permutation
    std::deque<std::vector<int>> recent;  // the last window_tokens tokens' choices, newest first
  };
  double Uniform(Layer& l);
  int PopularityDraw(Layer& l);

  LocalityRoutingOptions options_;
  std::vector<double> cumulative_;  // popularity CDF over ranks
  std::vector<Layer> layers_;
};

// Locality statistics of one layer's trace (rows of k ids per token), as the calibration defines them.
struct LocalityStats {
  double repeat_next = 0;      // share of a token's experts that the previous token also chose
  double within_window = 0;    // share of a token's experts chosen by one of the previous `window` tokens
  double median_reuse = 0;     // median distance in tokens to the previous choice of the same expert
};
LocalityStats MeasureLocality(std::span<const int> trace, int k, int window = 8);

}  // namespace specgen::moe
