// A run's host expert path as the flags ask for it (--moe-host, --calibration) resolved against the
// calibration file: what the run plan carries (moe/run_plan.h) and `specgen plan` reports.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "moe/host/calibration.h"
#include "moe/host/host_split.h"

namespace specgen::moe_host {

struct HostPath {
  HostMode mode = HostMode::kOff;
  std::optional<Calibration> calibration;
  std::string calibration_path;  // where it was read (or looked for)
  std::string note;              // why the mode is not what was asked, for stderr; empty when it is
};

// mode_flag "" (not given): auto when a calibration is found, else off. "auto" without one: off, with a
// note. "only" needs none. calibration_flag "": DefaultCalibrationPath(). A file that exists but does
// not parse is an error naming the file and the field; a file given by --calibration must exist.
absl::StatusOr<HostPath> ResolveHostPath(std::string_view mode_flag, const std::string& calibration_flag);

// What `specgen plan` says of the bytes of a pass of n positions (per MoE layer): how many missed
// experts the host computes and how many cross the link, from the plan's expected misses.
struct PassMisses {
  int n = 0;
  double distinct = 0;  // expected distinct experts a layer
  double missed = 0;    // of them, expected missed a layer
};
struct HostPathRow {
  int n = 0;
  int tokens_per_expert = 1;  // n·k / distinct, rounded, in 1..16
  Split split;                // for the missed experts rounded to whole ones
  double all_link_seconds = 0;  // the same layer with every missed expert over the link
  size_t host_weight_bytes = 0;  // weights the host reads for its experts (host RAM, never the link)
};
std::vector<HostPathRow> HostPathRows(const HostPath& path, const std::vector<PassMisses>& passes,
                                      size_t expert_bytes, int64_t hidden, int64_t top_k,
                                      double default_link_bytes_per_second);

}  // namespace specgen::moe_host
