// ModelProposer: a draft language model (any CausalLm) as a Proposer. It decodes k tokens
// autoregressively, sampling each from its processed distribution q with the keyed randomness of the
// chosen acceptance mode, and keeps its KV cache equal to the longest prefix of the committed
// sequence it has seen (rolling back drafts that were rejected).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "draft/proposer.h"
#include "engine/model/causal_lm.h"
#include "engine/sampling/acceptance.h"
#include "engine/sampling/sampling_params.h"

namespace specgen {

class ModelProposer : public Proposer {
 public:
  // `draft` is not owned. q rows have `target_vocab` entries: draft logits past it are dropped and
  // missing ones count as -inf (only matters with --allow-vocab-mismatch, for padded vocabularies).
  ModelProposer(CausalLm* draft, int64_t target_vocab, const SamplingParams& params, AcceptMode mode);

  absl::Status Prefill(std::span<const int32_t> context) override;
  int64_t MaxDraft(int64_t context_len) const override;
  absl::Status Propose(std::span<const int32_t> context, int k, Proposal* out) override;
  absl::Status Rollback(std::span<const int32_t> context) override;

  // Benchmarks' acceptance regimes only (bench/acceptance; never generate or chat): each drawn token
  // is replaced by script(position, depth, drawn) (depth 0-based within the step), its q row by the
  // one-hot of the replacement, the distribution it then comes from; the draft decodes on from it.
  using DraftScript = std::function<int32_t(int64_t position, int depth, int32_t drawn)>;
  void SetScript(DraftScript script) { script_ = std::move(script); }

  // The tokens the draft's KV cache holds (for tests).
  const std::vector<int32_t>& cached() const { return cached_; }

 private:
  // Truncates the cache to its longest common prefix with `context`.
  absl::Status TruncateToCommonPrefix(std::span<const int32_t> context);
  // Feeds `tokens` (chunked) and, with `read_last`, leaves the last row's logits, resized to the target
  // vocab, in row_ (the head runs on that row alone; without `read_last` on none).
  absl::Status Feed(std::span<const int32_t> tokens, bool read_last = true);

  CausalLm* draft_;
  int64_t target_vocab_;
  SamplingParams params_;
  AcceptMode mode_;
  std::vector<int32_t> cached_;  // mirrors the draft's KV cache
  std::vector<float> logits_;    // scratch [n, V_draft]
  std::vector<float> row_;       // last row, [target_vocab]
  DraftScript script_;           // null: the draws stand
};

}  // namespace specgen
