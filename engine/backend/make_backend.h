// MakeBackend: the Backend for a --device flag value. "auto" picks CUDA when this build has it and a
// device is present, else the CPU; "cuda" fails with a clear message when either is missing.
// Header-only so that it costs nothing in CPU-only builds; callers link specgen_backend_cpu and, when
// SPECGEN_WITH_CUDA is defined, specgen_backend_cuda.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/status_macros.h"
#include "kernels/kernel_types.h"
#if defined(SPECGEN_WITH_CUDA)
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace specgen {

struct BackendOptions {
  int cpu_threads = 0;      // <= 0: all hardware threads
  size_t vram_bytes = 0;    // CUDA arena budget; 0: free VRAM minus a reserve
  // CudaBackendOptions::gemv_order (--gemv-order); unset: kernels::kDefaultGemvOrder on the GPU. The
  // CPU backend has one order of its own, so kTensorCores with a CPU backend is refused rather than
  // silently ignored.
  std::optional<kernels::GemvOrder> gemv_order;
};

inline bool CudaCompiledIn() {
#if defined(SPECGEN_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

class CudaBackend;

// A backend and, when it is the CUDA backend, its concrete type (what the GPU-resident loop and
// kernels need), known where it was made rather than recovered by a cast.
struct MadeBackend {
  std::unique_ptr<Backend> backend;
  CudaBackend* cuda = nullptr;
  size_t vram_budget = 0;  // the CUDA backend's arena (what the offload planner may place), else 0
};

inline absl::StatusOr<MadeBackend> MakeDeviceBackend(std::string_view device, const BackendOptions& options = {}) {
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return InvalidArgument("--device must be auto, cpu or cuda, got '", device, "'");
  }
#if defined(SPECGEN_WITH_CUDA)
  if (device == "cuda" || (device == "auto" && CudaBackend::DeviceAvailable())) {
    CudaBackendOptions cuda;
    cuda.arena_bytes = options.vram_bytes;
    cuda.gemv_order = options.gemv_order.value_or(kernels::kDefaultGemvOrder);
    ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> be, CudaBackend::Create(cuda));
    MadeBackend made;
    made.cuda = be.get();
    made.vram_budget = be->arena().capacity();
    made.backend = std::move(be);
    return made;
  }
#else
  if (device == "cuda") {
    return absl::FailedPreconditionError(
        "--device cuda: this build has no CUDA support (configure with -DSPECGEN_CUDA=ON)");
  }
#endif
  if (options.gemv_order == kernels::GemvOrder::kTensorCores) {
    return absl::FailedPreconditionError(Cat(
        "--gemv-order tensor runs on the GPU only, and this run uses the CPU backend (--device ", device,
        "); leave --gemv-order at auto or fma, or run with --device cuda"));
  }
  MadeBackend made;
  made.backend = std::make_unique<CpuBackend>(options.cpu_threads);
  return made;
}

inline absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view device,
                                                            const BackendOptions& options = {}) {
  ASSIGN_OR_RETURN(MadeBackend made, MakeDeviceBackend(device, options));
  return std::move(made.backend);
}

}  // namespace specgen
