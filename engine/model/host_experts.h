// HostExpertPath: routed experts of a streamed MoE layer computed on the host CPU (docs/design.md
// §12.1, --moe-host), as the Transformer sees it. engine/model may not include moe/, so the Transformer
// declares here what it needs; moe/host/streamed_host_path.h implements it (the pinned HostPool, the
// packed product's host kernels and the calibrated split), and moe/apply_plan.h hands one in
// (TransformerOptions::host_experts) when the plan streams experts and --moe-host is not off.
//
// The contract that keeps the output exact: an expert computed here gives the bits of the GPU's
// per-expert ops (MatMul gate, MatMul up, SwiGlu, MatMul down: moe/host/host_expert.h), so which
// experts the host takes never changes a logit (engine/model/split_routed_experts.h sums them in the
// host-routed path's order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/weight_streaming.h"

namespace specgen {

// One host expert of a layer pass: y [rows, hidden] = expert(x [rows, hidden]), row-major floats.
struct HostExpertWork {
  int expert = 0;
  const float* x = nullptr;
  int64_t rows = 0;
  float* y = nullptr;
};

// What the host path did so far (ExpertStreamStats' host_* fields).
struct HostExpertStats {
  int64_t experts = 0;           // expert computations the host ran (one per host expert per layer pass)
  double seconds = 0;            // wall time of the host's work, Start to its end
  int64_t activation_bytes = 0;  // activations that crossed the link for it (both ways)
};

class HostExpertPath {
 public:
  // The largest pass the path takes: a verification pass's positions (the calibration's range).
  static constexpr int64_t kMaxPositions = 16;

  virtual ~HostExpertPath() = default;

  // Readies the path for `layers` streamed layers of `experts_per_layer` experts each, read through
  // `experts.HostView` (which must outlive this path's use). An error says why the host cannot compute
  // them (a type it has no kernel for, no host view): the Transformer then runs without the path.
  virtual absl::Status Bind(const StreamedExperts& experts, size_t layers, int64_t experts_per_layer) = 0;

  // Whether a pass of n positions takes the split path (decided at plan time: moe/host/streamed_decision.h).
  virtual bool TakesPass(int64_t n) const = 0;

  // The host share of one layer pass: of its distinct experts `ids` (ascending) with `tokens[i]` tokens
  // routed to ids[i], which the host computes (host[i] != 0). Any answer is exact; this one is for speed.
  virtual std::vector<uint8_t> HostShare(size_t layer, std::span<const int32_t> ids,
                                         std::span<const int64_t> tokens) = 0;

  // Starts computing `work` (layer `layer`'s host share) off the calling thread and returns at once, so
  // the caller can queue the link experts' GPU ops meanwhile. Every x and y must stay valid until
  // Finish. `activation_bytes`: what the caller moved across the link for it (counted in Stats). At most
  // one Start before each Finish.
  virtual absl::Status Start(size_t layer, std::span<const HostExpertWork> work, int64_t activation_bytes) = 0;
  // Waits for the work Start began and returns its status (OK when none was started).
  virtual absl::Status Finish() = 0;

  virtual HostExpertStats Stats() const = 0;
};

}  // namespace specgen
