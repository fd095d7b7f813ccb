#include "moe/host/host_path.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "engine/core/str_cat.h"
#include "engine/core/status_macros.h"

namespace specgen::moe_host {

absl::StatusOr<HostPath> ResolveHostPath(std::string_view mode_flag, const std::string& calibration_flag) {
  HostPath p;
  std::optional<HostMode> asked;
  if (!mode_flag.empty()) {
    ASSIGN_OR_RETURN(asked, ParseHostMode(mode_flag));
  }
  p.calibration_path = calibration_flag.empty() ? DefaultCalibrationPath() : calibration_flag;
  std::error_code ec;
  if (!calibration_flag.empty() || std::filesystem::exists(p.calibration_path, ec)) {
    ASSIGN_OR_RETURN(p.calibration, ReadCalibration(p.calibration_path));
  }
  if (!asked) {
    p.mode = p.calibration ? HostMode::kAuto : HostMode::kOff;
  } else if (*asked == HostMode::kAuto && !p.calibration) {
    p.mode = HostMode::kOff;
    p.note = Cat("--moe-host auto: no calibration at ", p.calibration_path,
                 " (run `specgen plan --calibrate`), so every missed expert crosses the link");
  } else {
    p.mode = *asked;
  }
  return p;
}

std::vector<HostPathRow> HostPathRows(const HostPath& path, const std::vector<PassMisses>& passes,
                                      size_t expert_bytes, int64_t hidden, int64_t top_k,
                                      double default_link_bytes_per_second) {
  const Calibration* cal = path.calibration ? &*path.calibration : nullptr;
  const double link = cal != nullptr && cal->link_gbps ? *cal->link_gbps * 1e9 : default_link_bytes_per_second;
  std::vector<HostPathRow> rows;
  for (const PassMisses& p : passes) {
    HostPathRow r;
    r.n = p.n;
    const double per_expert = p.distinct > 0 ? static_cast<double>(p.n * top_k) / p.distinct : 1.0;
    r.tokens_per_expert = static_cast<int>(std::clamp(std::lround(per_expert), 1L, static_cast<long>(kCalibratedTokens)));
    const SplitInput in{std::llround(p.missed), r.tokens_per_expert, expert_bytes, hidden, link};
    r.split = ChooseSplit(path.mode, cal, in);
    r.all_link_seconds = SplitAt(0, cal, in).seconds();
    r.host_weight_bytes = static_cast<size_t>(r.split.host) * expert_bytes;
    rows.push_back(r);
  }
  return rows;
}

}  // namespace specgen::moe_host
