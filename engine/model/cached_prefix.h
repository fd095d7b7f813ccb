// KeepCachedPrefix: KV-cache reuse across generations (chat turns), shared by every loop and draft.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/status_macros.h"
#include "engine/model/causal_lm.h"

namespace specgen {

// Truncates `lm`'s KV cache to the longest prefix of `tokens` it already holds, as vouched for by
// `cached` (the tokens it held when the last generation ended: trusted only while lm.n_past() still
// equals cached->size(), and only when `reuse`), and returns that prefix's length. Clears `cached`:
// the caller sets it again once its generation has finished.
inline absl::StatusOr<size_t> KeepCachedPrefix(CausalLm& lm, std::vector<int32_t>* cached,
                                               std::span<const int32_t> tokens, bool reuse) {
  size_t common = 0;
  if (reuse && static_cast<int64_t>(cached->size()) == lm.n_past()) {
    while (common < cached->size() && common < tokens.size() && (*cached)[common] == tokens[common]) {
      ++common;
    }
  }
  cached->clear();
  // A sliding-window ring may no longer hold what the first new position sees: keep less then.
  common = static_cast<size_t>(lm.KeepablePrefix(static_cast<int64_t>(common)));
  if (lm.n_past() > static_cast<int64_t>(common)) RETURN_IF_ERROR(lm.Truncate(static_cast<int64_t>(common)));
  return common;
}

}  // namespace specgen
