// CUDA error → absl::Status at the boundary between kernel launchers and the engine: the Status names
// the failing call, the file and the line (docs/design.md §6.7). Depends on the CUDA runtime and Abseil only,
// never on engine/core, so kernels/ stays free of model code.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace specgen {

// OK for cudaSuccess; otherwise an Internal (or ResourceExhausted for out-of-memory, InvalidArgument
// for bad launch arguments) Status "CUDA error <name> (<text>) in <call> at <file>:<line>".
inline absl::Status CudaStatus(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                                 ") in ", call, " at ", file, ":", line);
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorInvalidValue:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace specgen

// SPECGEN_CUDA_STATUS(expr): the Status of a cudaError_t expression (a runtime call or a launcher).
#define SPECGEN_CUDA_STATUS(expr) ::specgen::CudaStatus((expr), #expr, __FILE__, __LINE__)

// SPECGEN_CUDA_RETURN_IF_ERROR(expr): returns the Status of a failing cudaError_t expression.
#define SPECGEN_CUDA_RETURN_IF_ERROR(expr)                              \
  do {                                                                  \
    ::absl::Status _specgen_cuda_status = SPECGEN_CUDA_STATUS(expr);    \
    if (!_specgen_cuda_status.ok()) return _specgen_cuda_status;        \
  } while (0)
