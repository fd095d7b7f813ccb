// One link of a chain of dependent kernels (kernel_chain.cu), for BM_KernelChainFloor.
#pragma once

#include <cuda_runtime_api.h>

namespace specgen::bench {

// in [1024] and out [max(blocks, 1024)] floats, device. `work`: read in, reduce it per block, write.
// `programmatic`: launched with programmatic dependent launch (sm_90+).
// One link: work 0 nothing, 1 a GEMV prologue's read + reduction, 2 that + 1024 FMAs a thread in
// straight code (one of 8 copies, by `link`), 3 the same FMAs as a loop, 4 work 1 waiting for its
// predecessor through counters[link - 1] (zeroed before the chain) instead of the grid boundary (see
// kernel_chain.cu).
cudaError_t LaunchChainLink(const float* in, float* out, int blocks, int work, bool programmatic,
                            cudaStream_t stream, int link, unsigned* counters = nullptr);

// HBM traffic beside the chain: `blocks` blocks of 1024 threads stream [src, src + bytes) over and over
// until *stop (device memory) turns non-zero, adding the bytes they read to *read.
cudaError_t LaunchHbmReader(const void* src, size_t bytes, int blocks, const int* stop,
                            unsigned long long* read, unsigned* sink, cudaStream_t stream);

}  // namespace specgen::bench
