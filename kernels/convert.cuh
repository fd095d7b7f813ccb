// fp32 → bf16 conversion of activations (the cuBLAS prefill path reads bf16), and fp32 rows into a KV
// cache of any cache type.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

// dst[i] = bf16(src[i]) round-to-nearest-even, i < n.  dst is uint16_t bf16 bits.
cudaError_t LaunchF32ToBf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream);

// dst[i] = src[i] rounded to `type` (kF32: copied; kF16 / kBF16: round-to-nearest-even), i < n; dst is
// an array of `type`.
cudaError_t LaunchF32ToCache(const float* src, void* dst, ElemType type, int64_t n, cudaStream_t stream);

}  // namespace specgen::kernels
