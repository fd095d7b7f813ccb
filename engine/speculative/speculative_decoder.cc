#include "engine/speculative/speculative_decoder.h"

#include <algorithm>
#include <chrono>

#include "engine/core/status_macros.h"
#include "engine/sampling/distribution.h"

namespace specgen {
namespace {

constexpr size_t kPrefillChunk = 256;  // bounds the [n, V] logits of a long prompt

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

SpeculativeDecoder::SpeculativeDecoder(CausalLm* target, Proposer* proposer, SpeculativeOptions options)
    : target_(target), proposer_(proposer), options_(std::move(options)) {
  if (proposer_ == nullptr) options_.draft_max = 0;
  options_.draft_max = std::max(0, options_.draft_max);
  if (options_.adaptive && options_.draft_max > 0) {
    controller_ = std::make_unique<DraftLengthController>(options_.draft_max);
  }
}

absl::Status SpeculativeDecoder::Prefill(std::span<const int32_t> prompt) {
  // The target caches all but the last prompt token; the first pass feeds that one with the drafts.
  const auto head = prompt.first(prompt.size() - 1);
  size_t common = 0;
  if (options_.keep_cache && static_cast<int64_t>(target_cached_.size()) == target_->n_past()) {
    while (common < target_cached_.size() && common < head.size() &&
           target_cached_[common] == head[common]) {
      ++common;
    }
  }
  if (target_->n_past() > static_cast<int64_t>(common)) {
    RETURN_IF_ERROR(target_->Truncate(static_cast<int64_t>(common)));
  }
  std::vector<float> logits;
  for (size_t begin = common; begin < head.size(); begin += kPrefillChunk) {
    RETURN_IF_ERROR(
        target_->Forward(head.subspan(begin, std::min(kPrefillChunk, head.size() - begin)), &logits));
  }
  if (options_.keep_cache) target_cached_.assign(head.begin(), head.end());
  if (proposer_ != nullptr) RETURN_IF_ERROR(proposer_->Prefill(prompt));
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

int SpeculativeDecoder::ChooseDraftLength(int64_t context_len, int64_t remaining) {
  int64_t k = controller_ ? controller_->Choose() : options_.draft_max;
  // Drafting past -n or the context end is wasted: the pass emits at most k + 1 tokens and the
  // sequence must fit the target's context.
  k = std::min<int64_t>(k, remaining - 1);
  k = std::min<int64_t>(k, target_->max_context() - context_len - 1);
  if (proposer_ != nullptr && k > 0) k = std::min<int64_t>(k, proposer_->MaxDraft(context_len));
  return static_cast<int>(std::max<int64_t>(k, 0));
}

absl::StatusOr<std::vector<int32_t>> SpeculativeDecoder::Generate(std::span<const int32_t> prompt,
                                                                  const TokenSink& sink) {
  stats_ = SpeculativeStats();
  const int64_t vocab = target_->vocab_size();
  RETURN_IF_ERROR(ValidateGeneration(prompt, *target_, options_));
  stats_.prompt_tokens = static_cast<int64_t>(prompt.size());
  stats_.draft_max = options_.draft_max;
  stats_.adaptive = controller_ != nullptr;

  auto t_prefill = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(Prefill(prompt));
  stats_.prefill_seconds = SecondsSince(t_prefill);

  const auto t_start = std::chrono::steady_clock::now();
  std::vector<int32_t> sequence(prompt.begin(), prompt.end());
  std::vector<int32_t> generated;
  std::vector<int32_t> batch;
  std::vector<float> logits, p, row;
  Proposal proposal;
  const size_t v = static_cast<size_t>(vocab);
  bool ended = false;
  int previous_k = -1;  // the draft holds the prompt: the first pass has nothing to catch up
  while (!ended && static_cast<int64_t>(generated.size()) < options_.max_new_tokens &&
         static_cast<int64_t>(sequence.size()) < target_->max_context()) {
    const int64_t context_len = static_cast<int64_t>(sequence.size());
    const int k = ChooseDraftLength(context_len,
                                    options_.max_new_tokens - static_cast<int64_t>(generated.size()));

    auto t0 = std::chrono::steady_clock::now();
    proposal.tokens.clear();
    proposal.q.clear();
    if (k > 0) {
      RETURN_IF_ERROR(proposer_->Propose(sequence, k, &proposal));
      if (proposal.tokens.size() != static_cast<size_t>(k) ||
          proposal.q.size() != static_cast<size_t>(k) * v) {
        return absl::InternalError(Cat("proposer returned ", proposal.tokens.size(),
                                       " tokens and ", proposal.q.size(), " q values for k = ", k));
      }
    }
    const double t_draft = SecondsSince(t0);

    // ONE target pass over the k + 1 positions: the last committed token, then the drafts.
    t0 = std::chrono::steady_clock::now();
    batch.assign(1, sequence.back());
    batch.insert(batch.end(), proposal.tokens.begin(), proposal.tokens.end());
    RETURN_IF_ERROR(target_->Forward(batch, &logits));
    const double t_verify = SecondsSince(t0);

    t0 = std::chrono::steady_clock::now();
    p.resize((k + 1) * v);
    for (int i = 0; i <= k; ++i) {
      ProcessLogits(std::span<const float>(logits).subspan(i * v, v), options_.sampling, &row);
      std::copy(row.begin(), row.end(), p.begin() + i * v);
    }
    const AcceptResult result = Accept(options_.accept, proposal.tokens, proposal.q, p, vocab,
                                       options_.sampling, context_len);
    const double t_accept = SecondsSince(t0);

    // Roll both caches back to the accepted prefix: the target holds the sequence but its last
    // token (the new correction/bonus token is fed by the next pass).
    const int64_t keep = context_len + result.n_accepted;
    if (target_->n_past() > keep) RETURN_IF_ERROR(target_->Truncate(keep));
    if (options_.keep_cache) {
      // The cache now holds the sequence (its last token fed by this pass) and the accepted drafts.
      target_cached_.assign(sequence.begin(), sequence.end());
      target_cached_.insert(target_cached_.end(), result.tokens.begin(),
                            result.tokens.begin() + result.n_accepted);
    }
    const size_t first_new = generated.size();
    for (int32_t t : result.tokens) {
      sequence.push_back(t);
      generated.push_back(t);
      if (std::find(options_.end_ids.begin(), options_.end_ids.end(), t) != options_.end_ids.end()) {
        ended = true;
        break;
      }
    }
    if (proposer_ != nullptr && k > 0) RETURN_IF_ERROR(proposer_->Rollback(sequence));

    stats_.RecordPass(k, result.n_accepted);
    stats_.draft_seconds += t_draft;
    stats_.verify_seconds += t_verify;
    stats_.accept_seconds += t_accept;
    if (controller_) {
      controller_->ObserveAcceptance(k, result.n_accepted);
      // A pass whose draft first caught up on the tokens of passes made without it (k = 0) did more
      // than drafting k: its times are not what a pass of that k costs.
      if (k > 0 && previous_k == 0) {
        controller_->ObserveUntimed();
      } else {
        controller_->ObserveStepTime(k, t_draft + t_verify + t_accept);
      }
    }
    previous_k = k;
    if (options_.on_pass) options_.on_pass(k, result);
    if (sink) sink(std::span<const int32_t>(generated).subspan(first_new));
  }
  stats_.tokens = static_cast<int64_t>(generated.size());
  stats_.total_seconds = SecondsSince(t_start);
  return generated;
}

}  // namespace specgen
