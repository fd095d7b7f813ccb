#include "kernels/device_util.cuh"
#include "kernels/rope.cuh"

namespace specgen::kernels {
namespace {

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
  const double inv_freq = pow(theta, -2.0 * i / rot_dim);
  double s, c;
  sincos(static_cast<double>(positions[t]) * inv_freq, &s, &c);
  const float cf = static_cast<float>(c), sf = static_cast<float>(s);
  const int i0 = style == RopeStyle::kRotateHalf ? i : 2 * i;
  const int i1 = style == RopeStyle::kRotateHalf ? i + half : 2 * i + 1;
  const float x0 = v[i0], x1 = v[i1];
  v[i0] = x0 * cf - x1 * sf;
  v[i1] = x0 * sf + x1 * cf;
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

}  // namespace specgen::kernels
