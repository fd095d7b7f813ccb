// Shared by the GPU tests: skip without a CUDA device, find the repository's data (tests/data,
// models/) on a machine where the build's SPECGEN_SOURCE_DIR does not exist, and a CudaBackend with a
// small budget so test binaries can share one GPU.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/backend/cuda/cuda_backend.h"
#include "gtest/gtest.h"

namespace specgen::testing {

#define SPECGEN_SKIP_WITHOUT_CUDA()                                          \
  do {                                                                       \
    if (!::specgen::CudaBackend::DeviceAvailable()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// $SPECGEN_SOURCE_DIR, else the working directory when it holds tests/data, else the build's source.
inline std::filesystem::path SourceDir() {
  if (const char* env = std::getenv("SPECGEN_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
  if (std::filesystem::exists("tests/data")) return std::filesystem::current_path();
  return SPECGEN_SOURCE_DIR;
}

inline std::unique_ptr<CudaBackend> TestCudaBackend(size_t budget = size_t{2} << 30,
                                                    kernels::GemvOrder order = kernels::GemvOrder::kFma) {
  CudaBackendOptions o;
  o.arena_bytes = budget;
  o.gemv_order = order;
  auto be = CudaBackend::Create(o);
  EXPECT_TRUE(be.ok()) << be.status();
  return be.ok() ? std::move(be).value() : nullptr;
}

}  // namespace specgen::testing
