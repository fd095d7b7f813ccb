#include "kernels/routing_override.cuh"

namespace specgen::kernels {
namespace {

// One thread an id: n·k of them (at most a verification pass's 16 rows of top-k, or a host-routed
// batch's), one block of 256 threads per 256 ids.
__global__ void RoutingOverrideKernel(RoutingTraceTable trace, int layer, const int32_t* positions,
                                      const int32_t* base, int n, int32_t* ids) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * trace.k) return;
  const int t = i / trace.k, j = i % trace.k;
  const int64_t pos = positions != nullptr ? int64_t{positions[t]} : int64_t{*base} + t;
  const int64_t row = pos % trace.positions;
  ids[i] = trace.ids[(row * trace.layers + layer) * trace.k + j];
}

}  // namespace

cudaError_t LaunchRoutingOverride(const RoutingTraceTable& trace, int layer, const int32_t* positions,
                                  const int32_t* base, int n, int32_t* ids, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (trace.ids == nullptr || trace.positions <= 0 || trace.k <= 0 || layer < 0 || layer >= trace.layers ||
      (positions == nullptr) == (base == nullptr)) {
    return cudaErrorInvalidValue;
  }
  constexpr int kThreads = 256;
  const int total = n * trace.k;
  RoutingOverrideKernel<<<(total + kThreads - 1) / kThreads, kThreads, 0, stream>>>(trace, layer, positions, base,
                                                                                    n, ids);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
