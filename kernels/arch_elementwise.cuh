// The element-wise ops of the GLM-4.5 / gpt-oss forward pass (ModelFeature, issue 45): a projection's
// bias, gpt-oss's clamped SwiGLU and a shared expert's sigmoid gate. Each is the CPU backend's formula
// in the same order of fp32 operations, every product and sum rounded on its own (no contraction into
// an FMA), so the only difference from the host is CUDA's expf against the host's (a few ulps).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

// y[r, c] += bias[c] for r < rows, c < cols.
//   y     [rows, cols] fp32, device;  bias  [cols] of bias_type (kF32, kF16 or kBF16), device
cudaError_t LaunchAddBias(float* y, const void* bias, ElemType bias_type, int64_t rows, int cols,
                          cudaStream_t stream);

// gpt-oss's expert activation, i < n: g = min(gate, limit), u = clamp(up, −limit, limit),
// out = (u + 1) · (g · σ(alpha · g)), σ(z) = 1 / (1 + e^−z). out may alias gate or up.
cudaError_t LaunchSwiGluClamped(const float* gate, const float* up, float* out, int64_t n, float alpha,
                                float limit, cudaStream_t stream);

// y[r, :] *= σ(g[r]) for r < rows (a shared expert's gate; g [rows] fp32, y [rows, cols] fp32).
cudaError_t LaunchScaleRowsBySigmoid(const float* g, float* y, int64_t rows, int cols, cudaStream_t stream);

}  // namespace specgen::kernels
