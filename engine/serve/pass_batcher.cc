#include "engine/serve/pass_batcher.h"

#include <algorithm>

namespace specgen::serve {

void PassBatcher::Join() {
  std::lock_guard lock(mu_);
  ++active_;
}

void PassBatcher::Leave() {
  std::lock_guard lock(mu_);
  --active_;
  MaybeRunLocked();  // the others may have been waiting only for this one
}

PassBatcher::Counters PassBatcher::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

absl::Status PassBatcher::Forward(KvCache* cache, std::span<const int32_t> tokens, std::vector<float>* logits) {
  std::unique_lock lock(mu_);
  Pending p{cache, tokens, logits};
  pending_.push_back(&p);
  MaybeRunLocked();
  ran_.wait(lock, [&] { return p.done; });
  return p.status;
}

void PassBatcher::MaybeRunLocked() {
  if (pending_.empty() || static_cast<int>(pending_.size()) < active_) return;
  // The pass runs under the lock: a sequence that joins meanwhile waits for it, and its rows go in
  // the next one.
  std::vector<Transformer::SequenceRows> rows;
  for (const Pending* p : pending_) rows.push_back({p->tokens, p->cache});
  const absl::Status status = target_->ForwardSequences(rows, &all_logits_);
  const size_t v = static_cast<size_t>(target_->vocab_size());
  size_t row = 0;
  for (Pending* p : pending_) {
    if (status.ok()) {
      const auto begin = all_logits_.begin() + static_cast<std::ptrdiff_t>(row * v);
      p->logits->assign(begin, begin + static_cast<std::ptrdiff_t>(p->tokens.size() * v));
    } else {
      // One sequence's bad rows must not fail the others: each again alone, so that the error is
      // its own (a failed pass appended nothing: ForwardSequences checks before it runs).
      const Transformer::SequenceRows one[] = {{p->tokens, p->cache}};
      p->status = pending_.size() > 1 ? target_->ForwardSequences(one, p->logits) : status;
    }
    row += p->tokens.size();
    p->done = true;
  }
  ++counters_.passes;
  counters_.sequences += static_cast<int64_t>(pending_.size());
  counters_.rows += static_cast<int64_t>(row);
  pending_.clear();
  ran_.notify_all();
}

}  // namespace specgen::serve
