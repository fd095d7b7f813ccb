// Internal to the persistent decode kernel (persistent_decode.cu, persistent_attention.cuh): its block
// shape, the epoch-tagged activations its phases hand on instead of grid barriers, and its measurement
// stamps. Included from that one translation unit only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gemv_rows.cuh"

namespace specgen::kernels::persistent {

// One block of 256 threads per multiprocessor, with up to 255 registers per thread: with 512 threads
// (128 registers) the fused phases spilled ~2 KB per thread; 8 warps keep 32 KB of weight loads in
// flight per multiprocessor, and the L2 prefetch keeps HBM busy beyond that.
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// Output-head rows a warp prefetches into L2 ahead of the row it computes (x kWarps rows per block:
// 64 rows = 128 KB per multiprocessor for a 1024-wide head, ~17 MB in flight over 132 of them).
constexpr int kHeadAhead = 8;
constexpr int kMaxHeadDim = 256;

// Every activation a phase hands to the next (h, q, k, v, attn, act) is stored as 8-byte pairs
// {value bits, epoch}, written with one 8-byte store, which is single-copy atomic: a reader that sees
// the epoch it expects has the value written with it, with no fence and no barrier (the low-latency
// protocol of NCCL's LL). Each phase of a launch has its own epoch, so a consumer polls exactly the
// elements it needs until they carry the producing phase's epoch: a phase starts as soon as its inputs
// exist, and a layer costs one global round trip per phase instead of a barrier's two plus a read.
// Reuse is safe without barriers because every phase's output depends on all of the inputs of the
// phase before that overwrote the same buffer (e.g. h is rewritten by the O projection only after
// every attention item, hence every QKV block, has finished reading the h it started from).
__device__ __forceinline__ void StoreLL(uint2* p, float v, unsigned epoch) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(__float_as_uint(v)), "r"(epoch)
               : "memory");
}
__device__ __forceinline__ uint2 LoadPair(const uint2* p) {
  uint2 r;
  asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p) : "memory");
  return r;
}
__device__ __forceinline__ uint4 LoadTwoPairs(const uint4* p) {
  uint4 r;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p)
               : "memory");
  return r;
}
// The value of a pair once it carries `epoch` (`first`: a load already issued for it).
__device__ __forceinline__ float AwaitPair(const uint2* p, uint2 first, unsigned epoch) {
  while (first.y != epoch) first = LoadPair(p);
  return __uint_as_float(first.x);
}

// xs[StagedIndex(i)] = the value of x[i] once it carries `epoch`, for i < in (even), by the whole
// block. Each thread issues up to 4 loads of two pairs before checking any (polling one element after
// another would cost one round trip each), then re-polls only what was not there yet. No barrier at
// the end.
__device__ __forceinline__ void AwaitStage(const uint2* x, unsigned epoch, int in, float* xs) {
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  const int n4 = in / 2;
  for (int base = threadIdx.x; base < n4; base += 4 * blockDim.x) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = base + j * blockDim.x;
      if (i < n4) v[j] = LoadTwoPairs(x4 + i);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = base + j * blockDim.x;
      if (i < n4) {
        while (v[j].y != epoch || v[j].w != epoch) v[j] = LoadTwoPairs(x4 + i);
        xs[detail::StagedIndex(2 * i)] = __uint_as_float(v[j].x);
        xs[detail::StagedIndex(2 * i + 1)] = __uint_as_float(v[j].z);
      }
    }
  }
}

// Phase k of launch n writes its outputs with epoch n * PersistentDecodePhases + k + 1 (32 bits:
// equal epochs are 2^32 phases apart, while every buffer is rewritten every layer). Phases: 0 the
// embedding; per layer l: 1 + 5l QKV, 2 + 5l attention, 3 + 5l O, 4 + 5l gate/up, 5 + 5l down.
struct Epochs {
  unsigned base;
  __device__ __forceinline__ unsigned of(int phase) const { return base + static_cast<unsigned>(phase) + 1u; }
};

// Measurement hook (PersistentDecodeParams::timeline): thread 0 of each block stamps the end of its
// k-th phase at [k * (blocks + 1) + block].
__device__ __forceinline__ void Stamp(unsigned long long* timeline, int k) {
  if (timeline != nullptr) {
    __syncthreads();
    if (threadIdx.x == 0) timeline[static_cast<size_t>(k) * (gridDim.x + 1) + blockIdx.x] = detail::GlobalTimer();
  }
}

// Finer measurement inside a layer, block 0 only (see PersistentDecodeParams::timeline): `probe` is
// the layer's kPersistentProbeSlots stamps, or null.
__device__ __forceinline__ void Probe(unsigned long long* probe, int slot) {
  if (probe != nullptr && blockIdx.x == 0) {
    __syncthreads();
    if (threadIdx.x == 0) probe[slot] = detail::GlobalTimer();
  }
}

// The epoch-tagged activations of a launch, in the workspace (see WorkspaceLayout).
struct Activations {
  uint2 *h, *q, *k, *v, *attn, *act;
};

}  // namespace specgen::kernels::persistent
