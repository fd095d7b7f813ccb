#include "engine/speculative/speculative_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "engine/core/status_macros.h"
#include "engine/sampling/distribution.h"

namespace specgen {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

absl::Status CheckLogitsFinite(std::span<const float> logits, int64_t vocab, int64_t first_position) {
  const size_t v = static_cast<size_t>(vocab);
  for (size_t row = 0; v > 0 && row * v < logits.size(); ++row) {
    for (size_t j = row * v; j < (row + 1) * v && j < logits.size(); ++j) {
      if (!std::isfinite(logits[j])) {
        return absl::DataLossError(Cat("the target's logits at position ", first_position + static_cast<int64_t>(row),
                                       " are not finite (token ", j - row * v, " is ", logits[j],
                                       "): the weights or activations hold NaN or Inf; generation stopped"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateGeneration(std::span<const int32_t> prompt, const CausalLm& target,
                                const SpeculativeOptions& options) {
  const int64_t vocab = target.vocab_size();
  if (prompt.empty()) return InvalidArgument("generate: the prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      return InvalidArgument("generate: prompt token ", i, " is ", prompt[i],
                             ", outside the target's vocabulary [0, ", vocab, ")");
    }
  }
  if (static_cast<int64_t>(prompt.size()) >= target.max_context()) {
    return InvalidArgument("generate: the prompt has ", prompt.size(),
                           " tokens, leaving no room in the target's context of ", target.max_context(),
                           " (-c)");
  }
  return Validate(options.sampling);
}

SpeculativeLoop::SpeculativeLoop(CausalLm* target, SpeculativeOptions options, bool has_draft,
                                 int draft_bound)
    : target_(target), options_(std::move(options)), has_draft_(has_draft) {
  if (!has_draft_) options_.draft_max = 0;
  options_.draft_max = std::clamp(options_.draft_max, 0, draft_bound);
  if (options_.adaptive && options_.draft_max > 0) {
    DraftLengthController::Options controller;
    controller.modelled_step_seconds = options_.modelled_step_seconds;
    controller_ = std::make_unique<DraftLengthController>(options_.draft_max, controller);
  }
}

int SpeculativeLoop::ChooseDraftLength(int64_t context_len, int64_t remaining) {
  int64_t k = controller_ ? controller_->Choose() : options_.draft_max;
  // Drafting past -n or the context end is wasted: the pass emits at most k + 1 tokens and the
  // sequence must fit the target's context.
  k = std::min<int64_t>(k, remaining - 1);
  k = std::min<int64_t>(k, target_->max_context() - context_len - 1);
  if (has_draft_ && k > 0) k = std::min<int64_t>(k, DraftRoom(context_len));
  return static_cast<int>(std::max<int64_t>(k, 0));
}

absl::StatusOr<std::vector<int32_t>> SpeculativeLoop::Generate(std::span<const int32_t> prompt,
                                                               const TokenSink& sink) {
  stats_ = SpeculativeStats();
  const int64_t vocab = target_->vocab_size();
  RETURN_IF_ERROR(ValidateGeneration(prompt, *target_, options_));
  stats_.prompt_tokens = static_cast<int64_t>(prompt.size());
  stats_.draft_max = options_.draft_max;
  stats_.adaptive = controller_ != nullptr;
  RETURN_IF_ERROR(BeginGeneration());
  ASSIGN_OR_RETURN(const OffloadCounters offload_before, OffloadTotals());

  // Both models cache all but the last prompt token; the first step feeds that one with the drafts.
  const auto t_prefill = std::chrono::steady_clock::now();
  const auto head = prompt.first(prompt.size() - 1);
  ASSIGN_OR_RETURN(const size_t common, KeepCachedPrefix(*target_, &target_cached_, head, options_.keep_cache));
  const size_t chunk = target_->prefill_chunk();
  for (size_t begin = common; begin < head.size(); begin += chunk) {
    RETURN_IF_ERROR(FeedTarget(head.subspan(begin, std::min(chunk, head.size() - begin))));
  }
  last_prefill_fed_ = static_cast<int64_t>(head.size() - common);
  stats_.prompt_tokens_prefilled = last_prefill_fed_ + 1;
  if (has_draft_ && options_.draft_max > 0) RETURN_IF_ERROR(PrefillDraft(prompt));
  RETURN_IF_ERROR(FinishPrefill());
  stats_.prefill_seconds = SecondsSince(t_prefill);

  const auto t_start = std::chrono::steady_clock::now();
  const bool unlimited = options_.max_new_tokens < 0;
  const int64_t max_new = unlimited ? std::numeric_limits<int64_t>::max() : options_.max_new_tokens;
  std::vector<int32_t> sequence(prompt.begin(), prompt.end());
  std::vector<int32_t> generated;
  // keep_cache: what the target's cache holds, the sequence but its last token, then per step the
  // accepted drafts (which an end token may cut from `sequence`).
  std::vector<int32_t> held;
  if (options_.keep_cache) held.assign(head.begin(), head.end());
  bool ended = false;
  int previous_k = -1;  // the draft holds the prompt: the first step has nothing to catch up
  while (true) {
    const int64_t len = static_cast<int64_t>(sequence.size());
    const int64_t produced = static_cast<int64_t>(generated.size());
    if (ended) {
      stats_.stop_reason = StopReason::kEndToken;
      break;
    }
    if (produced >= max_new) {
      stats_.stop_reason = StopReason::kMaxTokens;
      break;
    }
    if (len >= target_->max_context()) {
      stats_.stop_reason = StopReason::kContextFull;
      break;
    }
    if (options_.stop && options_.stop()) {
      stats_.stop_reason = StopReason::kStopped;
      break;
    }
    const int k = ChooseDraftLength(len, max_new - produced);
    // Another step follows this one's k + 1 tokens unless -n or the context ends generation first.
    const bool another_may_follow = produced + k + 1 < max_new && len + k + 1 < target_->max_context();
    if (target_->n_past() != len - 1) {
      return absl::InternalError(Cat("target holds ", target_->n_past(), " positions of ", len,
                                     " tokens before a step"));
    }
    ASSIGN_OR_RETURN(StepOutcome step, Step(sequence, k, another_may_follow));
    const AcceptResult& result = step.result;
    const int n_acc = result.n_accepted;
    if (n_acc < 0 || n_acc > k || static_cast<int>(result.tokens.size()) != n_acc + 1) {
      return absl::InternalError(Cat("a step returned ", n_acc, " accepted of ", k, " and ",
                                     result.tokens.size(), " tokens"));
    }
    if (options_.on_logprobs && step.logprobs.size() != result.tokens.size()) {
      return absl::InternalError(Cat("a step returned ", step.logprobs.size(), " log-probability rows for ",
                                     result.tokens.size(), " tokens"));
    }
    for (const int32_t t : result.tokens) {
      // A sampler meets no token only where the logits it drew from were NaN or infinite.
      if (t < 0 || t >= vocab) {
        return absl::DataLossError(Cat("a step at position ", len - 1, " emitted token ", t,
                                       ": the target's logits there are not finite (NaN or Inf), from "
                                       "corrupt weights or overflowing activations; generation stopped"));
      }
    }

    // The target keeps the sequence and the accepted drafts; the target's token is fed next step.
    const int64_t keep = len + n_acc;
    if (target_->n_past() > keep) RETURN_IF_ERROR(target_->Truncate(keep));
    if (options_.keep_cache) {  // O(length) per step: only when the cache is kept for the next call
      held.assign(sequence.begin(), sequence.end());
      held.insert(held.end(), result.tokens.begin(), result.tokens.begin() + n_acc);
    }
    const size_t first_new = generated.size();
    for (const int32_t t : result.tokens) {
      sequence.push_back(t);
      generated.push_back(t);
      if (std::find(options_.end_ids.begin(), options_.end_ids.end(), t) != options_.end_ids.end()) {
        ended = true;
        break;
      }
    }
    RETURN_IF_ERROR(AfterCommit(sequence, k));
    if (stats_.passes == 0) stats_.ttft_seconds = SecondsSince(t_prefill);

    stats_.RecordPass(k, n_acc);
    stats_.draft_seconds += step.draft_seconds;
    stats_.verify_seconds += step.verify_seconds;
    stats_.accept_seconds += step.accept_seconds;
    if (controller_) {
      controller_->ObserveAcceptance(k, n_acc);
      // A step whose draft first caught up on the tokens of steps made without it (k = 0) did more
      // than drafting k, as did one whose pass was captured: neither costs what a step of k does.
      if (step.untimed || (k > 0 && previous_k == 0)) {
        controller_->ObserveUntimed();
      } else {
        controller_->ObserveStepTime(k, step.draft_seconds + step.verify_seconds + step.accept_seconds);
      }
    }
    previous_k = k;
    if (options_.on_pass) options_.on_pass(k, result);
    if (options_.on_logprobs) {
      options_.on_logprobs(std::span<const TokenLogprobs>(step.logprobs).first(generated.size() - first_new));
    }
    if (sink) sink(std::span<const int32_t>(generated).subspan(first_new));
  }
  stats_.tokens = static_cast<int64_t>(generated.size());
  stats_.total_seconds = SecondsSince(t_start);
  ASSIGN_OR_RETURN(stats_.offload, OffloadTotals());
  stats_.offload -= offload_before;
  if (options_.keep_cache) {
    target_cached_.assign(held.begin(), held.begin() + std::min<int64_t>(target_->n_past(), held.size()));
    RETURN_IF_ERROR(EndGeneration(target_cached_));
  }
  return generated;
}

}  // namespace specgen
