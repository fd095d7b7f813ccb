// The routers' top-k selection, a warp a token (router.cu, router_sigmoid.cu): k rounds of a warp-wide
// argmax over values[0 .. experts) in shared memory, lane l owning experts l + 32 i, ties to the lower
// id. Exact comparisons of the caller's fp32 values, so the ids are the CPU's wherever the values are.
#pragma once

#include <cstdint>

namespace specgen::kernels::detail {

// (value, index) maximum with ties to the lower index, across a warp.
__device__ __forceinline__ void WarpArgmax(float& v, int& idx) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) {
      v = ov;
      idx = oi;
    }
  }
}

// chosen[0 .. k) (written by lane 0) = the k largest values among the experts e with allowed(e), by
// descending value, ties to the lower id. experts <= 32 * 32 (a lane's taken experts are one word).
template <typename Allowed>
__device__ __forceinline__ void WarpTopK(const float* values, int experts, int k, int lane, Allowed allowed,
                                         int* chosen) {
  uint32_t taken = 0;  // bit i: expert lane + 32 i is chosen
  for (int r = 0; r < k; ++r) {
    float v = -INFINITY;
    int idx = 0x7fffffff;
    for (int i = 0, e = lane; e < experts; ++i, e += 32) {
      if (((taken >> i) & 1u) || !allowed(e)) continue;
      if (values[e] > v || (values[e] == v && e < idx)) {
        v = values[e];
        idx = e;
      }
    }
    WarpArgmax(v, idx);
    if (idx < experts && (idx & 31) == lane) taken |= 1u << (idx >> 5);
    if (lane == 0) chosen[r] = idx;
  }
}

}  // namespace specgen::kernels::detail
