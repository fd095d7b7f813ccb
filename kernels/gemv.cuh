// Small-batch matrix product for decode and verification (1..16 tokens): y = x · W^T with W in
// bf16/f16 read from HBM exactly once for all tokens, fp32 accumulation, and ONE reduction order per
// output element whatever the batch size (docs/design.md §6.6 batch invariance: row i of y is bit-identical
// whether the call had 1 or 16 tokens).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

inline constexpr int kGemvMaxTokens = 16;

// One weight matrix of a fused GEMV launch: y[o] (op)= sum_k x[k] * w[o, k] for o < rows.
struct GemvSegment {
  const void* w = nullptr;  // [rows, in] bf16/f16 (the launch's w_type), 16-byte aligned, device
  float* y = nullptr;       // [rows] fp32, device
  int rows = 0;
};

enum class GemvEpilogue : uint8_t {
  kStore = 0,   // y[o] = s
  kAddTo = 1,   // y[o] = y[o] + s  (residual add, as LaunchAdd)
  kSwiGlu = 2,  // segments[0] = gate, segments[1] = up (same rows); segments[0].y[o] =
                // silu(gate_o) * up_o (as LaunchSwiGlu); segments[1].y unused
};

// Whether LaunchGemv takes a product of w_type weights reduced over `in` values: bf16/f16 in 16-byte
// loads of 8, and the packed block types over whole blocks (kernels/packed.cuh, their own order). The
// others go to the row kernel (LaunchMatMulRows), whose reduction order differs; every path that must
// equal MatMul bit for bit (kernels/routed_experts.cu) chooses its order by this.
constexpr bool GemvTakes(ElemType w_type, int in) {
  return IsPacked(w_type) ? in > 0 && in % BlockElems(w_type) == 0 : w_type != ElemType::kF32 && in % 8 == 0;
}

// y[t, o] = sum_k x[t, k] * W[o, k]   for t < n, o < out.
//   w       [out, in] of type w_type (kBF16 or kF16), row-major (HF layout), device, 16-byte aligned
//   x       [n, in] fp32, device, 16-byte aligned
//   y       [n, out] fp32, device (must not alias x)
//   n       tokens, 1..kGemvMaxTokens
//   out,in  in must be a multiple of 8 (16-byte weight loads)
// Reduction order of y[t, o] (`order`):
//   kFma: lane l of the warp owning row o sums k = l*8 + 256*s + j for s = 0,1,.. and j = 0..7 in that
//     order with fmaf, then a fixed butterfly across the 32 lanes;
//   kTensorCores (bf16 weights, in % 32 == 0; else kFma): x rounded to bf16 hi + lo, the row's 32-input
//     blocks split over GemvOrderParts parts, each part's hi and lo products summed by mma.m16n8k16 in
//     block order, hi + lo, then the parts in order (kernels/mma_tile.cuh).
// Nothing in either depends on n (each token is its own mma column), so results are batch invariant
// bit for bit; the two orders differ from each other in the last bits.
// Packed weights (IsPacked(w_type), in a whole number of blocks) take kernels/packed.cuh's product, in its
// one order under either GemvOrder.
// Returns cudaErrorInvalidValue for bad shapes or types.
cudaError_t LaunchGemv(const void* w, ElemType w_type, const float* x, float* y, int n, int out,
                       int in, cudaStream_t stream, GemvOrder order = kDefaultGemvOrder);

// LaunchGemv over up to 3 matrices of the same x in one launch, with an epilogue: segment i's output
// is segments[i].y [n, segments[i].rows]; kStore writes the products, kAddTo adds them to y (as
// LaunchAdd: the residual), kSwiGlu takes segments[0] = gate and [1] = up (same rows) and writes
// silu(gate) * up into segments[0].y (as LaunchSwiGlu). Every product is reduced in LaunchGemv's order,
// so each result equals LaunchGemv (+ LaunchAdd / LaunchSwiGlu) bit for bit, whatever n.
//   weights 16-byte aligned, of w_type; y must not alias x; n 1..kGemvMaxTokens; in multiple of 8.
cudaError_t LaunchGemvSegments(const GemvSegment* segments, int n_segments, ElemType w_type, const float* x,
                               int n, int in, GemvEpilogue epilogue, cudaStream_t stream,
                               GemvOrder order = kDefaultGemvOrder);

// Whether LaunchGemv under `order` reduces a product of w_type weights over `in` inputs on tensor cores,
// and how many parts then split each row of a matrix of `rows` rows: a function of the shape alone (so
// a matrix's bits never depend on n or the device), but of the row count, so the Backend's fused
// launches split segments whose parts differ (q vs k/v). 1 in the FMA order, whose bits never depend
// on the row count.
bool GemvTensorOrder(GemvOrder order, ElemType w_type, int in);
int GemvOrderParts(GemvOrder order, ElemType w_type, int rows, int in);

}  // namespace specgen::kernels
