// Element-wise kernels of the transformer block: SwiGLU activation, residual add, and the embedding
// lookup (bf16/f16/f32 table rows gathered into fp32 activations).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)); i < n.
//   gate, up, out  [n] fp32, device (e.g. [tokens, ffn_dim] flattened); out may alias gate or up
cudaError_t LaunchSwiGlu(const float* gate, const float* up, float* out, int64_t n,
                         cudaStream_t stream);

// out[i] = a[i] + b[i]; i < n. out may alias a or b (residual += delta).
cudaError_t LaunchAdd(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);

// out[t, :] = table[ids[t], :] as fp32.
//   table  [vocab, dim] of type table_type, row-major, device
//   ids    [tokens] int32 token ids, device; an id outside [0, vocab) yields a NaN row (the backend
//          validates ids on the host before upload; NaN makes a slip visible rather than silent)
//   out    [tokens, dim] fp32, device
cudaError_t LaunchEmbedding(const void* table, ElemType table_type, int64_t vocab, int dim,
                            const int32_t* ids, int tokens, float* out, cudaStream_t stream);

// *dst = value, one thread, launched plainly (no programmatic edge: whatever follows it in a stream
// or a graph starts after the store). A captured pass's first node (engine/speculative/
// graphed_target_pass.h): SetStoreInt32NodeArgs gives each replay its value (the KV cache's length).
cudaError_t LaunchStoreInt32(int32_t* dst, int32_t value, cudaStream_t stream);
// Replaces the arguments of a captured LaunchStoreInt32 in `exec` (effective from its next launch).
// `node`: that launch's node in the graph `exec` was instantiated from.
cudaError_t SetStoreInt32NodeArgs(cudaGraphExec_t exec, cudaGraphNode_t node, int32_t* dst, int32_t value);

}  // namespace specgen::kernels
