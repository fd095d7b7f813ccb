// The bytes the CUDA backend keeps for a weight (its "device form"), computed on the host: f32, f16
// and bf16 as stored, matrices of the block types the packed kernels read (Q8_0, Q4_0, Q4_K, Q5_K,
// Q6_K, MXFP4: kernels/packed.cuh) as stored, packed; every other quantized type, and any quantized vector,
// dequantized to bf16. CudaBackend::Upload puts exactly these bytes in VRAM.
// Streamed weights (moe/cuda/host_arena.h) are copied into pinned host memory in this form,
// so a weight read from a streamed copy is the same bytes as a resident one (docs/design.md §6.6).
// Plain host code: the CPU build compiles and tests it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/tensor_view.h"
#include "kernels/kernel_types.h"

namespace specgen {

struct DeviceForm {
  kernels::ElemType type = kernels::ElemType::kBF16;
  int64_t rows = 0, cols = 0;  // [out, in]; a vector is [1, n]
  size_t bytes = 0;
};

// The packed element type a matrix of `t` keeps on the device, or nullopt when it is not one of them.
std::optional<kernels::ElemType> PackedDeviceType(DType t);

// The device form of `t` (a 1-D or 2-D host tensor); `name` is used in error messages.
absl::StatusOr<DeviceForm> DeviceFormOf(const TensorView& t, std::string_view name);

// Writes the device form of `t` to `dst` (DeviceFormOf(t).bytes bytes; any alignment). Thread-safe.
absl::Status WriteDeviceForm(const TensorView& t, std::string_view name, void* dst);

}  // namespace specgen
