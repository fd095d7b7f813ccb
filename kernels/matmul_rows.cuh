// The general matrix product of the CUDA backend: any weight type (f32 included) and width, any
// batch, one fixed reduction order per output element.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

// y[t, o] = sum_k x[t, k] * W[o, k] for t < n, o < out, any n >= 1 and any in >= 1.
//   w  [out, in] of type w_type (kF32, kF16 or kBF16), row-major, device
//   x  [n, in] fp32, device;  y [n, out] fp32, device (must not alias x)
// Reduction order of y[t, o]: lane l of a warp sums k = l, l + 32, ... with fmaf, then a fixed
// butterfly over the lanes; independent of n (batch invariant). One warp per output row and token.
cudaError_t LaunchMatMulRows(const void* w, ElemType w_type, const float* x, float* y, int n,
                             int out, int in, cudaStream_t stream);

}  // namespace specgen::kernels
