// The routing regimes of the offload benchmarks (docs/design.md §12; never generate or chat): after the
// router has written a pass's top-k ids on the device, this rewrites them from a device copy of a
// RoutingTable (engine/backend/routing_table.h), row t taking the table's ids of one MoE layer at the
// row's absolute position mod the trace's length. The router's weights are left as they are. The
// positions are read from device memory when the launch runs, so a pass replayed from a CUDA graph
// routes by the replay's positions, not the captured ones.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace specgen::kernels {

// A trace on the device: ids [positions, layers, k] row-major, int32.
struct RoutingTraceTable {
  const int32_t* ids = nullptr;
  int64_t positions = 0;
  int layers = 0;
  int k = 0;
};

// ids[t * k + j] = trace.ids[((pos_t mod positions) * layers + layer) * k + j] for t < n, j < k, where
// pos_t = positions[t] (device int32, each >= 0) when `positions` is given, else *base + t (the
// consecutive positions of a pass whose start the device holds: CudaBackend::SetDeviceLength).
cudaError_t LaunchRoutingOverride(const RoutingTraceTable& trace, int layer, const int32_t* positions,
                                  const int32_t* base, int n, int32_t* ids, cudaStream_t stream);

}  // namespace specgen::kernels
