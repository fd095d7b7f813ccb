// The row split shared by the split logits-processing paths (sampling_topk.cu, sampling_plain.cu): one
// block of kSliceThreads per kSliceIds ids of a row, and the first kernel of both, each slice's (max
// logit, id). Internal to kernels/: included from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device_util.cuh"   // SPECGEN_KERNEL_REQUIRE
#include "kernels/programmatic_launch.cuh"
#include "kernels/sampling_common.cuh"

namespace specgen::kernels::detail {

inline constexpr int kSliceIds = 2048;  // ids a slice block holds
inline constexpr int kSliceThreads = 512;

__host__ __device__ constexpr int Slices(int vocab) { return (vocab + kSliceIds - 1) / kSliceIds; }

struct MaxPartial {
  double value;
  int32_t id;
  int32_t pad;
};

// A split path's launch arguments: rows in [0, 65535] (a grid dimension), and for rows > 0 distinct
// logits and probs and a 16-byte aligned workspace of at least `needed` bytes. cudaSuccess when they
// hold (the caller returns at once for rows == 0), else cudaErrorInvalidValue.
inline cudaError_t CheckSplitArgs(const float* logits, int rows, const float* probs, const void* workspace,
                                  size_t workspace_bytes, size_t needed) {
  SPECGEN_KERNEL_REQUIRE(rows >= 0 && rows <= 65535);
  if (rows == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(logits && probs && logits != probs && workspace);
  SPECGEN_KERNEL_REQUIRE(workspace_bytes >= needed);
  SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(workspace) % 16 == 0);
  return cudaSuccess;
}

// Whether the split paths' kernels after the first start under programmatic dependent launch: on
// sm_90+ (the current device), each waiting for its predecessor before reading what it wrote (see
// decode_fused.cuh).
inline bool SplitLaunchesProgrammatic() {
  int device = 0;
  return cudaGetDevice(&device) == cudaSuccess && ProgrammaticLaunchSupported(device);
}

// Where a split path's keyed draw goes (tokens null: no draw): tokens[row] from keys (seed,
// first_position + row, purpose), as LaunchSampleTokens.
struct SliceDraw {
  int32_t* tokens;
  uint64_t seed;
  int64_t first_position;
  uint32_t purpose;
};

// partials[row][s] = the (max logit, id) of slice s (ties to the lower id); grid (slices, rows) of
// kSliceThreads. Launched plainly (it reads the logits the previous kernel wrote); it lets its
// successor launch at once, whose blocks load their logits meanwhile. Defined in sampling_topk.cu.
__global__ void SliceMaxKernel(const float* __restrict__ logits, int vocab, MaxPartial* __restrict__ partials);

// The row's (max logit, id) from its slices' partials, by the whole block (every thread gets it).
__device__ __forceinline__ MaxPartial RowMax(const MaxPartial* row_partials, int slices, double* sv, int* si) {
  double best = 0.0;
  int best_id = -1;
  for (int t = threadIdx.x; t < slices; t += blockDim.x) {
    if (Better(row_partials[t].value, row_partials[t].id, best, best_id)) {
      best = row_partials[t].value;
      best_id = row_partials[t].id;
    }
  }
  BlockBest(best, best_id, sv, si);
  return MaxPartial{best, best_id, 0};
}

}  // namespace specgen::kernels::detail
