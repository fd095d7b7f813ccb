// One target pass a step for every running sequence (docs/design.md §14), built from the unchanged
// CPU speculative loop: each sequence's loop runs on its request's thread against a SequenceTarget,
// a CausalLm over the shared target with a KV cache of its own, and a SequenceDraft over the shared
// draft. A SequenceTarget's Forward does not run a pass: it hands its rows to the PassBatcher and
// waits; once every running sequence has handed in its rows (or stepped out), one
// Transformer::ForwardSequences runs them all, each against its own cache, and every caller gets its
// own logits back. Rows equal those of the sequence alone bit for bit (ForwardSequences), so the
// loop's output is the sequence's own whatever else runs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/causal_lm.h"
#include "engine/model/kv_cache.h"
#include "engine/model/transformer.h"

namespace specgen::serve {

class PassBatcher {
 public:
  explicit PassBatcher(Transformer* target) : target_(target) {}

  // A sequence enters / leaves the set whose rows each pass waits for. A sequence leaves while it is
  // away from the models (sending its text to a client, or done), so that nobody waits for it.
  void Join();
  void Leave();
  // `tokens` at cache->size() .. of `cache` in the next pass; returns when that pass has run.
  absl::Status Forward(KvCache* cache, std::span<const int32_t> tokens, std::vector<float>* logits);

  struct Counters {
    int64_t passes = 0;     // ForwardSequences run
    int64_t sequences = 0;  // summed over them: sequences per pass = sequences / passes
    int64_t rows = 0;
  };
  Counters counters() const;

 private:
  struct Pending {
    KvCache* cache;
    std::span<const int32_t> tokens;
    std::vector<float>* logits;
    absl::Status status;
    bool done = false;
  };
  // Runs the pass of everything pending (mu_ held) when nobody else is still to come.
  void MaybeRunLocked();

  Transformer* target_;
  mutable std::mutex mu_;
  std::condition_variable ran_;
  int active_ = 0;
  std::vector<Pending*> pending_;
  std::vector<float> all_logits_;
  Counters counters_;
};

// The target for one sequence: its own KV cache, passes through the batcher.
class SequenceTarget : public CausalLm {
 public:
  SequenceTarget(Transformer* target, PassBatcher* batcher, KvCache cache)
      : target_(target), batcher_(batcher), cache_(std::move(cache)) {}
  const ModelSpec& spec() const override { return target_->spec(); }
  int64_t n_past() const override { return cache_.size(); }
  int64_t max_context() const override { return cache_.max_positions(); }
  absl::Status Forward(std::span<const int32_t> tokens, std::vector<float>* logits) override {
    return batcher_->Forward(&cache_, tokens, logits);
  }
  size_t prefill_chunk() const override { return target_->prefill_chunk(); }
  absl::Status Truncate(int64_t n) override { return cache_.Truncate(n); }
  int64_t KeepablePrefix(int64_t n) const override { return cache_.KeepablePrefix(n); }

 private:
  Transformer* target_;
  PassBatcher* batcher_;
  KvCache cache_;
};

// The draft for one sequence: the shared draft model, run under a lock with this sequence's KV cache
// swapped in for the call (drafts of different sequences run one after another).
class SequenceDraft : public CausalLm {
 public:
  SequenceDraft(Transformer* draft, std::mutex* mu, KvCache cache) : draft_(draft), mu_(mu), cache_(std::move(cache)) {}
  const ModelSpec& spec() const override { return draft_->spec(); }
  int64_t n_past() const override { return cache_.size(); }
  int64_t max_context() const override { return cache_.max_positions(); }
  absl::Status Forward(std::span<const int32_t> tokens, std::vector<float>* logits) override {
    return WithCache([&] { return draft_->Forward(tokens, logits); });
  }
  absl::Status ForwardLast(std::span<const int32_t> tokens, std::vector<float>* logits) override {
    return WithCache([&] { return draft_->ForwardLast(tokens, logits); });
  }
  absl::Status Feed(std::span<const int32_t> tokens) override {
    return WithCache([&] { return draft_->Feed(tokens); });
  }
  size_t prefill_chunk() const override { return draft_->prefill_chunk(); }
  absl::Status Truncate(int64_t n) override { return cache_.Truncate(n); }
  int64_t KeepablePrefix(int64_t n) const override { return cache_.KeepablePrefix(n); }

 private:
  template <typename F>
  absl::Status WithCache(F&& run) {
    std::lock_guard lock(*mu_);
    std::swap(draft_->kv_cache(), cache_);
    absl::Status s = run();
    std::swap(draft_->kv_cache(), cache_);
    return s;
  }

  Transformer* draft_;
  std::mutex* mu_;
  KvCache cache_;
};

}  // namespace specgen::serve
