// CUDA graphs for the passes replayed every step (the draft's decode, the target's verify pass):
// stream capture with its errors as Status, and the captured graph with its executable instance owned
// together.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specgen {

// Starts capturing `stream` (thread-local mode: other threads' CUDA calls are not captured).
absl::Status BeginStreamCapture(cudaStream_t stream);
// Ends the capture of `stream`: the graph of what was queued (the caller owns it), or the capture's
// error with the error a failed capture leaves behind cleared. Always leaves the stream out of capture.
absl::StatusOr<cudaGraph_t> EndStreamCapture(cudaStream_t stream);

// A captured graph and its executable instance, destroyed together. Move-only.
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph() { Reset(); }
  CudaGraph(CudaGraph&& other) noexcept;
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Takes ownership of `graph` (destroyed here when instantiation fails) and instantiates it.
  static absl::StatusOr<CudaGraph> Instantiate(cudaGraph_t graph);
  // Captures what `enqueue` queues on `stream` and instantiates it. On an error (enqueue's first, then
  // the capture's or the instantiation's) nothing is kept and the stream is out of capture mode.
  static absl::StatusOr<CudaGraph> Capture(cudaStream_t stream, const std::function<absl::Status()>& enqueue);

  // The graph's only root node (the kernel whose arguments each replay replaces); an Internal error
  // naming `what` when the graph has no or several roots.
  absl::StatusOr<cudaGraphNode_t> SingleRoot(std::string_view what) const;
  absl::Status Launch(cudaStream_t stream) const;

  bool empty() const { return exec_ == nullptr; }
  cudaGraphExec_t exec() const { return exec_; }
  // Destroys the instance and the graph (a replay still queued finishes first: the driver defers it).
  void Reset();

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace specgen
