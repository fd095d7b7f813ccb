// DeviceSpeculativeDecoder: the speculative loop (speculative_loop.h) with its step on the GPU
// (CudaBackend). The draft proposes on the device (DeviceProposer: tokens and q rows never visit the
// host); the target verifies the k + 1 positions in one pass whose logits stay on the device
// (replayed from a CUDA graph per pass size: GraphedTargetPass); logits processing and the acceptance
// rule run as kernels; the step's result {n_accepted, tokens, logprobs} comes back in ONE pinned copy,
// the step's only host wait (resident MoE experts route on the device; a layer's experts are read on
// the host only where they cannot: a pass of more than 16 positions, or experts of mixed shapes).
// Same options, Stats and outputs as SpeculativeDecoder, which it mirrors draw for draw.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "draft/cuda/device_proposer.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/transformer.h"
#include "engine/speculative/graphed_target_pass.h"
#include "engine/speculative/speculative_loop.h"

namespace specgen {

// Host waits of the generation steps (prefill excluded), by kind.
struct StepSyncStats {
  int64_t steps = 0;
  int64_t step_result = 0;        // should equal steps
  int64_t expert_union = 0;       // host-routed MoE layers' reads (docs/design.md: the stepping stone)
  int64_t other = 0;              // should be 0
  int64_t max_non_union_per_step = 0;  // result + other waits of the worst step
};

// How the target's passes of the generation steps ran.
struct VerifyPassStats {
  int64_t graph_replays = 0;  // passes replayed from a captured graph
  int64_t captures = 0;       // graphs captured (one per pass size and key bound, again after a workspace grew)
  int64_t eager_passes = 0;   // passes launched kernel by kernel (graphs off, or no graph possible)
  std::string why_not_graph;  // why passes run eagerly (empty while graphs are in use or not asked for)
};

// Test and benchmark seam: how the GPU loop runs. The defaults are the product's; every setting gives
// the same tokens.
struct DeviceLoopHooks {
  DeviceDraftHooks draft;
  // The target's pass replayed from a CUDA graph per pass size instead of launched kernel by kernel.
  bool graph_verify = true;
};

class DeviceSpeculativeDecoder : public SpeculativeLoop {
 public:
  // `target` and `draft` run on `backend`; `draft` may be null (plain decoding through the same
  // kernels). Draft and target must share the vocabulary size. None is owned.
  static absl::StatusOr<std::unique_ptr<DeviceSpeculativeDecoder>> Create(CudaBackend* backend, Transformer* target,
                                                                         Transformer* draft, SpeculativeOptions options,
                                                                         const DeviceLoopHooks& hooks = {});
  ~DeviceSpeculativeDecoder() override;

  const StepSyncStats& syncs() const { return syncs_; }
  // Cumulative over this decoder's life.
  DraftDecodeStats draft_decode_stats() const;
  VerifyPassStats verify_pass_stats() const;

 private:
  DeviceSpeculativeDecoder(CudaBackend* backend, Transformer* target, Transformer* draft, SpeculativeOptions options);
  absl::Status Allocate();

  absl::Status BeginGeneration() override;
  absl::Status FeedTarget(std::span<const int32_t> chunk) override;
  absl::Status PrefillDraft(std::span<const int32_t> prompt) override;
  absl::Status FinishPrefill() override;
  int64_t DraftRoom(int64_t context_len) const override;
  absl::StatusOr<StepOutcome> Step(const std::vector<int32_t>& sequence, int k, bool another_may_follow) override;
  absl::Status EndGeneration(std::span<const int32_t> target_cached) override;
  absl::StatusOr<OffloadCounters> OffloadTotals() override;

  CudaBackend* backend_;
  Transformer* target_lm_;
  Transformer* draft_;
  StepSyncStats syncs_;
  std::unique_ptr<DeviceProposer> proposer_;        // null: plain decoding
  std::unique_ptr<GraphedTargetPass> target_pass_;  // every target pass of a step

  // Device memory (from the backend's arena).
  int32_t* batch_ = nullptr;  // [kAcceptMaxDraft + 1]: the last committed token, then the drafts
  float* p_ = nullptr;        // [kAcceptMaxDraft + 1, V] the target's processed distributions
  void* result_ = nullptr;    // kernels::AcceptanceResult
  void* accept_ws_ = nullptr;
  size_t accept_ws_bytes_ = 0;
  void* sample_ws_ = nullptr;  // the target rows' processing
  size_t sample_ws_bytes_ = 0;
  void* host_result_ = nullptr;  // pinned kernels::AcceptanceResult
  float* host_logits_ = nullptr;  // pinned [kAcceptMaxDraft + 1, V]: the pass's logits, with on_logprobs only
};

}  // namespace specgen
