#include "engine/backend/cuda/cuda_graph.h"

#include <utility>

#include "engine/core/str_cat.h"
#include "kernels/cuda_check.h"

namespace specgen {

absl::Status BeginStreamCapture(cudaStream_t stream) {
  return SPECGEN_CUDA_STATUS(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
}

absl::StatusOr<cudaGraph_t> EndStreamCapture(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // a failed capture leaves its error behind
    return SPECGEN_CUDA_STATUS(ended);
  }
  return graph;
}

CudaGraph::CudaGraph(CudaGraph&& other) noexcept
    : graph_(std::exchange(other.graph_, nullptr)), exec_(std::exchange(other.exec_, nullptr)) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    Reset();
    graph_ = std::exchange(other.graph_, nullptr);
    exec_ = std::exchange(other.exec_, nullptr);
  }
  return *this;
}

void CudaGraph::Reset() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

absl::StatusOr<CudaGraph> CudaGraph::Instantiate(cudaGraph_t graph) {
  CudaGraph g;
  g.graph_ = graph;
  const absl::Status made = SPECGEN_CUDA_STATUS(cudaGraphInstantiate(&g.exec_, graph, 0));
  if (!made.ok()) {
    g.exec_ = nullptr;
    (void)cudaGetLastError();
    return made;  // g destroys the graph
  }
  return g;
}

absl::StatusOr<CudaGraph> CudaGraph::Capture(cudaStream_t stream, const std::function<absl::Status()>& enqueue) {
  if (absl::Status begun = BeginStreamCapture(stream); !begun.ok()) return begun;
  const absl::Status queued = enqueue();
  absl::StatusOr<cudaGraph_t> graph = EndStreamCapture(stream);
  if (!queued.ok()) {
    if (graph.ok()) cudaGraphDestroy(*graph);
    (void)cudaGetLastError();  // the launch error the failed enqueue left behind
    return queued;
  }
  if (!graph.ok()) return graph.status();
  return Instantiate(*graph);
}

absl::StatusOr<cudaGraphNode_t> CudaGraph::SingleRoot(std::string_view what) const {
  size_t roots = 0;
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaGraphGetRootNodes(graph_, nullptr, &roots));
  if (roots != 1) return absl::InternalError(Cat(what, ": ", roots, " root nodes, not 1"));
  cudaGraphNode_t root = nullptr;
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaGraphGetRootNodes(graph_, &root, &roots));
  return root;
}

absl::Status CudaGraph::Launch(cudaStream_t stream) const {
  if (exec_ == nullptr) return absl::FailedPreconditionError("CUDA graph: launched before it was captured");
  return SPECGEN_CUDA_STATUS(cudaGraphLaunch(exec_, stream));
}

}  // namespace specgen
