// CausalLm: what the generation and speculative loops need from a model, whatever runs it (CPU
// reference, CUDA, a test double): run a batch of consecutive positions with a causal mask, get their
// logits, and roll the KV cache back. Transformer implements it; tests use hand-built distributions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/status_macros.h"
#include "engine/model/model_spec.h"

namespace specgen {

// Prompts are fed in chunks of at most this many tokens: it bounds the activations of a long
// prompt's pass (moe/planner.h reserves them as workspace).
inline constexpr size_t kPrefillChunk = 256;
// Rows of logits a model's pass buffer holds from its first pass on: a verification pass's (the draft
// length bound, 16, plus one), so that passes of growing size do not reallocate it (a captured CUDA
// graph holds its address). Prefill chunks ask for one row or none (Transformer, LogitRows).
inline constexpr int64_t kLogitRowsReserved = 17;

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

  // Forward that writes only the last position's logits [V] (a prompt's prefill reads no other row);
  // they equal Forward's last row. The default runs Forward; a model overrides it to skip the head
  // for the other rows.
  virtual absl::Status ForwardLast(std::span<const int32_t> tokens, std::vector<float>* logits) {
    RETURN_IF_ERROR(Forward(tokens, logits));
    const size_t v = static_cast<size_t>(vocab_size());
    logits->erase(logits->begin(), logits->end() - static_cast<std::ptrdiff_t>(v));
    return absl::OkStatus();
  }
  // Forward whose logits are not wanted (a prefill chunk before the last token): the KV cache only.
  virtual absl::Status Feed(std::span<const int32_t> tokens) {
    std::vector<float> unused;
    return Forward(tokens, &unused);
  }
  // The prompt chunk this model is fed in: kPrefillChunk, or what its offload plan chose
  // (TransformerOptions::prefill_chunk).
  virtual size_t prefill_chunk() const { return kPrefillChunk; }

  // Drops cache positions >= n (rollback after a rejected draft); n <= n_past().
  virtual absl::Status Truncate(int64_t n) = 0;
  // The most positions up to n that Truncate can keep: n, or fewer where a sliding-window ring cache
  // has overwritten what position n would see (KvCache::KeepablePrefix). Rollbacks within one pass
  // (rejected drafts) always keep n.
  virtual int64_t KeepablePrefix(int64_t n) const { return n; }
};

}  // namespace specgen
