// A streamed MoE layer's pass routed on the host with its distinct experts split between the host CPU
// (HostExpertPath) and the link (StreamedExperts::Stage), docs/design.md §12.1.
//
// Route (Backend::RouteWith: the host wait the host-routed path already pays), group the (token,
// weight) pairs by expert as RunRoutedExperts does, ask the path for the host share; read x to the host
// once when the share is not empty and start the host experts on the path's thread; meanwhile queue the
// link experts' ops exactly as RunRoutedExperts does (Stage, GatherRows, MatMul gate, MatMul up,
// SwiGlu, MatMul down), each expert's output copied (CopyRows: exact) into the pair buffer Z at rows of
// its own; then wait for the host, write its outputs into Z's first rows, gather Z into Y in
// RunRoutedExperts's pair order (ascending expert, tokens ascending within) and add them with ONE
// ScatterAddScaled into a zeroed `out`. ScatterAddScaled applies pairs in order i (the contract; the CUDA
// kernel loops i in one thread per column, the CPU's rows in turn), so this is the same sequence of
// float additions as RunRoutedExperts's per-expert scatters, and a host expert has the GPU's
// per-expert bits (host_experts.h): `out` equals RunRoutedExperts's bit for bit, whatever the share.
//
// Only for passes of at most HostExpertPath::kMaxPositions positions (Z and Y hold n·k pairs), plain
// softmax routing and SwiGLU experts without biases (what streamed layers are: Transformer).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "engine/backend/backend.h"
#include "engine/backend/routed_experts.h"
#include "engine/model/host_experts.h"
#include "engine/model/weight_streaming.h"

namespace specgen {

struct SplitRoutingScratch {
  HostRoutingScratch expert;  // one link expert's rows, as RunRoutedExperts takes them
  Buffer* pairs_z = nullptr;  // [>= n·k, hidden]: host outputs first, then the link experts'
  Buffer* pairs_y = nullptr;  // [>= n·k, hidden]: Z in RunRoutedExperts's pair order
};

// out [n, hidden] = RunRoutedExperts(x, router_logits, k, norm, Stage of streamed layer `layer`), with
// the host share computed by `host`. Errors: n above kMaxPositions or scratch too small (InvalidArgument),
// and whatever the backend, Stage or the host path return; the host's work is always waited for.
absl::Status RunSplitRoutedExperts(Backend& be, const Buffer& x, const Buffer& router_logits, int64_t k,
                                   RouterNorm norm, int64_t n_experts, size_t layer, StreamedExperts& streamed,
                                   HostExpertPath& host, const SplitRoutingScratch& scratch, Buffer* out);

}  // namespace specgen
