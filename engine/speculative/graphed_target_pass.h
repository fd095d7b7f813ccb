// GraphedTargetPass: the target's pass of a speculative step (Transformer::ForwardResident over n <= 16
// consecutive positions from the cache's end, causal, token ids read from device memory) captured in a
// CUDA graph and replayed. Eagerly a pass costs the host a launch per kernel (a couple of hundred for a
// 28-layer target): passes of small targets are paced by the host's launches, not the GPU
// (bench/RESULTS.md). A replay is two calls.
//
// A replay keeps the arguments its capture recorded, so the capture runs the backend with a device
// length (CudaBackend::SetDeviceLength): the cache's length is stored into device memory by the graph's
// first node (its argument set per replay) and read there by the kernels that depend on it. One graph
// per (n, key bound): the attention's grid is sized for the bound, a power of two from 128 up to the
// context. The results are those of the eager pass bit for bit (the same kernels on the same inputs).
//
// Graphs hold the addresses of the target's activations and the backend's workspaces: they are
// recaptured when either was reallocated since (scratch generations), after one eager pass of the
// largest captured size has grown every workspace to what the graphs will need. A pass that needs the host
// midway (a layer routed on the host, a kernel without a device length) cannot be captured: the
// capture fails, the reason is kept, and every pass runs eagerly from then on. Passes whose streamed
// experts are routed on the host (Transformer::StreamsOnHost: too many positions for the expert
// cache's slots) run eagerly, and the other sizes keep their graphs.
//
// An instantiated graph holds device memory the driver allocates outside the budgeted arena (some
// hundreds of KiB for a 28-layer target; BM_TargetGraphMemory), and sizes x key bounds grow with the
// context (16 x 9 at 32K tokens): at most max_graphs are kept (kDefaultMaxGraphs unless told), the
// least recently replayed released first (a longer context leaves the graphs of its smaller key bounds
// unused).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_graph.h"
#include "engine/model/transformer.h"

namespace specgen {

class GraphedTargetPass {
 public:
  // Graphs kept at once unless Create is told otherwise: room for every size an adaptive draft length
  // tries at two key bounds.
  static constexpr int kDefaultMaxGraphs = 24;
  // `lm` runs on `backend`; `d_tokens` (device int32, at least max_tokens) holds each pass's token ids
  // when Forward is called. Nothing is captured before the first Forward; with `graphs` false nothing
  // ever is (every pass launched op by op, as graph_verify off asks; fallback_reason() stays empty).
  // At most `max_graphs` (>= 1) instantiated graphs are kept.
  static absl::StatusOr<std::unique_ptr<GraphedTargetPass>> Create(CudaBackend* backend, Transformer* lm,
                                                                    const int32_t* d_tokens, int max_tokens,
                                                                    bool graphs = true,
                                                                    int max_graphs = kDefaultMaxGraphs);
  ~GraphedTargetPass();
  GraphedTargetPass(const GraphedTargetPass&) = delete;
  GraphedTargetPass& operator=(const GraphedTargetPass&) = delete;

  // Queues the pass over d_tokens[0 .. n) at positions n_past() .. n_past() + n - 1 (1 <= n <=
  // max_tokens; eagerly past 16, where the attention has no device length), commits them to the KV
  // cache as ForwardResident does, and returns the logits [n, V] (device memory, valid until the next
  // pass). No host wait.
  absl::StatusOr<const Buffer*> Forward(int n);

  int64_t replays() const { return replays_; }
  int64_t captures() const { return captures_; }
  int64_t eager_passes() const { return eager_; }
  int live_graphs() const { return static_cast<int>(graphs_.size()); }
  // Why passes run eagerly (empty while graphs are in use).
  const std::string& fallback_reason() const { return fallback_; }

 private:
  // The scratch generations of the backend and the model: what a graph's addresses depend on.
  struct Generations {
    int64_t backend = -1, lm = -1;
    bool operator==(const Generations&) const = default;
  };
  struct Graph {
    CudaGraph cuda;
    cudaGraphNode_t length_node = nullptr;  // the root: LaunchStoreInt32 of the cache's length
    Generations made;                       // when it was captured
    int64_t used = 0;                       // the pass count at its last replay
  };
  GraphedTargetPass(CudaBackend* backend, Transformer* lm, const int32_t* d_tokens, int max_tokens,
                    bool graphs, int max_graphs, int32_t* d_length);
  // The capture of the pass over n tokens at the current length with the attention sized for max_keys.
  absl::Status Capture(int n, int64_t max_keys, Graph* g);
  // One eager pass of graph_max_tokens_ positions (then rolled back) so that every workspace has the size the
  // graphs need before any capture (fewer where the host would route that many streamed experts); false
  // when the context has no room for it.
  absl::StatusOr<bool> Warm();
  absl::StatusOr<const Buffer*> Eager(int n);
  bool Current(const Graph& g) const;
  // Releases the least recently replayed graphs until fewer than max_graphs_ remain.
  void MakeRoom();
  Generations Now() const { return {backend_->scratch_generation(), lm_->scratch_generation()}; }

  CudaBackend* backend_;
  Transformer* lm_;
  const int32_t* d_tokens_;
  int max_tokens_;
  int graph_max_tokens_;  // passes up to this size are captured (the decode attention's limit)
  int max_graphs_;
  int32_t* d_length_;  // the cache's length as the replayed kernels read it (arena)
  std::map<std::pair<int, int64_t>, Graph> graphs_;  // by (n, max_keys)
  Generations warmed_;  // when the last warm-up pass ran
  bool use_graphs_;  // Create's `graphs`, false from a failed capture on
  std::string fallback_;
  std::vector<int32_t> dummy_;  // the pass's host token ids (unused: the ids come from d_tokens)
  int64_t replays_ = 0, captures_ = 0, eager_ = 0;
};

}  // namespace specgen
