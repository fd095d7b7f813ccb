#include "draft/model_proposer.h"

#include <algorithm>
#include <limits>

#include "engine/core/status_macros.h"
#include "engine/model/cached_prefix.h"
#include "engine/sampling/distribution.h"

namespace specgen {

ModelProposer::ModelProposer(CausalLm* draft, int64_t target_vocab, const SamplingParams& params,
                             AcceptMode mode)
    : draft_(draft), target_vocab_(target_vocab), params_(params), mode_(mode) {}

absl::Status ModelProposer::TruncateToCommonPrefix(std::span<const int32_t> context) {
  if (cached_.size() != static_cast<size_t>(draft_->n_past())) {
    cached_.clear();  // someone else used the model: start over
  }
  size_t common = 0;
  while (common < cached_.size() && common < context.size() && cached_[common] == context[common]) {
    ++common;
  }
  // A sliding-window ring may no longer hold what the first new position sees: keep less then.
  common = static_cast<size_t>(draft_->KeepablePrefix(static_cast<int64_t>(common)));
  if (common < static_cast<size_t>(draft_->n_past())) {
    RETURN_IF_ERROR(draft_->Truncate(static_cast<int64_t>(common)));
  }
  cached_.resize(common);
  return absl::OkStatus();
}

absl::Status ModelProposer::Feed(std::span<const int32_t> tokens, bool read_last) {
  const int32_t draft_vocab = static_cast<int32_t>(draft_->vocab_size());
  std::vector<int32_t> mapped;
  const size_t chunk_max = draft_->prefill_chunk();
  for (size_t begin = 0; begin < tokens.size(); begin += chunk_max) {
    const auto chunk = tokens.subspan(begin, std::min(chunk_max, tokens.size() - begin));
    // With --allow-vocab-mismatch the target may emit ids the draft does not have. The draft reads
    // id 0 in their place: its guesses get worse there, but the output stays exact because the
    // target verifies every token. `cached_` keeps the real ids, so prefix matching is unaffected.
    mapped.assign(chunk.begin(), chunk.end());
    for (int32_t& t : mapped) {
      if (t >= draft_vocab) t = 0;
    }
    if (read_last && begin + chunk.size() == tokens.size()) {
      RETURN_IF_ERROR(draft_->ForwardLast(mapped, &logits_));
    } else {
      RETURN_IF_ERROR(draft_->Feed(mapped));
    }
    cached_.insert(cached_.end(), chunk.begin(), chunk.end());
  }
  if (!read_last) return absl::OkStatus();
  const size_t v = static_cast<size_t>(draft_->vocab_size());
  row_.assign(static_cast<size_t>(target_vocab_), -std::numeric_limits<float>::infinity());
  std::copy_n(logits_.begin(), std::min<size_t>(v, row_.size()), row_.begin());
  return absl::OkStatus();
}

absl::Status ModelProposer::Prefill(std::span<const int32_t> context) {
  // Everything but the last token: Propose feeds that one and samples from its logits.
  if (context.size() < 2) return TruncateToCommonPrefix({});
  const auto head = context.first(context.size() - 1);
  RETURN_IF_ERROR(TruncateToCommonPrefix(head));
  // Propose feeds the last token and reads the logits after it: these are not read.
  if (cached_.size() < head.size()) RETURN_IF_ERROR(Feed(head.subspan(cached_.size()), false));
  return absl::OkStatus();
}

int64_t ModelProposer::MaxDraft(int64_t context_len) const {
  // Proposing k feeds the context and x_1..x_{k-1}.
  return std::max<int64_t>(0, draft_->max_context() - context_len + 1);
}

absl::Status ModelProposer::Propose(std::span<const int32_t> context, int k, Proposal* out) {
  if (context.empty()) return InvalidArgument("draft proposer: empty context");
  if (k < 1 || k > MaxDraft(static_cast<int64_t>(context.size()))) {
    return InvalidArgument("draft proposer: cannot propose ", k, " tokens after ", context.size(),
                           " (draft context ", draft_->max_context(), ")");
  }
  RETURN_IF_ERROR(TruncateToCommonPrefix(context.first(context.size() - 1)));
  const size_t v = static_cast<size_t>(target_vocab_);
  out->tokens.resize(k);
  out->q.resize(static_cast<size_t>(k) * v);
  std::vector<float> q;
  // First step feeds whatever of the context the cache lacks (the last token at least).
  RETURN_IF_ERROR(Feed(context.subspan(cached_.size())));
  const int64_t first_position = static_cast<int64_t>(context.size());
  for (int i = 0; i < k; ++i) {
    if (i > 0) RETURN_IF_ERROR(Feed(std::span<const int32_t>(&out->tokens[i - 1], 1)));
    ProcessLogits(row_, params_, &q);
    out->tokens[i] = SampleDraft(mode_, q, params_, first_position + i);
    std::copy(q.begin(), q.end(), out->q.begin() + static_cast<size_t>(i) * v);
  }
  return absl::OkStatus();
}

absl::Status ModelProposer::Rollback(std::span<const int32_t> context) {
  return TruncateToCommonPrefix(context);
}

}  // namespace specgen
