// CudaStreamedLayers: the CUDA backend's StreamedLayers (docs/design.md §12, the dense-layer ring).
// Every streamed layer's weights lie in ONE pinned HostArena (moe/layer_ring_layout.h: a
// layer is one contiguous run), each weight in the backend's device form (engine/backend/device_form.h),
// so a copied layer holds the bytes a resident upload would. VRAM holds a ring of R layer buffers;
// streamed layer i uses buffer i mod R, and its Weight views are made once, with fixed addresses.
//
// Copies run on a copy stream of their own, ordered against the backend's (compute) stream by events
// only, so a pass can be captured in a CUDA graph and replayed:
//   BeginPass   compute records `start`; copy waits for it, then copies layers 0 .. R-1, recording
//               copied[b] after each (the previous pass's reads of every buffer are before `start`).
//   Acquire(i)  compute waits for copied[i mod R].
//   Release(i)  compute records freed[i mod R]; if layer i + R exists, copy waits for it, copies layer
//               i + R into the buffer and records copied[i mod R]: it copies while i + 1 .. i + R - 1
//               compute.
//   EndPass     copy records `joined`, compute waits for it: the copy stream rejoins the compute
//               stream, as a capture requires, and an eager pass leaves nothing queued behind it.
// Every pass copies its layers from the start, so a replayed graph is as correct as the pass it
// captured, however many times it runs. An event is waited for only after its latest record was queued
// by the host (the calls come in pass order), so reusing one event per buffer is safe eagerly; inside
// a capture the records and waits become the graph's edges.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/weight_streaming.h"
#include "moe/cuda/host_arena.h"
#include "moe/layer_ring_layout.h"

namespace specgen {

class CudaStreamedLayers : public StreamedLayers {
 public:
  static absl::StatusOr<std::unique_ptr<CudaStreamedLayers>> Create(CudaBackend* backend,
                                                                    std::span<const LayerViews> layers,
                                                                    const LayerStreamingOptions& options);
  ~CudaStreamedLayers() override;

  size_t size() const override { return layers_.size(); }
  const Weight& weight(size_t i, size_t t) const override { return *layers_[i][t]; }
  absl::Status BeginPass() override;
  absl::Status Acquire(size_t i) override;
  absl::Status Release(size_t i) override;
  absl::Status EndPass() override;
  LayerStreamStats Stats() const override;

  const LayerRingLayout& layout() const { return layout_; }
  // Ring buffer b in VRAM (for tests).
  const char* buffer(int b) const { return ring_ + static_cast<size_t>(b) * stride_; }
  const HostArena& host() const { return *host_; }

 private:
  explicit CudaStreamedLayers(CudaBackend* backend) : backend_(backend) {}
  // Queues the copy of layer i into its buffer on the copy stream and records copied[buffer].
  absl::Status Copy(size_t i);

  CudaBackend* backend_;
  LayerRingLayout layout_;
  std::unique_ptr<HostArena> host_;
  char* ring_ = nullptr;  // R buffers of stride_ bytes (arena)
  size_t stride_ = 0;
  std::vector<std::vector<std::unique_ptr<Weight>>> layers_;  // views into the ring, per layer
  cudaStream_t copy_ = nullptr;
  cudaEvent_t start_ = nullptr, joined_ = nullptr;
  std::vector<cudaEvent_t> copied_, freed_;  // per buffer
  // The pass's progress on the host, to refuse calls out of order: the next layer to acquire, and
  // whether it is held.
  bool in_pass_ = false;
  size_t next_ = 0;
  bool held_ = false;
  bool capturing_ = false;  // the pass is being captured: it copies nothing now
  int64_t passes_ = 0;      // passes ended outside a capture
};

}  // namespace specgen
