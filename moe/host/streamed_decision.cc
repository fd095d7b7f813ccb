#include "moe/host/streamed_decision.h"

#include <algorithm>
#include <cmath>

#include "engine/core/str_cat.h"

namespace specgen::moe_host {

bool StreamedHostDecision::any() const {
  return std::any_of(takes.begin(), takes.end(), [](bool t) { return t; });
}

namespace {

// "1-4, 9" from the flags.
std::string Ranges(const std::array<bool, kCalibratedTokens>& takes, bool want) {
  std::string out;
  for (int n = 1; n <= kCalibratedTokens; ++n) {
    if (takes[n - 1] != want || (n > 1 && takes[n - 2] == want)) continue;
    int last = n;
    while (last < kCalibratedTokens && takes[last] == want) ++last;
    if (!out.empty()) out += ", ";
    out += last == n ? Cat(n) : Cat(n, "-", last);
  }
  return out;
}

}  // namespace

StreamedHostDecision DecideStreamedHostPath(const HostPath& path, const StreamedDecisionInput& in) {
  StreamedHostDecision d;
  d.mode = path.mode;
  const std::string flag = Cat("--moe-host ", HostModeName(path.mode));
  if (path.mode == HostMode::kOff) {
    d.note = Cat(flag, ": every missed expert crosses the link (the device path with its VRAM cache)");
    return d;
  }
  if (path.mode == HostMode::kOnly) {
    d.takes.fill(true);
    d.note = Cat(flag, ": passes of up to ", kCalibratedTokens, " positions route on the host and compute every "
                 "routed expert on the host CPU (the VRAM expert cache is bypassed)");
    return d;
  }
  const Calibration* cal = path.calibration ? &*path.calibration : nullptr;
  const double link = cal != nullptr && cal->link_gbps ? *cal->link_gbps * 1e9 : in.default_link_bytes_per_second;
  const double rate = link > 0 ? link : 1.0;
  for (const PassMisses& p : in.passes) {
    if (p.n < 1 || p.n > kCalibratedTokens) continue;
    StreamedPassChoice c;
    c.n = p.n;
    const int64_t distinct = std::max<int64_t>(1, std::llround(p.distinct));
    const int per_expert = static_cast<int>(std::clamp<long>(
        std::lround(static_cast<double>(p.n * in.top_k) / static_cast<double>(distinct)), 1L,
        static_cast<long>(kCalibratedTokens)));
    const bool cache_takes = p.n * in.top_k <= in.cache_slots || in.n_experts <= in.cache_slots;
    c.device_seconds = cache_takes ? p.missed * static_cast<double>(in.expert_bytes) / rate
                                   : p.distinct * static_cast<double>(in.expert_bytes) / rate + in.host_wait_seconds;
    c.split = ChooseSplit(HostMode::kAuto, cal, {distinct, per_expert, in.expert_bytes, in.hidden, link});
    c.split_seconds = c.split.seconds() + in.host_wait_seconds;
    // Strictly faster, and the host takes a share (else the split path is only the staged path).
    c.take = cal != nullptr && c.split.host > 0 && c.split_seconds < c.device_seconds;
    d.takes[static_cast<size_t>(p.n - 1)] = c.take;
    d.passes.push_back(c);
  }
  if (cal == nullptr) {
    d.note = Cat(flag, ": no calibration, so every pass takes the device path with its VRAM cache");
  } else if (!d.any()) {
    d.note = Cat(flag, ": every pass takes the device path with its VRAM cache (predicted no slower than routing on "
                 "the host and splitting its experts between the host CPU and the link, which bypasses the cache)");
  } else {
    d.note = Cat(flag, ": passes of n = ", Ranges(d.takes, true), " route on the host and split their experts between "
                 "the host CPU and the link (predicted faster than the device path with its VRAM cache, which they "
                 "bypass)");
    const std::string rest = Ranges(d.takes, false);
    if (!rest.empty()) d.note += Cat("; n = ", rest, " take the device path");
  }
  return d;
}

}  // namespace specgen::moe_host
