// GraphedDraft: the resident draft's single-token decode (docs/design.md §1) on a dense Transformer's own
// weights and KV cache, by one of two paths:
//   kGraph (the speculative loop's default): a fixed sequence of fused kernels
//     (kernels/decode_fused.cuh; for head_dim 32/64/128/256 the q/k-norm + RoPE + KV append runs inside the
//     decode attention kernel: 5 per layer), captured once
//     into a CUDA graph and replayed for every token (the token and position are read from device
//     memory); on sm_90+ with programmatic dependent launch, so each kernel's weight loads overlap the
//     previous kernel's tail;
//   kFused: the same kernels launched one by one.
// kGraph falls back to kFused if capture fails (fallback_reason() says why).
// Its logits equal Transformer::ForwardResident's for the same token up to fp32 rounding: the fused
// GEMV/norm/RoPE code repeats the Backend ops' arithmetic, but the attention (the graph's single-query
// decode kernel for head_dim 32/64/128/256) and the split-row O and down GEMVs
// (kernels/split_row_gemv.cuh, inputs a multiple of 1024) sum in their own order. The graph and the
// eager launches of the same kernels agree bit for bit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_graph.h"
#include "engine/model/transformer.h"
#include "draft/cuda/graphed_draft_hooks.h"

namespace specgen {
namespace kernels {
struct DecodeInput;
}  // namespace kernels

// How a draft token was decoded (reported by the speculative stats and the benchmarks).
enum class DraftDecodePath : int {
  kTransformer = 0,  // Transformer::ForwardResident (Backend ops, one launch each)
  kFused = 1,        // GraphedDraft's kernels launched one by one
  kGraph = 2,        // GraphedDraft's kernels replayed from the captured CUDA graph
};
const char* DraftDecodePathName(DraftDecodePath path);

class GraphedDraft {
 public:
  // Empty when `lm` (on a CudaBackend) can take the fused decode: dense layers whose matrices are
  // bf16, f16 or packed GGUF blocks (q, k, v of one type, gate and up of one type); else the reason it
  // cannot (an MoE layer, f32 weights, a shape the fused kernels do not take).
  static std::string Unsupported(const Transformer& lm);
  // `path`: kGraph (capture on the first Decode and replay after) or kFused (the graph's
  // kernels launched eagerly); kTransformer is refused. `lm` must run on `backend` and outlive this.
  // `hooks`: benchmarks only (graphed_draft_hooks.h).
  static absl::StatusOr<std::unique_ptr<GraphedDraft>> Create(CudaBackend* backend, Transformer* lm,
                                                             DraftDecodePath path,
                                                             const GraphedDraftHooks& hooks = {});
  ~GraphedDraft();
  GraphedDraft(const GraphedDraft&) = delete;
  GraphedDraft& operator=(const GraphedDraft&) = delete;

  // Decodes one token at position lm->n_past() and commits its K/V there. The token id is
  // *device_token when device_token is set (a drafted token that never visits the host), else
  // host_token. Returns the logits [V] in device memory, valid until the next Decode. Queues work
  // only: no host wait, no allocation, no argument copy. `stream`: where the work goes (null: the
  // backend's stream); another stream only where ReplaysCaptured() (a replay, never a capture), and the
  // caller orders it against everything else that touches this draft (graph replays of one shape are
  // ordered among themselves by CUDA, but the two shapes' graphs, eager launches and the Transformer's
  // own passes are not).
  absl::StatusOr<const float*> Decode(const int32_t* device_token, int32_t host_token,
                                      cudaStream_t stream = nullptr);
  // Whether the next Decode (at lm->n_past()) replays an already captured graph.
  bool ReplaysCaptured() const;

  // The path in use: kGraph while the captured graph is in use, kFused when launching eagerly (asked
  // for, or a fallback: fallback_reason() says why).
  DraftDecodePath path() const { return use_graph_ ? DraftDecodePath::kGraph : DraftDecodePath::kFused; }
  int64_t graph_replays() const { return replays_; }
  int64_t eager_steps() const { return eager_; }
  const std::string& fallback_reason() const { return fallback_; }
  // Whether the kernels are launched (and captured) with programmatic dependent launch: sm_90+, unless
  // the capture with it failed or the hooks turned it off.
  bool programmatic() const { return programmatic_; }
  // The fused QKV and gate/up GEMVs' grids: the rows (QKV) and row pairs (gate/up) each warp loads
  // before its wait (1: a row a warp, the widest grid). Which blocks start beside their predecessor's
  // is set by the register file, and the best shape depends on the context (the attention's blocks
  // compete for the same registers): one graph per shape, picked by position (ShapeFor).
  struct GemvShape {
    int qkv_rows = 1;
    int gate_up_rows = 1;
    bool split_o = false;     // the O projection as a split-row GEMV (kernels/split_row_gemv.cuh)
    bool split_down = false;  // the down projection as one
  };

 private:
  GraphedDraft(CudaBackend* backend, Transformer* lm, bool use_graph, const GraphedDraftHooks& hooks);
  absl::Status Allocate();
  // Queues the step's kernels on the backend's stream (captured or not); `programmatic`: with PDL.
  // Shapes in use: 0 below kLongContext positions, 1 from there on.
  static constexpr int kShapes = 2;
  static constexpr int64_t kLongContext = 384;
  static int ShapeIndex(int64_t pos) { return pos < kLongContext ? 0 : 1; }
  GemvShape ShapeFor(int index) const;
  // The step's first kernel's arguments: the token (*device_token when set, else host_token), its
  // position, the embedding table and the residual it starts.
  kernels::DecodeInput InputFor(const int32_t* device_token, int32_t host_token, int32_t pos) const;
  absl::Status Enqueue(bool programmatic, const GemvShape& shape, const kernels::DecodeInput& input);
  // Captures Enqueue into graphs_[index], and finds its first node (the input kernel, whose arguments
  // each replay replaces).
  absl::Status Capture(bool programmatic, int index, const kernels::DecodeInput& in);

  CudaBackend* backend_;
  Transformer* lm_;
  bool use_graph_;
  std::string fallback_;
  int64_t replays_ = 0;
  int64_t eager_ = 0;
  GraphedDraftHooks hooks_;
  int max_blocks_ = 0;
  int sms_ = 1;  // multiprocessors
  bool programmatic_ = false;  // the device takes programmatic dependent launch (sm_90+)
  bool decode_attention_ = false;  // kernels::LaunchDecodeAttention (else the general chunked kernel)
  CudaGraph graphs_[kShapes];  // a graph per shape, captured when first used
  cudaGraphNode_t input_node_[kShapes] = {nullptr, nullptr};  // the graph's LaunchDecodeInput
  // Device memory from the backend's arena.
  void* state_ = nullptr;  // kernels::DecodeState
  float* h_ = nullptr;     // [D] residual stream
  float* q_ = nullptr;     // [H*d]
  float* k_ = nullptr;     // [Hkv*d]
  float* v_ = nullptr;     // [Hkv*d]
  float* attn_ = nullptr;  // [H*d]
  float* act_ = nullptr;   // [F] silu(gate) * up
  float* logits_ = nullptr;  // [V]
  void* attn_ws_ = nullptr;
  void* rope_table_ = nullptr;  // float2 [max positions, head_dim / 2]: RoPE's cos/sin
  size_t attn_ws_bytes_ = 0;
};

}  // namespace specgen
