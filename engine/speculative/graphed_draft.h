// GraphedDraft: the resident draft's single-token decode (DESIGN §1) as a fixed sequence of fused
// kernels (kernels/decode_fused.cuh) on a dense Transformer's own weights and KV cache. The token and
// its position are read from device memory, so the sequence is captured once into a CUDA graph and
// replayed for every drafted token: 7 kernels per layer instead of ~20 launches and argument copies.
// On sm_90+ the kernels are launched with programmatic dependent launch, so each one's weight loads
// overlap the previous kernel's tail (results do not change: see kernels/decode_fused.cuh).
// Its logits equal Transformer::ForwardResident's for the same token up to fp32 rounding: the fused
// GEMV/norm/RoPE kernels repeat the Backend ops' arithmetic, but the attention (head_dim 64/128/256) is
// the single-query decode kernel, whose reduction order is its own. The graph and the eager launches
// of the same kernels agree bit for bit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/transformer.h"

namespace specgen {

// How a draft token was decoded (reported by the speculative stats and the benchmarks).
enum class DraftDecodePath : int {
  kTransformer = 0,  // Transformer::ForwardResident (Backend ops, one launch each)
  kFused = 1,        // GraphedDraft's kernels launched one by one
  kGraph = 2,        // GraphedDraft's kernels replayed from the captured CUDA graph
};
const char* DraftDecodePathName(DraftDecodePath path);

class GraphedDraft {
 public:
  // Empty when `lm` (on a CudaBackend) can take the fused decode; else the reason it cannot (an MoE
  // layer, f32 weights, a shape the fused kernels do not take).
  static std::string Unsupported(const Transformer& lm);
  // `use_graph`: capture on the first Decode and replay after; else the same kernels launched eagerly.
  // `lm` must run on `backend` and outlive this object.
  static absl::StatusOr<std::unique_ptr<GraphedDraft>> Create(CudaBackend* backend, Transformer* lm,
                                                             bool use_graph);
  ~GraphedDraft();
  GraphedDraft(const GraphedDraft&) = delete;
  GraphedDraft& operator=(const GraphedDraft&) = delete;

  // Decodes one token at position lm->n_past() and commits its K/V there. The token id is
  // *device_token when device_token is set (a drafted token that never visits the host), else
  // host_token. Returns the logits [V] in device memory, valid until the next Decode. Queues work
  // only: no host wait, no allocation, no argument copy.
  absl::StatusOr<const float*> Decode(const int32_t* device_token, int32_t host_token);

  // kGraph while the captured graph is in use; kFused when launching eagerly (asked for, or capture
  // failed: fallback_reason() says why).
  DraftDecodePath path() const { return use_graph_ ? DraftDecodePath::kGraph : DraftDecodePath::kFused; }
  int64_t graph_replays() const { return replays_; }
  int64_t eager_steps() const { return eager_; }
  const std::string& fallback_reason() const { return fallback_; }

 private:
  GraphedDraft(CudaBackend* backend, Transformer* lm, bool use_graph)
      : backend_(backend), lm_(lm), use_graph_(use_graph) {}
  absl::Status Allocate();
  // Queues the step's kernels on the backend's stream (captured or not); `programmatic`: with PDL.
  absl::Status Enqueue(bool programmatic);
  absl::Status Capture(bool programmatic);

  CudaBackend* backend_;
  Transformer* lm_;
  bool use_graph_;
  std::string fallback_;
  int64_t replays_ = 0;
  int64_t eager_ = 0;
  int max_blocks_ = 0;
  bool programmatic_ = false;  // the device takes programmatic dependent launch (sm_90+)
  bool decode_attention_ = false;  // kernels::LaunchDecodeAttention (else the general chunked kernel)
  cudaGraphExec_t exec_ = nullptr;
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
