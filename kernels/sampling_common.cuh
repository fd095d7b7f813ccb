// Device helpers shared by the logits-processing kernels (sampling.cu, sampling_topk.cu): weights as
// bits and as fixed-point mass, and the (value, id) order every argmax and selection uses. Internal to
// kernels/: included from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace specgen::kernels::detail {

// Fixed-point mass (2^40 a unit of weight, the largest weight being 1): exact, order-free sums. A
// weight loses at most 2^-40 to the truncation, so a 151936-id total is off by at most 1.4e-7 (at 2^32
// it was 3.5e-5, which moved the top-p cut of one row in a few % of random rows); 2^40 x 16 M ids
// still fits 64 bits.
constexpr double kMassScale = 1099511627776.0;

__device__ __forceinline__ uint32_t Bits(float w) { return __float_as_uint(w); }
__device__ __forceinline__ uint64_t Mass(float w) {
  return static_cast<uint64_t>(static_cast<double>(w) * kMassScale);
}

// (value, id) max, ties to the lower id; id -1 loses to everything.
__device__ __forceinline__ bool Better(double v, int id, double bv, int bid) {
  if (id < 0) return false;
  if (bid < 0) return true;
  return v > bv || (v == bv && id < bid);
}
__device__ __forceinline__ void WarpBest(double& v, int& id) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const double ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (Better(ov, oi, v, id)) {
      v = ov;
      id = oi;
    }
  }
}
// Block-wide best; every thread gets it. scratch_v/scratch_i hold 32 entries.
__device__ __forceinline__ void BlockBest(double& v, int& id, double* scratch_v, int* scratch_i) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  WarpBest(v, id);
  if (lane == 0) {
    scratch_v[warp] = v;
    scratch_i[warp] = id;
  }
  __syncthreads();
  v = lane < nwarps ? scratch_v[lane] : 0.0;
  id = lane < nwarps ? scratch_i[lane] : -1;
  WarpBest(v, id);
  __syncthreads();
}

}  // namespace specgen::kernels::detail
