#include "moe/acceptance_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/core/status_macros.h"

namespace specgen::moe {

double AcceptanceProfile::at(int depth) const {
  if (by_depth.empty()) return 0.0;
  return by_depth[std::min<size_t>(static_cast<size_t>(std::max(depth, 0)), by_depth.size() - 1)];
}

AcceptanceProfile TypicalAcceptance() { return {"typical", {0.8, 0.75, 0.7, 0.65, 0.6, 0.55}}; }

AcceptanceProfile FlatAcceptance(double a) {
  char b[32];
  std::snprintf(b, sizeof b, "flat:%g", a);
  return {b, {a}};
}

absl::StatusOr<AcceptanceProfile> ParseAcceptance(std::string_view text, std::string_view what) {
  const std::string usage =
      "must be 'typical', 'flat:X' (or X) for the chance X that a drafted token is accepted at every depth, "
      "or a list by depth such as 0.9,0.8,0.7 (the last for deeper tokens), each in (0, 1]";
  if (text == "typical") return TypicalAcceptance();
  const bool flat = text.rfind("flat:", 0) == 0;
  const std::string_view values = flat ? text.substr(5) : text;
  std::vector<absl::string_view> parts = absl::StrSplit(AsAbsl(values), ',');
  if (flat && parts.size() != 1) {
    return InvalidArgument(what, " '", text, "': flat takes one number; ", usage);
  }
  AcceptanceProfile out;
  for (size_t i = 0; i < parts.size(); ++i) {
    double a = 0;
    if (!absl::SimpleAtod(parts[i], &a) || !std::isfinite(a) || a <= 0 || a > 1) {
      return InvalidArgument(what, " '", text, "'",
                             parts.size() > 1 ? Cat(": value ", i + 1, " ('", parts[i], "') is not in (0, 1]") : "",
                             ": ", usage);
    }
    out.by_depth.push_back(a);
  }
  out.name = std::string(text);
  return out;
}

double TokensPerPass(const AcceptanceProfile& a, int k) {
  double tokens = 1, reach = 1;
  for (int j = 0; j < k; ++j) {
    reach *= a.at(j);
    tokens += reach;
  }
  return tokens;
}

}  // namespace specgen::moe
