#include "engine/speculative/speculative_decoder.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "engine/core/status_macros.h"
#include "engine/sampling/distribution.h"

namespace specgen {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

SpeculativeDecoder::SpeculativeDecoder(CausalLm* target, Proposer* proposer, SpeculativeOptions options)
    : SpeculativeLoop(target, std::move(options), proposer != nullptr, std::numeric_limits<int>::max()),
      proposer_(proposer) {}

SpeculativeDecoder::SpeculativeDecoder(CausalLm* target, std::unique_ptr<Proposer> proposer,
                                       SpeculativeOptions options)
    : SpeculativeDecoder(target, proposer.get(), std::move(options)) {
  owned_proposer_ = std::move(proposer);
}

absl::Status SpeculativeDecoder::FeedTarget(std::span<const int32_t> chunk) {
  return target_->Feed(chunk);
}

absl::Status SpeculativeDecoder::PrefillDraft(std::span<const int32_t> prompt) {
  return proposer_->Prefill(prompt);
}

int64_t SpeculativeDecoder::DraftRoom(int64_t context_len) const { return proposer_->MaxDraft(context_len); }

absl::StatusOr<SpeculativeLoop::StepOutcome> SpeculativeDecoder::Step(const std::vector<int32_t>& sequence,
                                                                      int k, bool another_may_follow) {
  const int64_t vocab = target_->vocab_size();
  const size_t v = static_cast<size_t>(vocab);
  const int64_t context_len = static_cast<int64_t>(sequence.size());
  StepOutcome out;

  auto t0 = std::chrono::steady_clock::now();
  proposal_.tokens.clear();
  proposal_.q.clear();
  if (k > 0) {
    RETURN_IF_ERROR(proposer_->Propose(sequence, k, &proposal_));
    if (proposal_.tokens.size() != static_cast<size_t>(k) || proposal_.q.size() != static_cast<size_t>(k) * v) {
      return absl::InternalError(Cat("proposer returned ", proposal_.tokens.size(), " tokens and ",
                                     proposal_.q.size(), " q values for k = ", k));
    }
  }
  out.draft_seconds = SecondsSince(t0);

  // ONE target pass over the k + 1 positions: the last committed token, then the drafts.
  t0 = std::chrono::steady_clock::now();
  batch_.assign(1, sequence.back());
  batch_.insert(batch_.end(), proposal_.tokens.begin(), proposal_.tokens.end());
  RETURN_IF_ERROR(target_->Forward(batch_, &logits_));
  out.verify_seconds = SecondsSince(t0);
  RETURN_IF_ERROR(CheckLogitsFinite(logits_, vocab, context_len - 1));

  t0 = std::chrono::steady_clock::now();
  p_.resize((k + 1) * v);
  for (int i = 0; i <= k; ++i) {
    ProcessLogits(std::span<const float>(logits_).subspan(i * v, v), options_.sampling, &row_);
    std::copy(row_.begin(), row_.end(), p_.begin() + i * v);
  }
  out.result = Accept(options_.accept, proposal_.tokens, proposal_.q, p_, vocab, options_.sampling, context_len);
  out.accept_seconds = SecondsSince(t0);
  if (options_.on_logprobs) {
    // Row i chose result.tokens[i]: rows before it hold the accepted drafts, so it is the target's
    // own distribution at that position.
    for (size_t i = 0; i < out.result.tokens.size(); ++i) {
      out.logprobs.push_back(TopLogprobs(std::span<const float>(logits_).subspan(i * v, v), out.result.tokens[i],
                                         options_.n_probs));
    }
  }
  return out;
}

absl::Status SpeculativeDecoder::AfterCommit(const std::vector<int32_t>& sequence, int k) {
  // The draft drops what it built on tokens that were not accepted.
  if (k > 0) return proposer_->Rollback(sequence);
  return absl::OkStatus();
}

}  // namespace specgen
