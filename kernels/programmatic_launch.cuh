// Programmatic dependent launch (PDL, sm_90+): the device-side wait/trigger pair, the launch helper
// that sets the attribute, and the host's question whether the device takes it. Every kernel family
// that launches under PDL includes this header (and nothing else of another family for it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace specgen::kernels {

// Programmatic dependent launch (PDL, sm_90+): a kernel launched with `programmatic` may start while
// the stream's previous kernel is still running. Every kernel launched so (decode_fused.cu, attention.cu, ...) issues
// only reads of data no kernel of the step writes (weights, norm weights, tables; the decode attention
// also the position and the cache rows of earlier positions) before WaitForPrecedingGrid(), which
// returns once the previous grid has completed and its writes are visible; everything else comes after
// it, so results do not depend on the overlap. Each kernel calls LetDependentsLaunch() early so that
// the next one's blocks can be scheduled (and start fetching their weights) during its tail. Both are
// no-ops for a kernel launched without the attribute. A kernel launched without it still waits for the
// previous one.
// Whether `device` takes programmatic dependent launch (compute capability 9.0+); false when it cannot
// be asked. Launching with the attribute elsewhere is the caller's error.
bool ProgrammaticLaunchSupported(int device);
// The same for the device current when first asked, remembered for the process: what the Backend
// op launchers (norm, GEMV) use, which know no device of their own (specgen drives one GPU).
bool ProgrammaticLaunchOnCurrentDevice();
// The current device's multiprocessors, asked once as above (132 where it cannot be asked): what
// LaunchGemv sizes its rows a warp by.
int MultiprocessorsOnCurrentDevice();
#ifdef __CUDACC__
__device__ __forceinline__ void WaitForPrecedingGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void LetDependentsLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when `programmatic`.
template <typename... Params, typename... Args>
cudaError_t LaunchDecodeKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                               cudaStream_t stream, bool programmatic, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}
#endif  // __CUDACC__

}  // namespace specgen::kernels
