// SpeculativeDecoder: the speculative loop (speculative_loop.h) over any CausalLm target and Proposer,
// logits on the host: the CPU reference, and the loop tests drive with test doubles. No draft (or
// draft length 0) is plain decoding through the same code, so greedy and `coupled` outputs can be
// compared token for token with and without speculation.
#pragma once

#include <memory>
#include <vector>

#include "draft/proposer.h"
#include "engine/speculative/speculative_loop.h"

namespace specgen {

class SpeculativeDecoder : public SpeculativeLoop {
 public:
  // Neither model is owned; `proposer` may be null (plain decoding).
  SpeculativeDecoder(CausalLm* target, Proposer* proposer, SpeculativeOptions options);
  // The same, owning its proposer.
  SpeculativeDecoder(CausalLm* target, std::unique_ptr<Proposer> proposer, SpeculativeOptions options);

 private:
  absl::Status FeedTarget(std::span<const int32_t> chunk) override;
  absl::Status PrefillDraft(std::span<const int32_t> prompt) override;
  int64_t DraftRoom(int64_t context_len) const override;
  absl::StatusOr<StepOutcome> Step(const std::vector<int32_t>& sequence, int k,
                                   bool another_may_follow) override;
  absl::Status AfterCommit(const std::vector<int32_t>& sequence, int k) override;

  std::unique_ptr<Proposer> owned_proposer_;
  Proposer* proposer_;
  // Scratch reused across steps.
  Proposal proposal_;
  std::vector<int32_t> batch_;
  std::vector<float> logits_, p_, row_;
};

}  // namespace specgen
