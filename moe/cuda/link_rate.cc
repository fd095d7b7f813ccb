#include "moe/cuda/link_rate.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "engine/core/str_cat.h"

namespace specgen::moe {
namespace {

absl::Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(Cat("link rate: ", what, ": ", cudaGetErrorString(e)));
}

}  // namespace

bool CudaDevicePresent() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

absl::StatusOr<double> MeasurePinnedH2DGbps(size_t bytes, int reps) {
  void* host = nullptr;
  void* device = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  // Everything made is freed on every path: a failed measurement leaves the device as it was.
  auto release = [&] {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
    if (device) cudaFree(device);
    if (host) cudaFreeHost(host);
  };
  absl::Status s = Check(cudaMallocHost(&host, bytes), "cudaMallocHost");
  if (s.ok()) s = Check(cudaMalloc(&device, bytes), "cudaMalloc");
  if (s.ok()) s = Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (s.ok()) s = Check(cudaEventCreate(&start), "cudaEventCreate");
  if (s.ok()) s = Check(cudaEventCreate(&stop), "cudaEventCreate");
  if (s.ok()) {
    // Touch the pages, so the first timed copy does not pay for them.
    static_cast<char*>(host)[0] = 1;
    for (size_t i = 0; i < bytes; i += 4096) static_cast<char*>(host)[i] = static_cast<char>(i);
    s = Check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream), "warm-up copy");
  }
  double best = 0;
  for (int r = 0; s.ok() && r < std::max(reps, 1); ++r) {
    s = Check(cudaEventRecord(start, stream), "cudaEventRecord");
    if (s.ok()) s = Check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream), "copy");
    if (s.ok()) s = Check(cudaEventRecord(stop, stream), "cudaEventRecord");
    if (s.ok()) s = Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (s.ok()) s = Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (s.ok() && ms > 0) best = std::max(best, static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
  }
  release();
  if (!s.ok()) return s;
  if (!(best > 0)) return absl::InternalError("link rate: no copy was timed");
  return best;
}

}  // namespace specgen::moe
