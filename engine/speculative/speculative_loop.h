// SpeculativeLoop: the propose → verify → accept loop (docs/design.md §1) written once. It owns what
// every loop does the same way: validating a request, prefilling the target with KV-cache reuse
// (chat turns), choosing each step's draft length (fixed, or the adaptive controller), committing the
// step's tokens and stopping (end token, -n, full context), and the Stats. A concrete loop supplies
// where the work runs: the step itself (propose k, verify k + 1 positions in one pass, accept, roll
// back) and how the draft is prefilled. SpeculativeDecoder runs on any CausalLm with host logits (the
// CPU reference); DeviceSpeculativeDecoder keeps the step on the GPU. MakeSpeculativeLoop
// (make_loop.h) picks one for the models' backend.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/cached_prefix.h"
#include "engine/model/causal_lm.h"
#include "engine/sampling/acceptance.h"
#include "engine/sampling/sampling_params.h"
#include "engine/sampling/top_logprobs.h"
#include "engine/speculative/draft_length_controller.h"
#include "engine/speculative/stats.h"

namespace specgen {

struct SpeculativeOptions {
  int64_t max_new_tokens = 128;   // -n; negative: until an end token or a full context
  int draft_max = 4;              // --draft-max: k, or the adaptive controller's upper bound
  bool adaptive = false;          // --draft-adaptive
  // With adaptive: a step's cost at each k from a model of the bytes its pass streams
  // (moe/step_cost_model.h) instead of measured times (DraftLengthController::Options).
  std::function<double(int k)> modelled_step_seconds;
  AcceptMode accept = AcceptMode::kRejection;
  SamplingParams sampling;
  std::vector<int32_t> end_ids;   // generation stops after emitting one of these
  // Reuse the target's (and the draft's) KV cache across Generate calls of this loop: the prompt's
  // longest common prefix with what the cache holds is not fed again (chat turns). The models must
  // not be run by anyone else in between (a changed n_past() is detected and falls back to a full
  // prefill).
  bool keep_cache = false;
  // Called after every pass with the drafted length k and the acceptance result (tests, tracing,
  // the chat's colouring): result.tokens holds the n_accepted drafts, then the target's token.
  std::function<void(int k, const AcceptResult&)> on_pass;
  // Asked before every step; true ends generation there (StopReason::kStopped), with the tokens so
  // far committed and, with keep_cache, cached: the chat's Ctrl-C.
  std::function<bool()> stop;
  // --n-probs and the server's logprobs: when set, called before the sink with each committed token's
  // log-probability and the n_probs most probable tokens at its position (TopLogprobs over the
  // target's logits of the verification pass, the row that chose the token: the same figures as the
  // target alone computes there, since every earlier row of the pass holds accepted tokens).
  int n_probs = 0;
  std::function<void(std::span<const TokenLogprobs>)> on_logprobs;
};

// Receives each pass's newly committed tokens, in order, as soon as they are accepted.
using TokenSink = std::function<void(std::span<const int32_t>)>;

// What every loop checks before generating: a non-empty prompt of ids in the target's vocabulary
// that leaves room in its context, and valid sampling parameters.
absl::Status ValidateGeneration(std::span<const int32_t> prompt, const CausalLm& target,
                                const SpeculativeOptions& options);

// Rows of `vocab` logits, the first at position `first_position`: an error naming the first row with
// a NaN or an infinity. A NaN row is no distribution; taken as one, greedy would pick the end token
// and stop as if normally, and sampling would draw no token at all.
absl::Status CheckLogitsFinite(std::span<const float> logits, int64_t vocab, int64_t first_position);

class SpeculativeLoop {
 public:
  virtual ~SpeculativeLoop() = default;
  SpeculativeLoop(const SpeculativeLoop&) = delete;
  SpeculativeLoop& operator=(const SpeculativeLoop&) = delete;

  // Generates after `prompt`; returns the generated tokens (an end token included). With keep_cache
  // the target's cache keeps its common prefix with the previous call's sequence.
  absl::StatusOr<std::vector<int32_t>> Generate(std::span<const int32_t> prompt,
                                                const TokenSink& sink = nullptr);

  const SpeculativeStats& stats() const { return stats_; }
  const SpeculativeOptions& options() const { return options_; }
  bool has_draft() const { return has_draft_; }
  // Prompt tokens the last Generate's prefill fed to the target (with keep_cache, only those past the
  // prefix its KV cache already held).
  int64_t last_prefill_fed() const { return last_prefill_fed_; }

 protected:
  // What a step did: result.tokens = the n_accepted drafts, then the target's token; the time of its
  // three phases; untimed when those times are not what a step of this k costs (a CUDA graph was
  // captured in it), so that the adaptive controller does not learn from them.
  struct StepOutcome {
    AcceptResult result;
    // With on_logprobs: one entry per result.tokens entry, from the pass's row that chose it.
    std::vector<TokenLogprobs> logprobs;
    double draft_seconds = 0, verify_seconds = 0, accept_seconds = 0;
    bool untimed = false;
  };

  // `has_draft`: a draft exists (else draft_max is 0: plain decoding through the same code);
  // `draft_bound`: the largest k the loop's step can take.
  SpeculativeLoop(CausalLm* target, SpeculativeOptions options, bool has_draft, int draft_bound);

  // Called first by every Generate (after validation): state a failed call may have left behind.
  virtual absl::Status BeginGeneration() { return absl::OkStatus(); }
  // Feeds one chunk of prompt tokens to the target at its n_past() (logits unread).
  virtual absl::Status FeedTarget(std::span<const int32_t> chunk) = 0;
  // Brings the draft up to `prompt` (all of it but the last token cached, as the target), after the
  // target's prefill; called only when the loop drafts (a draft and draft_max > 0).
  virtual absl::Status PrefillDraft(std::span<const int32_t> prompt) = 0;
  // Ends the prefill (a device loop waits for it here, so that its time is the prefill's).
  virtual absl::Status FinishPrefill() { return absl::OkStatus(); }
  // The largest k the draft can propose after `context_len` committed tokens (its own context).
  virtual int64_t DraftRoom(int64_t context_len) const = 0;
  // One step at k (0: the target alone) after `sequence` (the target's cache holds all of it but its
  // last token): propose, ONE verification pass over k + 1 positions, accept, and roll the draft
  // back. The loop truncates the target to the accepted prefix afterwards. `another_may_follow`:
  // neither -n nor the context ends generation after this step's k + 1 tokens.
  virtual absl::StatusOr<StepOutcome> Step(const std::vector<int32_t>& sequence, int k,
                                           bool another_may_follow) = 0;
  // After a step's tokens were committed to `sequence` (an end token may have cut them short).
  virtual absl::Status AfterCommit(const std::vector<int32_t>& sequence, int k) { return absl::OkStatus(); }
  // With keep_cache, once Generate has finished: `target_cached` is what the target's cache holds.
  virtual absl::Status EndGeneration(std::span<const int32_t> target_cached) { return absl::OkStatus(); }
  // Running totals of the target's weight streaming (zero where nothing streams), read before and
  // after a generation: their difference is the run's stats().offload. A loop whose target streams
  // may wait for the device here (twice a generation, never inside a step).
  virtual absl::StatusOr<OffloadCounters> OffloadTotals() { return OffloadCounters(); }

  CausalLm* target_;
  SpeculativeOptions options_;

 private:
  int ChooseDraftLength(int64_t context_len, int64_t remaining);

  bool has_draft_;
  std::unique_ptr<DraftLengthController> controller_;
  SpeculativeStats stats_;
  std::vector<int32_t> target_cached_;  // keep_cache: the tokens the target's cache holds
  int64_t last_prefill_fed_ = 0;
};

}  // namespace specgen
