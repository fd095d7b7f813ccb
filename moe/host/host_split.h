// Where a layer's missed experts are computed (docs/design.md §12.1): the split between the host CPU
// and the link that minimises the layer's time, max(host time, link time). The host computes h missed
// experts in host memory (their tokens' activations cross to it and their outputs back as n x hidden
// floats) while the link fetches the other missed − h to the GPU. A pure function of the calibration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "moe/host/calibration.h"

namespace specgen::moe_host {

// --moe-host: auto (the split below, only where the calibration says it pays), off (every missed expert
// crosses the link: the default, and what auto becomes without a calibration), only (every missed
// expert on the host).
enum class HostMode { kOff, kAuto, kOnly };
absl::StatusOr<HostMode> ParseHostMode(std::string_view s);
std::string_view HostModeName(HostMode m);

struct SplitInput {
  int64_t missed = 0;          // missed experts of the layer in this pass
  int tokens_per_expert = 1;   // tokens routed to a missed expert (1..16; the pass's n·k / union)
  size_t expert_bytes = 0;     // one expert's gate + up + down as streamed
  int64_t hidden = 0;          // activation floats a token carries each way for a host expert
  double link_bytes_per_second = 0;  // the calibration's link_gbps, else the planner's assumption
};

struct Split {
  int64_t host = 0;            // missed experts computed on the host
  int64_t link = 0;            // missed experts fetched over the link
  double host_seconds = 0;     // the host's products and the activations it needs
  double link_seconds = 0;     // the fetches and the host's outputs coming back
  double seconds() const { return host_seconds > link_seconds ? host_seconds : link_seconds; }
  size_t link_bytes = 0;       // bytes over the link: fetched experts and activations both ways
};

// The split for `mode`: kOff (or no calibration) all to the link, kOnly all to the host, kAuto the h
// in [0, missed] with the least max(host, link) time, the smallest such h (the GPU path is the default,
// so the host takes experts only where that is strictly faster).
Split ChooseSplit(HostMode mode, const Calibration* calibration, const SplitInput& in);

// The times of computing h of the missed experts on the host (ChooseSplit's cost model, for tests and
// `specgen plan`).
Split SplitAt(int64_t h, const Calibration* calibration, const SplitInput& in);

}  // namespace specgen::moe_host
