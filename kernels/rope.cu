#include "kernels/cache_elem.cuh"
#include "kernels/device_util.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/rope.cuh"

namespace specgen::kernels {
namespace {

// Pair i of a head rotated by position pos: the pair's indices, and cos/sin of pos * theta^(-2i/rot_dim)
// computed in double and rounded to fp32 (shared by the kernels below, so that they rotate alike).
struct RopePair {
  int i0, i1;
  float cf, sf;
  __device__ __forceinline__ RopePair(int pos, int i, int rot_dim, double theta, RopeStyle style) {
    const int half = rot_dim / 2;
    const double inv_freq = pow(theta, -2.0 * i / rot_dim);
    double s, c;
    sincos(static_cast<double>(pos) * inv_freq, &s, &c);
    cf = static_cast<float>(c);
    sf = static_cast<float>(s);
    i0 = style == RopeStyle::kRotateHalf ? i : 2 * i;
    i1 = style == RopeStyle::kRotateHalf ? i + half : 2 * i + 1;
  }
  __device__ __forceinline__ float First(float x0, float x1) const { return x0 * cf - x1 * sf; }
  __device__ __forceinline__ float Second(float x0, float x1) const { return x0 * sf + x1 * cf; }
};

// Pair i of a head rotated by position pos with a given frequency (LaunchRopeFrequencies): the CPU
// backend's RopePartial operation by operation, each rounded on its own.
struct FreqRopePair {
  int i0, i1;
  float cf, sf;
  __device__ __forceinline__ FreqRopePair(int pos, int i, const RopeFrequencies& f, RopeStyle style) {
    const int half = f.rot_dim / 2;
    const float angle = __fmul_rn(static_cast<float>(pos), f.inv_freq[i]);
    double s, c;
    sincos(static_cast<double>(angle), &s, &c);
    cf = __fmul_rn(static_cast<float>(c), f.factor);
    sf = __fmul_rn(static_cast<float>(s), f.factor);
    i0 = style == RopeStyle::kRotateHalf ? i : 2 * i;
    i1 = style == RopeStyle::kRotateHalf ? i + half : 2 * i + 1;
  }
  __device__ __forceinline__ float First(float x0, float x1) const {
    return __fsub_rn(__fmul_rn(x0, cf), __fmul_rn(x1, sf));
  }
  __device__ __forceinline__ float Second(float x0, float x1) const {
    return __fadd_rn(__fmul_rn(x1, cf), __fmul_rn(x0, sf));
  }
};

__global__ void RopeFrequenciesKernel(float* x, const int32_t* __restrict__ positions, int tokens, int heads,
                                      int head_dim, RopeFrequencies f, RopeStyle style) {
  const int half = f.rot_dim / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = static_cast<int64_t>(tokens) * heads * half;
  if (idx >= total) return;
  const int i = static_cast<int>(idx % half);
  const int64_t th = idx / half;
  const int t = static_cast<int>(th / heads);
  float* v = x + th * head_dim;
  const FreqRopePair r(positions[t], i, f, style);
  const float x0 = v[r.i0], x1 = v[r.i1];
  v[r.i0] = r.First(x0, x1);
  v[r.i1] = r.Second(x0, x1);
}

// One thread per (token, head, pair).
__global__ void RopeKernel(float* x, const int32_t* __restrict__ positions, int tokens, int heads,
                           int head_dim, int rot_dim, double theta, RopeStyle style) {
  const int half = rot_dim / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = static_cast<int64_t>(tokens) * heads * half;
  if (idx >= total) return;
  const int i = static_cast<int>(idx % half);
  const int64_t th = idx / half;  // token * heads + head
  const int t = static_cast<int>(th / heads);
  float* v = x + th * head_dim;
  const RopePair r(positions[t], i, rot_dim, theta, style);
  const float x0 = v[r.i0], x1 = v[r.i1];
  v[r.i0] = r.First(x0, x1);
  v[r.i1] = r.Second(x0, x1);
}

// One block of RmsNormKernel's size for dim = head_dim per (token, head); see LaunchNormRopeStore.
__global__ void NormRopeStoreKernel(float* q, float* k, const float* __restrict__ v, const void* __restrict__ q_norm,
                                    const void* __restrict__ k_norm, ElemType norm_type, float eps,
                                    const int32_t* __restrict__ positions, int heads, int kv_heads, int d,
                                    double theta, RopeStyle style, void* k_cache, void* v_cache,
                                    ElemType kv_type, int64_t dst_row, const int32_t* __restrict__ d_base,
                                    RopeFrequencies freqs) {
  __shared__ float scratch[32];
  __shared__ float y[256];
  // Under PDL (LaunchNormRopeStore): everything it reads comes from the q/k/v projection before it.
  LetDependentsLaunch();
  WaitForPrecedingGrid();
  const int per_token = heads + 2 * kv_heads;
  const int t = blockIdx.x / per_token, b = blockIdx.x % per_token;
  const int64_t kv_dim = static_cast<int64_t>(kv_heads) * d;
  const int64_t base = d_base != nullptr ? *d_base : dst_row;
  const int64_t cache_row = (base + t) * kv_dim;
  if (b >= heads + kv_heads) {  // V: copied as it is
    const int64_t h = b - heads - kv_heads;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
      detail::CacheStoreAs(v_cache, kv_type, cache_row + h * d + i, v[t * kv_dim + h * d + i]);
    }
    return;
  }
  const bool is_q = b < heads;
  const int64_t h = is_q ? b : b - heads;
  float* x = is_q ? q + (static_cast<int64_t>(t) * heads + h) * d : k + t * kv_dim + h * d;
  const void* w = is_q ? q_norm : k_norm;
  if (w != nullptr) {  // RmsNormKernel's arithmetic
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss = fmaf(x[i], x[i], ss);
    const float inv = detail::RmsInverse(ss, d, eps, scratch);
    for (int i = threadIdx.x; i < d; i += blockDim.x) y[i] = x[i] * inv * detail::LoadAsF32(w, norm_type, i);
  } else {
    for (int i = threadIdx.x; i < d; i += blockDim.x) y[i] = x[i];
  }
  __syncthreads();
  const int pos = d_base != nullptr ? static_cast<int>(base) + t : positions[t];
  // One pair rotated from the normed y into x (and, for k, the cache).
  const auto rotate = [&](const auto& r) {
    const float x0 = y[r.i0], x1 = y[r.i1];
    const float a = r.First(x0, x1), c = r.Second(x0, x1);
    x[r.i0] = a;
    x[r.i1] = c;
    if (!is_q) {
      detail::CacheStoreAs(k_cache, kv_type, cache_row + h * d + r.i0, a);
      detail::CacheStoreAs(k_cache, kv_type, cache_row + h * d + r.i1, c);
    }
  };
  if (freqs.inv_freq != nullptr) {  // RopeFrequenciesKernel's; the dims past rot_dim as normed
    for (int i = threadIdx.x; i < freqs.rot_dim / 2; i += blockDim.x) rotate(FreqRopePair(pos, i, freqs, style));
    for (int i = freqs.rot_dim + threadIdx.x; i < d; i += blockDim.x) {
      x[i] = y[i];
      if (!is_q) detail::CacheStoreAs(k_cache, kv_type, cache_row + h * d + i, y[i]);
    }
    return;
  }
  // RopeKernel's, with rot_dim = d.
  for (int i = threadIdx.x; i < d / 2; i += blockDim.x) rotate(RopePair(pos, i, d, theta, style));
}

}  // namespace

cudaError_t LaunchRope(float* x, const int32_t* positions, int tokens, int heads, int head_dim,
                       int rot_dim, double theta, RopeStyle style, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(tokens >= 0 && heads > 0 && head_dim > 0 && rot_dim > 0 &&
                         rot_dim % 2 == 0 && rot_dim <= head_dim && theta > 0);
  if (tokens == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(x != nullptr && positions != nullptr);
  const int64_t total = static_cast<int64_t>(tokens) * heads * (rot_dim / 2);
  const int threads = 256;
  RopeKernel<<<static_cast<unsigned>((total + threads - 1) / threads), threads, 0, stream>>>(
      x, positions, tokens, heads, head_dim, rot_dim, theta, style);
  return cudaGetLastError();
}

cudaError_t LaunchRopeFrequencies(float* x, const int32_t* positions, int tokens, int heads, int head_dim,
                                  const RopeFrequencies& f, RopeStyle style, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(tokens >= 0 && heads > 0 && head_dim > 0 && f.rot_dim > 0 && f.rot_dim % 2 == 0 &&
                         f.rot_dim <= head_dim);
  if (tokens == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(x != nullptr && positions != nullptr && f.inv_freq != nullptr);
  const int64_t total = static_cast<int64_t>(tokens) * heads * (f.rot_dim / 2);
  const int threads = 256;
  RopeFrequenciesKernel<<<static_cast<unsigned>((total + threads - 1) / threads), threads, 0, stream>>>(
      x, positions, tokens, heads, head_dim, f, style);
  return cudaGetLastError();
}

cudaError_t LaunchNormRopeStore(float* q, float* k, const float* v, const void* q_norm, const void* k_norm,
                                ElemType norm_type, float eps, const int32_t* positions, int n, int heads,
                                int kv_heads, int head_dim, double theta, RopeStyle style, void* k_cache,
                                void* v_cache, int64_t dst_row, cudaStream_t stream, const int32_t* d_base,
                                ElemType kv_type, const RopeFrequencies* freqs) {
  SPECGEN_KERNEL_REQUIRE(n >= 0 && heads > 0 && kv_heads > 0 && head_dim > 0 && head_dim % 2 == 0 &&
                         head_dim <= 256 && (freqs != nullptr || theta > 0) && dst_row >= 0);
  SPECGEN_KERNEL_REQUIRE(freqs == nullptr || (freqs->inv_freq != nullptr && freqs->rot_dim > 0 &&
                                              freqs->rot_dim % 2 == 0 && freqs->rot_dim <= head_dim));
  const RopeFrequencies f = freqs != nullptr ? *freqs : RopeFrequencies{};
  SPECGEN_KERNEL_REQUIRE((q_norm == nullptr) == (k_norm == nullptr));
  if (n == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(q && k && v && (positions || d_base) && k_cache && v_cache);
  SPECGEN_KERNEL_REQUIRE(detail::IsCacheElemType(kv_type));
  const int threads = head_dim >= 256 ? 256 : ((head_dim + 31) / 32) * 32;  // as LaunchRmsNorm's
  const unsigned blocks = static_cast<unsigned>(n) * static_cast<unsigned>(heads + 2 * kv_heads);
  return LaunchDecodeKernel(NormRopeStoreKernel, dim3(blocks), dim3(threads), 0, stream,
                            ProgrammaticLaunchOnCurrentDevice(), q, k, v, q_norm, k_norm, norm_type, eps, positions,
                            heads, kv_heads, head_dim, theta, style, k_cache, v_cache, kv_type, dst_row,
                            d_base, f);
}

}  // namespace specgen::kernels
