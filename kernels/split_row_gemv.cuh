// The decode's residual GEMVs (the O and down projections: y[o] += sum_k x[k] w[o, k] over one token)
// with each row split across kSplitRowWarps warps of a block. These matrices have few rows (the hidden
// size) and long ones (the attention width, the FFN width), so one warp a row left a multiprocessor ~8
// warps, each walking a 2-3 K-long chain of loads and FMAs, and made every block hold a whole row of
// weights in registers (which decided how many blocks started beside the previous kernel under PDL). Here
// each warp holds a quarter of a row, reads its quarter of x straight from global memory (no staged
// copy, no block barrier before the dots) and the quarters' sums are added in warp order.
// Deterministic (a fixed order for every output), but not the Backend GEMV's order: results equal
// LaunchGemv + LaunchAdd up to fp32 rounding.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

inline constexpr int kSplitRowWarps = 4;  // warps a row

// Whether LaunchSplitRowAddGemv takes rows of `in` inputs of w_type: bf16/f16, in a multiple of
// 256 * kSplitRowWarps and at most 4 of those (4096).
bool SplitRowAddGemvTakes(int in, ElemType w_type);

// y[o] = y[o] + sum_k x[k] * w[o, k] for o < rows: x [in] fp32 (16-byte aligned), w [rows, in] of w_type
// (16-byte aligned rows), y [rows] fp32, all device; x may not alias y. `programmatic`: launched with
// PDL (sm_90+): the weights are loaded before waiting for the previous kernel, x and y after.
// cudaErrorInvalidValue for a shape it does not take.
cudaError_t LaunchSplitRowAddGemv(const float* x, const void* w, ElemType w_type, float* y, int rows, int in,
                                  cudaStream_t stream, bool programmatic);

}  // namespace specgen::kernels
