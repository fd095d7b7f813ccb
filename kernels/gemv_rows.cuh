// Warp-per-row GEMV building blocks of gemv.cu and the fused decode kernels (decode_fused.cu,
// decode_fused_packed.cu): the 16-byte weight loads of a row, the row's dot product in GemvKernel's
// (gemv.cu) reduction order, the rows of a fused segment set, and RMSNorm over a vector staged in
// shared memory with RmsNormKernel's (norm.cu) arithmetic. One copy of each is what keeps the fused
// GEMVs bit-identical to the Backend ops they replace.
// Internal to kernels/: included from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/decode_fused.cuh"  // kFusedGemvMaxIn
#include "kernels/device_util.cuh"
#include "kernels/gemv.cuh"          // GemvSegment, GemvEpilogue
#include "kernels/kernel_types.h"

namespace specgen::kernels::detail {

inline constexpr int kRowChunk = 8;               // weights per 16-byte load
inline constexpr int kRowWarpK = 32 * kRowChunk;  // weights a warp covers with one load per lane

// The shared-memory layout of a staged activation: lane l multiplies inputs k = l*8 + 256*s + j
// (j < 8), read as two float4; stored plainly, a warp's first float4 reads would touch 1 KB (8
// wavefronts, every bank twice). Here the 256 inputs of batch s are stored as [half j/4][lane][j%4],
// so each warp-wide float4 read is 512 contiguous bytes (4 wavefronts, no conflict). Only where values
// live changes, never which values are multiplied, so results are the same bits.
__host__ __device__ constexpr int StagedIndex(int k) {
  return (k & ~255) | ((k & 4) << 5) | (((k >> 3) & 31) << 2) | (k & 3);
}
// Floats a staged activation of `in` inputs occupies (the last batch is laid out whole).
__host__ __device__ constexpr int StagedFloats(int in) { return (in + kRowWarpK - 1) / kRowWarpK * kRowWarpK; }

// Lane `lane`'s 8 inputs k .. k + 7 (k = 256 s + 8 lane) of an activation staged in the StagedIndex
// layout: StagedIndex(k) and StagedIndex(k + 4), two conflict-free float4 reads.
__device__ __forceinline__ void LoadStaged8(const float* xs, int k, int lane, float (&xv)[8]) {
  const float* batch = xs + (k & ~(kRowWarpK - 1)) + lane * 4;
  const float4 a = *reinterpret_cast<const float4*>(batch);
  const float4 b = *reinterpret_cast<const float4*>(batch + kRowWarpK / 2);
  xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w, xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
}

// kU 16-byte weight loads per row for lane offsets kb, kb + 256, .. (zeros past `in`).
template <int kRows, int kU>
__device__ __forceinline__ void LoadBatch(const uint16_t* const (&w)[kRows], int kb, int in,
                                          uint4 (&wv)[kU][kRows]) {
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int k = kb + u * kRowWarpK;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      wv[u][r] = k < in ? LoadWeights16(w[r] + k) : make_uint4(0, 0, 0, 0);
    }
  }
}

// Dot products of kRows weight rows with xs (shared, StagedIndex layout), each in GemvKernel's order:
// lane l accumulates k = l*8 + 256*s + j (s = 0, 1, .., j = 0..7) with __fmaf_rn, then the fixed
// butterfly. `wv` holds the first batch of loads (kb = lane*8), issued by the caller ahead of time; the
// batches after it (in > 256*kU) are loaded here. How far ahead loads are issued never changes the
// arithmetic.
template <ElemType kW, int kRows, int kU>
__device__ __forceinline__ void RowDots(const uint16_t* const (&w)[kRows], const float* xs, int in,
                                        int lane, uint4 (&wv)[kU][kRows], float (&out)[kRows]) {
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
  for (int kb = lane * kRowChunk; kb < in; kb += kRowWarpK * kU) {
    if (kb != lane * kRowChunk) LoadBatch<kRows, kU>(w, kb, in, wv);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int k = kb + u * kRowWarpK;
      if (k >= in) break;
      float xv[8];
      LoadStaged8(xs, k, lane, xv);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float wf[8];
        Unpack8<kW>(wv[u][r], wf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] = __fmaf_rn(wf[j], xv[j], acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) out[r] = WarpSum(acc[r]);
}

// xs = RmsNorm(xs; norm_w, eps) in place over inputs i < in (xs staged in shared memory in the
// StagedIndex layout, then a block
// barrier by the caller), a barrier at the end. The arithmetic is RmsNormKernel's for one row of `in`
// elements with its block of T threads: thread t sums i = t, t + T, ... with fmaf, then the per-warp
// butterfly and the butterfly of the warp sums. Works for any block of at least 256 threads (a multiple
// of 32): threads past T add nothing. norm_s: the norm weights already as fp32 in shared memory, or
// nullptr to read them from norm_w. `scratch`: 32 floats of shared memory.
__device__ __forceinline__ void NormalizeStaged(float* xs, const void* norm_w, ElemType norm_type, float eps,
                                                int in, float* scratch, const float* norm_s = nullptr) {
  const int tid = threadIdx.x;
  const int T = in >= 256 ? 256 : ((in + 31) / 32) * 32;
  float ss = 0.f;
  if (tid < T) {
    for (int i = tid; i < in; i += T) ss = fmaf(xs[StagedIndex(i)], xs[StagedIndex(i)], ss);
  }
  const float inv = RmsInverse(ss, in, eps, scratch);
  for (int i = tid; i < in; i += blockDim.x) {
    const int j = StagedIndex(i);
    xs[j] = xs[j] * inv * (norm_s != nullptr ? norm_s[i] : LoadAsF32(norm_w, norm_type, i));
  }
  __syncthreads();
}

// xs (shared, StagedIndex layout) = RmsNorm(x; norm_w, eps) when norm_w is set (the arithmetic of
// LaunchRmsNorm), else x, with every load of a thread issued at once: read one element at a time, a
// thread's loads went out one after another, a chain of L2 round trips on every decode kernel's path
// (a large share of each small kernel's time in the decode graph). With a norm and a block of 256
// threads (up to 2048 inputs) each thread keeps its elements in registers; otherwise x is read as
// float4s (x 16-byte aligned, `in` a multiple of 4; four consecutive inputs are four consecutive staged
// floats, StagedIndex keeps k & 3) and normalized in place by NormalizeStaged. Any block of at least
// 256 threads; ends with a barrier. `scratch`: 32 floats of shared memory; norm_s: as NormalizeStaged.
// norm_async: norm_w is a copy in shared memory that this block's CopyNormWeightsAsync is still filling
// (each thread waits for its own copies before the norm's block reduction, whose barrier publishes them).
__device__ __forceinline__ void StageInput(const float* x, const void* norm_w, ElemType norm_type, float eps,
                                           int in, float* xs, float* scratch, const float* norm_s = nullptr,
                                           bool norm_async = false) {
  constexpr int kPerThread = 8;
  if (norm_w != nullptr && blockDim.x == 256 && in >= 256 && in <= 256 * kPerThread) {
    // RmsNormKernel's block of T = 256 threads, its elements loaded all at once and kept in registers:
    // one round trip to L2 and one barrier before the normalized values are staged.
    const int tid = threadIdx.x;
    float v[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) v[j] = tid + 256 * j < in ? x[tid + 256 * j] : 0.f;
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      if (tid + 256 * j < in) ss = fmaf(v[j], v[j], ss);
    }
    if (norm_async) asm volatile("cp.async.wait_all;" ::: "memory");
    const float inv = RmsInverse(ss, in, eps, scratch);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = tid + 256 * j;
      if (i < in) {
        xs[StagedIndex(i)] = v[j] * inv * (norm_s != nullptr ? norm_s[i] : LoadAsF32(norm_w, norm_type, i));
      }
    }
    __syncthreads();
    return;
  }
  constexpr int kInFlight = 4;
  const int step = static_cast<int>(blockDim.x) * 4;
  for (int base = threadIdx.x * 4; base < in; base += kInFlight * step) {
    float4 v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      if (base + j * step < in) v[j] = *reinterpret_cast<const float4*>(x + base + j * step);
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      if (base + j * step < in) *reinterpret_cast<float4*>(xs + StagedIndex(base + j * step)) = v[j];
    }
  }
  if (norm_async) asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  if (norm_w != nullptr) NormalizeStaged(xs, norm_w, norm_type, eps, in, scratch, norm_s);
}

// norm_s[i] = norm_w[i] as fp32 for i < in, thread t writing i = t, t + blockDim.x, ... (the elements
// StageInput reads with the same thread, so no barrier is needed between them). The norm weights are
// constant: a decode kernel loads them before waiting for its predecessor (PDL), which takes a
// dependent memory round trip off the path after the wait.
__device__ __forceinline__ void StageNormWeights(const void* norm_w, ElemType norm_type, int in,
                                                 float* norm_s) {
  for (int i = threadIdx.x; i < in; i += blockDim.x) norm_s[i] = LoadAsF32(norm_w, norm_type, i);
}

// The norm weights' bytes copied as they are into shared memory (dst, 16-byte aligned) by the block,
// asynchronously (16-byte cp.async): a decode kernel starts the copy before its wait and issues its
// input's loads after it without waiting for the copy first, so that a block that starts after its
// predecessor has ended pays one round trip for both instead of one after the other (StageNormWeights
// stores converted values, so each thread waits for its loads). Needs norm_w 16-byte aligned and
// in * ElemBytes(norm_type) a multiple of 16 (NormCopiesAsync); StageInput(.., norm_async) reads them.
__device__ __forceinline__ bool NormCopiesAsync(const void* norm_w, ElemType norm_type, int in) {
  return reinterpret_cast<uintptr_t>(norm_w) % 16 == 0 && (in * ElemBytes(norm_type)) % 16 == 0;
}
__device__ __forceinline__ void CopyNormWeightsAsync(const void* norm_w, ElemType norm_type, int in, void* dst) {
  const int bytes = in * ElemBytes(norm_type);
  for (int off = threadIdx.x * 16; off < bytes; off += blockDim.x * 16) {
    CpAsync16(static_cast<char*>(dst) + off, static_cast<const char*>(norm_w) + off);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// The weight matrices of one fused GEMV (rows concatenated) as kernel parameters.
struct Segments {
  GemvSegment s[3];
  int n;
  int total_rows;  // output rows walked by the warps (kSwiGlu: the gate's rows)
};

// Rows of a segment set: the weight rows of output row `row` (kSwiGlu: gate and up; else the one
// segment row it falls in) and where its result goes.
template <GemvEpilogue kEpi>
struct RowOf {
  static constexpr int kRows = kEpi == GemvEpilogue::kSwiGlu ? 2 : 1;
  const uint16_t* w[kRows];
  float* y;
  float* y_base;  // the segment's y; y = y_base + r (r: the row within its segment)
  int r;
  __device__ __forceinline__ RowOf(const Segments& segs, int row, int in) {
    if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
      w[0] = static_cast<const uint16_t*>(segs.s[0].w) + static_cast<int64_t>(row) * in;
      w[1] = static_cast<const uint16_t*>(segs.s[1].w) + static_cast<int64_t>(row) * in;
      y_base = segs.s[0].y;
      r = row;
      y = y_base + row;
    } else {
      // Walk the segments with constant indices only (a run-time index would copy the kernel
      // parameters to local memory).
      r = row;
      const void* ws = segs.s[0].w;
      float* ys = segs.s[0].y;
      bool walking = true;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        walking = walking && s + 1 < segs.n && r >= segs.s[s].rows;
        if (walking) {
          r -= segs.s[s].rows;
          ws = segs.s[s + 1].w;
          ys = segs.s[s + 1].y;
        }
      }
      w[0] = static_cast<const uint16_t*>(ws) + static_cast<int64_t>(r) * in;
      y_base = ys;
      y = ys + r;
    }
  }
  // The epilogue of LaunchFusedGemv on this row's dot products (one lane stores); kAddTo adds to
  // `prior`, the residual *y read beforehand (a kernel may read it early, off its critical path).
  __device__ __forceinline__ void Store(const float (&d)[kRows], float prior) const {
    if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
      const float g = d[0];
      *y = portable::SiluMul(g, d[1]);
    } else if constexpr (kEpi == GemvEpilogue::kAddTo) {
      *y = prior + d[0];
    } else {
      *y = d[0];
    }
  }
  // The same, kAddTo's residual read now.
  __device__ __forceinline__ void Store(const float (&d)[kRows]) const {
    Store(d, kEpi == GemvEpilogue::kAddTo ? *y : 0.f);
  }
};

// Checks a fused GEMV's segments (LaunchFusedGemv's contract) and gathers them as kernel parameters.
inline cudaError_t MakeSegments(const float* x, const GemvSegment* segments, int n_segments, int in,
                                GemvEpilogue epilogue, int max_blocks, Segments* segs) {
  SPECGEN_KERNEL_REQUIRE(x != nullptr && segments != nullptr && n_segments >= 1 && n_segments <= 3);
  SPECGEN_KERNEL_REQUIRE(in > 0 && in % kRowChunk == 0 && in <= kFusedGemvMaxIn && max_blocks > 0);
  SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0);
  *segs = Segments{};
  segs->n = n_segments;
  for (int i = 0; i < n_segments; ++i) {
    const GemvSegment& s = segments[i];
    SPECGEN_KERNEL_REQUIRE(s.w != nullptr && s.y != nullptr && s.rows > 0);
    SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(s.w) % 16 == 0);
    segs->s[i] = s;
    segs->total_rows += s.rows;
  }
  if (epilogue == GemvEpilogue::kSwiGlu) {
    SPECGEN_KERNEL_REQUIRE(n_segments == 2 && segments[0].rows == segments[1].rows);
    segs->total_rows = segments[0].rows;
  }
  return cudaSuccess;
}

}  // namespace specgen::kernels::detail
