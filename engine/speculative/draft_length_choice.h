// The draft length that maximizes expected tokens per second (docs/design.md §3.4), as a pure function
// of per-depth acceptance estimates and a cost per step length: what the adaptive controller decides
// with, whether its costs are measured (DraftLengthController) or modelled from the bytes a pass
// streams (moe/step_cost_model.h).
#pragma once

#include <functional>
#include <span>

namespace specgen {

// E(k) = 1 + Σ_{j=1..k} Π_{i=1..j} α_i: the tokens a step of draft length k yields, the target's own
// token included. alpha[i - 1] is α_i, the chance that draft i is accepted given drafts 1..i−1 were;
// depths past alpha's end take its last value (none: 0).
double ExpectedTokensPerStep(std::span<const double> alpha, int k);

// The k in [0, k_max] of the most E(k) / step_seconds(k); ties go to the shorter draft, so k = 0
// (no draft decode at all) unless some k >= 1 is strictly faster. step_seconds must be > 0.
int BestDraftLength(std::span<const double> alpha, const std::function<double(int k)>& step_seconds, int k_max);

}  // namespace specgen
