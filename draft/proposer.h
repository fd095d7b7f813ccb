// Proposer: what the speculative loop asks a draft for. Given the committed sequence, propose k
// tokens and, for each, the exact distribution q it was drawn from (the acceptance rule needs the
// very q that was sampled, after temperature/top-k/top-p/min-p). Model proposers run a small draft
// transformer; others (n-gram, prompt lookup) can implement the same interface.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace specgen {

struct Proposal {
  std::vector<int32_t> tokens;  // x_1..x_k; x_i goes at absolute position context.size() + i - 1
  std::vector<float> q;         // [k, V] row-major, V = the target's vocabulary
};

class Proposer {
 public:
  virtual ~Proposer() = default;

  // Warms any state for `context` (e.g. the draft's prompt prefill) so that the first Propose costs
  // what every later one does. Optional.
  virtual absl::Status Prefill(std::span<const int32_t> context) { return absl::OkStatus(); }

  // Largest k it can propose after `context_len` committed tokens (its own context limit).
  virtual int64_t MaxDraft(int64_t context_len) const = 0;

  // Proposes k >= 1 tokens continuing `context` (the whole committed sequence, prompt included).
  virtual absl::Status Propose(std::span<const int32_t> context, int k, Proposal* out) = 0;

  // Called after each verification with the committed sequence: drops any state built on tokens
  // that were not accepted (the draft's KV cache rollback).
  virtual absl::Status Rollback(std::span<const int32_t> context) { return absl::OkStatus(); }
};

}  // namespace specgen
