// The launch-to-launch floor of a CUDA graph of dependent kernels, the cost every kernel boundary of the
// draft's decode graph pays before doing any work of its own (BM_KernelChainFloor). Each link waits for
// its predecessor (under PDL: griddepcontrol.wait; without: stream order); with `work` its blocks then
// do what a decode GEMV's prologue does after the wait: read a 1024-float vector from L2, reduce it
// across the block, and write one value per block.
#include "bench/e2e_gpu/kernel_chain.h"

#include "kernels/programmatic_launch.cuh"

namespace specgen::bench {
namespace {

// work 2 and 3 add the same 1024 FMAs a thread after the reduction: work 2 fully unrolled (16 KB of
// straight code), in 8 copies (kCopy: links cycle through them, so a multiprocessor's instruction cache
// sees 128 KB of code, as it sees the decode graph's five ~50 KB kernels); work 3 as a loop (a few
// instructions). The difference is what fetching a kernel's instructions costs on its critical path.
constexpr int kCodeFmas = 1024;

// The block's sum of in[0..1023]^2, in every thread: what a decode GEMV's prologue does after its wait.
// kFromL2: the loads skip L1 (ChainFlagKernel's input was not published by a grid boundary).
template <bool kFromL2>
__device__ __forceinline__ float BlockSumOfSquares(const float* in) {
  __shared__ float partial[32];
  float s = 0.f;
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) {
    const float v = kFromL2 ? __ldcg(in + i) : in[i];
    s += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) t += partial[w];
  return t;
}

template <int kCopy, bool kUnrolled>
__global__ void ChainLinkKernel(const float* __restrict__ in, float* __restrict__ out, int work) {
  kernels::LetDependentsLaunch();
  kernels::WaitForPrecedingGrid();
  if (!work) {
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = in[0] + 1.f;
    return;
  }
  float t = BlockSumOfSquares<false>(in);
  if (work >= 2) {
    // 8 chains of 128 dependent FMAs, the same operands in both forms.
    constexpr float kScale = 0.999f + kCopy * 1e-5f;
    float acc[8], add[8];
#pragma unroll
    for (int a = 0; a < 8; ++a) {
      acc[a] = t + a;
      add[a] = 0.001f * (a + 1) + t * 1e-9f;
    }
    if constexpr (kUnrolled) {
#pragma unroll
      for (int i = 0; i < kCodeFmas; ++i) acc[i & 7] = fmaf(acc[i & 7], kScale, add[i & 7]);
    } else {
#pragma unroll 1
      for (int i = 0; i < kCodeFmas; i += 8) {
#pragma unroll
        for (int a = 0; a < 8; ++a) acc[a] = fmaf(acc[a], kScale, add[a]);
      }
    }
#pragma unroll
    for (int a = 0; a < 8; ++a) t += acc[a];
  }
  if (threadIdx.x == 0) out[blockIdx.x] = t * 1e-6f;
}

// work 4: work 1 with the link's dependency carried by a counter instead of the grid boundary: each
// block adds 1 to counters[link] (release) after writing its value, and link + 1's blocks wait until
// the count reaches the grid size (acquire) instead of in griddepcontrol.wait. Launched under PDL all
// the same, so each link's blocks are resident (the predecessor's have all started) before they spin.
// Measures what the hardware's grid-completion path costs against a flag in L2.
__global__ void ChainFlagKernel(const float* __restrict__ in, float* __restrict__ out, unsigned* counters,
                                int link, unsigned prev_blocks) {
  kernels::LetDependentsLaunch();
  if (link > 0) {
    if (threadIdx.x == 0) {
      unsigned seen = 0;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counters + link - 1) : "memory");
      } while (seen < prev_blocks);
    }
    __syncthreads();
  }
  const float t = BlockSumOfSquares<true>(in);
  if (threadIdx.x == 0) {
    __stcg(out + blockIdx.x, t * 1e-6f);
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counters + link) : "memory");
  }
}

template <bool kUnrolled>
cudaError_t LaunchCopy(int copy, const float* in, float* out, int blocks, int work, bool programmatic,
                       cudaStream_t stream) {
  using Kernel = void (*)(const float*, float*, int);
  static constexpr Kernel kCopies[8] = {
      ChainLinkKernel<0, kUnrolled>, ChainLinkKernel<1, kUnrolled>, ChainLinkKernel<2, kUnrolled>,
      ChainLinkKernel<3, kUnrolled>, ChainLinkKernel<4, kUnrolled>, ChainLinkKernel<5, kUnrolled>,
      ChainLinkKernel<6, kUnrolled>, ChainLinkKernel<7, kUnrolled>};
  return kernels::LaunchDecodeKernel(kCopies[copy & 7], dim3(blocks), dim3(256), 0, stream, programmatic, in,
                                     out, work);
}

// Streams [src, src + n) from HBM over and over (every load of a thread in flight 4 deep) until *stop,
// counting the bytes read into *bytes: HBM traffic that is not on the chain's path.
__global__ void __launch_bounds__(1024) HbmReaderKernel(const uint4* __restrict__ src, size_t n,
                                                        const volatile int* stop,
                                                        unsigned long long* bytes, unsigned* sink) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  unsigned long long read = 0;
  do {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += 4 * stride) {
      uint4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        v[u] = i + u * stride < n ? __ldcs(src + i + u * stride) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
      read += 4 * sizeof(uint4);
    }
  } while (*stop == 0);
  atomicAdd(bytes, read);
  if (acc == 0x12345678u) *sink = acc;
}

}  // namespace

cudaError_t LaunchHbmReader(const void* src, size_t bytes, int blocks, const int* stop,
                            unsigned long long* read, unsigned* sink, cudaStream_t stream) {
  HbmReaderKernel<<<blocks, 1024, 0, stream>>>(static_cast<const uint4*>(src), bytes / sizeof(uint4), stop,
                                               read, sink);
  return cudaGetLastError();
}

cudaError_t LaunchChainLink(const float* in, float* out, int blocks, int work, bool programmatic,
                            cudaStream_t stream, int link, unsigned* counters) {
  if (work == 4) {
    if (counters == nullptr) return cudaErrorInvalidValue;
    return kernels::LaunchDecodeKernel(ChainFlagKernel, dim3(blocks), dim3(256), 0, stream, programmatic, in, out,
                                       counters, link, static_cast<unsigned>(blocks));
  }
  if (work == 2) return LaunchCopy<true>(link, in, out, blocks, work, programmatic, stream);
  return LaunchCopy<false>(work == 3 ? link : 0, in, out, blocks, work, programmatic, stream);
}

}  // namespace specgen::bench
