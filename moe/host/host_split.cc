#include "moe/host/host_split.h"

#include <algorithm>

#include "engine/core/str_cat.h"

namespace specgen::moe_host {

absl::StatusOr<HostMode> ParseHostMode(std::string_view s) {
  if (s == "off") return HostMode::kOff;
  if (s == "auto") return HostMode::kAuto;
  if (s == "only") return HostMode::kOnly;
  return absl::InvalidArgumentError(Cat("--moe-host must be auto, off or only, got '", s, "'"));
}

std::string_view HostModeName(HostMode m) {
  switch (m) {
    case HostMode::kOff: return "off";
    case HostMode::kAuto: return "auto";
    case HostMode::kOnly: return "only";
  }
  return "?";
}

Split SplitAt(int64_t h, const Calibration* calibration, const SplitInput& in) {
  Split s;
  s.host = std::clamp<int64_t>(h, 0, in.missed);
  s.link = in.missed - s.host;
  // A host expert's tokens cross to the host and its outputs back: n x hidden floats each way.
  const size_t activations = static_cast<size_t>(in.tokens_per_expert) * static_cast<size_t>(in.hidden) * sizeof(float);
  s.link_bytes = static_cast<size_t>(s.link) * in.expert_bytes + static_cast<size_t>(s.host) * 2 * activations;
  const double rate = in.link_bytes_per_second > 0 ? in.link_bytes_per_second : 1.0;
  // The fetches and the host's outputs share the host-to-device direction; the activations the host
  // needs come the other way before it can start, so they count on the host's side.
  s.link_seconds = static_cast<double>(static_cast<size_t>(s.link) * in.expert_bytes +
                                       static_cast<size_t>(s.host) * activations) / rate;
  if (s.host > 0) {
    const double products = calibration != nullptr
                                ? calibration->HostSeconds(s.host, in.expert_bytes, in.tokens_per_expert)
                                : 1e30;  // no calibration: the host never pays
    s.host_seconds = static_cast<double>(activations * static_cast<size_t>(s.host)) / rate + products;
  }
  return s;
}

Split ChooseSplit(HostMode mode, const Calibration* calibration, const SplitInput& in) {
  if (in.missed <= 0) return {};
  if (mode == HostMode::kOnly) return SplitAt(in.missed, calibration, in);
  Split best = SplitAt(0, calibration, in);
  if (mode == HostMode::kOff || calibration == nullptr) return best;
  // Both times are linear in h, so the least max is at their crossing; the layer's missed experts are
  // at most a few hundred, and trying each h is exact where rounding would not be.
  for (int64_t h = 1; h <= in.missed; ++h) {
    const Split s = SplitAt(h, calibration, in);
    if (s.seconds() < best.seconds()) best = s;
  }
  return best;
}

}  // namespace specgen::moe_host
