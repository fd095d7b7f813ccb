// The whole single-token decode of a dense model (the resident draft) as ONE persistent cooperative
// kernel: one block per multiprocessor walks every layer's phases (QKV projection, q/k-norm + RoPE + KV
// append + attention, O projection, gate/up + SwiGLU, down projection) and the output head. The aim: at
// one token a layer's matrices are 4-13 MB, a few microseconds of HBM time each, and the separate
// kernels of decode_fused.cuh spend most of a layer starting, waiting and draining (~26 us per
// qwen3-0.6b layer in the graph against 7.5 us of weight reads). Today this kernel is slower than that
// graph (bench/RESULTS_H200.md measures its phases and says why); it is the opt-in path kPersistent.
// There is no grid barrier: the activations one phase hands to the next carry the epoch of the phase
// that wrote them (8-byte {value, epoch} pairs, single-copy atomic), and a block polls exactly the
// elements it needs until they carry the epoch it expects, so a phase starts as soon as its inputs
// exist. Each block issues its first weight loads before it polls (weights never depend on the token),
// and an attention item copies its committed cache rows into shared memory (cp.async) while the QKV
// projection runs, so HBM keeps streaming while blocks wait for each other.
//
// Results: every GEMV and RMSNorm is computed with the operations and the order of the Backend ops
// (gemv_rows.cuh), and q/k-norm + RoPE repeat QkNormRopeAppendKernel's arithmetic; the attention sums in
// its own fixed order (warps split the chunks of up to 128 slots of each kv head), so logits equal
// Transformer::ForwardResident's up to fp32 rounding. Nothing depends on timing: two launches with the
// same inputs give the same bits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernel_types.h"
#include "kernels/rope.cuh"

namespace specgen::kernels {

// One layer's device pointers. Projection weights are [rows, in] of the launch's w_type, 16-byte
// aligned; norms [n] of norm_type.
struct PersistentLayer {
  const void* attn_norm = nullptr;  // [hidden]
  const void* q = nullptr;          // [heads * head_dim, hidden]
  const void* k = nullptr;          // [kv_heads * head_dim, hidden]
  const void* v = nullptr;          // [kv_heads * head_dim, hidden]
  const void* q_norm = nullptr;     // [head_dim] or nullptr (then k_norm is nullptr too)
  const void* k_norm = nullptr;     // [head_dim] or nullptr
  const void* o = nullptr;          // [hidden, heads * head_dim]
  const void* ffn_norm = nullptr;   // [hidden]
  const void* gate = nullptr;       // [ffn, hidden]
  const void* up = nullptr;         // [ffn, hidden]
  const void* down = nullptr;       // [hidden, ffn]
  float* k_cache = nullptr;         // [capacity, kv_heads * head_dim] fp32
  float* v_cache = nullptr;         // [capacity, kv_heads * head_dim] fp32
};

struct PersistentDecodeParams {
  const PersistentLayer* layers = nullptr;  // device array [n_layers]
  int n_layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  int capacity = 0;  // KV cache rows (and RoPE table positions)
  ElemType w_type = ElemType::kBF16;     // every projection and the head: bf16 or f16
  ElemType norm_type = ElemType::kF32;   // every norm weight
  ElemType embed_type = ElemType::kF32;  // the token embedding table
  float eps = 1e-6f, scale = 1.f;        // RMSNorm epsilon; attention scale (1/sqrt(head_dim))
  RopeStyle style = RopeStyle::kRotateHalf;
  const float2* rope_table = nullptr;  // LaunchRopeTable(table, capacity, head_dim, theta)
  const void* embedding = nullptr;     // [vocab, hidden] of embed_type
  const void* out_norm = nullptr;      // [hidden]
  const void* head = nullptr;          // [vocab, hidden] of w_type
  float* logits = nullptr;  // [vocab] fp32, device: the result
  // PersistentDecodeWorkspaceBytes bytes, ZEROED once before the first launch (the activations that
  // pass between phases, with their epochs, and the attention merge counters; every launch leaves them
  // consistent for the next).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Measurement hooks for the benchmarks (results never depend on them). timeline: when set, device
  // memory of PersistentDecodeTimelineEntries(n_layers, blocks) u64: thread 0 of block b writes the
  // global timer (ns) at the end of its phase k (0 the embedding, then per layer QKV, attention, O,
  // gate/up, down; last the head) to [k * (blocks + 1) + b].
  unsigned long long* timeline = nullptr;
  // L2 prefetch of each block's weights two weight phases ahead (cp.async.bulk.prefetch.L2). Off by
  // default: on the H200 it made the phases slower (its bulk requests queue ahead of the loads on the
  // critical path; BM_PersistentPhases measures both).
  bool l2_prefetch = false;
};

// Phases per token that hand activations on: the embedding and five per layer (the head is last).
constexpr int PersistentDecodePhases(int n_layers) { return 1 + 5 * n_layers; }
// Stamps inside each layer's attention phase, block 0 only, after the timeline's rows: [l * 8 + s] =
// s 0 entry, 1 new K/V row appended, 2 queries rotated and cache rows staged, 3 slot loop done, 4 merged.
inline constexpr int kPersistentProbeSlots = 8;
inline size_t PersistentDecodeTimelineEntries(int n_layers, int blocks) {
  return static_cast<size_t>(PersistentDecodePhases(n_layers) + 1) * (blocks + 1) +
         static_cast<size_t>(n_layers) * kPersistentProbeSlots;
}

// Workspace bytes for p's shapes (n_layers, hidden, heads, kv_heads, head_dim, ffn, capacity).
size_t PersistentDecodeWorkspaceBytes(const PersistentDecodeParams& p);

// Empty when the shapes are ones the kernel takes (in dims multiples of 8 up to 8192, head_dim a
// multiple of 4 up to 256, heads / kv_heads up to 8), else what is not.
const char* PersistentDecodeUnsupported(const PersistentDecodeParams& p);

// Blocks of the cooperative grid for these params on the current device (one per multiprocessor), or
// 0 when the device cannot launch it (no cooperative launch, or a block does not fit).
int PersistentDecodeBlocks(const PersistentDecodeParams& p);

// Decodes one token at position `pos` (< capacity): token = *device_token when set, else host_token;
// writes its K/V at row `pos` of every layer's cache and its logits to p.logits. Slots 0..pos-1 of the
// caches must hold the committed prefix. `launch_index`: 0 for the first launch on this workspace, +1
// for each launch after (the grid barrier counts up from it). `blocks`: PersistentDecodeBlocks(p).
cudaError_t LaunchPersistentDecode(const PersistentDecodeParams& p, const int32_t* device_token,
                                   int32_t host_token, int32_t pos, uint64_t launch_index, int blocks,
                                   cudaStream_t stream);

}  // namespace specgen::kernels
