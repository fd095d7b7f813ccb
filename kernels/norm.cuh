// RMSNorm over rows of fp32 activations, for whole hidden rows and per attention head (Qwen3 q/k
// norm). fp32 in and out, weight of any ElemType, fp32 accumulation in a fixed reduction order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:]
//   x       [rows, dim] fp32, row-major, device
//   weight  [dim] of type weight_type, device (the norm's gain vector)
//   out     [rows, dim] fp32, device; may alias x (in place)
//   rows    number of rows (>= 0); per-head norm passes rows = tokens * heads, dim = head_dim
//   eps     added to the mean square
// One block per row; the row's sum of squares is reduced in an order that depends only on dim.
cudaError_t LaunchRmsNorm(const float* x, const void* weight, ElemType weight_type, float* out,
                          int64_t rows, int dim, float eps, cudaStream_t stream);

}  // namespace specgen::kernels
