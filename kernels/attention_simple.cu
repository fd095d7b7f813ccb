#include "kernels/attention_simple.cuh"
#include "kernels/cache_elem.cuh"
#include "kernels/device_util.cuh"

namespace specgen::kernels {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxPerLane = 8;  // head_dim <= 256

// One warp per (query, head), keys in tiles of 32 slots from slot 0: lane j takes slot tile + j's dot
// product (its own K row, q from shared memory, c ascending), the tile's visible scores join the online
// softmax at once (warp max, fixed-butterfly sum), and the lanes, each owning kPerLane output columns,
// add the tile's V rows in slot order, so no key's load waits on the previous key's reduction. A
// query's arithmetic depends only on the slots it sees (tiles start at slot 0 whatever the batch;
// slots it does not see are left out of every sum), so its result does not depend on the batch.
template <ElemType kT, int kPerLane>
__global__ void AttentionSimpleKernel(const float* __restrict__ q, const void* __restrict__ k,
                                      const void* __restrict__ v, const uint8_t* __restrict__ mask,
                                      float* __restrict__ out, int n, int n_past, int heads,
                                      int kv_heads, int d, float scale,
                                      const int32_t* __restrict__ d_n_past, AttentionSinksWindow extra) {
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
  // A sink starts the online softmax as a key of score sinks[h] and a zero value.
  float m = extra.sinks != nullptr ? detail::LoadAsF32(extra.sinks, extra.sinks_type, h) : -INFINITY;
  float l = m == -INFINITY ? 0.f : 1.f;
  const int keys = n_past + n;
  const int64_t row_stride = static_cast<int64_t>(kv_heads) * d;
  // The window's first visible position; prefix slots before it are skipped a whole tile at a time.
  const int first = extra.window > 0 ? extra.positions[i] - extra.window + 1 : 0;
  const int first_tile = (min(max(first, 0), n_past) / 32) * 32;
  for (int tile = first_tile; tile < keys; tile += 32) {
    const int j = tile + lane;
    bool visible = j < keys;
    if (visible && j >= n_past) {
      const int b = j - n_past;
      visible = mask ? mask[i * n + b] != 0 : b <= i;
      if (visible && extra.window > 0) visible = extra.positions[b] >= first;
    } else if (visible && extra.window > 0) {
      visible = j >= first;
    }
    float s = -INFINITY;
    if (visible) {
      const int64_t kr = j * row_stride + static_cast<int64_t>(g) * d;
      float dot = 0.f;
      for (int c = 0; c < d; ++c) dot = __fmaf_rn(qs[c], detail::CacheLoad<kT>(k, kr + c), dot);
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
    const int64_t vt = static_cast<int64_t>(tile) * row_stride + static_cast<int64_t>(g) * d;
#pragma unroll 8
    for (int jj = 0; jj < 32; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      if ((seen >> jj) & 1u) {
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) {
          const int c = lane + 32 * e;
          if (c < d) acc[e] = __fmaf_rn(pj, detail::CacheLoad<kT>(v, vt + jj * row_stride + c), acc[e]);
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

}  // namespace

namespace {
cudaError_t Launch(const float* q, const void* k_cache, const void* v_cache, ElemType kv_type, const uint8_t* mask,
                   float* out, int n, int n_past, int heads, int kv_heads, int head_dim, float scale,
                   cudaStream_t stream, const int32_t* d_n_past, const AttentionSinksWindow& extra) {
  SPECGEN_KERNEL_REQUIRE(q && k_cache && v_cache && out && n >= 1 && n_past >= 0);
  SPECGEN_KERNEL_REQUIRE(extra.window >= 0 && (extra.window == 0 || extra.positions != nullptr));
  SPECGEN_KERNEL_REQUIRE(extra.sinks == nullptr || !IsPacked(extra.sinks_type));
  SPECGEN_KERNEL_REQUIRE(heads > 0 && kv_heads > 0 && heads % kv_heads == 0);
  SPECGEN_KERNEL_REQUIRE(head_dim >= 1 && head_dim <= 32 * kMaxPerLane);
  SPECGEN_KERNEL_REQUIRE(detail::IsCacheElemType(kv_type));
  const unsigned blocks = static_cast<unsigned>((n * heads + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const int per_lane = (head_dim + 31) / 32;
#define SPECGEN_SIMPLE_CASE(T, P)                                                                     \
  if (kv_type == T && per_lane <= P) {                                                                 \
    AttentionSimpleKernel<T, P><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(                           \
        q, k_cache, v_cache, mask, out, n, n_past, heads, kv_heads, head_dim, scale, d_n_past, extra);  \
    return cudaGetLastError();                                                                         \
  }
#define SPECGEN_SIMPLE_TYPE(T) \
  SPECGEN_SIMPLE_CASE(T, 1)    \
  SPECGEN_SIMPLE_CASE(T, 2)    \
  SPECGEN_SIMPLE_CASE(T, 4)    \
  SPECGEN_SIMPLE_CASE(T, 8)
  SPECGEN_SIMPLE_TYPE(ElemType::kF32)
  SPECGEN_SIMPLE_TYPE(ElemType::kF16)
  SPECGEN_SIMPLE_TYPE(ElemType::kBF16)
#undef SPECGEN_SIMPLE_TYPE
#undef SPECGEN_SIMPLE_CASE
  return cudaErrorInvalidValue;
}
}  // namespace

cudaError_t LaunchAttentionSimple(const float* q, const void* k_cache, const void* v_cache, ElemType kv_type,
                                  const uint8_t* mask, float* out, int n, int n_past, int heads,
                                  int kv_heads, int head_dim, float scale, cudaStream_t stream,
                                  const int32_t* d_n_past) {
  return Launch(q, k_cache, v_cache, kv_type, mask, out, n, n_past, heads, kv_heads, head_dim, scale, stream,
                d_n_past, AttentionSinksWindow{});
}

cudaError_t LaunchAttentionSimple(const float* q, const void* k_cache, const void* v_cache, ElemType kv_type,
                                  const uint8_t* mask, float* out, int n, int n_past, int heads,
                                  int kv_heads, int head_dim, float scale, const AttentionSinksWindow& extra,
                                  cudaStream_t stream) {
  return Launch(q, k_cache, v_cache, kv_type, mask, out, n, n_past, heads, kv_heads, head_dim, scale, stream,
                nullptr, extra);
}

}  // namespace specgen::kernels
