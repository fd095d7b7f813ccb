#include "engine/speculative/graphed_target_pass.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "engine/core/status_macros.h"
#include "kernels/attention.cuh"
#include "kernels/cuda_check.h"
#include "kernels/elementwise.cuh"

namespace specgen {
namespace {

// The smallest key bound a graph is captured for. Bounds are powers of two from here to the context,
// so a generation of L positions captures at most log2(L / 128) + 1 graphs per pass size; the decode
// attention's grid stops growing at 16 chunks whatever the bound, so a larger bound costs only blocks
// that return at once.
constexpr int64_t kMinKeyBound = 128;

}  // namespace

GraphedTargetPass::GraphedTargetPass(CudaBackend* backend, Transformer* lm, const int32_t* d_tokens,
                                     int max_tokens, bool graphs, int max_graphs, int32_t* d_length)
    : backend_(backend),
      lm_(lm),
      d_tokens_(d_tokens),
      max_tokens_(max_tokens),
      graph_max_tokens_(std::min(max_tokens, kernels::kDecodeMaxQueries)),
      max_graphs_(max_graphs),
      d_length_(d_length),
      use_graphs_(graphs) {}

absl::StatusOr<std::unique_ptr<GraphedTargetPass>> GraphedTargetPass::Create(CudaBackend* backend, Transformer* lm,
                                                                              const int32_t* d_tokens,
                                                                              int max_tokens, bool graphs,
                                                                              int max_graphs) {
  if (backend == nullptr || lm == nullptr || d_tokens == nullptr) {
    return InvalidArgument("graphed target pass: no backend, model or token buffer");
  }
  if (&lm->backend() != backend) return InvalidArgument("graphed target pass: the model runs on another backend");
  if (max_tokens < 1) return InvalidArgument("graphed target pass: ", max_tokens, " positions a pass");
  if (max_graphs < 1) return InvalidArgument("graphed target pass: room for ", max_graphs, " graphs");
  ASSIGN_OR_RETURN(void* p, backend->arena().Allocate(sizeof(int32_t), "the graphed pass's cache length"));
  return std::unique_ptr<GraphedTargetPass>(
      new GraphedTargetPass(backend, lm, d_tokens, max_tokens, graphs, max_graphs, static_cast<int32_t*>(p)));
}

GraphedTargetPass::~GraphedTargetPass() {
  // A replay may still be queued: the stream finishes it before the graphs and the length go.
  (void)cudaStreamSynchronize(backend_->stream());
  graphs_.clear();
  backend_->arena().Free(d_length_);
}

void GraphedTargetPass::MakeRoom() {
  while (!graphs_.empty() && static_cast<int>(graphs_.size()) >= max_graphs_) {
    auto oldest = graphs_.begin();
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if (it->second.used < oldest->second.used) oldest = it;
    }
    graphs_.erase(oldest);  // a replay of it still queued finishes first (the driver defers the free)
  }
}

bool GraphedTargetPass::Current(const Graph& g) const {
  return !g.cuda.empty() && g.made == Now();
}

absl::StatusOr<bool> GraphedTargetPass::Warm() {
  if (warmed_ == Now()) return true;
  const int64_t len = lm_->n_past();
  // The largest pass a graph is captured for (not one the host must route: it runs eagerly).
  int n = graph_max_tokens_;
  while (n > 1 && lm_->StreamsOnHost(n)) --n;
  if (len + n > lm_->max_context()) return false;
  dummy_.assign(n, 0);
  RETURN_IF_ERROR(lm_->ForwardResident(dummy_).status());
  RETURN_IF_ERROR(lm_->Truncate(len));  // its rows past the length are never read
  warmed_ = Now();
  return true;
}

absl::Status GraphedTargetPass::Capture(int n, int64_t max_keys, Graph* g) {
  const int64_t len = lm_->n_past();
  dummy_.assign(n, 0);
  RETURN_IF_ERROR(backend_->BeginCapture());
  absl::Status queued =
      SPECGEN_CUDA_STATUS(kernels::LaunchStoreInt32(d_length_, static_cast<int32_t>(len), backend_->stream()));
  if (queued.ok()) {
    backend_->SetDeviceLength(d_length_, max_keys);
    backend_->UseDeviceTokensOnce(d_tokens_);
    queued = lm_->ForwardResident(dummy_).status();
    backend_->UseDeviceTokensOnce(nullptr);  // unused when the pass failed before its embedding
    backend_->ClearDeviceLength();
  }
  absl::StatusOr<cudaGraph_t> graph = backend_->EndCapture();
  // The capture ran nothing: the host's commit of the n positions is undone.
  if (lm_->n_past() > len) RETURN_IF_ERROR(lm_->Truncate(len));
  if (!queued.ok()) {
    if (graph.ok()) cudaGraphDestroy(*graph);
    (void)cudaGetLastError();
    return queued;
  }
  if (!graph.ok()) return graph.status();
  ASSIGN_OR_RETURN(g->cuda, CudaGraph::Instantiate(*graph));
  // The length store, queued first, is the graph's only root.
  absl::StatusOr<cudaGraphNode_t> root = g->cuda.SingleRoot("target graph");
  if (!root.ok()) {
    *g = Graph();
    return root.status();
  }
  g->length_node = *root;
  g->made = Now();
  ++captures_;
  return absl::OkStatus();
}

absl::StatusOr<const Buffer*> GraphedTargetPass::Eager(int n) {
  dummy_.assign(n, 0);
  backend_->UseDeviceTokensOnce(d_tokens_);
  ++eager_;
  return lm_->ForwardResident(dummy_);
}

absl::StatusOr<const Buffer*> GraphedTargetPass::Forward(int n) {
  if (n < 1 || n > max_tokens_) {
    return InvalidArgument("graphed target pass: ", n, " positions (1 .. ", max_tokens_, ")");
  }
  RETURN_IF_ERROR(lm_->CheckRoom(n));
  const int64_t len = lm_->n_past();
  // Past the decode attention's 16 queries a pass takes the general attention, which has no device length.
  // A pass whose streamed experts the host must route (their union might not fit the cache) runs
  // eagerly too, without giving up the graphs of the sizes that fit.
  if (!use_graphs_ || n > graph_max_tokens_ || lm_->StreamsOnHost(n)) return Eager(n);
  const int64_t max_keys =
      std::min(lm_->max_context(), std::max(kMinKeyBound, static_cast<int64_t>(std::bit_ceil(
                                                               static_cast<uint64_t>(len + n)))));
  const std::pair<int, int64_t> key{n, max_keys};
  auto it = graphs_.find(key);
  if (it == graphs_.end() || !Current(it->second)) {
    if (it != graphs_.end()) graphs_.erase(it);
    ASSIGN_OR_RETURN(const bool warm, Warm());
    if (!warm) return Eager(n);  // no room for the warm-up pass: this one eagerly, a later one captures
    MakeRoom();
    Graph fresh;
    const absl::Status captured = Capture(n, max_keys, &fresh);
    if (!captured.ok()) {
      use_graphs_ = false;
      fallback_ = std::string(captured.message());
      graphs_.clear();
      return Eager(n);
    }
    it = graphs_.emplace(key, std::move(fresh)).first;
  }
  Graph& g = it->second;
  SPECGEN_CUDA_RETURN_IF_ERROR(
      kernels::SetStoreInt32NodeArgs(g.cuda.exec(), g.length_node, d_length_, static_cast<int32_t>(len)));
  RETURN_IF_ERROR(g.cuda.Launch(backend_->stream()));
  ++replays_;
  g.used = replays_;
  return lm_->CommitReplayedPass(n);
}

}  // namespace specgen
