// The link's pinned host-to-device rate on this machine's GPU, for `specgen plan --calibrate`
// (moe/host/calibration.h's link_gbps): what a missed expert's fetch runs at.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"

namespace specgen::moe {

// Whether a CUDA device can be used (cudaGetDeviceCount > 0).
bool CudaDevicePresent();

// GB/s (1e9 bytes a second) of cudaMemcpyAsync from page-locked host memory (cudaMallocHost) to device
// memory, `bytes` a copy: one warm-up, then the best of `reps` copies timed with CUDA events.
absl::StatusOr<double> MeasurePinnedH2DGbps(size_t bytes = size_t{256} << 20, int reps = 5);

}  // namespace specgen::moe
