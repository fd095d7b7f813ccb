// Row gather and scaled scatter-add for the expert FFN on host-routed MoE layers: the tokens of one
// expert gathered into a batch, and its outputs added back to their rows in a fixed order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

// dst[i, :] = src[rows[i], :] for i < m.  src [*, cols], dst [m, cols] fp32; rows [m] int32, device.
cudaError_t LaunchGatherRows(const float* src, const int32_t* rows, int m, int cols, float* dst,
                             cudaStream_t stream);

// dst[rows[i], :] += scales[i] * src[i, :] for i = 0, 1, ..., m-1 in that order (each column is one
// thread walking i, so repeated rows accumulate in order). src [m, cols]; rows, scales [m], device.
cudaError_t LaunchScatterAddScaled(const float* src, const int32_t* rows, const float* scales, int m,
                                   int cols, float* dst, cudaStream_t stream);

}  // namespace specgen::kernels
