// One link of a chain of dependent kernels (kernel_chain.cu), for BM_KernelChainFloor.
#pragma once

#include <cuda_runtime_api.h>

namespace specgen::bench {

// in [1024] and out [max(blocks, 1024)] floats, device. `work`: read in, reduce it per block, write.
// `programmatic`: launched with programmatic dependent launch (sm_90+).
cudaError_t LaunchChainLink(const float* in, float* out, int blocks, bool work, bool programmatic,
                            cudaStream_t stream);

}  // namespace specgen::bench
