// The launch-to-launch floor of a CUDA graph of dependent kernels, the cost every kernel boundary of the
// draft's decode graph pays before doing any work of its own (BM_KernelChainFloor). Each link waits for
// its predecessor (under PDL: griddepcontrol.wait; without: stream order); with `work` its blocks then
// do what a decode GEMV's prologue does after the wait: read a 1024-float vector from L2, reduce it
// across the block, and write one value per block.
#include "bench/e2e_gpu/kernel_chain.h"

#include "kernels/decode_fused.cuh"  // LaunchDecodeKernel, WaitForPrecedingGrid, LetDependentsLaunch

namespace specgen::bench {
namespace {

__global__ void ChainLinkKernel(const float* __restrict__ in, float* __restrict__ out, int work) {
  kernels::LetDependentsLaunch();
  kernels::WaitForPrecedingGrid();
  if (!work) {
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = in[0] + 1.f;
    return;
  }
  __shared__ float partial[32];
  float s = 0.f;
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) s += in[i] * in[i];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) t += partial[w];
    out[blockIdx.x] = t * 1e-6f;
  }
}

}  // namespace

cudaError_t LaunchChainLink(const float* in, float* out, int blocks, bool work, bool programmatic,
                            cudaStream_t stream) {
  return kernels::LaunchDecodeKernel(ChainLinkKernel, dim3(blocks), dim3(256), 0, stream, programmatic, in, out,
                                     work ? 1 : 0);
}

}  // namespace specgen::bench
