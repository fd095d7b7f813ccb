// StreamedHostPath: the Transformer's HostExpertPath (engine/model/host_experts.h) on this machine's
// CPU (docs/design.md §12.1). The experts' bytes are read in place from the streamed experts' pinned
// host copy (StreamedExperts::HostView); the products run on a HostPool through
// HostExpertRunner::RunMany, driven by one thread of this object's own so that Start returns at once
// (RunMany blocks its caller, and the caller is the thread that queues the GPU's link experts).
//
// The host share of a layer pass: --moe-host only, every distinct expert; auto, ChooseSplit's h for
// the pass's distinct experts (the cache is bypassed on this path, so each one either crosses the link
// or is computed here), taking the h with the fewest tokens, since the host's time grows with an
// expert's tokens and the link's does not. Which passes take the path at all was decided at plan time
// (streamed_decision.h) and is handed in.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/host_experts.h"
#include "moe/host/calibration.h"
#include "moe/host/host_expert.h"
#include "moe/host/host_pool.h"
#include "moe/host/host_split.h"

namespace specgen::moe_host {

class StreamedHostPath : public HostExpertPath {
 public:
  struct Options {
    HostMode mode = HostMode::kOnly;  // kAuto or kOnly (kOff makes no path)
    std::optional<Calibration> calibration;  // kAuto's split; without one kAuto computes nothing here
    // takes[n - 1]: a pass of n positions takes the split path (StreamedHostDecision::takes).
    std::array<bool, kCalibratedTokens> takes{};
    double link_bytes_per_second = 55e9;  // where the calibration has no link rate
    int threads = 0;                       // the pool's (HostPool::Options)
    bool pin = true;
    std::optional<Isa> isa;                // default BestIsa()
    // Tests: each layer pass's host share is this many of its experts (the fewest tokens first),
    // whatever `mode` would choose; -1: the mode's.
    int64_t force_host_experts = -1;
  };

  explicit StreamedHostPath(Options options);
  ~StreamedHostPath() override;

  absl::Status Bind(const StreamedExperts& experts, size_t layers, int64_t experts_per_layer) override;
  bool TakesPass(int64_t n) const override;
  std::vector<uint8_t> HostShare(size_t layer, std::span<const int32_t> ids, std::span<const int64_t> tokens) override;
  absl::Status Start(size_t layer, std::span<const HostExpertWork> work, int64_t activation_bytes) override;
  absl::Status Finish() override;
  HostExpertStats Stats() const override;

  const Options& options() const { return options_; }

 private:
  void Drive();

  Options options_;
  Isa isa_;
  std::unique_ptr<HostPool> pool_;
  std::unique_ptr<HostExpertRunner> runner_;
  std::vector<std::vector<HostExpert>> experts_;  // [layer][expert]
  std::vector<size_t> expert_bytes_;              // a layer's gate + up + down
  int64_t hidden_ = 0;

  // The driver thread and its one job.
  std::thread driver_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, pending_ = false, running_ = false;
  std::vector<HostExpertJob> jobs_;
  absl::Status result_;
  HostExpertStats stats_;  // under mu_
};

}  // namespace specgen::moe_host
