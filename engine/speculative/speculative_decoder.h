// SpeculativeDecoder: the propose → verify → accept loop of docs/design.md §1 over any CausalLm target and
// Proposer, with Stats. No draft (or draft length 0) is plain decoding through the same code, so
// greedy and `coupled` outputs can be compared token for token with and without speculation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "draft/proposer.h"
#include "engine/model/causal_lm.h"
#include "engine/sampling/acceptance.h"
#include "engine/sampling/sampling_params.h"
#include "engine/speculative/draft_length_controller.h"
#include "engine/speculative/stats.h"

namespace specgen {

// SpeculativeOptions::run_ahead.
enum class RunAhead {
  kOff,
  kAuto,    // guess while hits are at least as frequent as misses whose decode outlasted the step
  kAlways,  // guess in every drafted step that another may follow (tests and measurements)
};

struct SpeculativeOptions {
  int64_t max_new_tokens = 128;   // -n
  int draft_max = 4;              // --draft-max: k, or the adaptive controller's upper bound
  bool adaptive = false;          // --draft-adaptive
  AcceptMode accept = AcceptMode::kRejection;
  SamplingParams sampling;
  std::vector<int32_t> end_ids;   // generation stops after emitting one of these
  // Reuse the target's KV cache across Generate calls of this decoder: the prompt's longest common
  // prefix with what the cache holds is not fed again (chat turns). The target must not be run by
  // anyone else in between (a changed n_past() is detected and falls back to a full prefill).
  bool keep_cache = false;
  // GPU loop only: decode the step's last draft x_k on a second stream while the target verifies
  // (it does not depend on the verification), so that a step which accepts every draft leaves the
  // draft holding x_k and the next step feeds it only the target's bonus token (one decode instead of
  // two); a step that rejects x_k discards it (the draft's cache is truncated, as always). The draft's
  // states and proposals are the same either way (the same graph on the same inputs): off only to
  // measure it.
  bool overlap_last_draft = true;
  // GPU loop, with overlap_last_draft: after x_k the side stream also takes the draft's argmax y (its
  // guess of the target's bonus token) and decodes it, so that a step which accepts every draft and
  // whose bonus token is y starts the next step from the draft's logits after y (no decode before the
  // first draw). Where it is used the draft's state is the one the bonus token's own decode would give
  // (the same graph on the same token and position), so outputs and proposals are unchanged. A guess
  // that misses costs its decode only where that decode outlasts the step's verification (the next
  // step's draft waits for it): kAuto guesses while that is rarer than a hit (RunAhead above).
  RunAhead run_ahead = RunAhead::kAuto;
  // GPU loop only: the target's pass replayed from a CUDA graph per pass size (GraphedTargetPass) instead
  // of launched kernel by kernel; the same bits. A small target's eager pass is paced by the host's
  // launches (~230 at 4-5 us each): off only to measure it.
  bool graph_verify = true;
  // Called after every pass with the drafted length k and the acceptance result (tests, tracing).
  std::function<void(int k, const AcceptResult&)> on_pass;
};

// Receives each pass's newly committed tokens, in order, as soon as they are accepted.
using TokenSink = std::function<void(std::span<const int32_t>)>;

// What both loops (this one and the GPU-resident one) check before generating: a non-empty prompt of
// ids in the target's vocabulary that leaves room in its context, and valid sampling parameters.
absl::Status ValidateGeneration(std::span<const int32_t> prompt, const CausalLm& target,
                                const SpeculativeOptions& options);

class SpeculativeDecoder {
 public:
  // Neither model is owned; `proposer` may be null (plain decoding).
  SpeculativeDecoder(CausalLm* target, Proposer* proposer, SpeculativeOptions options);

  // Generates after `prompt` (target cache reset first); returns the generated tokens.
  absl::StatusOr<std::vector<int32_t>> Generate(std::span<const int32_t> prompt,
                                                const TokenSink& sink = nullptr);

  const SpeculativeStats& stats() const { return stats_; }

 private:
  absl::Status Prefill(std::span<const int32_t> prompt);
  int ChooseDraftLength(int64_t context_len, int64_t remaining);

  CausalLm* target_;
  Proposer* proposer_;
  SpeculativeOptions options_;
  std::unique_ptr<DraftLengthController> controller_;
  SpeculativeStats stats_;
  std::vector<int32_t> target_cached_;  // the tokens the target's KV cache holds (keep_cache)
};

}  // namespace specgen
