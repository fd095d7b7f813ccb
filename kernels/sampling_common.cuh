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

// The keyed Gumbel-max draw's scores: FastScore, an fp32 approximation of log(w) + Gumbel(bits) within
// 1e-4 of the double value for w > 0, picks the candidates; those within kScoreMargin of the best
// fp32 score (>> the fp32 error, so the exact winner is always among them) are scored again in double,
// log(double(w)) + GumbelFromBits(bits), as the CPU reference scores every id.
constexpr float kScoreMargin = 1e-3f;
__device__ __forceinline__ float FastScore(float w, uint32_t x) {
  float e;  // -log(u), u = (x + 0.5) 2^-32
  if (x < 0x80000000u) {
    e = -__logf(static_cast<float>((static_cast<double>(x) + 0.5) * 0x1p-32));
  } else {
    e = -log1pf(-static_cast<float>((4294967296.0 - static_cast<double>(x) - 0.5) * 0x1p-32));
  }
  return __logf(w) - __logf(e);
}

}  // namespace specgen::kernels::detail
