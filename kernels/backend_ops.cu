#include <cuda_bf16.h>

#include "kernels/backend_ops.cuh"
#include "kernels/device_util.cuh"

namespace specgen::kernels {
namespace {

constexpr int kWarpsPerBlock = 4;

template <ElemType kW>
__device__ __forceinline__ float LoadW(const void* w, int64_t i) {
  if constexpr (kW == ElemType::kF32) {
    return static_cast<const float*>(w)[i];
  } else if constexpr (kW == ElemType::kF16) {
    return detail::F16BitsToF32(static_cast<const uint16_t*>(w)[i]);
  } else {
    return detail::Bf16BitsToF32(static_cast<const uint16_t*>(w)[i]);
  }
}

template <ElemType kW>
__global__ void MatMulRowsKernel(const void* __restrict__ w, const float* __restrict__ x,
                                 float* __restrict__ y, int n, int out, int in) {
  const int lane = threadIdx.x & 31;
  const int o = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (o >= out) return;
  const int64_t wrow = static_cast<int64_t>(o) * in;
  for (int t = 0; t < n; ++t) {
    const float* xr = x + static_cast<int64_t>(t) * in;
    float acc = 0.f;
    for (int k = lane; k < in; k += 32) acc = __fmaf_rn(LoadW<kW>(w, wrow + k), xr[k], acc);
    acc = detail::WarpSum(acc);
    if (lane == 0) y[static_cast<int64_t>(t) * out + o] = acc;
  }
}

constexpr int kMaxPerLane = 8;  // head_dim <= 256

// One warp per (query, head), keys in tiles of 32 slots from slot 0: lane j takes slot tile + j's dot
// product (its own K row, q from shared memory, c ascending), the tile's visible scores join the online
// softmax at once (warp max, fixed-butterfly sum), and the lanes, each owning kPerLane output columns,
// add the tile's V rows in slot order. The old kernel walked the keys one by one, each key's load
// waiting on the last's reduction (H200, the bundled draft's token: 92 -> 62 us through its graph;
// unrolling the dot product's loop over the template's width measured the same, 61 us). A
// query's arithmetic depends only on the slots it sees (tiles start at slot 0 whatever the batch;
// slots it does not see are left out of every sum), so its result does not depend on the batch.
template <int kPerLane>
__global__ void AttentionSimpleKernel(const float* __restrict__ q, const float* __restrict__ k,
                                      const float* __restrict__ v, const uint8_t* __restrict__ mask,
                                      float* __restrict__ out, int n, int n_past, int heads,
                                      int kv_heads, int d, float scale,
                                      const int32_t* __restrict__ d_n_past) {
  __shared__ float q_s[kWarpsPerBlock][32 * kPerLane];
  if (d_n_past != nullptr) n_past = *d_n_past;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int item = blockIdx.x * kWarpsPerBlock + warp;
  if (item >= n * heads) return;
  const int i = item / heads, h = item % heads, g = h / (heads / kv_heads);
  float* qs = q_s[warp];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int c = lane + 32 * e;
    qs[c] = c < d ? q[(static_cast<int64_t>(i) * heads + h) * d + c] : 0.f;
  }
  __syncwarp();
  float acc[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) acc[e] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int keys = n_past + n;
  const int64_t row_stride = static_cast<int64_t>(kv_heads) * d;
  for (int tile = 0; tile < keys; tile += 32) {
    const int j = tile + lane;
    bool visible = j < keys;
    if (visible && j >= n_past) {
      const int b = j - n_past;
      visible = mask ? mask[i * n + b] != 0 : b <= i;
    }
    float s = -INFINITY;
    if (visible) {
      const float* kr = k + j * row_stride + static_cast<int64_t>(g) * d;
      float dot = 0.f;
      for (int c = 0; c < d; ++c) dot = __fmaf_rn(qs[c], kr[c], dot);
      s = dot * scale;
    }
    const unsigned seen = __ballot_sync(0xffffffffu, visible);
    if (seen == 0) continue;
    const float m_new = fmaxf(m, detail::WarpMax(s));
    const float c_old = m == -INFINITY ? 0.f : expf(m - m_new);
    const float p = visible ? expf(s - m_new) : 0.f;
    l = l * c_old + detail::WarpSum(p);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[e] *= c_old;
    const float* vt = v + static_cast<int64_t>(tile) * row_stride + static_cast<int64_t>(g) * d;
#pragma unroll 8
    for (int jj = 0; jj < 32; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      if ((seen >> jj) & 1u) {
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) {
          const int c = lane + 32 * e;
          if (c < d) acc[e] = __fmaf_rn(pj, vt[jj * row_stride + c], acc[e]);
        }
      }
    }
    m = m_new;
  }
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < d) out[(static_cast<int64_t>(i) * heads + h) * d + c] = l > 0.f ? acc[e] / l : 0.f;
  }
}

__global__ void GatherRowsKernel(const float* __restrict__ src, const int32_t* __restrict__ rows,
                                 int cols, float* __restrict__ dst) {
  const int i = blockIdx.y;
  const int64_t r = rows[i];
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
    dst[static_cast<int64_t>(i) * cols + c] = src[r * cols + c];
  }
}

__global__ void ScatterAddScaledKernel(const float* __restrict__ src, const int32_t* __restrict__ rows,
                                       const float* __restrict__ scales, int m, int cols,
                                       float* __restrict__ dst) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int i = 0; i < m; ++i) {
    float* d = dst + static_cast<int64_t>(rows[i]) * cols + c;
    *d = __fmaf_rn(scales[i], src[static_cast<int64_t>(i) * cols + c], *d);
  }
}

__global__ void F32ToBf16Kernel(const float* __restrict__ src, uint16_t* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
  }
}

}  // namespace

cudaError_t LaunchMatMulRows(const void* w, ElemType w_type, const float* x, float* y, int n,
                             int out, int in, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(w && x && y && n >= 1 && out >= 1 && in >= 1);
  const unsigned blocks = static_cast<unsigned>((out + kWarpsPerBlock - 1) / kWarpsPerBlock);
  switch (w_type) {
    case ElemType::kF32:
      MatMulRowsKernel<ElemType::kF32><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(w, x, y, n, out, in);
      break;
    case ElemType::kF16:
      MatMulRowsKernel<ElemType::kF16><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(w, x, y, n, out, in);
      break;
    case ElemType::kBF16:
      MatMulRowsKernel<ElemType::kBF16><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(w, x, y, n, out, in);
      break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchAttentionSimple(const float* q, const float* k_cache, const float* v_cache,
                                  const uint8_t* mask, float* out, int n, int n_past, int heads,
                                  int kv_heads, int head_dim, float scale, cudaStream_t stream,
                                  const int32_t* d_n_past) {
  SPECGEN_KERNEL_REQUIRE(q && k_cache && v_cache && out && n >= 1 && n_past >= 0);
  SPECGEN_KERNEL_REQUIRE(heads > 0 && kv_heads > 0 && heads % kv_heads == 0);
  SPECGEN_KERNEL_REQUIRE(head_dim >= 1 && head_dim <= 32 * kMaxPerLane);
  const unsigned blocks = static_cast<unsigned>((n * heads + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const int per_lane = (head_dim + 31) / 32;
#define SPECGEN_SIMPLE_CASE(P)                                                                        \
  if (per_lane <= P) {                                                                                 \
    AttentionSimpleKernel<P><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(                              \
        q, k_cache, v_cache, mask, out, n, n_past, heads, kv_heads, head_dim, scale, d_n_past);         \
    return cudaGetLastError();                                                                         \
  }
  SPECGEN_SIMPLE_CASE(1)
  SPECGEN_SIMPLE_CASE(2)
  SPECGEN_SIMPLE_CASE(4)
  SPECGEN_SIMPLE_CASE(8)
#undef SPECGEN_SIMPLE_CASE
  return cudaErrorInvalidValue;
}

cudaError_t LaunchGatherRows(const float* src, const int32_t* rows, int m, int cols, float* dst,
                             cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(m >= 0 && cols > 0 && m <= 65535);
  if (m == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(src && rows && dst);
  const unsigned bx = static_cast<unsigned>(std::min((cols + 255) / 256, 64));
  GatherRowsKernel<<<dim3(bx, m), 256, 0, stream>>>(src, rows, cols, dst);
  return cudaGetLastError();
}

cudaError_t LaunchScatterAddScaled(const float* src, const int32_t* rows, const float* scales, int m,
                                   int cols, float* dst, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(m >= 0 && cols > 0);
  if (m == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(src && rows && scales && dst);
  ScatterAddScaledKernel<<<(cols + 255) / 256, 256, 0, stream>>>(src, rows, scales, m, cols, dst);
  return cudaGetLastError();
}

cudaError_t LaunchF32ToBf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(n >= 0);
  if (n == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(src && dst);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
  F32ToBf16Kernel<<<blocks, 256, 0, stream>>>(src, dst, n);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
