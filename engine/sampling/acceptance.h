// Acceptance of drafted tokens against the target's distributions: the rule that makes speculative
// decoding exact. CPU reference of the GPU acceptance kernel (docs/design.md §11.1-11.2, §6.4).
//   rejection: Leviathan et al. / Chen et al.; accept x_i w.p. min(1, p_i(x_i)/q_i(x_i)), at the first
//              rejection draw from norm(max(0, p_i - q_i)), all accepted → bonus from p_{k+1}.
//   coupled:   Gumbel-max with noise shared by draft and target, keyed by (seed, position); accept iff
//              the draft's token equals the target's, so the output per seed is the draft-free one.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampling/sampling_params.h"

namespace specgen {

enum class AcceptMode { kRejection, kCoupled };
std::string_view AcceptModeName(AcceptMode mode);
absl::StatusOr<AcceptMode> ParseAcceptMode(std::string_view name);  // "rejection" | "coupled"

struct AcceptResult {
  int32_t n_accepted = 0;       // drafts kept, 0..k
  std::vector<int32_t> tokens;  // the kept drafts, then one target token (correction or bonus)
};

// The target's own draw at `position` from its processed distribution p (one row, [V]): plain
// decoding, the bonus token, and the shared-noise token of `coupled` mode all use it.
int32_t SampleTarget(std::span<const float> p, const SamplingParams& params, int64_t position);

// The draft's draw at `position` from its processed distribution q: own noise in `rejection` mode,
// the target's noise in `coupled` mode. Greedy: argmax.
int32_t SampleDraft(AcceptMode mode, std::span<const float> q, const SamplingParams& params,
                    int64_t position);

// Decides one verification pass. drafts: x_1..x_k, x_i placed at position first_position + i - 1.
// q: [k, V] row-major, the exact distributions x_i were drawn from (unused in coupled mode).
// p: [k+1, V] row-major, the target's processed distributions for positions first_position ..
// first_position + k. Random draws are keyed by (params.seed, position, purpose) only.
AcceptResult Accept(AcceptMode mode, std::span<const int32_t> drafts, std::span<const float> q,
                    std::span<const float> p, int64_t vocab, const SamplingParams& params,
                    int64_t first_position);

}  // namespace specgen
