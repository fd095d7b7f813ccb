// CausalLm: what the generation and speculative loops need from a model, whatever runs it (CPU
// reference, CUDA, a test double): run a batch of consecutive positions with a causal mask, get their
// logits, and roll the KV cache back. Transformer implements it; tests use hand-built distributions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/model_spec.h"

namespace specgen {

class CausalLm {
 public:
  virtual ~CausalLm() = default;
  virtual const ModelSpec& spec() const = 0;
  int64_t vocab_size() const { return spec().vocab_size; }
  // Positions held in the KV cache; the next token goes at this position.
  virtual int64_t n_past() const = 0;
  // Largest number of positions the cache can hold.
  virtual int64_t max_context() const = 0;

  // Runs `tokens` at positions n_past() .. n_past()+n-1 (each attends to the cache and to the earlier
  // tokens of the batch), appends them to the cache and writes their logits, [n, V] row-major fp32,
  // into `logits` (resized). A position's logits do not depend on how many share the batch.
  virtual absl::Status Forward(std::span<const int32_t> tokens, std::vector<float>* logits) = 0;

  // Drops cache positions >= n (rollback after a rejected draft); n <= n_past().
  virtual absl::Status Truncate(int64_t n) = 0;
};

}  // namespace specgen
