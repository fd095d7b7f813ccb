// Which passes of a streamed target take the host-routed split path (engine/model/split_routed_experts.h)
// rather than the device path with its VRAM expert cache, decided once at plan time from the plan's
// expected distinct and missed experts per layer and the calibration (docs/design.md §12.1).
//
// In this first wiring the split path bypasses the cache: every distinct expert of a layer pass is
// either computed on the host or staged over the link, and the host waits once a layer for the
// routing. So --moe-host auto takes it for a pass of n positions only where that is predicted faster:
//   device (cache) path: missed(n) experts over the link (or, where the union may not fit the slots
//     and the pass is routed on the host anyway, distinct(n) staged plus the host wait);
//   split path: ChooseSplit(auto) of distinct(n) experts, plus the host wait.
// --moe-host only takes it for every n; off for none. A pure function: tests/moe runs it on the CPU.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "moe/host/host_path.h"
#include "moe/host/host_split.h"

namespace specgen::moe_host {

// What the host pays each layer to route on the host: the GPU's queue drained for the routing's read
// back, and the host's grouping before the next op is queued. An assumption (not calibrated yet).
inline constexpr double kHostRoutedWaitSeconds = 40e-6;

struct StreamedDecisionInput {
  std::vector<PassMisses> passes;  // per pass size n (1..16): expected distinct and missed experts a layer
  size_t expert_bytes = 0;         // one expert's gate + up + down as streamed
  int64_t hidden = 0;
  int64_t top_k = 0;
  int64_t n_experts = 0;          // experts a layer
  int64_t cache_slots = 0;        // the plan's expert cache
  double default_link_bytes_per_second = 0;  // where the calibration has no link rate
  double host_wait_seconds = kHostRoutedWaitSeconds;
};

struct StreamedPassChoice {
  int n = 0;
  double device_seconds = 0;  // a layer through the device path
  double split_seconds = 0;   // a layer through the split path
  Split split;                // the split path's host / link experts
  bool take = false;
};

struct StreamedHostDecision {
  HostMode mode = HostMode::kOff;
  std::array<bool, kCalibratedTokens> takes{};  // takes[n - 1]
  std::vector<StreamedPassChoice> passes;
  std::string note;  // one line: which path the run's passes take and why

  bool any() const;
};

StreamedHostDecision DecideStreamedHostPath(const HostPath& path, const StreamedDecisionInput& in);

}  // namespace specgen::moe_host
