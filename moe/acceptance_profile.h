// Acceptance profiles: the chance that a drafted token is accepted at each depth of a draft, given that
// the drafts before it were. `specgen plan --acceptance` predicts speed under one, and specgen_bench's
// acceptance regimes (bench/acceptance) script a draft to follow one (docs/design.md §3.5).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace specgen::moe {

// The probability that the draft token at depth i (0-based) is accepted given the ones before it were;
// the last entry holds for every deeper token.
struct AcceptanceProfile {
  std::string name;  // "typical", "flat:0.6" or the list as given
  std::vector<double> by_depth;
  double at(int depth) const;
};

// The decaying profile of a small draft of the target's family on chat and code.
AcceptanceProfile TypicalAcceptance();
// One chance at every depth.
AcceptanceProfile FlatAcceptance(double a);

// "typical" (0.8, 0.75, 0.7, 0.65, 0.6, then 0.55), "flat:X" or a bare X (X at every depth), or a
// comma-separated list by depth "0.9,0.8,0.7" (the last for every deeper token); each value in (0, 1].
// InvalidArgument otherwise, naming `what` (the flag or config key) and the bad element.
absl::StatusOr<AcceptanceProfile> ParseAcceptance(std::string_view text, std::string_view what = "--acceptance");

// Expected tokens a pass yields at draft length k: 1 + Σ_{j=1..k} Π_{i<j} a_i (the target's own token
// always comes, each draft token only if every earlier one was accepted).
double TokensPerPass(const AcceptanceProfile& a, int k);

}  // namespace specgen::moe
