// WeightStreaming: where a Transformer's streamed weights go (docs/design.md §12), handed in at creation
// (TransformerOptions::streaming) by whoever placed the model (moe/apply_plan.h); none keeps every
// weight resident. The Transformer declares here what it needs of streaming; moe/cuda/ implements it
// for the CUDA backend. Experts stream into a VRAM cache of slots, dense layers' FFNs through a ring of
// VRAM layer buffers, both from one copy in pinned host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/core/tensor_view.h"

namespace specgen {

// --- experts kept in host memory and streamed into a VRAM cache (docs/design.md §12) ---
// One MoE layer's experts as loaded (host views), by expert id.
struct ExpertViews {
  std::vector<TensorView> gate, up, down;
  // Biases by expert id (ModelSpec::expert_bias; each role empty or one an expert): weights the caller
  // uploaded, which must outlive the streamed experts. They never stream (E × (2F + D) values a layer,
  // read by every pass): the layer's ExpertSet and Stage refer to them where they are.
  std::vector<const Weight*> gate_bias, up_bias, down_bias;
  std::string name;  // names the layer in messages
};
struct ExpertStreamingOptions {
  // VRAM slots shared by every streamed layer, each the size of one expert (of the largest layer).
  int64_t cache_slots = 0;
  // The copy of the experts into host memory: (bytes done, bytes in all), now and then and at the end.
  std::function<void(size_t done, size_t total)> progress;
};
struct ExpertStreamStats {
  int64_t slots = 0;
  size_t slot_bytes = 0;
  size_t host_bytes = 0;  // the pinned host copy of every streamed expert
  // The cache, decided on the device (passes the device routes: at most 16 positions, a union that fits).
  int64_t hits = 0, misses = 0, evictions = 0;
  int64_t fetched_bytes = 0;
  // The host-routed path (larger batches; unions that may exceed the slots): each routed expert copied
  // through a staging buffer, once per pass.
  int64_t staged = 0;
  int64_t staged_bytes = 0;
  // (pass, streamed layer) pairs the device decided (Transformer::expert_stream_stats adds the ones
  // routed on the host): the unions the counts above sum over.
  int64_t layer_passes = 0;
  // Routed experts computed on the host CPU instead of staged (moe/host, --moe-host: the host expert
  // path, engine/model/host_experts.h), the host's wall time for them and the activations that crossed
  // the link for them (x read down once a layer pass, their outputs written back). Filled in by
  // Transformer::expert_stream_stats; zero without the host path.
  int64_t host_experts = 0;
  double host_seconds = 0;
  int64_t host_activation_bytes = 0;
};
// One streamed expert's three matrices where the host CPU can read them (the pinned host copy):
// gate and up [ffn, hidden] of `type`, down [hidden, ffn] of `down_type`, rows packed back to back in
// the stored GGUF block form (what moe/host's packed product reads).
struct ExpertHostView {
  DType type = DType::kQ8_0, down_type = DType::kQ8_0;
  int64_t hidden = 0, ffn = 0;
  const uint8_t* gate = nullptr;
  const uint8_t* up = nullptr;
  const uint8_t* down = nullptr;
};
// Every streamed layer's experts: the host copy, the VRAM cache, and per layer an ExpertSet for
// RouteAndRunExperts, which fetches the layer's misses on its own.
class StreamedExperts {
 public:
  virtual ~StreamedExperts() = default;
  // Layer i (its index among the layers given to WeightStreaming::PrepareExperts).
  virtual const ExpertSet& layer(size_t i) const = 0;
  // For the host-routed path: expert `expert` of layer i copied into VRAM in stream order (no host
  // wait); the refs are valid for the ops queued before the next Stage.
  virtual absl::StatusOr<ExpertRefs> Stage(size_t i, int expert) = 0;
  // The counters so far (a host wait: read them with the stats, not per step).
  virtual absl::StatusOr<ExpertStreamStats> Stats() = 0;
  // Empties the cache in stream order (every slot free; the counters go on): a cold start for benchmarks.
  virtual absl::Status EmptyCache() = 0;
  // Expert `expert` of layer i in host memory, for the host expert path (engine/model/host_experts.h):
  // valid as long as this object. Only where the host copy keeps the matrices as stored in a packed
  // type the host computes (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4); else an error saying why (the run
  // then goes without the host path). The default: Unimplemented.
  virtual absl::StatusOr<ExpertHostView> HostView(size_t i, int expert) const {
    (void)i, (void)expert;
    return absl::UnimplementedError("these streamed experts have no host view");
  }
};

// --- dense layers kept in host memory, streamed through a ring of VRAM layer buffers (§12) ---
// One streamed layer's weights as loaded (host views), in the order StreamedLayers::weight gives them.
struct LayerViews {
  std::vector<TensorView> weights;
  std::string name;  // names the layer in messages
};
struct LayerStreamingOptions {
  // VRAM layer buffers (>= 1; more than the layers is the layers): streamed layer i uses buffer i mod
  // ring, and layer i + ring copies while layers i + 1 .. i + ring - 1 compute.
  int ring_layers = 2;
  // The copy of the layers into host memory: (bytes done, bytes in all), now and then and at the end.
  std::function<void(size_t done, size_t total)> progress;
};
struct LayerStreamStats {
  int64_t layers = 0;
  int ring = 0;            // buffers
  size_t buffer_bytes = 0;  // one buffer
  size_t host_bytes = 0;    // the pinned host copy
  size_t pass_bytes = 0;    // copied by every pass: each streamed layer once
  // Passes so far and the bytes they copied: StreamedLayers counts the passes it queued outside a
  // graph capture; Transformer::dense_stream_stats adds the replays of captured ones.
  int64_t passes = 0;
  int64_t copied_bytes = 0;
};
// Every streamed layer's weights: the host copy and the ring. A pass brackets its use of the layers:
//   BeginPass, then for each streamed layer i in order Acquire(i) .. (the ops reading weight(i, *)) ..
//   Release(i), then EndPass.
// Every call only queues work (no host wait), so a pass between BeginPass and EndPass can be captured
// in a CUDA graph and replayed: each pass copies its layers again, and EndPass joins whatever the
// copies ran on back into the backend's stream.
class StreamedLayers {
 public:
  virtual ~StreamedLayers() = default;
  virtual size_t size() const = 0;
  // Weight t of streamed layer i: a view of the layer's ring buffer (a fixed address), holding the
  // layer's bytes between Acquire(i) and Release(i) of a pass.
  virtual const Weight& weight(size_t i, size_t t) const = 0;
  // Starts the copies of the first layers (one per buffer), ordered after the work already queued.
  virtual absl::Status BeginPass() = 0;
  // The ops queued next wait for layer i's copy. Layers are acquired in order, once a pass.
  virtual absl::Status Acquire(size_t i) = 0;
  // Layer i's ops are queued: its buffer takes the next layer that maps to it once they have run.
  virtual absl::Status Release(size_t i) = 0;
  // Ends the pass (also one cut short by an error): the backend's stream waits for every copy queued.
  virtual absl::Status EndPass() = 0;
  virtual LayerStreamStats Stats() const = 0;
};


class WeightStreaming {
 public:
  virtual ~WeightStreaming() = default;
  // Every layer of `layers` kept in host memory (copied there once, in the backend's form of each
  // weight) and streamed on demand into `options.cache_slots` VRAM slots.
  virtual absl::StatusOr<std::unique_ptr<StreamedExperts>> PrepareExperts(std::span<const ExpertViews> layers,
                                                                          const ExpertStreamingOptions& options) = 0;
  // Every layer of `layers` kept in host memory (copied there once, in the backend's form of each
  // weight) and streamed through a ring of `options.ring_layers` VRAM layer buffers, pass by pass.
  virtual absl::StatusOr<std::unique_ptr<StreamedLayers>> PrepareLayers(std::span<const LayerViews> layers,
                                                                        const LayerStreamingOptions& options) = 0;
};

}  // namespace specgen
